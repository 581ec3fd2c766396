//! Readiness: what `/readyz` answers, from what each mapping (and the
//! approver) reported, its live certificate's expiry and its renewal.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use super::{Live, Metrics, lock, unix_now};

/// The state `/readyz` is answered from, apart from the certificates'
/// windows (kept with the metrics).
#[derive(Default)]
pub(super) struct Readiness {
    /// Per mapping: `None` when ready, else why not.
    reported: Mutex<BTreeMap<String, Option<String>>>,
    /// Per `ca:`/`csr:` mapping whose renewal is failing: the error. Every
    /// attempt is made at or past the renewal point, so such a mapping is
    /// not ready until an attempt succeeds.
    renewal_failing: Mutex<BTreeMap<String, String>>,
    shutting_down: AtomicBool,
    /// Whether the process has declared everything `/readyz` waits for:
    /// the admin port listens before the mappings (or the approver) are
    /// declared, and an empty list must not read as ready.
    started: AtomicBool,
    /// `run --generation`: which configuration this process was started
    /// for, answered with `/readyz` (see [`crate::admin`]).
    generation: OnceLock<String>,
}

impl Metrics {
    /// The token `/readyz` answers with (`run --generation`); set once.
    pub fn set_generation(&self, generation: String) {
        let _ = self.ready.generation.set(generation);
    }

    pub fn generation(&self) -> Option<&str> {
        self.ready.generation.get().map(String::as_str)
    }

    /// Everything `/readyz` waits for is declared: from now on an empty
    /// list of problems is ready.
    pub fn started(&self) {
        self.ready.started.store(true, Ordering::SeqCst);
    }

    /// Declares something `/readyz` waits for (not ready until told).
    pub fn add_readiness(&self, name: &str) {
        self.ready(name, Some("no valid revision yet".into()));
    }

    pub fn ready(&self, mapping: &str, problem: Option<String>) {
        lock(&self.ready.reported).insert(mapping.to_owned(), problem);
    }

    pub fn begin_shutdown(&self) {
        self.ready.shutting_down.store(true, Ordering::SeqCst);
    }

    /// A `ca:` or `csr:` mapping's renewal failed with `error` (`None`:
    /// it succeeded).
    pub fn renewal_failing(&self, mapping: &str, error: Option<String>) {
        let mut failing = lock(&self.ready.renewal_failing);
        match error {
            Some(e) => failing.insert(mapping.to_owned(), e),
            None => failing.remove(mapping),
        };
    }

    /// `Ok` when every mapping is ready, else why not: a mapping is not
    /// ready with a problem reported, with its live certificate expired,
    /// or with its renewal failing.
    pub fn readiness(&self) -> Result<(), NotReady> {
        if self.ready.shutting_down.load(Ordering::SeqCst) {
            return Err(NotReady::ShuttingDown);
        }
        if !self.ready.started.load(Ordering::SeqCst) {
            return Err(NotReady::Starting);
        }
        // Each lock taken alone, never nested.
        let reported = lock(&self.ready.reported).clone();
        let failing = lock(&self.ready.renewal_failing).clone();
        let validity = lock(&self.validity).clone();
        let now = unix_now();
        let problems: Vec<(String, String)> = reported
            .into_iter()
            .filter_map(|(m, reported)| {
                let problem = reported
                    .or_else(|| unattended(validity.get(&m).copied(), failing.get(&m), now))?;
                Some((m, problem))
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(NotReady::Mappings(problems))
        }
    }
}

/// Why a mapping that reported no problem is not ready, if it is not: its
/// live certificate expired, its renewal is failing, or both.
fn unattended(live: Option<Live>, failing: Option<&String>, now: f64) -> Option<String> {
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
    #[error("{}", lines(.0))]
    Mappings(Vec<(String, String)>),
}

fn lines(problems: &[(String, String)]) -> String {
    problems
        .iter()
        .map(|(m, p)| format!("mapping {m}: {p}\n"))
        .collect()
}
