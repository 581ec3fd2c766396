//! Sources publish the newest content of one mapping into a
//! `tokio::sync::watch` channel: bursts coalesce and the latest wins. They
//! never validate or write; the sync task does (see `sync`).
//!
//! - `hostdir`: a directory on the node (inotify, debounced, resync).
//! - `client`: the API client shared by every `secret` source.
//! - `secret`: one Secret or ConfigMap, watched by name in the API server.
//! - `csr`: a certificate requested, approved and renewed through the CSR API.
//! - `trust_bundle`: ClusterTrustBundles, by name or by signer, as a CA bundle.

pub mod client;
pub mod csr;
pub mod hostdir;
pub mod secret;
pub mod trust_bundle;

use tokio::sync::watch;

use crate::bundle::Bundle;

/// Why a source could not produce a bundle.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error(transparent)]
    HostDir(#[from] hostdir::HostDirError),
    #[error(transparent)]
    Kube(#[from] secret::KubeError),
    #[error(transparent)]
    TrustBundle(#[from] trust_bundle::TrustBundleError),
}

impl SourceError {
    /// A short, fixed label for metrics, as validation reasons are.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::HostDir(hostdir::HostDirError::TooLarge { .. }) => "too_large",
            _ => "source_unavailable",
        }
    }
}

/// What a source publishes: the newest content, or why it cannot be read.
pub type Update = Result<Bundle, SourceError>;

/// Publishes `update` unless it equals what the channel holds, so a resync
/// that reads the same content (or the same error) wakes nobody.
pub fn publish(tx: &watch::Sender<Option<Update>>, update: Update) {
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

/// The newest API client from `clients`, waiting for the first; `None` on
/// shutdown or when the client task is gone.
pub async fn newest_client(
    clients: &mut watch::Receiver<Option<kube::Client>>,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<kube::Client> {
    tokio::select! {
        () = crate::sync::stopped(shutdown) => None,
        c = clients.wait_for(Option::is_some) => c.ok().and_then(|c| c.clone()),
    }
}
