//! The loop: client-go's reflector as a state machine, failures paced,
//! each request through the rate limiter and the [`Gate`].

use std::collections::VecDeque;
use std::time::Duration;

use kube::Resource;
use kube::core::WatchEvent;
use kube::runtime::watcher::Event;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::conn::{Conn, Line, Open};
use super::error::{LOG, WatchError};
use super::pacing::{Gate, Pacing, Recovery};

enum State<K> {
    /// List from the first page.
    List,
    /// Reporting a list: the objects still to report, the next page's
    /// continue token, the list's resourceVersion.
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

pub(super) struct Loop<K> {
    conn: Conn,
    pacing: Pacing,
    /// The rate limiter's bucket as of `refilled`.
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

impl<K> Loop<K>
where
    K: Resource + Clone + DeserializeOwned + Send + 'static,
{
    pub(super) fn new(conn: Conn, pacing: Pacing, recovery: Recovery, gate: Gate) -> Self {
        Self {
            conn,
            tokens: pacing.burst,
            refilled: Instant::now(),
            pacing,
            failures: 0,
            short_streak: 0,
            pause: None,
            recovery,
            gate,
            unreachable: None,
            state: State::List,
        }
    }

    /// The next event, or the next failure (already counted and paced).
    pub(super) async fn next(&mut self) -> Result<Event<K>, WatchError> {
        loop {
            if let Some(until) = self.pause.take() {
                self.wait(until).await;
            }
            let step = match std::mem::replace(&mut self.state, State::List) {
                State::List => self.page(None).await,
                State::Listing {
                    items,
                    next_page,
                    version,
                } => self.report(items, next_page, version).await,
                State::Watch { version, fresh } => self.watch(version, fresh).await,
                State::Watching(open) => self.read(open).await,
            };
            if let Some(step) = step {
                return step;
            }
        }
    }

    /// A list's first page (`token` `None`: reported as `Init`), or its
    /// next. A failed page (an expired continue token, too): the whole list
    /// again, after the backoff.
    async fn page(&mut self, token: Option<String>) -> Option<Result<Event<K>, WatchError>> {
        let first = token.is_none();
        match Box::pin(self.throttled(|c| c.page(token))).await {
            Ok(list) => {
                self.state = State::Listing {
                    items: list.items.into(),
                    next_page: list.metadata.continue_.filter(|c| !c.is_empty()),
                    version: list.metadata.resource_version.unwrap_or_default(),
                };
                first.then_some(Ok(Event::Init))
            }
            Err(e) => Some(Err(self.failed(e))),
        }
    }

    /// The next object of a list, its end, or `None` (next page asked).
    async fn report(
        &mut self,
        mut items: VecDeque<K>,
        next_page: Option<String>,
        version: String,
    ) -> Option<Result<Event<K>, WatchError>> {
        if let Some(o) = items.pop_front() {
            self.state = State::Listing {
                items,
                next_page,
                version,
            };
            return Some(Ok(Event::InitApply(o)));
        }
        let Some(token) = next_page else {
            self.state = State::Watch {
                version,
                fresh: true,
            };
            return Some(Ok(Event::InitDone));
        };
        self.page(Some(token)).await
    }

    /// Opens a watch from `version` (`None`: opened, or gone: relisting).
    async fn watch(
        &mut self,
        version: String,
        fresh: bool,
    ) -> Option<Result<Event<K>, WatchError>> {
        match Box::pin(self.throttled(|c| c.open(&version, fresh))).await {
            Ok(open) => self.state = State::Watching(open),
            Err(e) if e.code() == Some(410) => self.gone(fresh),
            Err(e) => return Some(Err(self.resume_after(version, e))),
        }
        None
    }

    /// The next line of a watch (`None`: a bookmark, an end, gone).
    async fn read(&mut self, mut open: Box<Open>) -> Option<Result<Event<K>, WatchError>> {
        match self.conn.read::<K>(&mut open).await {
            Line::Event(WatchEvent::Added(o) | WatchEvent::Modified(o)) => {
                self.healthy(open, o.meta().resource_version.clone());
                return Some(Ok(Event::Apply(o)));
            }
            Line::Event(WatchEvent::Deleted(o)) => {
                self.healthy(open, o.meta().resource_version.clone());
                return Some(Ok(Event::Delete(o)));
            }
            Line::Event(WatchEvent::Bookmark(b)) => {
                self.healthy(open, Some(b.metadata.resource_version));
            }
            Line::Event(WatchEvent::Error(s)) if s.code == 410 => self.gone(open.fresh),
            Line::Event(WatchEvent::Error(s)) => {
                let message = if s.code == 403 {
                    s.message
                } else {
                    format!("{} ({})", s.message, s.code)
                };
                let e = self.conn.error("watch", Some(s.code), message);
                return Some(Err(self.resume_after(open.version, e)));
            }
            Line::Failed(e) => return Some(Err(self.resume_after(open.version, e))),
            Line::End => self.ended(*open),
        }
        None
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
    /// its headers).
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
        // The server serves again (anything but no answer, 429 or 5xx)
        // after this loop could not reach it: the others are told.
        let serving =
            (answer.as_ref().err()).is_none_or(|e| e.code().is_some_and(|c| c != 429 && c < 500));
        if serving && self.unreachable.take().is_some() {
            self.recovery.answered();
        }
        answer
    }

    /// An event arrived on `open`: the watch is healthy, and resumes from
    /// here (`version`).
    fn healthy(&mut self, mut open: Box<Open>, version: Option<String>) {
        if let Some(v) = version.filter(|v| !v.is_empty()) {
            open.version = v;
        }
        open.seen = true;
        open.fresh = false;
        self.state = State::Watching(open);
        self.reset();
    }

    fn reset(&mut self) {
        self.failures = 0;
        if self.short_streak > 0 {
            tracing::info!(target: LOG, watching = %self.conn.what, short_watches = self.short_streak, "watch healthy again");
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
                    target: LOG,
                    watching = %self.conn.what,
                    lasted_ms = lasted.as_millis() as u64,
                    "the API server ended the watch within {:?} without a single event; \
                     backing off (is a proxy cutting long requests?)",
                    self.pacing.short
                );
            } else {
                tracing::debug!(target: LOG, watching = %self.conn.what, streak = self.short_streak, "another short watch");
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
        tracing::debug!(target: LOG, watching = %self.conn.what, fresh, "resourceVersion expired; re-listing");
        if fresh {
            self.count_failure();
        }
        self.state = State::List;
    }

    /// A failed watch (or one that could not be opened): resumed from
    /// `version`, after the backoff; a 410 then (history compacted) relists
    /// at once, not after more backoff. Not fresh any more: a 410 now is an
    /// expired version (a server back from an outage), not a storm.
    fn resume_after(&mut self, version: String, e: WatchError) -> WatchError {
        self.state = State::Watch {
            version,
            fresh: false,
        };
        self.failed(e)
    }

    fn failed(&mut self, e: WatchError) -> WatchError {
        self.count_failure();
        // No answer at all: listen, from now on (news that arrives before
        // the pause begins is not missed), for another loop hearing from it.
        let unanswered = matches!(e, WatchError::Api { code: None, .. });
        self.unreachable = unanswered.then(|| self.recovery.subscribe());
        e
    }

    fn count_failure(&mut self) {
        self.failures = self.failures.saturating_add(1);
        let wait = (self.pacing.backoff)(self.failures);
        tracing::debug!(target: LOG, watching = %self.conn.what, failures = self.failures, retry_in_ms = wait.as_millis() as u64, "backing off");
        self.pause = Some(Instant::now() + wait);
    }
}
