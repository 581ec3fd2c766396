//! The per-target loop: take the newest update from the source, validate it,
//! publish it through the writer, and keep the target repaired.
//!
//! One task owns each target directory; nothing else writes there. The last
//! good bundle (from this run, or found intact on disk at start) is what
//! drift repair restores; a rejected or unreadable update never replaces it.
//! Errors are logged once per distinct problem (then at debug level on each
//! retry) so a broken source does not flood the log.
//!
//! Split by concern: [`Syncer`] (`syncer`) holds a mapping's state and
//! `publish` its trips through the writer; `task` is the loop around it,
//! `sources` builds each mapping's source, `pin` holds an issuing source
//! while a rollback pin does, and `once` and `run` are the two ways
//! `certsync run` drives them.

mod once;
mod pin;
mod publish;
mod run;
mod sources;
mod syncer;
mod task;

pub use once::once;
pub use run::{SHUTDOWN_GRACE, log_plan, run};
pub use syncer::Syncer;

use crate::validate::ValidationError;
use crate::writer::WriterError;

/// The target of every log line of `sync`, whichever of its files writes
/// it: `certsync::sync`, as before the module was split, which log filters
/// and the README's examples name.
const LOG: &str = module_path!();

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("mapping {mapping}: {source}")]
    Writer {
        mapping: String,
        #[source]
        source: WriterError,
    },
    #[error("mapping {mapping}: source: {message}")]
    Source {
        mapping: String,
        message: String,
        /// Metric label, e.g. `too_large` or `source_unavailable`.
        reason: &'static str,
    },
    #[error("mapping {mapping}: rejected: {source}")]
    Rejected {
        mapping: String,
        #[source]
        source: ValidationError,
    },
    #[error("mapping {mapping}: internal task failed: {message}")]
    Task { mapping: String, message: String },
    /// The target is published; its `update-kubeconfig=` file or
    /// `update-pair=` copy is not.
    #[error("mapping {mapping}: {message}")]
    Copy {
        mapping: String,
        copy: Copy,
        message: String,
    },
}

/// A copy of the live pair outside the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Copy {
    /// `update-kubeconfig=`: embedded in a kubeconfig.
    Kubeconfig,
    /// `update-pair=`: `PREFIX.crt` and `PREFIX.key`.
    Pair,
}

/// Writer work off the runtime ([`crate::blocking`]), its errors named
/// after the mapping.
async fn blocking<T: Send + 'static>(
    mapping: &str,
    f: impl FnOnce() -> Result<T, WriterError> + Send + 'static,
) -> Result<T, SyncError> {
    crate::blocking(f)
        .await
        .map_err(|e| SyncError::Task {
            mapping: mapping.to_owned(),
            message: e.to_string(),
        })?
        .map_err(|source| SyncError::Writer {
            mapping: mapping.to_owned(),
            source,
        })
}
