//! The loop against a scripted API server (a tower service behind a real
//! `kube::Client`), on tokio's paused clock: every request is logged with
//! the virtual time it was made at, so the pacing is asserted exactly, with
//! a backoff without jitter (`n` failures: `10 s × n`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body::Frame;
use http_body_util::StreamBody;
use http_body_util::combinators::UnsyncBoxBody;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::*;

mod pacing;
mod protocol;

/// What the server answers to the next request.
enum Reply {
    /// A list at `rv` holding ConfigMaps of these names.
    List(u64, &'static [&'static str]),
    /// A page of a list, with more to come after `continue` token.
    Page(&'static [&'static str], &'static str),
    /// A watch sending these lines, then ending after `Duration`.
    Watch(Vec<Value>, Duration),
    /// A watch that sends nothing and never ends.
    Hang,
    /// An error status.
    Status(u16),
    /// A watch whose connection breaks after `Duration`, having sent nothing.
    Cut(Duration),
}

fn cm(name: &str, rv: u64) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv.to_string()}})
}

fn event(ty: &str, object: Value) -> Value {
    json!({"type": ty, "object": object})
}

fn bookmark(rv: u64) -> Value {
    event(
        "BOOKMARK",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"resourceVersion": rv.to_string()}}),
    )
}

fn status(code: u16) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
           "message": format!("status {code}"), "reason": "Test", "code": code})
}

type Body = UnsyncBoxBody<Bytes, std::io::Error>;

/// A body that fails (a broken connection) after `after`.
fn cut(after: Duration) -> Body {
    let fail = futures::stream::once(async move {
        tokio::time::sleep(after).await;
        Err::<Frame<Bytes>, _>(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset",
        ))
    });
    UnsyncBoxBody::new(StreamBody::new(fail))
}

fn body(lines: Vec<Value>, end: Option<Duration>) -> Body {
    let lines = futures::stream::iter(
        lines
            .into_iter()
            .map(|l| Ok(Frame::data(Bytes::from(format!("{l}\n"))))),
    );
    let tail = futures::stream::once(async move {
        match end {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    })
    .filter_map(|()| async { None::<Result<Frame<Bytes>, std::io::Error>> });
    UnsyncBoxBody::new(StreamBody::new(lines.chain(tail)))
}

/// Requests seen: (seconds since the start, "list" or "watch@RV").
type Seen = Arc<Mutex<Vec<(u64, String)>>>;

fn server(script: Vec<Reply>) -> (Api<ConfigMap>, Seen) {
    let script = Arc::new(Mutex::new(VecDeque::from(script)));
    let seen: Seen = Arc::default();
    let start = Instant::now();
    let log = Arc::clone(&seen);
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let query = req.uri().query().unwrap_or_default().to_owned();
        let watching = query.contains("watch=true");
        let what = if watching {
            let rv = query
                .split('&')
                .find_map(|p| p.strip_prefix("resourceVersion="))
                .unwrap_or_default();
            format!("watch@{rv}")
        } else {
            let page = query
                .split('&')
                .find_map(|p| p.strip_prefix("continue="))
                .map_or(String::new(), |c| format!("+{c}"));
            let limit = query
                .split('&')
                .find_map(|p| p.strip_prefix("limit="))
                .map_or(String::new(), |l| format!(" limit={l}"));
            format!("list{page}{limit}")
        };
        log.lock()
            .unwrap()
            .push((start.elapsed().as_secs(), what.clone()));
        let reply = script.lock().unwrap().pop_front().unwrap_or(Reply::Hang);
        let response = match reply {
            Reply::Page(names, token) => {
                assert!(what.starts_with("list"), "script and requests disagree");
                let items: Vec<Value> = names.iter().map(|n| cm(n, 5)).collect();
                let list = json!({"apiVersion": "v1", "kind": "ConfigMapList",
                                  "metadata": {"resourceVersion": "5", "continue": token}, "items": items});
                http::Response::new(body(vec![list], Some(Duration::ZERO)))
            }
            Reply::List(rv, names) => {
                assert!(what.starts_with("list"), "script and requests disagree");
                let items: Vec<Value> = names.iter().map(|n| cm(n, rv)).collect();
                let list = json!({"apiVersion": "v1", "kind": "ConfigMapList",
                                  "metadata": {"resourceVersion": rv.to_string()}, "items": items});
                http::Response::new(body(vec![list], Some(Duration::ZERO)))
            }
            Reply::Watch(lines, lasts) => {
                assert!(what.starts_with("watch"), "script and requests disagree");
                http::Response::new(body(lines, Some(lasts)))
            }
            Reply::Hang => http::Response::new(body(Vec::new(), None)),
            Reply::Cut(after) => http::Response::new(cut(after)),
            Reply::Status(code) => {
                let mut r = http::Response::new(body(vec![status(code)], Some(Duration::ZERO)));
                *r.status_mut() = http::StatusCode::from_u16(code).unwrap();
                r
            }
        };
        async move { Ok::<_, std::convert::Infallible>(response) }
    });
    let client = Client::new(service, "ns");
    (Api::namespaced(client, "ns"), seen)
}

fn paced(
    api: Api<ConfigMap>,
    config: watcher::Config,
) -> impl Stream<Item = Result<Event<ConfigMap>, WatchError>> {
    Watch {
        pacing: Pacing {
            backoff: |n| Duration::from_secs(10 * u64::from(n)),
            short: Duration::from_secs(1),
            ..Pacing::default()
        },
        ..Watch::new(api, config, "configmaps in ns")
    }
    .stream()
}

/// What the stream says until it has been quiet for 100 s (virtual), at
/// most `max` items. Errors are cut at their first " (" (kube's debug
/// print of a Status).
async fn drain(
    events: impl Stream<Item = Result<Event<ConfigMap>, WatchError>>,
    max: usize,
) -> Vec<String> {
    let mut events = std::pin::pin!(events);
    let mut out = Vec::new();
    while out.len() < max
        && let Ok(Some(e)) = tokio::time::timeout(Duration::from_secs(100), events.next()).await
    {
        out.push(match e {
            Ok(Event::Init) => "Init".to_owned(),
            Ok(Event::InitApply(o)) => format!("InitApply {}", o.metadata.name.unwrap()),
            Ok(Event::InitDone) => "InitDone".to_owned(),
            Ok(Event::Apply(o)) => format!("Apply {}", o.metadata.name.unwrap()),
            Ok(Event::Delete(o)) => format!("Delete {}", o.metadata.name.unwrap()),
            Err(e) => {
                let e = format!("Err {:?} {e}", e.code());
                e.split(" (").next().unwrap_or_default().to_owned()
            }
        });
    }
    out
}

fn requests(seen: &Seen) -> Vec<(u64, String)> {
    seen.lock().unwrap().clone()
}

fn at(list: &[(u64, &str)]) -> Vec<(u64, String)> {
    list.iter().map(|(t, w)| (*t, (*w).to_owned())).collect()
}
