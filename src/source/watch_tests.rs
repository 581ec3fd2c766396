//! The loop against a scripted API server (a tower service behind a real
//! `kube::Client`), on tokio's paused clock: every request is logged with
//! the virtual time it was made at, so the pacing is asserted exactly, with
//! a backoff without jitter (`n` failures: `10 s × n`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use http_body::Frame;
use http_body_util::StreamBody;
use http_body_util::combinators::UnsyncBoxBody;
use k8s_openapi::api::core::v1::ConfigMap;
use serde_json::{Value, json};

use super::*;

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
    Watch::new(api, config)
        .named("configmaps in ns")
        .pacing(Pacing {
            backoff: |n| Duration::from_secs(10 * u64::from(n)),
            short: Duration::from_secs(1),
            ..Pacing::default()
        })
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

/// client-go's "very short watch": ended within a second without an event,
/// a watch is a failure, backed off more each time; a watch with an event,
/// or one that lasted, resets the backoff.
#[tokio::test(start_paused = true)]
async fn short_watches_back_off_and_a_healthy_watch_resets_it() {
    let (api, seen) = server(vec![
        Reply::List(5, &["a"]),
        Reply::Watch(vec![], Duration::ZERO), // short: 1 failure
        Reply::Watch(vec![], Duration::from_millis(999)), // short: 2
        Reply::Watch(vec![], Duration::ZERO), // short: 3
        Reply::Watch(vec![event("MODIFIED", cm("a", 7))], Duration::ZERO), // healthy
        Reply::Watch(vec![], Duration::ZERO), // short: 1 again
        Reply::Watch(vec![], Duration::from_secs(2)), // quiet but lasted: healthy
        Reply::Watch(vec![], Duration::ZERO), // short: 1 again
        Reply::Watch(vec![bookmark(9)], Duration::ZERO), // a bookmark is an event
    ]);
    let events = drain(paced(api, watcher::Config::default().timeout(1000)), 99).await;
    assert_eq!(events, ["Init", "InitApply a", "InitDone", "Apply a"]);
    assert_eq!(
        requests(&seen),
        at(&[
            (0, "list limit=500"),
            (0, "watch@5"),
            (10, "watch@5"), // after 10 s × 1
            (30, "watch@5"), // 10 + 10 s × 2 (the 999 ms were still short)
            (60, "watch@5"), // 30 + 10 s × 3
            (60, "watch@7"), // the event reset it, and moved the version
            (70, "watch@7"), // 10 s × 1: counting from one again
            (72, "watch@7"), // it lasted 2 s: healthy, resumed at once
            (82, "watch@7"), // 10 s × 1 again
            (82, "watch@9"), // resumed at the bookmark, at once
        ])
    );
}

/// `410 Gone` relists at once after a healthy watch; only a 410 on the very
/// watch a list started (a server that expires even fresh versions) waits.
#[tokio::test(start_paused = true)]
async fn gone_relists_at_once_unless_the_version_was_fresh() {
    let gone = || Reply::Watch(vec![event("ERROR", status(410))], Duration::ZERO);
    let (api, seen) = server(vec![
        Reply::List(5, &["a"]),
        gone(), // the list's own version: a storm, paced
        Reply::List(6, &["a", "b"]),
        Reply::Watch(vec![], Duration::from_secs(3)), // healthy (lasted)
        gone(),                                       // compacted: at once
        Reply::List(8, &["b"]),
        Reply::Watch(vec![event("ADDED", cm("c", 9))], Duration::ZERO),
        Reply::Status(410), // as an HTTP status, after a healthy watch
        Reply::List(10, &["c"]),
    ]);
    let events = drain(paced(api, watcher::Config::default().timeout(1000)), 99).await;
    assert_eq!(
        events,
        [
            "Init",
            "InitApply a",
            "InitDone",
            "Init",
            "InitApply a",
            "InitApply b",
            "InitDone",
            "Init",
            "InitApply b",
            "InitDone",
            "Apply c",
            "Init",
            "InitApply c",
            "InitDone",
        ],
        "410s are routine: no error reported"
    );
    assert_eq!(
        requests(&seen),
        at(&[
            (0, "list limit=500"),
            (0, "watch@5"),
            (10, "list limit=500"), // paced: 410 on the list's own version
            (10, "watch@6"),
            (13, "watch@6"),
            (13, "list limit=500"), // at once
            (13, "watch@8"),
            (13, "watch@9"),
            (13, "list limit=500"), // at once
            (13, "watch@10"),
        ])
    );
}

