//! Sources publish the newest content of one mapping into a
//! `tokio::sync::watch` channel: bursts coalesce and the latest wins. They
//! never validate or write; the sync task does (see `sync`).

pub mod ca;
pub mod client;
pub mod csr;
pub mod hostdir;
pub mod secret;
pub mod trust_bundle;
pub mod watch;

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::runtime::watcher;

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
    /// `--once`: no mapping needed the process's API client.
    #[error("no API client needed")]
    NoClientNeeded,
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
            Self::HostDir(hostdir::HostDirError::TooLarge { .. })
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

/// Runs `watch` with the newest API client from `clients` until shutdown,
/// and again with each client rebuilt (rotated credentials).
pub async fn follow<F: Future<Output = ()>>(
    mut clients: tokio::sync::watch::Receiver<Option<kube::Client>>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    mut watch: impl FnMut(kube::Client) -> F,
) {
    while let Some(client) = newest_client(&mut clients, &mut shutdown).await {
        tokio::select! {
            () = crate::shutdown::stopped(&mut shutdown) => return,
            _ = clients.changed() => {}
            () = watch(client) => {}
        }
    }
}

/// The newest API client from `clients`, waiting for the first; `None` on
/// shutdown or when the client task is gone.
pub async fn newest_client(
    clients: &mut tokio::sync::watch::Receiver<Option<kube::Client>>,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> Option<kube::Client> {
    tokio::select! {
        () = crate::shutdown::stopped(shutdown) => None,
        c = clients.wait_for(Option::is_some) => c.ok().and_then(|c| c.clone()),
    }
}

/// The objects a list/watch loop reports, by name. A re-list is collected
/// aside and replaces the set only once complete: a Node missing mid-list
/// must not let the approver miss that another Node owns an address, nor a
/// trust bundle drop out of the published CA for a moment.
#[derive(Debug)]
pub struct Listed<K> {
    items: BTreeMap<String, K>,
    listing: BTreeMap<String, K>,
    synced: bool,
}

impl<K> Default for Listed<K> {
    fn default() -> Self {
        Self {
            items: BTreeMap::new(),
            listing: BTreeMap::new(),
            synced: false,
        }
    }
}

impl<K: kube::Resource> Listed<K> {
    /// Applies one watcher event; `true` when the visible set changed.
    pub fn apply(&mut self, event: watcher::Event<K>) -> bool {
        let name = |o: &K| o.meta().name.clone().unwrap_or_default();
        match event {
            watcher::Event::Init => {
                self.listing.clear();
                false
            }
            watcher::Event::InitApply(o) => {
                self.listing.insert(name(&o), o);
                false
            }
            watcher::Event::InitDone => {
                self.items = std::mem::take(&mut self.listing);
                self.synced = true;
                true
            }
            watcher::Event::Apply(o) => {
                self.items.insert(name(&o), o);
                true
            }
            watcher::Event::Delete(o) => {
                self.items.remove(&name(&o));
                true
            }
        }
    }

    pub fn synced(&self) -> bool {
        self.synced
    }

    pub fn items(&self) -> &BTreeMap<String, K> {
        &self.items
    }

    /// Records what the process itself just wrote, ahead of the watch.
    pub fn insert(&mut self, name: String, object: K) {
        self.items.insert(name, object);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;

    fn node(name: &str) -> Node {
        let mut n = Node::default();
        n.metadata.name = Some(name.into());
        n
    }

    #[test]
    fn a_relist_replaces_the_set_only_when_complete() {
        let mut l = Listed::default();
        for e in [
            watcher::Event::Init,
            watcher::Event::InitApply(node("a")),
            watcher::Event::InitApply(node("b")),
        ] {
            assert!(!l.apply(e));
        }
        assert!(!l.synced() && l.items().is_empty());
        assert!(l.apply(watcher::Event::InitDone));
        assert!(l.apply(watcher::Event::Delete(node("a"))));
        assert!(l.apply(watcher::Event::Apply(node("c"))));
        assert_eq!(l.items().keys().collect::<Vec<_>>(), ["b", "c"]);

        // A re-list: until it is done, the old set stays whole.
        l.apply(watcher::Event::Init);
        l.apply(watcher::Event::InitApply(node("c")));
        assert_eq!(l.items().keys().collect::<Vec<_>>(), ["b", "c"]);
        l.apply(watcher::Event::InitApply(node("d")));
        l.apply(watcher::Event::InitDone);
        assert_eq!(l.items().keys().collect::<Vec<_>>(), ["c", "d"]);
        assert!(l.synced());
    }
}
