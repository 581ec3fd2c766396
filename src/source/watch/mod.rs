//! The one list/watch loop every Kubernetes source uses (Secrets,
//! ConfigMaps, ClusterTrustBundles, the CSR requester's wait) and the
//! approver can use: client-go's reflector protocol, reported as
//! kube-runtime's [`watcher::Event`]s so that [`super::Listed`] applies them.
//!
//! - list (paged as [`watcher::Config::page_size`] says), then watch from
//!   the list's resourceVersion with `allowWatchBookmarks`; a relist is
//!   reported as `Init`, `InitApply`…, `InitDone`, so a reader keeps the old
//!   set until the new one is complete;
//! - a watch that ends is resumed from the last resourceVersion seen,
//!   bookmarks included;
//! - `410 Gone` (an `ERROR` event or the HTTP status) relists at once, as
//!   the reflector does after "too old resource version"; only a 410 on the
//!   very watch a list just started (a server that expires every version,
//!   a "410 storm") counts as a failure, so it is not relisted in a loop;
//! - the "very short watch" rule of client-go's reflector: a watch that ends
//!   within a second (`Pacing::short`) without a single event (bookmarks
//!   count) is a failure. kube-runtime's `watcher` re-watches such a server
//!   at once, which made thousands of requests a second behind a proxy that
//!   cuts streaming responses, silently. The first of a streak is warned
//!   about, naming what is watched;
//! - failures (errors, short watches, stalls) back off with jitter, capped
//!   ([`retry_delay`]: 0.8 s doubling to 30 s, client-go's numbers), and are
//!   reported as `Err` items, except short watches and 410s (routine, or
//!   said once in the log); a healthy watch (one that delivered an event,
//!   or lasted) resets the backoff;
//! - whatever the server does, the loop makes at most [`Pacing::qps`]
//!   requests a second on average, in bursts of at most [`Pacing::burst`]
//!   (client-go's client rate limiter: 5 and 10): a server or proxy that
//!   ends every watch after one event or bookmark (never "short"), or
//!   answers one with `410 Gone` (relisted at once), cannot make it spin;
//! - a loop that could not reach the API server (no HTTP answer) waits out
//!   its backoff, or less: as soon as another loop of the process hears
//!   from the server again ([`Recovery`]), it retries within a second
//!   (jittered). One process's hundreds of watches then come back together
//!   after an outage instead of over the next 30 s, while different
//!   processes, each woken by its own first jittered retry, still spread out;
//! - a watch the server has not ended within its `timeoutSeconds` and
//!   [`super::WATCH_MARGIN`] more is stalled ([`super::stall_deadline`]):
//!   given up and resumed, however alive its connection looks;
//! - every loop of the process shares one [`Gate`]: at most [`IN_FLIGHT`]
//!   requests (list pages, and watches until their response headers) are
//!   in flight at once, so that a thousand mappings starting together (or
//!   relisting together after an outage) do not overflow the API server's
//!   Priority and Fairness queues of the one flow they all are (see
//!   [`IN_FLIGHT`]). A permit is never held across an open watch, and a
//!   request holding one is given up after [`ANSWER_WITHIN`].
//!
//! Event lines are read into a buffer of their own, freed once parsed, so a
//! quiet watch holds no read buffer (kube-runtime's keeps 8 KiB per watch,
//! which was a third of certsync's memory at 1,000 mappings), and every
//! request's state is boxed: it lives only while the request is in flight.

mod conn;
mod pacing;
mod reflector;

use futures::Stream;
use kube::api::{ListParams, VersionMatch, WatchParams};
use kube::runtime::watcher::{self, Event, ListSemantic};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use conn::Conn;
pub use pacing::{ANSWER_WITHIN, Gate, IN_FLIGHT, Pacing, Recovery, retry_delay};
use reflector::Loop;

/// The target of the loop's log lines, whichever of its files writes them:
/// `certsync::source::watch`, as before the module was split.
const LOG: &str = module_path!();

/// Why a list or watch failed. Retried by the loop itself; reported so a
/// source can publish it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum WatchError {
    #[error("{verb} {what}: {message}")]
    Api {
        verb: &'static str,
        /// What is watched, as the loop was told ([`Watch::named`]).
        what: String,
        /// The API server's status code, when it answered with one.
        code: Option<u16>,
        message: String,
    },
    #[error("watch {what}: {said}; watching again")]
    Stalled { what: String, said: String },
}

impl WatchError {
    /// The API server's status code (403, 404, 500…), if it sent one.
    pub fn code(&self) -> Option<u16> {
        match self {
            Self::Api { code, .. } => *code,
            Self::Stalled { .. } => None,
        }
    }

    /// `list` or `watch`.
    pub fn verb(&self) -> &'static str {
        match self {
            Self::Api { verb, .. } => verb,
            Self::Stalled { .. } => "watch",
        }
    }

    /// What went wrong, without the verb and object.
    pub fn message(&self) -> String {
        match self {
            Self::Api { message, .. } => message.clone(),
            Self::Stalled { said, .. } => format!("{said}; watching again"),
        }
    }
}

/// The loop for `api` as `config` selects (`label_selector`,
/// `field_selector`, `timeout`, `list_semantic`, `page_size`; bookmarks are
/// always asked for). A drop-in for kube-runtime's `watcher(api, config)`.
pub fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
) -> impl Stream<Item = Result<Event<K>, WatchError>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Send + 'static,
{
    Watch::new(api, config).stream()
}

/// The loop, before it runs: for a name in the log or other pacing.
pub struct Watch<K> {
    api: Api<K>,
    config: watcher::Config,
    what: Option<String>,
    pacing: Pacing,
    recovery: Recovery,
    gate: Gate,
}

impl<K> Watch<K>
where
    K: Resource + Clone + DeserializeOwned + Send + 'static,
{
    pub fn new(api: Api<K>, config: watcher::Config) -> Self {
        Self {
            api,
            config,
            what: None,
            pacing: Pacing::default(),
            recovery: Recovery::process(),
            gate: Gate::process(),
        }
    }

    /// What the log and errors call the watched objects ("secret ns/tls");
    /// by default the resource's path and the selectors.
    #[must_use]
    pub fn named(mut self, what: impl Into<String>) -> Self {
        self.what = Some(what.into());
        self
    }

    #[must_use]
    pub fn pacing(mut self, pacing: Pacing) -> Self {
        self.pacing = pacing;
        self
    }

    /// Whose news of the server answering again this loop shares (by
    /// default the process's).
    #[must_use]
    pub fn recovery(mut self, recovery: Recovery) -> Self {
        self.recovery = recovery;
        self
    }

    /// Whose permits this loop's requests take (by default the process's).
    #[must_use]
    pub fn gate(mut self, gate: Gate) -> Self {
        self.gate = gate;
        self
    }

    /// The events, forever (it never ends; drop it to stop watching).
    pub fn stream(self) -> impl Stream<Item = Result<Event<K>, WatchError>> + Send + 'static {
        let url = self.api.resource_url().to_owned();
        let what = self.what.unwrap_or_else(|| {
            let selectors = [&self.config.field_selector, &self.config.label_selector]
                .into_iter()
                .flatten()
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(",");
            format!("{url} {selectors}").trim_end().to_owned()
        });
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
            what,
        };
        let state = Loop::new(conn, self.pacing, self.recovery, self.gate);
        futures::stream::unfold(state, |mut state| async move {
            let item = state.next().await;
            Some((item, state))
        })
    }
}

#[cfg(test)]
mod tests;