/// The API server restarts with its history compacted: the watch from a
/// list, quiet for minutes, is cut; the retries fail while the server is
/// down; then the resumed watch gets `410 Gone`. The version was not fresh
/// any more (the watch lasted): relist at once, not after the backoff the
/// outage built up (it was 30 s in the recovery bench).
#[tokio::test(start_paused = true)]
async fn gone_after_an_outage_relists_at_once() {
    let (api, seen) = server(vec![
        Reply::List(5, &["a"]),
        Reply::Cut(Duration::from_secs(60)), // the server goes away
        Reply::Status(503),
        Reply::Status(503),
        Reply::Status(410), // back, compacted
        Reply::List(9, &["a"]),
    ]);
    let events = drain(paced(api, watcher::Config::default().timeout(1000)), 99).await;
    assert_eq!(
        events.iter().filter(|e| e.starts_with("Init")).count(),
        6,
        "{events:?}"
    );
    assert_eq!(
        requests(&seen),
        at(&[
            (0, "list limit=500"),
            (0, "watch@5"),
            (70, "watch@5"),         // cut at 60, 10 s × 1
            (90, "watch@5"),         // 10 s × 2
            (120, "watch@5"),        // 10 s × 3: the server answers 410
            (120, "list limit=500"), // at once
            (120, "watch@9"),
        ])
    );
}

/// Errors are reported and backed off; the watch resumes where it was; a
/// failed list is made again; a watch not ended in time is given up.
#[tokio::test(start_paused = true)]
async fn errors_are_reported_paced_and_resumed() {
    let (api, seen) = server(vec![
        Reply::Status(500),
        Reply::List(5, &[]),
        Reply::Status(403),
        Reply::Watch(vec![event("ERROR", status(500))], Duration::ZERO),
        Reply::Hang, // stalled: given up 10 s + 5 s after it started
        Reply::Watch(vec![event("ADDED", cm("a", 6))], Duration::ZERO),
    ]);
    let events = drain(paced(api, watcher::Config::default().timeout(10)), 7).await;
    assert_eq!(
        events,
        [
            "Err Some(500) list configmaps in ns: ApiError: status 500: Test",
            "Init",
            "InitDone",
            "Err Some(403) watch configmaps in ns: status 403",
            "Err Some(500) watch configmaps in ns: status 500",
            "Err None watch configmaps in ns: the API server did not end the watch within its 10s timeout and 5s more; watching again",
            "Apply a",
        ]
    );
    assert_eq!(
        requests(&seen),
        at(&[
            (0, "list limit=500"),
            (10, "list limit=500"),
            (10, "watch@5"),
            (30, "watch@5"),
            (60, "watch@5"),
            (115, "watch@5"), // the stall at 75, then 10 s × 4
        ]),
        "a list that succeeds does not reset the backoff; only a healthy watch does"
    );
}

/// Pages are reported as one list: `Init`, every object, `InitDone`; a
/// page that fails starts the list again.
#[tokio::test(start_paused = true)]
async fn a_paged_list_is_reported_whole() {
    let (api, seen) = server(vec![
        Reply::Page(&["a", "b"], "p2"),
        Reply::Status(410), // the continue token expired
        Reply::Page(&["a", "b"], "p2"),
        Reply::List(5, &["c"]),
    ]);
    let events = drain(paced(api, watcher::Config::default().page_size(2)), 99).await;
    assert_eq!(
        events[..3],
        ["Init", "InitApply a", "InitApply b"],
        "a page at a time"
    );
    assert!(events[3].starts_with("Err Some(410) list"), "{events:?}");
    assert_eq!(
        events[4..],
        [
            "Init",
            "InitApply a",
            "InitApply b",
            "InitApply c",
            "InitDone"
        ]
    );
    assert_eq!(
        requests(&seen),
        at(&[
            (0, "list limit=2"),
            (0, "list+p2 limit=2"),
            (10, "list limit=2"),
            (10, "list+p2 limit=2"),
            (10, "watch@5"),
        ])
    );
}

/// The default pacing: jittered, doubling from 0.8 s, capped at 30 s.
#[test]
fn retry_delays_double_with_jitter_up_to_thirty_seconds() {
    for n in 1..=5u32 {
        let base = Duration::from_millis(800) * 2u32.pow(n - 1);
        let d = retry_delay(n);
        assert!(d >= base && d < base * 2, "{n}: {d:?}");
    }
    assert_eq!(retry_delay(7), Duration::from_secs(30));
    assert_eq!(retry_delay(u32::MAX), Duration::from_secs(30));
}

