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

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use futures::{AsyncBufRead, AsyncBufReadExt, Stream};
use kube::api::{ListParams, VersionMatch, WatchParams};
use kube::core::{ObjectList, Status, WatchEvent};
use kube::runtime::watcher::{self, Event, ListSemantic};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::stall_deadline;

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

/// The wait before retrying after `failures` failures in a row: from 0.8 s
/// (client-go's and kube-runtime's start), doubling, jittered so that many
/// sidecars restarted together do not retry in lockstep, at most 30 s.
pub fn retry_delay(failures: u32) -> Duration {
    crate::backoff(Duration::from_millis(800), failures).min(Duration::from_secs(30))
}

/// Requests one process's loops have in flight at once, at most: list
/// pages, and watches until their response headers arrive (kube-apiserver
/// holds an APF seat for a WATCH until the watch is set up, then frees it).
///
/// An identity without a FlowSchema of its own (a ServiceAccount: the
/// `service-accounts` schema, level `workload-low`; a user:
/// `global-default`) is one flow, shuffle-sharded onto 6 of its level's
/// queues of at most 50 requests: 300 places, shared with whatever else
/// hashes there, and more are refused with 429 (kube-apiserver v1.36's
/// bootstrap configuration, `apiserver/pkg/apis/flowcontrol/bootstrap`).
/// Executing, `global-default` has 49 seats on a default server (600 seats
/// in all; it may lend half) and `workload-low` 245 (it may lend 90%).
/// 32 keeps one process well inside its seats, and lets nine processes of
/// one ServiceAccount (one flow) start at the same moment before its
/// queues could fill; it still runs 32 requests side by side, so a
/// thousand mappings' 2,000 requests go in about 63 rounds of a few
/// milliseconds each.
pub const IN_FLIGHT: usize = 32;

/// How long a request holding a permit of the [`Gate`] waits for its answer
/// (a list page whole, a watch its headers): kube-apiserver's own
/// `--request-timeout` (1 minute, APF queueing included) and
/// [`super::WATCH_MARGIN`]. A server that holds a request longer is not
/// answering; the permit goes to the next loop and this one backs off.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(60).saturating_add(super::WATCH_MARGIN);

/// The permits of [`IN_FLIGHT`], shared by the loops of one process (they
/// talk to one API server, as one flow). Waiting loops are served in the
/// order they asked (tokio's semaphore is fair), so none starves.
#[derive(Clone)]
pub struct Gate(std::sync::Arc<tokio::sync::Semaphore>);

impl Gate {
    /// A gate of its own with `permits` (tests: loops that must not wait
    /// for others').
    pub fn new(permits: usize) -> Self {
        Self(std::sync::Arc::new(tokio::sync::Semaphore::new(
            permits.max(1),
        )))
    }

    /// The process's: what every loop uses unless told otherwise.
    pub fn process() -> Self {
        static PROCESS: std::sync::LazyLock<Gate> =
            std::sync::LazyLock::new(|| Gate::new(IN_FLIGHT));
        PROCESS.clone()
    }

    /// A permit, once one is free. `None` never happens: the semaphore is
    /// never closed.
    async fn enter(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.0.acquire().await.ok()
    }
}

/// News, shared by the loops of one process (they talk to one API server),
/// that the server answers again after it could not be reached.
#[derive(Clone)]
pub struct Recovery(std::sync::Arc<tokio::sync::watch::Sender<u64>>);

impl Recovery {
    /// A channel of its own (tests: loops that must not hear others').
    pub fn new() -> Self {
        Self(std::sync::Arc::new(tokio::sync::watch::Sender::new(0)))
    }

    /// The process's: what every loop uses unless told otherwise.
    pub fn process() -> Self {
        static PROCESS: std::sync::LazyLock<Recovery> = std::sync::LazyLock::new(Recovery::new);
        PROCESS.clone()
    }

