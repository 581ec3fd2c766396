//! Readiness: what `/readyz` answers, from what each mapping (and the
//! approver) reported, its live certificate's expiry and its renewal.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, OnceLock};

/// What is known about a mapping's current certificate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Validity {
    pub(super) not_before: i64,
    pub(super) not_after: i64,
}

/// A mapping's live revision, as far as expiry goes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Live {
    /// Nothing valid published yet: expiry unknown, reported as expired.
    Nothing,
    /// A revision without a leaf (a CA bundle): no expiry series.
    NoLeaf,
    Leaf(Validity),
}

/// The state `/readyz` is answered from, apart from the certificates'
/// windows (kept with the metrics).
#[derive(Default)]
pub(super) struct Readiness {
    /// Per mapping: `None` when ready, else why not.
    pub(super) reported: Mutex<BTreeMap<String, Option<String>>>,
    /// Per `ca:`/`csr:` mapping whose renewal is failing: the error. Every
    /// attempt is made at or past the renewal point, so such a mapping is
    /// not ready until an attempt succeeds.
    pub(super) renewal_failing: Mutex<BTreeMap<String, String>>,
    pub(super) shutting_down: AtomicBool,
    /// Whether the process has declared everything `/readyz` waits for:
    /// the admin port listens before the mappings (or the approver) are
    /// declared, and an empty list must not read as ready.
    pub(super) started: AtomicBool,
    /// `run --generation`: which configuration this process was started
    /// for, answered with `/readyz` (see [`crate::admin`]).
    pub(super) generation: OnceLock<String>,
}

/// Why a mapping that reported no problem is not ready, if it is not: its
/// live certificate expired, its renewal is failing, or both.
pub(super) fn unattended(live: Option<Live>, failing: Option<&String>, now: f64) -> Option<String> {
    let expired = match live {
        Some(Live::Leaf(v)) if v.not_after as f64 <= now => Some(format!(
            "the live certificate expired at {}",
            crate::validate::rfc3339(v.not_after)
        )),
        _ => None,
    };
    match (expired, failing) {
        (Some(x), Some(e)) => Some(format!("{x}; renewal is failing: {e}")),
        (None, Some(e)) => Some(format!(
            "past its renewal point and renewal is failing: {e}"
        )),
        (x, None) => x,
    }
}

/// Why certsync is not ready: the `/readyz` body, one line per reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    #[error("shutting down\n")]
    ShuttingDown,
    #[error("starting\n")]
    Starting,
    /// Each mapping (or other part, such as the approver) that is not
    /// ready, with why.
    #[error("{}", .0.iter().map(|(m, p)| format!("mapping {m}: {p}\n")).collect::<String>())]
    Mappings(Vec<(String, String)>),
}
