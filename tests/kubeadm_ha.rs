//! Three control-plane nodes that kubeadm v1.36 itself made and joined
//! (stacked etcd, `../shared/realkube/kubeadm/node.sh up` and `join`), each
//! joining an adopted cluster and then adopted, as
//! docs/guides/kubeadm-control-plane.md says,
//! through the binary, while the cluster keeps serving; then run past the
//! end of the CAs kubeadm made (`caCertificateValidityPeriod`, minutes),
//! which node 1's adopt renewed with their own key and the others took
//! from it (`kube-system/certsync-kubeadm-cas`), node 3 reverted to
//! kubeadm's files before it and serving past it. Needs root and the
//! realkube tools, as tests/kubeadm.rs does (skips without them, fails
//! under `CI=true`).

mod support;

use std::time::Duration;

use support::ca_end::serves_past_the_ca_end;
use support::certsync_bin;
use support::kubeadm_node::{
    Node, Restarts, containers, first_der, kubeadm_cmd, kubectl, live_der, pem_not_after,
    readyz_at, realkube, restarts, served, settled, stored_cluster_configuration, unix_now,
    wait_long,
};

/// Adopt with a lifetime long enough that no renewal falls inside the test
/// (tests/kubeadm.rs renews at short lifetimes on one node), and that
/// adopt accepts: renewed at 70-90 %, at least 6 minutes are left for
/// client-go's 5-minute re-read of the components' client certificates.
const ADOPT: [&str; 5] = ["adopt", "--image", "certsync", "--set", "lifetime=1h"];

/// kubeadm's CAs' lifetime, in minutes: longer than making and adopting
/// three nodes and reverting one takes on two cores beside the suite
/// (about 12 minutes, each adopt and revert waiting for its API server),
/// short enough to wait for. Each adopt renews them once a tenth of that
/// is past, each renewal lasting as long again from then.
const CA_MINUTES: i64 = 15;

/// Lines of `node.sh members` that are etcd voters.
fn voters(node: &Node) -> usize {
    let out = node.sh("members", &[]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.trim_end().ends_with("voter"))
        .count()
}

