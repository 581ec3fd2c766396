//! adopt never leaves a node without a running certsync. On a
//! fresh node, `adopt --image` naming an image the node cannot run printed
//! `adopted` and pointed every component at targets no certsync renewed;
//! re-adopting with a new image (how certsync is upgraded) did the same
//! (tests/kubeadm_revert_aged.rs has adopt after an outage). Now certsync's pod, of this configuration and image, must be
//! ready before any component manifest changes; when it is not, adopt puts
//! back what it changed (the previous pod, on a re-adopt) and exits 1.
//!
//! node.sh's kubelet stand-in runs only the images mapped with
//! `-- --image REF=BINARY`: an unmapped one waits in `ErrImageNeverPull`,
//! as a tag never pushed does. Needs root and the realkube tools, as
//! tests/kubeadm.rs does (skips without them, fails under `CI=true`).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use support::certsync_bin;
use support::kubeadm_node::{Node, kubeadm_cmd, kubectl, ready, realkube, settled, wait_long};

const GOOD: &str = "registry.example.com/platform/certsync:0.2.0";
const NEXT: &str = "registry.example.com/platform/certsync:0.2.1";
/// A tag never pushed: no binary is mapped to it.
const NEVER_PUSHED: &str = "registry.example.com/platform/certsync:0.1.9";

/// `node.sh up` with the images mapped to the certsync under test (by
/// image reference only: the container name `certsync` stays unmapped).
fn up(realkube: &Path, tag: &str, images: &[&str]) -> Node {
    let bin = certsync_bin();
    let maps: Vec<String> = images.iter().map(|i| format!("{i}={bin}")).collect();
    let mut args = vec!["--"];
    for m in &maps {
        args.extend(["--image", m.as_str()]);
    }
    Node::up(realkube, tag, &args)
}

/// Every file below the node's /etc/kubernetes with its bytes, except
/// adopt's own directory (its backups) and certsync's target directories
/// when `targets` is false; a directory is recorded as such.
fn tree(etc: &Path, targets: bool) -> BTreeMap<PathBuf, Option<Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![etc.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d)
            .expect("read_dir")
            .map(|e| e.expect("entry"))
        {
            let path = e.path();
            if path == etc.join("certsync")
                || (!targets
                    && (path == etc.join("pki/certsync") || path == etc.join("pki/etcd/certsync")))
            {
                continue;
            }
            let t = e.file_type().expect("type");
            if t.is_dir() {
                out.insert(path.clone(), None);
                todo.push(path);
            } else {
                out.insert(path.clone(), Some(std::fs::read(&path).unwrap_or_default()));
            }
        }
    }
    out
}

/// The runner's view of certsync's container: (state/reason, ready, pid).
fn certsync_status(node: &Node) -> Option<(String, bool, u64)> {
    let text = std::fs::read_to_string(node.dir.join("run/status.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v["pods"].as_array()?.iter().find_map(|p| {
        let c = p["containers"]
            .as_array()?
            .iter()
            .find(|c| c["name"] == "certsync")?;
        Some((
            format!(
                "{}/{}",
                c["state"].as_str().unwrap_or("?"),
                c["reason"].as_str().unwrap_or("")
            ),
            c["ready"].as_bool().unwrap_or(false),
            c["pid"].as_u64().unwrap_or(0),
        ))
    })
}

const COMPONENTS: [&str; 4] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

fn manifests(etc: &Path) -> Vec<Vec<u8>> {
    COMPONENTS
        .iter()
        .map(|c| std::fs::read(etc.join(format!("manifests/{c}.yaml"))).expect("manifest"))
        .collect()
}

/// (1) A fresh node adopted with an image it cannot run: adopt waits
/// `--ready-timeout`, takes certsync's pod out and exits 1 naming the image
/// and what it saw; kubeadm's manifests, pki/ and kubeconfigs are as
/// before, byte for byte, with no certsync pod manifest and no target
/// directory. Before: `adopted`, exit 0, and four manifests naming targets
/// no certsync renewed.
#[test]
fn a_fresh_node_adopted_with_an_image_it_cannot_run_is_left_as_kubeadm_made_it() {
    let Some(realkube) = realkube() else { return };
    let node = up(&realkube, "image-fresh", &[GOOD]);
    let etc = node.etc();
    let before = tree(&etc, true);
    let (ok, text) = kubeadm_cmd(
        &node,
        &["adopt", "--image", NEVER_PUSHED, "--ready-timeout", "30s"],
    );
    assert!(
        !ok,
        "adopt with an image the node cannot run succeeded:\n{text}"
    );
    for said in [
        &format!("certsync's pod (image {NEVER_PUSHED}, generation "),
        "was not ready within 30s",
        "nothing answers on 127.0.0.1:9814",
        "No component manifest was changed",
        "took certsync's pod out",
    ] {
        assert!(text.contains(said), "{said:?} not in:\n{text}");
    }
    let after = tree(&etc, true);
    let changed: Vec<_> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .collect();
    assert!(changed.is_empty(), "changed, made or removed: {changed:?}");
    assert!(!etc.join("manifests/certsync.yaml").exists());
    assert!(
        !etc.join("certsync/adopted.json").exists(),
        "the node is not adopted"
    );
    // The runner saw what a kubelet would, and runs kubeadm's four pods.
    let log = std::fs::read_to_string(node.dir.join("logs/runner.log")).unwrap_or_default();
    assert!(log.contains("ErrImageNeverPull"), "{log}");
    wait_long("kubeadm's four pods", Duration::from_secs(60), || {
        settled(&node, 4)
    });
}

