//! `SyncError`, what a mapping's sync failed at; the log target and the work off the runtime every step shares.

use std::sync::Arc;

use crate::source::SourceError;
use crate::validate::ValidationError;
use crate::writer::WriterError;

/// The target of every log line of `sync`, whichever of its files writes
/// it: `certsync::sync`, which log filters and the README's examples name.
pub(super) const LOG: &str = "certsync::sync";

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("mapping {mapping}: {source}")]
    Writer {
        mapping: String,
        #[source]
        source: WriterError,
    },
    #[error("mapping {mapping}: source: {source}")]
    Source {
        mapping: String,
        #[source]
        source: Arc<SourceError>,
    },
    #[error("mapping {mapping}: rejected: {source}")]
    Rejected {
        mapping: String,
        #[source]
        source: ValidationError,
    },
    #[error("mapping {mapping}: internal task failed: {source}")]
    Task {
        mapping: String,
        #[source]
        source: crate::Panicked,
    },
    #[error("mapping *: internal task failed: {0}")]
    Watcher(#[source] crate::dirwatch::DirWatchError),
    /// The target is published; its `update-kubeconfig=` file or
    /// `update-pair=` copy is not (`source` names the mapping).
    #[error("{source}")]
    Copy {
        copy: Copy,
        #[source]
        source: Arc<SyncError>,
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

/// Work off the runtime ([`crate::blocking`]), a panic named after the
/// mapping.
pub(super) async fn off_runtime<T: Send + 'static>(
    mapping: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, SyncError> {
    crate::blocking(f).await.map_err(|source| SyncError::Task {
        mapping: mapping.to_owned(),
        source,
    })
}

/// Writer work off the runtime, its errors named after the mapping.
pub(super) async fn blocking<T: Send + 'static>(
    mapping: &str,
    f: impl FnOnce() -> Result<T, WriterError> + Send + 'static,
) -> Result<T, SyncError> {
    off_runtime(mapping, f)
        .await?
        .map_err(|source| SyncError::Writer {
            mapping: mapping.to_owned(),
            source,
        })
}