/// Node 1 made and adopted; node 2 joins the adopted cluster
/// (`kubeadm join --control-plane`'s own phases against the
/// ClusterConfiguration, which adopt leaves kubeadm's) and is adopted; node
/// 3 the same, its keys through kubeadm-certs (`--upload-certs`). Each join
/// completes unattended and the new node serves kubeadm's own certificate
/// until its adoption. After each adoption: that node's API server and
/// etcd serve certsync's certificates (read with openssl, compared with
/// its targets), every API server answers `/readyz`, etcd keeps every
/// member voting, and the ClusterConfiguration is never changed. Meanwhile
/// the API servers of the other nodes are polled: the cluster keeps
/// serving. No container restarts on any node from its adoption on (a new
/// manifest starts a new pod), but a scheduler or controller-manager that
/// lost its lease in its node's API server restart at adoption or revert;
/// none past the CAs' end. What restarts while a node joins, on kubeadm's
/// manifests before certsync touches it, is kubeadm's: printed, not judged.
#[test]
fn nodes_join_an_adopted_cluster_and_are_adopted_one_at_a_time() {
    let Some(realkube) = realkube() else { return };
    let image = format!("certsync={}", certsync_bin());
    let runner = ["--", "--image", image.as_str()];
    let kubectl = kubectl(&realkube);
    let mut nodes = vec![Node::up_to_join(
        &realkube,
        "ha1",
        200,
        None,
        Some(&format!("{CA_MINUTES}m")),
    )];
    let ca_end = pem_not_after(&std::fs::read(nodes[0].etc().join("pki/ca.crt")).expect("ca.crt"));
    let admin = nodes[0].etc().join("admin.conf");
    let server = |n: &Node| format!("https://{}:6443", n.ip);
    let cc = || stored_cluster_configuration(&kubectl, &admin);
    wait_long(
        "node 1's API server ready",
        Duration::from_secs(180),
        || readyz_at(&kubectl, &admin, Some(&server(&nodes[0]))).ok(),
    );
    let original_cc = cc();

    let mut polls = 0usize;
    let mut failures = Vec::new();
    // Where each node's restarts.log stood when its adoption began.
    let mut adopted_from = Vec::new();
    for i in 0..3 {
        if i > 0 {
            let mut args = Vec::new();
            if i == 2 {
                args.push("--upload-certs");
            }
            args.extend(runner);
            let joined = Node::join(&realkube, &format!("ha{}", i + 1), &nodes[0], &args);
            nodes.push(joined);
        }
        let (node, others) = nodes.split_last().expect("a node");
        if i > 0 {
            // The join completed (Node::join asserts it) on kubeadm's own
            // manifests: the new node serves kubeadm's certificate.
            wait_long(
                &format!("node {}'s API server ready", i + 1),
                Duration::from_secs(180),
                || readyz_at(&kubectl, &admin, Some(&server(node))).ok(),
            );
            let kubeadm = first_der(
                &std::fs::read(node.etc().join("pki/apiserver.crt")).expect("apiserver.crt"),
            );
            assert_eq!(
                served(node, &format!("{}:6443", node.ip), None),
                kubeadm,
                "node {} serves kubeadm's certificate before its adoption",
                i + 1
            );
        }
        assert_eq!(
            voters(&nodes[0]),
            i + 1,
            "etcd voters before node {}'s adoption",
            i + 1
        );
        if i == 0 {
            // A renewal is due once less than 90% of the span (without
            // kubeadm's 5-minute backdate) is left.
            let due = ca_end - CA_MINUTES * 60 * 9 / 10 - unix_now() + 5;
            if due > 0 {
                std::thread::sleep(Duration::from_secs(due as u64));
            }
        }
        // From here on the node is certsync's: what restarted before, on
        // kubeadm's manifests while it joined, is kubeadm's.
        adopted_from.push(Restarts::mark(node));
        let before = containers(node);
        let (ok, text) = kubeadm_cmd(node, &ADOPT);
        assert!(ok, "adopt on node {}:\n{text}", i + 1);
        assert!(
            i > 0 || text.contains("renewed now"),
            "node 1's CAs renewed:\n{text}"
        );
        // One renewal per CA for the cluster: the others take node 1's.
        if i > 0 {
            assert!(
                text.contains("the cluster's CA certificate, which another node renewed"),
                "node {} took node 1's renewal:\n{text}",
                i + 1
            );
            for ca in ["pki/ca.crt", "pki/front-proxy-ca.crt", "pki/etcd/ca.crt"] {
                assert_eq!(
                    std::fs::read(node.etc().join(ca)).expect("CA"),
                    std::fs::read(nodes[0].etc().join(ca)).expect("CA"),
                    "node {}'s {ca} is node 1's renewal",
                    i + 1
                );
            }
        }
        assert!(text.ends_with("adopted\n"), "{text}");
        // This node's pods start again on their new manifests (new pids),
        // certsync's beside them; the other API servers answer meanwhile.
        wait_long(
            &format!("node {}'s adopted pods", i + 1),
            Duration::from_secs(240),
            || {
                for other in others {
                    polls += 1;
                    if let Err(e) = readyz_at(&kubectl, &admin, Some(&server(other))) {
                        eprintln!("/readyz at {} failed: {e}", other.ip);
                        failures.push(other.ip.clone());
                    }
                }
                let now = settled(node, 5)?;
                let fresh = now
                    .iter()
                    .all(|(name, pid, _)| before.iter().all(|(n, p, _)| n != name || p != pid));
                (fresh && now.iter().any(|(n, _, _)| n.contains("certsync"))).then_some(())
            },
        );
        let etc = node.etc();
        let hc = etc.join("pki/etcd/certsync/healthcheck-client");
        let (hc_crt, hc_key) = (hc.join("tls.crt"), hc.join("tls.key"));
        for (target, addr, client) in [
            (
                etc.join("pki/certsync/apiserver"),
                format!("{}:6443", node.ip),
                None,
            ),
            (
                etc.join("pki/etcd/certsync/server"),
                format!("{}:2379", node.ip),
                Some((hc_crt.as_path(), hc_key.as_path())),
            ),
        ] {
            wait_long(
                &format!("{addr} serving certsync's certificate"),
                Duration::from_secs(120),
                || {
                    let live = live_der(&target)?;
                    served(node, &addr, client).filter(|s| *s == live)
                },
            );
        }
        wait_long(
            &format!("every API server ready after node {}", i + 1),
            Duration::from_secs(120),
            || {
                nodes
                    .iter()
                    .all(|n| readyz_at(&kubectl, &admin, Some(&server(n))).is_ok())
                    .then_some(())
            },
        );
        assert_eq!(voters(&nodes[0]), i + 1, "etcd voters after node {}", i + 1);
        assert!(
            cc() == original_cc,
            "adopting node {} changed the ClusterConfiguration",
            i + 1
        );
    }
    // An adoption restarts the node's API server (its new manifest); a
    // scheduler or controller-manager holding its lease through it may
    // lose it and exit, and the kubelet starts it again (the guide says
    // so). Nothing else restarted from a node's adoption on, while
    // adopting or reverting, and nothing at all past the CAs' end.
    let only_lease_losses = |when: &str| {
        for (i, node) in nodes.iter().enumerate() {
            let log = adopted_from[i].since(node);
            for line in log.lines().filter(|l| !l.trim().is_empty()) {
                assert!(
                    line.contains("Leaderelection lost")
                        && (line.contains("container=kube-scheduler")
                            || line.contains("container=kube-controller-manager")),
                    "node {}'s containers restarted while {when}:\n{log}",
                    i + 1
                );
            }
        }
    };
    only_lease_losses("adopting");
    let left = ca_end - unix_now();
    assert!(
        left > 0,
        "the CAs ended {}s before all three were adopted",
        -left
    );

    // Node 3 reverted, one node of three, while the others stay adopted:
    // back on kubeadm's files (which trust pki/ca.crt, the renewal), it
    // serves, and etcd keeps its three voters. Before the CAs' end, as the
    // test's clock allows: each node's CAs were renewed by its own adopt
    // for the CAs' span from then, so node 1's (adopted once a tenth of
    // the span had passed) ends about 95 s after kubeadm's (a year on a
    // ten-year CA's clock, the alert rules asking for an adopt two years
    // ahead), node 2's a few minutes later; a revert and its API server's
    // restart past the end could outlast the trust of the nodes it needs.
    let (ok, text) = kubeadm_cmd(&nodes[2], &["revert"]);
    assert!(
        ok && text.ends_with("reverted\n"),
        "revert on node 3:\n{text}"
    );
    // What was last seen, said if it never settles.
    let mut seen = String::new();
    let start = std::time::Instant::now();
    while start.elapsed() < Duration::from_secs(240) {
        let now = containers(&nodes[2]);
        let ready = readyz_at(&kubectl, &admin, Some(&server(&nodes[2])));
        if settled(&nodes[2], 4).is_some() && ready.is_ok() {
            seen.clear();
            break;
        }
        seen = format!(
            "containers {now:?}; /readyz {ready:?}; restarts:\n{}",
            restarts(&nodes[2])
        );
        std::thread::sleep(Duration::from_secs(2));
    }
    assert!(
        seen.is_empty(),
        "node 3 not serving on kubeadm's files 240 s after revert:\n{seen}\nrevert said:\n{text}"
    );
    assert_eq!(voters(&nodes[0]), 3, "etcd voters after revert");
    only_lease_losses("reverting");
    let settled_logs: Vec<String> = nodes.iter().map(restarts).collect();

    // Past the end of kubeadm's CAs: every API server answers (node 3's on
    // kubeadm's files), etcd keeps its members, a write goes through,
    // leases are renewed, a CSR is signed under the renewed CA, kubeadm
    // reads every file, and nothing restarted.
    let left = ca_end - unix_now();
    if left > -10 {
        std::thread::sleep(Duration::from_secs((left + 10) as u64));
    }
    // Node 1's renewal bounds how long node 1 can be checked.
    let renewed = pem_not_after(&std::fs::read(nodes[0].etc().join("pki/ca.crt")).expect("ca.crt"));
    for (i, n) in nodes.iter().enumerate() {
        if let Err(e) = readyz_at(&kubectl, &admin, Some(&server(n))) {
            let left = renewed - unix_now();
            panic!(
                "node {}'s API server past the CAs' end ({left} s before node 1's renewal ends): {e}",
                i + 1
            );
        }
    }
    assert_eq!(voters(&nodes[0]), 3, "etcd voters past the CAs' end");
    serves_past_the_ca_end(&kubectl, &admin, &nodes[0], "after-the-ca-end");
    // Two cores run this beside the rest of the suite: a /readyz may time
    // out under load (tests/kubeadm.rs allows the same); more means the
    // cluster stopped serving.
    assert!(
        failures.len() * 10 <= polls,
        "{} of {polls} /readyz through the other API servers failed: {failures:?}",
        failures.len()
    );
    for (i, node) in nodes.iter().enumerate() {
        let now = restarts(node);
        assert!(
            now == settled_logs[i],
            "node {}'s containers restarted past the CAs' end:\n{now}",
            i + 1
        );
    }
}
