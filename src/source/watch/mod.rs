//! The one list/watch loop of every Kubernetes source and the approver:
//! client-go's reflector protocol, reported as kube-runtime's
//! [`watcher::Event`]s for [`Listed`].
//!
//! - a paged list, then a watch from its resourceVersion with bookmarks; a
//!   relist is `Init`, `InitApply`…, `InitDone`: readers keep the old set
//!   until the new one is complete;
//! - an ended watch resumes from the last resourceVersion; `410 Gone`
//!   relists at once (after a backoff when the watch was fresh from a list:
//!   a "410 storm");
//! - a watch ending within [`Pacing::short`] without an event is a failure
//!   (client-go's rule; kube-runtime re-watches at once, thousands of times
//!   a second behind a proxy that cuts streaming responses);
//! - failures back off with jitter ([`retry_delay`]), at most [`Pacing::qps`]
//!   requests a second in bursts of [`Pacing::burst`], so no server or proxy
//!   makes it spin; after an outage a loop retries within a second of
//!   another loop hearing from the server ([`Recovery`]);
//! - a watch not ended within its `timeoutSeconds` and
//!   [`pacing::WATCH_MARGIN`] is stalled: given up and resumed;
//! - one [`Gate`] of [`IN_FLIGHT`] requests is shared by the process.
//!
//! Each event line has a buffer of its own, freed once parsed (a quiet
//! watch holds none; kube-runtime's keeps 8 KiB), and each request's state
//! is boxed: it lives only while in flight.

mod conn;
mod error;
mod pacing;
mod reflector;

use std::collections::BTreeMap;

use futures::Stream;
use kube::api::{ListParams, VersionMatch, WatchParams};
use kube::runtime::watcher::{self, Event, ListSemantic};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use conn::Conn;
pub use error::WatchError;
pub use pacing::{ANSWER_WITHIN, Gate, IN_FLIGHT, Pacing, Recovery, retry_delay, watch_seconds};
use reflector::Loop;

/// The loop for `api` as `config` selects, before it runs.
pub struct Watch<K> {
    api: Api<K>,
    config: watcher::Config,
    what: String,
    pacing: Pacing,
    recovery: Recovery,
    gate: Gate,
}

impl<K> Watch<K>
where
    K: Resource + Clone + DeserializeOwned + Send + 'static,
{
    /// `what`: what the log and errors call the watched objects
    /// ("secret ns/tls").
    pub fn new(api: Api<K>, config: watcher::Config, what: impl Into<String>) -> Self {
        Self {
            api,
            config,
            what: what.into(),
            pacing: Pacing::default(),
            recovery: Recovery::process(),
            gate: Gate::process(),
        }
    }

    /// The events, forever (it never ends; drop it to stop watching).
    pub fn stream(self) -> impl Stream<Item = Result<Event<K>, WatchError>> + Send + 'static {
        let url = self.api.resource_url().to_owned();
        // Bookmarks always: they move the resume point on while nothing
        // selected changes, so a resumed watch is rarely too old.
        let watch = WatchParams {
            field_selector: self.config.field_selector.clone(),
            label_selector: self.config.label_selector.clone(),
            timeout: self.config.timeout,
            bookmarks: true,
            ..WatchParams::default()
        };
        let (resource_version, version_match) = match self.config.list_semantic {
            ListSemantic::Any => (Some("0".to_owned()), Some(VersionMatch::NotOlderThan)),
            ListSemantic::MostRecent => (None, None),
        };
        let list = ListParams {
            field_selector: self.config.field_selector.clone(),
            label_selector: self.config.label_selector.clone(),
            limit: self.config.page_size,
            resource_version,
            version_match,
            ..ListParams::default()
        };
        let conn = Conn {
            client: self.api.into_client(),
            request: kube::core::Request::new(url),
            list,
            watch,
            what: self.what,
        };
        let state = Loop::new(conn, self.pacing, self.recovery, self.gate);
        futures::stream::unfold(state, |mut state| async move {
            let item = state.next().await;
            Some((item, state))
        })
    }
}

/// The objects a list/watch loop reports, by name. A re-list is collected
/// aside and replaces the set only once complete: a Node missing mid-list
/// must not let the approver miss that another Node owns an address, nor a
/// trust bundle drop out of the published CA for a moment.
#[derive(Debug, Default)]
pub struct Listed<K> {
    items: BTreeMap<String, K>,
    listing: BTreeMap<String, K>,
    synced: bool,
}

impl<K: kube::Resource> Listed<K> {
    /// Applies one watcher event; what of the visible set changed: `None`
    /// nothing, `Some(None)` all of it (a re-list), else the object named.
    pub fn apply(&mut self, event: watcher::Event<K>) -> Option<Option<String>> {
        let name = |o: &K| o.meta().name.clone().unwrap_or_default();
        match event {
            watcher::Event::Init => {
                self.listing.clear();
                None
            }
            watcher::Event::InitApply(o) => {
                self.listing.insert(name(&o), o);
                None
            }
            watcher::Event::InitDone => {
                self.items = std::mem::take(&mut self.listing);
                self.synced = true;
                Some(None)
            }
            watcher::Event::Apply(o) => {
                let n = name(&o);
                self.items.insert(n.clone(), o);
                Some(Some(n))
            }
            watcher::Event::Delete(o) => {
                let n = name(&o);
                self.items.remove(&n);
                Some(Some(n))
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
mod tests;
