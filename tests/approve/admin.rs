//! The approver's admin port (`certsync approve --admin-addr`), through
//! the binary, as `tests/operate.rs` and `tests/security_invariants.rs` test
//! `run`'s: what a Deployment's probes and Prometheus see.

use super::*;

/// `/livez` answers from the start; `/readyz` is 503 while the cluster
/// facts cannot be read (here: listing Services is forbidden, as a
/// missing RBAC rule is), naming why, and 200 once they are read;
/// `/metrics` counts the decision. With many idle connections held (more
/// than the 64 served at once) a probe is answered at its first try and
/// the connections over the cap are closed and counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approvers_admin_port_answers_probes_and_holds_its_connection_cap() {
    let mut env = Env::test_server().await;
    let fake = env.fake.as_ref().expect("the test API server");
    fake.forbid("list", "services", true);
    let (approver, port) = env.approver_with_admin();
    wait_for("/livez", || {
        http_get(port, "/livez").filter(|(s, _)| *s == 200)
    });
    let (status, body) = wait_for("/readyz naming the facts", || {
        http_get(port, "/readyz").filter(|(_, b)| b.contains("cannot read the cluster"))
    });
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("forbidden"), "{body}");
    assert_eq!(http_get(port, "/livez").map(|r| r.0), Some(200));

    // The facts can be read again: the next decision reads them.
    env.fake.as_ref().unwrap().forbid("list", "services", false);
    let n1 = env.node_name("n1");
    let ip = env.ip(91);
    env.add_node(&n1, &[("InternalIP", &ip), ("Hostname", &n1)])
        .await;
    let kubelet = env.node_client(&n1).await;
    let csr = env.kubelet_asks(&kubelet, &n1, &[&n1], &[&ip]).await;
    assert_eq!(env.decision(&csr).await.0, "Approved", "{}", approver.log());
    let (status, body) = wait_for("/readyz ready", || {
        http_get(port, "/readyz").filter(|(s, _)| *s == 200)
    });
    assert_eq!(status, 200, "{body}");
    let approved = wait_for("the decision counted", || {
        let m = parse_metrics(&http_get(port, "/metrics")?.1);
        m.get("certsync_csr_decisions_total{decision=\"approve\",reason=\"ok\"}")
            .copied()
            .filter(|v| *v >= 1.0)
    });
    assert_eq!(approved, 1.0);

    // Idle connections past the cap: not a byte sent on any of them.
    const HELD: usize = 200;
    let held: Vec<_> = (0..HELD)
        .map(|i| {
            std::net::TcpStream::connect_timeout(
                &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
                Duration::from_secs(5),
            )
            .unwrap_or_else(|e| panic!("connection {i}: {e}"))
        })
        .collect();
    assert_eq!(livez(port), Some(200), "/livez while {HELD} are held");
    assert_eq!(
        http_get(port, "/readyz").map(|r| r.0),
        Some(200),
        "/readyz while {HELD} are held"
    );
    let (_, text) = http_get(port, "/metrics").expect("/metrics while they are held");
    let closed = parse_metrics(&text)
        .get("certsync_admin_connections_closed_total{reason=\"limit\"}")
        .copied()
        .unwrap_or_else(|| panic!("no closed{{reason=limit}} in\n{text}"));
    assert!(closed >= (HELD - 64) as f64, "{closed} closed:\n{text}");
    drop(held);
    drop(approver);
    env.cleanup().await;
}
