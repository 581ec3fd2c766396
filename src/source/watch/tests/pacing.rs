//! Pacing against the scripted server: the default backoff, the rate limit
//! that bounds a server ending every watch early, and what one process's
//! loops share (the news that the server answers again, the gate).

use super::*;

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
    let recovery = Recovery::default();
    let loop_with = |script, step: u64| {
        let (api, seen) = server(script);
        let stream = Watch {
            pacing: Pacing {
                backoff: match step {
                    10 => |n| Duration::from_secs(10 * u64::from(n)),
                    _ => |n| Duration::from_secs(100 * u64::from(n)),
                },
                ..Pacing::default()
            },
            recovery: recovery.clone(),
            ..Watch::new(
                api,
                watcher::Config::default().timeout(1000),
                "configmaps in ns",
            )
        }
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
    let stream = Watch {
        pacing: Pacing {
            backoff: |n| Duration::from_secs(30 * u64::from(n)),
            ..Pacing::default()
        },
        recovery: Recovery::default(),
        ..Watch::new(
            api,
            watcher::Config::default().timeout(1000),
            "configmaps in ns",
        )
    }
    .stream();
    let other = Recovery::default();
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
        let stream = Watch {
            pacing: Pacing {
                backoff: |n| Duration::from_secs(10 * u64::from(n)),
                ..Pacing::default()
            },
            recovery: Recovery::default(),
            gate: gate.clone(),
            ..Watch::new(
                api,
                watcher::Config::default().timeout(1000),
                "configmaps in ns",
            )
        }
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
