//! The requests one loop makes: a list page, a watch opened, a line read;
//! each failure a [`WatchError`] naming what is watched.

use std::pin::Pin;
use std::time::Duration;

use futures::{AsyncBufRead, AsyncBufReadExt};
use kube::api::{ListParams, WatchParams};
use kube::core::{ObjectList, Status, WatchEvent};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use super::error::WatchError;
use super::pacing::{ANSWER_WITHIN, WATCH_MARGIN};

pub(super) struct Open {
    pub(super) body: Pin<Box<dyn AsyncBufRead + Send>>,
    pub(super) version: String,
    pub(super) fresh: bool,
    pub(super) started: Instant,
    /// When it is taken for stalled, and what is said then.
    pub(super) deadline: Instant,
    pub(super) said: String,
    /// Whether any event (bookmarks included) arrived.
    pub(super) seen: bool,
}

/// What the requests are made with.
pub(super) struct Conn {
    pub(super) client: Client,
    pub(super) request: kube::core::Request,
    pub(super) list: ListParams,
    pub(super) watch: WatchParams,
    pub(super) what: String,
}

pub(super) enum Line<K> {
    Event(WatchEvent<K>),
    /// The server ended the watch.
    End,
    Failed(WatchError),
}

impl Conn {
    pub(super) async fn page<K: Resource + Clone + DeserializeOwned>(
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

    /// A watch from `version`, open: its body, stall deadline and what to say then.
    pub(super) async fn open(&self, version: &str, fresh: bool) -> Result<Box<Open>, WatchError> {
        // `timeoutSeconds` as sent: kube-core sends 290 when none is set.
        let seconds = self.watch.timeout.unwrap_or(290);
        // Taken for stalled then, however alive its connection looks.
        let deadline = Instant::now() + Duration::from_secs(seconds.into()) + WATCH_MARGIN;
        let said = format!(
            "the API server did not end the watch within its {seconds}s timeout and {}s more",
            WATCH_MARGIN.as_secs()
        );
        let req = self
            .request
            .watch(&self.watch, version)
            .map_err(|e| self.error("watch", None, e.to_string()))?;
        // Headers within ANSWER_WITHIN (the permit is held until then), or
        // the stall deadline if sooner.
        let headers_by = deadline.min(Instant::now() + ANSWER_WITHIN);
        match tokio::time::timeout_at(headers_by, self.client.request_stream(req)).await {
            Ok(Ok(body)) => Ok(Box::new(Open {
                body: Box::pin(body),
                version: version.to_owned(),
                fresh,
                started: Instant::now(),
                deadline,
                said,
                seen: false,
            })),
            Ok(Err(e)) => Err(self.kube_error("watch", &e)),
            Err(_) if headers_by < deadline => Err(self.unanswered("watch")),
            Err(_) => Err(WatchError::Stalled {
                what: self.what.clone(),
                said,
            }),
        }
    }

    pub(super) async fn read<K: Resource + Clone + DeserializeOwned>(
        &self,
        open: &mut Open,
    ) -> Line<K> {
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

    pub(super) fn error(
        &self,
        verb: &'static str,
        code: Option<u16>,
        message: String,
    ) -> WatchError {
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

/// An I/O error that only means the stream ended (a TLS close without
/// `close_notify`, a chunked body cut at a chunk boundary), as kube-client
/// classifies them for its own watches.
fn is_eof(e: &std::io::Error) -> bool {
    // `e` is the first link of its own chain.
    std::iter::successors(Some(e as &(dyn std::error::Error + 'static)), |c| {
        c.source()
    })
    .any(|c| {
        c.to_string().contains("unexpected EOF during chunk")
            || c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::UnexpectedEof)
    })
}
