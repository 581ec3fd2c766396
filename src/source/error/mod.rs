//! Why a source cannot publish (`SourceError`, over each kind's error
//! below), what it publishes (`Update`); it imports no source kind.

pub mod ca;
pub mod csr;
pub mod hostdir;
pub mod secret;
pub mod trust_bundle;

use std::sync::Arc;

use super::client;
use crate::beneath::PathError;
use crate::bundle::Bundle;

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    HostDir(#[from] hostdir::HostDirError),
    #[error(transparent)]
    Kube(#[from] secret::KubeError),
    #[error(transparent)]
    TrustBundle(#[from] trust_bundle::TrustBundleError),
    #[error(transparent)]
    Csr(Box<csr::CsrError>),
    #[error(transparent)]
    Ca(Box<ca::CaError>),
    /// `--once`: the process's API client could not be made.
    #[error(transparent)]
    Client(Arc<client::ClientError>),
    /// `--once`: the API server gave no answer (a 5xx, or none) in time.
    #[error(
        "the API server {server} did not answer within {}: {}",
        humantime::format_duration(*within),
        crate::error_chain(source)
    )]
    Unanswered {
        server: String,
        within: std::time::Duration,
        #[source]
        source: kube::Error,
    },
    /// `--once`: no API client (no mapping needed the process's).
    #[error("no API client")]
    NoClient,
    #[error("no live pair")]
    NoLivePair,
    #[error(transparent)]
    Panicked(#[from] crate::Panicked),
}

impl SourceError {
    /// A short, fixed label for metrics, as validation reasons are.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::HostDir(hostdir::HostDirError::Read(PathError::TooLarge { .. }))
            | Self::TrustBundle(trust_bundle::TrustBundleError::TooLarge { .. }) => "too_large",
            // As when validation finds it in a file.
            Self::HostDir(hostdir::HostDirError::Combined { .. }) => "bad_pem",
            Self::Csr(e) => e.reason(),
            Self::Ca(e) => e.reason(),
            _ => "source_unavailable",
        }
    }
}

/// What a source publishes: the newest content, or why it cannot be read.
pub type Update = Result<Bundle, Arc<SourceError>>;

/// Publishes `update` unless it equals what the channel holds, so a resync
/// that reads the same content (or the same error) wakes nobody.
pub fn publish(
    tx: &tokio::sync::watch::Sender<Option<Update>>,
    update: Result<Bundle, SourceError>,
) {
    let update = update.map_err(Arc::new);
    tx.send_if_modified(|cur| {
        let same = match (cur.as_ref(), &update) {
            (Some(Ok(a)), Ok(b)) => a == b,
            (Some(Err(a)), Err(b)) => a.to_string() == b.to_string(),
            _ => false,
        };
        if !same {
            *cur = Some(update);
        }
        !same
    });
}
