//! `WatchError`, why a list or watch failed, and the loop's log target.

/// The target of the loop's log lines, whichever of its files writes them.
pub(super) const LOG: &str = "certsync::source::watch";

/// Why a list or watch failed: retried by the loop, reported to publish.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WatchError {
    #[error("{verb} {what}: {message}")]
    Api {
        verb: &'static str,
        /// What is watched ([`super::Watch::new`]).
        what: String,
        code: Option<u16>,
        message: String,
    },
    #[error("watch {what}: {said}; watching again")]
    Stalled { what: String, said: String },
}

impl WatchError {
    pub fn code(&self) -> Option<u16> {
        match self {
            Self::Api { code, .. } => *code,
            Self::Stalled { .. } => None,
        }
    }
}