/// The approver's two kube-runtime watchers, replaced by this loop as its
/// code would (the same `watcher::Config`, the same `Listed`, the same
/// `select!`): both lists arrive and are applied.
#[tokio::test(start_paused = true)]
async fn a_cluster_scoped_watch_pair_fills_listed_sets() {
    use k8s_openapi::api::certificates::v1::CertificateSigningRequest as Csr;
    use k8s_openapi::api::core::v1::Node;
    let (cm_api, csr_seen) = server(vec![Reply::List(5, &[])]);
    let csrs: Api<Csr> = Api::all(cm_api.into_client());
    let (cm_api, node_seen) = server(vec![Reply::List(6, &[])]);
    let nodes: Api<Node> = Api::all(cm_api.into_client());
    let selector = "spec.signerName=kubernetes.io/kubelet-serving";

    let watching = watcher::Config::default().timeout(290);
    let mut csr_events = std::pin::pin!(watch(csrs.clone(), watching.clone().fields(selector)));
    let mut node_events = std::pin::pin!(watch(nodes, watching));

    let (mut csr_list, mut node_list) = (
        super::super::Listed::default(),
        super::super::Listed::default(),
    );
    while !(csr_list.synced() && node_list.synced()) {
        tokio::select! {
            Some(e) = csr_events.next() => { csr_list.apply(e.unwrap()); }
            Some(e) = node_events.next() => { node_list.apply(e.unwrap()); }
        }
    }
    assert!(csr_list.items().is_empty() && node_list.items().is_empty());
    assert_eq!(requests(&csr_seen)[..1], at(&[(0, "list limit=500")])[..]);
    assert_eq!(requests(&node_seen)[..1], at(&[(0, "list limit=500")])[..]);
}

/// Attack: a server (or a proxy cutting streams after the first chunk)
/// that answers every watch with one BOOKMARK and ends it at once. A
/// bookmark makes the watch "healthy", so neither the short-watch rule nor
/// the backoff applies, and the loop re-watched as fast as the server
/// answered: client-go is bounded by its client's rate limiter (5 requests
/// a second, bursts of 10); the loop must be bounded too.
#[tokio::test(start_paused = true)]
async fn attack_watches_ending_after_one_bookmark_are_not_a_hot_loop() {
    let mut script = vec![Reply::List(5, &["a"])];
    script.extend((0..300).map(|i| Reply::Watch(vec![bookmark(6 + i)], Duration::ZERO)));
    let (api, seen) = server(script);
    let events = drain(paced(api, watcher::Config::default().timeout(1000)), 99).await;
    assert_eq!(events, ["Init", "InitApply a", "InitDone"]);
    let first_10s = requests(&seen).iter().filter(|(t, _)| *t < 10).count();
    assert!(
        first_10s <= 60,
        "{first_10s} requests in the first 10 s against a server that ends every watch after one bookmark"
    );
}

/// Attack: every watch delivers one event, then `410 Gone`. The event
/// makes the watch healthy (backoff reset, version no longer fresh), so
/// each 410 relisted at once: a full list and a watch in a loop, as fast
/// as the server answers.
#[tokio::test(start_paused = true)]
async fn attack_a_gone_after_every_one_event_watch_does_not_relist_in_a_loop() {
    let mut script = Vec::new();
    for _ in 0..150 {
        script.push(Reply::List(5, &["a"]));
        script.push(Reply::Watch(
            vec![event("MODIFIED", cm("a", 6)), event("ERROR", status(410))],
            Duration::ZERO,
        ));
    }
    let (api, seen) = server(script);
    let events = drain(paced(api, watcher::Config::default().timeout(1000)), 2000).await;
    assert!(events.len() > 4, "{events:?}");
    let lists = requests(&seen)
        .iter()
        .filter(|(t, w)| *t < 10 && w.starts_with("list"))
        .count();
    assert!(
        lists <= 30,
        "{lists} full lists in the first 10 s against a server that ends every watch with 410"
    );
}

/// Attack on the rule above: every watch fails (500) once, then answers
/// `410 Gone`. The 410 is not on a fresh version, so it relists at once,
/// but the failures are counted and never reset (no watch is ever
/// healthy), so the relists slow down with the backoff.
#[tokio::test(start_paused = true)]
async fn attack_a_gone_after_every_failed_watch_does_not_relist_in_a_loop() {
    let mut script = Vec::new();
    for _ in 0..50 {
        script.push(Reply::List(5, &["a"]));
        script.push(Reply::Status(500));
        script.push(Reply::Status(410));
    }
    let (api, seen) = server(script);
    let events = drain(paced(api, watcher::Config::default().timeout(1000)), 2000).await;
    assert!(events.len() > 4, "{events:?}");
    let lists: Vec<u64> = requests(&seen)
        .iter()
        .filter(|(_, w)| w.starts_with("list"))
        .map(|(t, _)| *t)
        .collect();
    // 10 s × 1, then × 2, × 3…: the n-th relist at 10 × n(n+1)/2 s.
    assert_eq!(lists[..5], [0, 10, 30, 60, 100], "{lists:?}");
}

