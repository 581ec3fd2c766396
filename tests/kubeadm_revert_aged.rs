//! Revert a year after `kubeadm init`, on kubeadm's own clock: a
//! node whose kubeadm certificates last minutes (`certificateValidityPeriod`),
//! adopted with the defaults, serves on certsync's once kubeadm's have
//! ended. revert then refused (exit 1, "both kubeadm's copy in the backup
//! and certsync's current one end that soon", which was untrue) and
//! `--force` handed back expired files. Now revert, without `--force`,
//! issues again from kubeadm's copies in the backup every certificate that
//! has ended, and the node serves on them; nothing kubeadm's ends within a
//! day, and `kubeadm certs renew all` and `certs check-expiration` work.
//! Needs root and the realkube tools, as tests/kubeadm.rs does (skips
//! without them, fails under `CI=true`).

mod support;

use std::path::Path;
use std::time::Duration;

use support::kubeadm_node::{
    Node, clock_config, kubeadm_cmd, kubectl, pem_not_after, ready, readyz, realkube, settled,
    unix_now, wait_long,
};

/// kubeadm's certificates' lifetime on the node: long enough to bring it up
/// and adopt it, short enough to wait for.
const VALIDITY: &str = "5m";

/// revert's margin: nothing it leaves may end sooner.
const DAY: i64 = 86_400;

/// notAfter of every certificate kubeadm's `.crt` files and kubeconfigs
/// hold under `etc` (the node's /etc/kubernetes), by path: every `.crt`
/// under `pki/` and the embedded client certificate of each kubeconfig
/// `kubeadm certs renew all` renews. The backups under `certsync/` keep
/// old copies by design, and kubelet.conf is the kubelet's to rotate.
fn kubeadms_ends(etc: &Path) -> Vec<(String, i64)> {
    use base64::Engine as _;
    let mut all = Vec::new();
    let mut todo = vec![etc.join("pki")];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                todo.push(p);
            } else if p.extension().is_some_and(|x| x == "crt") {
                let end = pem_not_after(&std::fs::read(&p).expect("crt"));
                all.push((p.display().to_string(), end));
            }
        }
    }
    for f in [
        "admin.conf",
        "super-admin.conf",
        "controller-manager.conf",
        "scheduler.conf",
    ] {
        let text = std::fs::read_to_string(etc.join(f)).expect("kubeconfig");
        let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).expect("yaml");
        let data = doc["users"][0]["user"]["client-certificate-data"]
            .as_str()
            .unwrap_or_else(|| panic!("{f}: no embedded client certificate"));
        let pem = base64::engine::general_purpose::STANDARD
            .decode(data)
            .expect("base64");
        all.push((f.to_owned(), pem_not_after(&pem)));
    }
    all
}

#[test]
fn revert_after_kubeadms_certificates_ended_hands_back_a_serving_node() {
    let Some(realkube) = realkube() else { return };
    let node = Node::up_with_config(
        &realkube,
        "aged",
        &clock_config("h3-aged", Some(VALIDITY), None),
    );
    let etc = node.etc();
    let kubectl = kubectl(&realkube);
    let admin = etc.join("admin.conf");
    let kubeadms_end = pem_not_after(&std::fs::read(etc.join("pki/apiserver.crt")).expect("crt"));
    assert!(
        kubeadms_end - unix_now() < 600,
        "kubeadm's certificates last {VALIDITY}"
    );

    // Adopted with the defaults (a year), before kubeadm's end.
    let (ok, text) = kubeadm_cmd(&node, &["adopt", "--image", "certsync"]);
    assert!(ok, "{text}");
    wait_long(
        "certsync's pod and the four components",
        Duration::from_secs(240),
        || {
            settled(&node, 5)?
                .iter()
                .any(|(n, _, _)| n.starts_with("certsync-"))
                .then_some(())
        },
    );
    // kubeadm's certificates end; the node serves on certsync's.
    let wait = kubeadms_end - unix_now() + 5;
    if wait > 0 {
        std::thread::sleep(Duration::from_secs(wait as u64));
    }
    wait_long(
        "the node serving on certsync's certificates after kubeadm's ended",
        Duration::from_secs(180),
        || ready(&kubectl, &admin).then_some(()),
    );
    let backup = std::fs::read_dir(etc.join("certsync/backup"))
        .expect("backup")
        .next()
        .expect("one backup")
        .expect("entry")
        .path();
    assert!(
        pem_not_after(&std::fs::read(backup.join("pki/apiserver.crt")).expect("crt")) < unix_now(),
        "kubeadm's copy in the backup has ended"
    );

    // revert --dry-run, then revert, without --force: exit 0, each
    // certificate issued again.
    let (ok, text) = kubeadm_cmd(&node, &["revert", "--dry-run"]);
    assert!(ok, "revert --dry-run refused:\n{text}");
    assert!(
        text.contains(
            "would issue /etc/kubernetes/pki/apiserver.crt again from kubeadm's copy in "
        ) && text.ends_with("dry run: nothing was changed\n"),
        "{text}"
    );
    eprintln!("{text}");
    let started = std::time::Instant::now();
    let (ok, text) = kubeadm_cmd(&node, &["revert"]);
    assert!(ok, "revert refused:\n{text}");
    eprintln!("{text}");
    assert!(text.ends_with("reverted\n"), "{text}");
    for again in [
        "issued /etc/kubernetes/pki/apiserver.crt again from kubeadm's copy in ",
        "issued /etc/kubernetes/pki/etcd/server.crt again from kubeadm's copy in ",
        "issued /etc/kubernetes/admin.conf again from kubeadm's copy in ",
        "issued /etc/kubernetes/scheduler.conf again from kubeadm's copy in ",
    ] {
        assert!(text.contains(again), "{again:?} not in\n{text}");
    }
    wait_long(
        "the node serving on kubeadm's files after revert",
        Duration::from_secs(240),
        || {
            settled(&node, 4)?;
            ready(&kubectl, &admin).then_some(())
        },
    );
    eprintln!(
        "revert and the node ready again: {} s",
        started.elapsed().as_secs()
    );
    assert!(
        !node
            .dir
            .join("etc-kubernetes/manifests/certsync.yaml")
            .exists(),
        "certsync's pod removed"
    );
    let day_on = unix_now() + DAY;
    let short: Vec<_> = kubeadms_ends(&etc)
        .into_iter()
        .filter(|(_, end)| *end <= day_on)
        .collect();
    assert!(short.is_empty(), "ending within a day: {short:?}");

    // kubeadm takes its node back: renew and check as usual.
    let out = node.sh("kubeadm", &["certs", "renew", "all"]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let out = node.sh("kubeadm", &["certs", "check-expiration"]);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success() && !said.contains("invalid") && !said.contains("MISSING"),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{said}");
    if let Err(e) = readyz(&kubectl, &admin) {
        panic!("after kubeadm certs renew all: {e}");
    }
}
