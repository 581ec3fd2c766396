//! Issue 34: three control-plane nodes that kubeadm v1.36 itself made and
//! joined (stacked etcd, `../shared/realkube/kubeadm/node.sh up` and `join`),
//! adopted one at a time as docs/guides/kubeadm-control-plane.md says,
//! through the binary, while the cluster keeps serving. Needs root and the
//! realkube tools, as tests/kubeadm.rs does (skips without them, fails
//! under `CI=true`).

mod support;

use std::time::Duration;

use support::certsync_bin;
use support::kubeadm_node::{
    Node, containers, first_der, kubeadm_cmd, kubectl, live_der, readyz_at, realkube, served,
    settled, wait_long,
};

/// Adopt with a lifetime long enough that no renewal falls inside the test
/// (tests/kubeadm.rs renews at short lifetimes on one node), and that
/// adopt accepts: renewed at 70-90 %, at least 6 minutes are left for
/// client-go's 5-minute re-read of the components' client certificates.
const ADOPT: [&str; 5] = ["adopt", "--image", "certsync", "--set", "lifetime=1h"];

/// Lines of `node.sh members` that are etcd voters.
fn voters(node: &Node) -> usize {
    let out = node.sh("members", &[]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.trim_end().ends_with("voter"))
        .count()
}

/// Nodes 1, 2 and 3 adopted in turn. After each adoption: that node's
/// API server and etcd serve certsync's certificates (read with openssl,
/// compared with its targets), the nodes not adopted yet still serve
/// kubeadm's, every API server answers `/readyz`, etcd keeps three voters,
/// and the first adoption alone changes the cluster-wide
/// ClusterConfiguration. Meanwhile the API servers of the other nodes are
/// polled: the cluster keeps serving. No container restarts on any node
/// (a new manifest starts a new pod; `restarts.log` stays empty).
#[test]
fn three_nodes_adopted_one_at_a_time_keep_serving() {
    let Some(realkube) = realkube() else { return };
    let image = format!("certsync={}", certsync_bin());
    let runner = ["--", "--image", image.as_str()];
    let n1 = Node::up(&realkube, "ha1", &runner);
    let n2 = Node::join(&realkube, "ha2", &n1, &runner);
    let mut upload = vec!["--upload-certs"];
    upload.extend(runner);
    let n3 = Node::join(&realkube, "ha3", &n1, &upload);
    let nodes = [&n1, &n2, &n3];
    let kubectl = kubectl(&realkube);
    let admin = n1.etc().join("admin.conf");
    let server = |n: &Node| format!("https://{}:6443", n.ip);
    let all_ready = || {
        nodes
            .iter()
            .all(|n| readyz_at(&kubectl, &admin, Some(&server(n))).is_ok())
    };
    wait_long("three API servers ready", Duration::from_secs(180), || {
        all_ready().then_some(())
    });
    assert_eq!(voters(&n1), 3, "three etcd voters before adoption");

    let mut polls = 0usize;
    let mut failures = Vec::new();
    for (i, node) in nodes.iter().enumerate() {
        let before = containers(node);
        let (ok, text) = kubeadm_cmd(node, &ADOPT);
        assert!(ok, "adopt on node {}:\n{text}", i + 1);
        assert!(text.ends_with("adopted\n"), "{text}");
        // The ClusterConfiguration is cluster-wide: node 1's adoption
        // writes it, the others find it already naming certsync's files.
        let changes_cc = text.contains("extraArgs") || text.contains("extraVolumes");
        assert_eq!(
            changes_cc,
            i == 0,
            "only the first adoption changes the ClusterConfiguration:\n{text}"
        );
        // This node's pods start again on their new manifests (new pids),
        // certsync's beside them; the other API servers answer meanwhile.
        wait_long(
            &format!("node {}'s adopted pods", i + 1),
            Duration::from_secs(240),
            || {
                for other in nodes.iter().filter(|o| o.ip != node.ip) {
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
        // The nodes not adopted yet serve kubeadm's own certificate.
        for later in &nodes[i + 1..] {
            let kubeadm = first_der(
                &std::fs::read(later.etc().join("pki/apiserver.crt")).expect("apiserver.crt"),
            );
            assert_eq!(
                served(later, &format!("{}:6443", later.ip), None),
                kubeadm,
                "node {} is not adopted yet",
                later.ip
            );
        }
        wait_long(
            &format!("every API server ready after node {}", i + 1),
            Duration::from_secs(120),
            || all_ready().then_some(()),
        );
        assert_eq!(voters(&n1), 3, "three etcd voters after node {}", i + 1);
    }
    // Two cores run this beside the rest of the suite: a /readyz may time
    // out under load (tests/kubeadm.rs allows the same); more means the
    // cluster stopped serving.
    assert!(
        failures.len() * 10 <= polls,
        "{} of {polls} /readyz through the other API servers failed: {failures:?}",
        failures.len()
    );
    for (i, node) in nodes.iter().enumerate() {
        let restarts = std::fs::read_to_string(node.dir.join("restarts.log")).unwrap_or_default();
        assert!(
            restarts.trim().is_empty(),
            "node {}'s containers restarted:\n{restarts}",
            i + 1
        );
    }
}