/// Two loops of one process lose the server together; the first to hear
/// from it again tells the other, which retries within a second instead of
/// sleeping out its own (longer) backoff.
#[tokio::test(start_paused = true)]
async fn a_loop_hearing_from_the_server_again_wakes_the_others() {
    let recovery = Recovery::new();
    let loop_with = |script, step: u64| {
        let (api, seen) = server(script);
        let stream = Watch::new(api, watcher::Config::default().timeout(1000))
            .pacing(Pacing {
                backoff: match step {
                    10 => |n| Duration::from_secs(10 * u64::from(n)),
                    _ => |n| Duration::from_secs(100 * u64::from(n)),
                },
                ..Pacing::default()
            })
            .recovery(recovery.clone())
            .stream();
        (stream, seen)
    };
    let (quick, quick_seen) = loop_with(
        vec![
            Reply::List(5, &["a"]),
            Reply::Cut(Duration::from_secs(60)),
            Reply::Status(410),
            Reply::List(9, &["a"]),
        ],
        10,
    );
    let (slow, slow_seen) = loop_with(
        vec![
            Reply::List(5, &["b"]),
            Reply::Cut(Duration::from_secs(60)),
            Reply::Status(410),
            Reply::List(9, &["b"]),
        ],
        100,
    );
    let _ = tokio::join!(drain(quick, 99), drain(slow, 99));
    let after_cut = |seen: &Seen| requests(seen)[2..].to_vec();
    assert_eq!(
        after_cut(&quick_seen),
        at(&[(70, "watch@5"), (70, "list limit=500"), (70, "watch@9")]),
        "the quick loop's own backoff: 10 s"
    );
    assert_eq!(
        after_cut(&slow_seen),
        at(&[(70, "watch@5"), (70, "list limit=500"), (70, "watch@9")]),
        "woken by the quick loop's answer, within a second, not at 160 s"
    );
}

/// Loops that do not share a [`Recovery`] (other processes) keep their own
/// backoff: the news is no stampede trigger across processes.
#[tokio::test(start_paused = true)]
async fn loops_of_other_processes_keep_their_backoff() {
    let (api, seen) = server(vec![
        Reply::List(5, &["b"]),
        Reply::Cut(Duration::from_secs(60)),
        Reply::Status(410),
        Reply::List(9, &["b"]),
    ]);
    let stream = Watch::new(api, watcher::Config::default().timeout(1000))
        .pacing(Pacing {
            backoff: |n| Duration::from_secs(30 * u64::from(n)),
            ..Pacing::default()
        })
        .recovery(Recovery::new())
        .stream();
    let other = Recovery::new();
    let tell = async {
        tokio::time::sleep(Duration::from_secs(70)).await;
        other.answered();
    };
    let _ = tokio::join!(drain(stream, 99), tell);
    assert_eq!(requests(&seen)[2].0, 90, "{:?}", requests(&seen));
}

/// Loops sharing a [`Gate`] of one permit: a list the server never answers
/// holds it for [`ANSWER_WITHIN`], not forever; the other loop then lists
/// and opens its watch, whose permit is given back at its headers (not held
/// while it lasts), so the first loop's retry goes through after its own
/// backoff.
#[tokio::test(start_paused = true)]
async fn a_permit_is_held_until_the_answer_or_the_timeout_never_across_a_watch() {
    let gate = Gate::new(1);
    let loop_with = |script| {
        let (api, seen) = server(script);
        let stream = Watch::new(api, watcher::Config::default().timeout(1000))
            .named("configmaps in ns")
            .pacing(Pacing {
                backoff: |n| Duration::from_secs(10 * u64::from(n)),
                ..Pacing::default()
            })
            .recovery(Recovery::new())
            .gate(gate.clone())
            .stream();
        (stream, seen)
    };
    let (stuck, stuck_seen) = loop_with(vec![Reply::Hang, Reply::List(5, &["a"]), Reply::Hang]);
    let (other, other_seen) = loop_with(vec![Reply::List(5, &["b"]), Reply::Hang]);
    let (stuck, other) = tokio::join!(drain(stuck, 9), drain(other, 9));
    let waited = ANSWER_WITHIN.as_secs();
    assert_eq!(
        stuck,
        [
            format!(
                "Err None list configmaps in ns: the API server did not answer within {waited}s"
            ),
            "Init".to_owned(),
            "InitApply a".to_owned(),
            "InitDone".to_owned(),
        ]
    );
    assert_eq!(other, ["Init", "InitApply b", "InitDone"]);
    assert_eq!(
        requests(&stuck_seen),
        at(&[
            (0, "list limit=500"),
            (waited + 10, "list limit=500"),
            (waited + 10, "watch@5")
        ]),
        "given up after {waited} s, retried after the backoff while the other loop's watch is open"
    );
    assert_eq!(
        requests(&other_seen),
        at(&[(waited, "list limit=500"), (waited, "watch@5")]),
        "the permit, free once the stuck list was given up"
    );
}