/// (2) Re-adopting is how certsync is upgraded. With an image the node
/// cannot run: exit 1, the previous pod (its manifest and configuration
/// byte for byte) back, running and ready, the components' manifests
/// untouched. With a runnable new image: the new pod runs, and adopt
/// waited for it (this generation's `/readyz`, not the old pod's).
#[test]
fn readopting_with_a_new_image_keeps_the_old_pod_until_the_new_one_is_ready() {
    let Some(realkube) = realkube() else { return };
    let node = up(&realkube, "image-upgrade", &[GOOD, NEXT]);
    let etc = node.etc();
    let kubectl = kubectl(&realkube);
    let admin = etc.join("admin.conf");
    let (ok, text) = kubeadm_cmd(&node, &["adopt", "--image", GOOD]);
    assert!(ok, "{text}");
    assert!(
        text.contains("certsync's pod is ready (generation "),
        "{text}"
    );
    assert!(text.ends_with("adopted\n"), "{text}");
    wait_long(
        "five pods, the API server ready",
        Duration::from_secs(180),
        || {
            settled(&node, 5)?;
            ready(&kubectl, &admin).then_some(())
        },
    );
    let pod = std::fs::read(etc.join("manifests/certsync.yaml")).expect("pod");
    let config = std::fs::read(etc.join("certsync.yaml")).expect("config");
    let adopted = manifests(&etc);
    let (_, _, old_pid) = wait_long(
        "certsync ready for the kubelet",
        Duration::from_secs(60),
        || certsync_status(&node).filter(|(_, ready, pid)| *ready && *pid > 0),
    );

    let (ok, text) = kubeadm_cmd(
        &node,
        &["adopt", "--image", NEVER_PUSHED, "--ready-timeout", "30s"],
    );
    assert!(
        !ok,
        "re-adopt with an image the node cannot run succeeded:\n{text}"
    );
    for said in [
        &format!("certsync's pod (image {NEVER_PUSHED}, generation "),
        "put the previous certsync pod back",
        "is running and ready",
    ] {
        assert!(text.contains(said), "{said:?} not in:\n{text}");
    }
    assert!(
        std::fs::read(etc.join("manifests/certsync.yaml")).ok() == Some(pod.clone()),
        "the previous pod's manifest is back byte for byte"
    );
    assert!(std::fs::read(etc.join("certsync.yaml")).ok() == Some(config));
    assert!(manifests(&etc) == adopted, "a component manifest changed");
    // adopt saw the pod's /readyz itself; the kubelet's probe follows.
    wait_long(
        "the previous pod ready for the kubelet",
        Duration::from_secs(60),
        || {
            certsync_status(&node)
                .filter(|(state, ready, _)| *ready && state.starts_with("running"))
        },
    );
    assert!(ready(&kubectl, &admin));

    // The upgrade: a runnable new image.
    let (ok, text) = kubeadm_cmd(&node, &["adopt", "--image", NEXT]);
    assert!(ok, "{text}");
    assert!(
        text.contains("certsync's pod is ready (generation "),
        "{text}"
    );
    let new_pod = std::fs::read_to_string(etc.join("manifests/certsync.yaml")).expect("pod");
    assert!(new_pod.contains(&format!("image: {NEXT}")), "{new_pod}");
    assert!(
        manifests(&etc) == adopted,
        "an upgrade changes no component"
    );
    wait_long(
        "the new pod ready for the kubelet",
        Duration::from_secs(60),
        || {
            certsync_status(&node).filter(|(state, ready, pid)| {
                *ready && state.starts_with("running") && *pid != old_pid
            })
        },
    );
    // A second run finds it all in place and the pod ready.
    let (ok, text) = kubeadm_cmd(&node, &["adopt", "--image", NEXT]);
    assert!(
        ok && text.contains("already adopted: nothing to change"),
        "{text}"
    );
    assert!(text.contains("certsync's pod is ready"), "{text}");
}
