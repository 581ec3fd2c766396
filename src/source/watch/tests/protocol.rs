//! The reflector's protocol against the scripted server: short watches
//! backed off, `410 Gone` relisted, errors reported and resumed, a paged
//! list reported whole, the approver's pair of watches.

use super::*;

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
    let mut csr_events = std::pin::pin!(
        Watch::new(csrs.clone(), watching.clone().fields(selector), "csrs").stream()
    );
    let mut node_events = std::pin::pin!(Watch::new(nodes, watching, "nodes").stream());

    let (mut csr_list, mut node_list) = (
        crate::source::Listed::default(),
        crate::source::Listed::default(),
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