    fn answered(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl Default for Recovery {
    fn default() -> Self {
        Self::new()
    }
}

/// How failures are paced; the default is client-go's.
#[derive(Debug, Clone, Copy)]
pub struct Pacing {
    /// The wait after `n` failures in a row (`n` ≥ 1).
    pub backoff: fn(u32) -> Duration,
    /// A watch that ends sooner than this without a single event is a
    /// failure (client-go: one second).
    pub short: Duration,
    /// Requests (list pages and watches) a second, on average, at most
    /// (client-go's client default: 5).
    pub qps: f64,
    /// Requests made at once, at most, before `qps` applies (client-go: 10).
    pub burst: f64,
}

impl Default for Pacing {
    fn default() -> Self {
        Self {
            backoff: retry_delay,
            short: Duration::from_secs(1),
            qps: 5.0,
            burst: 10.0,
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
        let state = Loop {
            conn: Conn {
                client: self.api.into_client(),
                request: kube::core::Request::new(url),
                list,
                watch,
                what,
            },
            tokens: self.pacing.burst,
            refilled: Instant::now(),
            pacing: self.pacing,
            failures: 0,
            short_streak: 0,
            pause: None,
            recovery: self.recovery,
            gate: self.gate,
            unreachable: None,
            state: State::List,
        };
        futures::stream::unfold(state, |mut state| async move {
            let item = state.next().await;
            Some((item, state))
        })
    }
}

/// Where the loop stands.
enum State<K> {
    /// List from the first page.
    List,
    /// Reporting a list: the objects still to report, the next page's
    /// continue token, and the list's resourceVersion once known.
    Listing {
        items: VecDeque<K>,
        next_page: Option<String>,
        version: String,
    },
    /// Watch from `version`. `fresh`: straight from a list, no healthy
    /// watch since.
    Watch {
        version: String,
        fresh: bool,
    },
    Watching(Box<Open>),
}

/// A watch in flight.
struct Open {
    body: Pin<Box<dyn AsyncBufRead + Send>>,
    version: String,
    fresh: bool,
    started: Instant,
    /// When it is taken for stalled, and what is said then.
    deadline: Instant,
    said: String,
    /// Whether any event (bookmarks included) arrived.
    seen: bool,
}

/// What the requests are made with (shared, immutable, while one is in
/// flight).
struct Conn {
    client: Client,
    request: kube::core::Request,
    list: ListParams,
    watch: WatchParams,
    what: String,
}

struct Loop<K> {
    conn: Conn,
    pacing: Pacing,
    /// The rate limiter's bucket: requests that may be made now, as of
    /// `refilled`.
    tokens: f64,
    refilled: Instant,
    /// Failures in a row; a healthy watch resets it.
    failures: u32,
    /// Short watches in a row (only the first is warned about).
    short_streak: u32,
    /// Nothing is asked of the server before this (the backoff).
    pause: Option<Instant>,
    recovery: Recovery,
    gate: Gate,
    /// Set while the last failure was the server not answering at all:
    /// the news of another loop hearing from it again cuts the backoff.
    unreachable: Option<tokio::sync::watch::Receiver<u64>>,
    state: State<K>,
}

/// How reading one line of a watch went.
enum Line<K> {
    Event(WatchEvent<K>),
    /// The server ended the watch.
    End,
    Failed(WatchError),
}

impl<K> Loop<K>
where
    K: Resource + Clone + DeserializeOwned + Send + 'static,
{
    /// The next event, or the next failure (already counted and paced).
    async fn next(&mut self) -> Result<Event<K>, WatchError> {
        loop {
            if let Some(until) = self.pause.take() {
                self.wait(until).await;
            }
            match std::mem::replace(&mut self.state, State::List) {
                State::List => match Box::pin(self.throttled(|c| c.page(None))).await {
                    Ok(list) => {
                        self.state = Self::listing(list);
                        return Ok(Event::Init);
                    }
                    Err(e) => return Err(self.failed(e)),
                },
                State::Listing {
                    mut items,
                    next_page,
                    version,
                } => {
                    if let Some(o) = items.pop_front() {
                        self.state = State::Listing {
                            items,
                            next_page,
                            version,
                        };
                        return Ok(Event::InitApply(o));
                    }
                    let Some(token) = next_page else {
                        self.state = State::Watch {
                            version,
                            fresh: true,
                        };
                        return Ok(Event::InitDone);
                    };
                    match Box::pin(self.throttled(|c| c.page(Some(token)))).await {
                        Ok(list) => self.state = Self::listing(list),
                        // A failed page (an expired continue token, too):
                        // the whole list again, after the backoff.
                        Err(e) => return Err(self.failed(e)),
                    }
                }
                State::Watch { version, fresh } => {
                    match Box::pin(self.throttled(|c| c.open(&version))).await {
                        Ok((body, deadline, said)) => {
                            self.state = State::Watching(Box::new(Open {
                                body,
                                version,
                                fresh,
                                started: Instant::now(),
                                deadline,
                                said,
                                seen: false,
                            }));
                        }
                        Err(e) if e.code() == Some(410) => self.gone(fresh),
                        Err(e) => {
                            // Not fresh any more: time passed since the
                            // list, and a 410 now is an expired version
                            // (a server back from an outage), not a storm.
                            self.state = State::Watch {
                                version,
                                fresh: false,
                            };
                            return Err(self.failed(e));
                        }
                    }
                }
                State::Watching(mut open) => match self.conn.read::<K>(&mut open).await {
                    Line::Event(WatchEvent::Added(o) | WatchEvent::Modified(o)) => {
                        self.healthy(&mut open, o.meta().resource_version.clone());
                        self.state = State::Watching(open);
                        return Ok(Event::Apply(o));
                    }
                    Line::Event(WatchEvent::Deleted(o)) => {
                        self.healthy(&mut open, o.meta().resource_version.clone());
                        self.state = State::Watching(open);
                        return Ok(Event::Delete(o));
                    }
                    Line::Event(WatchEvent::Bookmark(b)) => {
                        self.healthy(&mut open, Some(b.metadata.resource_version));
                        self.state = State::Watching(open);
                    }
                    Line::Event(WatchEvent::Error(s)) if s.code == 410 => self.gone(open.fresh),
                    Line::Event(WatchEvent::Error(s)) => {
                        let message = if s.code == 403 {
                            s.message
                        } else {
                            format!("{} ({})", s.message, s.code)
                        };
                        let e = self.conn.error("watch", Some(s.code), message);
                        return Err(self.resume_after(*open, e));
                    }
                    Line::Failed(e) => return Err(self.resume_after(*open, e)),
                    Line::End => self.ended(*open),
                },
            }
        }
    }

    /// Sleeps until `until`, or, when the server could not be reached, until
    /// another loop of the process hears from it again and a jittered
    /// moment (under a second) has passed, if that is sooner.
    async fn wait(&mut self, until: Instant) {
        // Kept: the first answer after the pause is what tells the others.
        let Some(news) = self.unreachable.as_mut() else {
            return tokio::time::sleep_until(until).await;
        };
        tokio::select! {
            () = tokio::time::sleep_until(until) => {}
            Ok(()) = news.changed() => {
                let spread = Duration::from_secs(1).mul_f64(crate::random_fraction());
                tokio::time::sleep_until(until.min(Instant::now() + spread)).await;
            }
        }
    }

    /// `request` once the rate limiter lets one more through and the
    /// [`Gate`] has a permit, held until `request` is answered (a watch:
    /// its headers); its answer [`heard`].
    async fn throttled<'a, F, T>(
        &'a mut self,
        request: impl FnOnce(&'a Conn) -> F,
    ) -> Result<T, WatchError>
    where
        F: Future<Output = Result<T, WatchError>> + 'a,
    {
        let (qps, burst) = (
            self.pacing.qps.max(f64::MIN_POSITIVE),
            self.pacing.burst.max(1.0),
        );
        loop {
            let now = Instant::now();
            let earned = now.duration_since(self.refilled).as_secs_f64() * qps;
            self.tokens = (self.tokens + earned).min(burst);
            self.refilled = now;
            if self.tokens >= 1.0 {
                self.tokens -= 1.0;
                break;
            }
            let wait = Duration::from_secs_f64(((1.0 - self.tokens) / qps).min(3600.0));
            tokio::time::sleep(wait).await;
        }
        let permit = self.gate.enter().await;
        let answer = request(&self.conn).await;
        drop(permit);
        heard(&mut self.unreachable, &self.recovery, answer)
    }

    fn listing(list: ObjectList<K>) -> State<K> {
        State::Listing {
            items: list.items.into(),
            next_page: list.metadata.continue_.filter(|c| !c.is_empty()),
            version: list.metadata.resource_version.unwrap_or_default(),
        }
    }

    /// An event arrived: the watch is healthy, and resumes from here.
    fn healthy(&mut self, open: &mut Open, version: Option<String>) {
        if let Some(v) = version.filter(|v| !v.is_empty()) {
            open.version = v;
        }
        open.seen = true;
        open.fresh = false;
        self.reset();
    }

    fn reset(&mut self) {
        self.failures = 0;
        if self.short_streak > 0 {
            tracing::info!(watching = %self.conn.what, short_watches = self.short_streak, "watch healthy again");
            self.short_streak = 0;
        }
    }

    /// The server ended the watch: resume, at once unless it was short.
    fn ended(&mut self, open: Open) {
        let lasted = open.started.elapsed();
        if !open.seen && lasted < self.pacing.short {
            self.short_streak += 1;
            if self.short_streak == 1 {
                tracing::warn!(
                    watching = %self.conn.what,
                    lasted_ms = lasted.as_millis() as u64,
                    "the API server ended the watch within {:?} without a single event; \
                     backing off (is a proxy cutting long requests?)",
                    self.pacing.short
                );
            } else {
                tracing::debug!(watching = %self.conn.what, streak = self.short_streak, "another short watch");
            }
            self.count_failure();
        } else if !open.seen {
            // A quiet watch that lasted: the server's timeout.
            self.reset();
        }
        let fresh = open.fresh && !open.seen && lasted < self.pacing.short;
        self.state = State::Watch {
            version: open.version,
            fresh,
        };
    }

    /// `410 Gone`: relist at once, unless the watch was the first from a
    /// list (the server expires even fresh versions): then after a backoff.
    fn gone(&mut self, fresh: bool) {
        tracing::debug!(watching = %self.conn.what, fresh, "resourceVersion expired; re-listing");
        if fresh {
            self.count_failure();
        }
        self.state = State::List;
    }

    /// A failed watch: resumed from where it was, after the backoff. The
    /// version is not fresh any more: a 410 on the resumed watch (the
    /// server restarted with its history compacted) relists at once rather
    /// than after the backoff the outage built up.
    fn resume_after(&mut self, open: Open, e: WatchError) -> WatchError {
        self.state = State::Watch {
            version: open.version,
            fresh: false,
        };
        self.failed(e)
    }

    /// A failure the caller is told about (and says how it sees fit).
    fn failed(&mut self, e: WatchError) -> WatchError {
        self.count_failure();
        // No answer at all (connection refused or reset, TLS, timeout):
        // listen for another loop hearing from the server again, from now
        // on, so news that arrives before the pause begins is not missed.
        let unanswered = matches!(e, WatchError::Api { code: None, .. });
        self.unreachable = unanswered.then(|| self.recovery.0.subscribe());
        e
    }

    fn count_failure(&mut self) {
        self.failures = self.failures.saturating_add(1);
        let wait = (self.pacing.backoff)(self.failures);
        tracing::debug!(watching = %self.conn.what, failures = self.failures, retry_in_ms = wait.as_millis() as u64, "backing off");
        self.pause = Some(Instant::now() + wait);
    }
}

impl Conn {
    /// One page of the list.
    async fn page<K: Resource + Clone + DeserializeOwned>(
        &self,
        token: Option<String>,
    ) -> Result<ObjectList<K>, WatchError> {
        let mut params = self.list.clone();
        params.continue_token = token;
        let req = self
            .request
            .list(&params)
            .map_err(|e| self.error("list", None, e.to_string()))?;
        let list: ObjectList<K> = tokio::time::timeout(ANSWER_WITHIN, self.client.request(req))
            .await
            .map_err(|_| self.unanswered("list"))?
            .map_err(|e| self.kube_error("list", &e))?;
        let last = list.metadata.continue_.as_deref().is_none_or(str::is_empty);
        if last
            && list
                .metadata
                .resource_version
                .as_deref()
                .is_none_or(str::is_empty)
        {
            // Nothing to watch from: refused rather than watching "now",
            // which would skip whatever changed since the list.
            return Err(self.error(
                "list",
                None,
                "the API server sent a list without a resourceVersion".into(),
            ));
        }
        Ok(list)
    }

    /// Starts a watch from `version`: its body, stall deadline and what to
    /// say when stalled.
    async fn open(
        &self,
        version: &str,
    ) -> Result<(Pin<Box<dyn AsyncBufRead + Send>>, Instant, String), WatchError> {
        // `timeoutSeconds` as sent: kube-core sends 290 when none is set.
        let (deadline, said) = stall_deadline(self.watch.timeout.unwrap_or(290));
        let req = self
            .request
            .watch(&self.watch, version)
            .map_err(|e| self.error("watch", None, e.to_string()))?;
        // Headers within ANSWER_WITHIN (the permit is held until then), or
        // within the stall deadline when a short watch timeout makes it
        // sooner.
        let headers_by = deadline.min(Instant::now() + ANSWER_WITHIN);
        match tokio::time::timeout_at(headers_by, self.client.request_stream(req)).await {
            Ok(Ok(body)) => Ok((Box::pin(body), deadline, said)),
            Ok(Err(e)) => Err(self.kube_error("watch", &e)),
            Err(_) if headers_by < deadline => Err(self.unanswered("watch")),
            Err(_) => Err(WatchError::Stalled {
                what: self.what.clone(),
                said,
            }),
        }
    }

    /// The next line of an open watch, parsed.
    async fn read<K: Resource + Clone + DeserializeOwned>(&self, open: &mut Open) -> Line<K> {
        // A buffer per event, dropped once parsed: a watch that waits for
        // its next event holds nothing.
        let mut line = Vec::new();
        let read = tokio::time::timeout_at(open.deadline, open.body.read_until(b'\n', &mut line));
        let Ok(read) = read.await else {
            return Line::Failed(WatchError::Stalled {
                what: self.what.clone(),
                said: open.said.clone(),
            });
        };
        match read {
            Ok(0) => return Line::End,
            Ok(_) => {}
            // TLS and chunked-encoding EOFs after a long watch: an end.
            Err(e) if is_eof(&e) => return Line::End,
            Err(e) => return Line::Failed(self.error("watch", None, crate::error_chain(&e))),
        }
        match serde_json::from_slice::<WatchEvent<K>>(&line) {
            Ok(event) => Line::Event(event),
            Err(e) => {
                // A line that is not an event: a Status, or garbage.
                let (code, message) = match serde_json::from_slice::<Status>(&line) {
                    Ok(s) => (Some(s.code), s.message),
                    Err(_) => (None, format!("unreadable watch event: {e}")),
                };
                Line::Failed(self.error("watch", code, message))
            }
        }
    }

    /// No answer within [`ANSWER_WITHIN`]: like a server that cannot be
    /// reached (no status code), retried after the backoff.
    fn unanswered(&self, verb: &'static str) -> WatchError {
        self.error(
            verb,
            None,
            format!(
                "the API server did not answer within {}s",
                ANSWER_WITHIN.as_secs()
            ),
        )
    }

    fn error(&self, verb: &'static str, code: Option<u16>, message: String) -> WatchError {
        WatchError::Api {
            verb,
            what: self.what.clone(),
            code,
            message,
        }
    }

    /// A kube error: a 403's own message (it names what RBAC denied), else
    /// every cause (TLS and connection failures hide below the top).
    fn kube_error(&self, verb: &'static str, e: &kube::Error) -> WatchError {
        match e {
            kube::Error::Api(s) if s.code == 403 => self.error(verb, Some(403), s.message.clone()),
            kube::Error::Api(s) => self.error(verb, Some(s.code), crate::error_chain(e)),
            _ => self.error(verb, None, crate::error_chain(e)),
        }
    }
}

/// Passes `answer` on; when it says the server serves again (anything but
/// no answer, 429 or 5xx) after the loop could not reach it, tells the
/// process's other loops ([`Recovery`]).
fn heard<T>(
    unreachable: &mut Option<tokio::sync::watch::Receiver<u64>>,
    recovery: &Recovery,
    answer: Result<T, WatchError>,
) -> Result<T, WatchError> {
    let serving = match &answer {
        Ok(_) => true,
        Err(e) => e.code().is_some_and(|c| c != 429 && c < 500),
    };
    if serving && unreachable.take().is_some() {
        recovery.answered();
    }
    answer
}

/// An I/O error that only means the stream ended (a TLS close without
/// `close_notify`, a chunked body cut at a chunk boundary), as kube-client
/// classifies them for its own watches.
fn is_eof(e: &std::io::Error) -> bool {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        return true;
    }
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if c.to_string().contains("unexpected EOF during chunk")
            || c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::UnexpectedEof)
        {
            return true;
        }
        cur = c.source();
    }
    false
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
