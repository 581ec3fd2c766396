//! certsync: keeps TLS certificate/key pairs on disk in step with their source
//! (a Kubernetes Secret or ConfigMap, or a host directory), publishes every new
//! pair atomically through a `..data` symlink flip, and tells the consumer.
//!
//! The binary (`main.rs`) only wires these modules together; see DESIGN.md for
//! the data flow.
#![forbid(unsafe_code)]
// The code's documentation is read with its private items (`cargo doc
// --document-private-items`, checked by CI): a link to one is meant.
#![allow(rustdoc::private_intra_doc_links)]

pub mod admin;
pub mod approve;
pub mod beneath;
pub mod bundle;
pub mod cli;
pub mod command;
pub mod config;
pub mod dirwatch;
pub mod events;
pub mod files;
pub mod inspect;
pub mod kubeadm;
pub mod limits;
pub mod man;
pub mod metrics;
pub mod pem;
pub mod reload;
pub mod shutdown;
pub mod source;
pub mod sync;
pub mod validate;
pub mod writer;
pub mod x509;

/// An error with its causes, each once ("client error (Connect): invalid
/// peer certificate: ..."): the top-level messages of kube and hyper hide
/// TLS and connection failures.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let s = c.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = c.source();
    }
    out
}

/// `s` with control characters (escape sequences, carriage returns, NUL,
/// DEL), the line and paragraph separators (U+2028, U+2029: a new line to
/// some terminals and log viewers) and bidirectional overrides written as
/// Unicode escapes
/// (`\u{1b}`), for a value someone else controls on its way to a terminal
/// or a log line.
pub fn escape(s: &str) -> std::borrow::Cow<'_, str> {
    let unsafe_char = |c: char| {
        c.is_control()
            || matches!(
                c,
                '\u{061c}'
                    | '\u{200b}'..='\u{200f}'
                    | '\u{2028}'..='\u{202e}'
                    | '\u{2060}'..='\u{2069}'
                    | '\u{feff}'
            )
    };
    if !s.chars().any(unsafe_char) {
        return s.into();
    }
    s.chars()
        .map(|c| {
            if unsafe_char(c) {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect::<String>()
        .into()
}

/// Runs `f` on tokio's blocking pool, never on the async runtime's threads:
/// parsers of outside bytes, file I/O, key generation and signing go
/// through here, so one slow input never stalls `/livez` or another
/// mapping. `Err` only when `f` panicked.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Panicked> {
    tokio::task::spawn_blocking(f).await.map_err(Panicked)
}

/// A task on the blocking pool panicked: said as tokio says it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Panicked(#[source] pub tokio::task::JoinError);

/// The one way certsync takes a lock: each is held for one insert, removal or
/// replacement, so a panic elsewhere while one was held left its value whole,
/// and the daemon (`/metrics`, `/readyz`, reloads, watches) must keep going.
pub fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `base * 2^(attempt-1)` plus a random share of the same again, so many
/// sidecars restarted together do not retry in lockstep (`attempt` ≥ 1).
pub fn backoff(base: std::time::Duration, attempt: u32) -> std::time::Duration {
    let exp = base.saturating_mul(1 << attempt.saturating_sub(1).min(10));
    exp + exp.mul_f64(random_fraction())
}

/// A number in [0, 1) for jitter and rotation deadlines: not for secrets
/// (keys come from the OS generator through ring and rsa), only so that
/// many processes started together spread out. Each `RandomState` is
/// seeded from the OS once per thread and then stepped.
pub fn random_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (random >> 11) as f64 / (1u64 << 53) as f64
}

/// Hand-assembled requests of odd shapes, shared with the integration tests.
#[cfg(test)]
#[path = "../tests/support/forge.rs"]
mod forge;

/// Test certificates, shared with the integration tests (one maker).
#[cfg(test)]
#[path = "../tests/support/certs.rs"]
mod test_certs;

#[cfg(test)]
mod blocking_tests {
    /// The one helper runs its work on another thread than the runtime's
    /// (a runtime of one thread stays free to answer while it runs), and a
    /// panic in the work is an error, not a crash of the caller.
    #[test]
    fn blocking_work_runs_off_the_runtime_thread() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let runtime_thread = std::thread::current().id();
            let (tx, rx) = std::sync::mpsc::channel::<()>();
            let work = tokio::spawn(super::blocking(move || {
                // Blocks until the runtime has shown it is still running.
                rx.recv().unwrap();
                std::thread::current().id()
            }));
            // The runtime's only thread is free while the work blocks.
            tokio::task::yield_now().await;
            tx.send(()).unwrap();
            let worker = work.await.unwrap().unwrap();
            assert_ne!(worker, runtime_thread);
            let panicked = super::blocking(|| -> u8 { panic!("hostile input") }).await;
            assert!(panicked.unwrap_err().0.is_panic());
        });
    }
}

#[cfg(test)]
mod escape_tests {
    /// `check` and `revisions` printed the
    /// line and paragraph separators (U+2028, U+2029) raw, which a
    /// terminal or log viewer may show as a new line, while other control
    /// and bidi characters were escaped.
    #[test]
    fn line_and_paragraph_separators_are_escaped_with_controls_and_bidi() {
        assert_eq!(
            super::escape("a\u{2028}b\u{2029}c\u{202e}d\u{1b}e\nf"),
            "a\\u{2028}b\\u{2029}c\\u{202e}d\\u{1b}e\\u{a}f"
        );
        assert_eq!(super::escape("CN=plain, O=é"), "CN=plain, O=é");
    }
}
