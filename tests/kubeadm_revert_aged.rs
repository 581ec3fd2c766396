//! A node past every certificate's end, on kubeadm's own clock: kubeadm's
//! certificates last minutes (`certificateValidityPeriod`), certsync's
//! minutes too (`lifetime=8m`), and certsync's pod is out until all have
//! ended (an outage). adopt again then said "every target has a live pair"
//! when all had ended; now it issues every target afresh without the API
//! server and the node serves again. revert, a year after `kubeadm init`,
//! then refused (exit 1, "both kubeadm's copy in the backup
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
    ADOPT_SHORT, Node, clock_config, containers, kubeadm_cmd, kubectl, live_der, pem_not_after,
    ready, readyz, realkube, served, settled, unix_now, wait_long,
};

/// kubeadm's certificates' lifetime on the node: long enough to bring it up
/// and adopt it, short enough to wait for.
const VALIDITY: &str = "5m";

/// revert's margin: nothing it leaves may end sooner.
const DAY: i64 = 86_400;

/// Every target of adopt's configuration on the host.
fn targets(etc: &Path) -> Vec<std::path::PathBuf> {
    std::fs::read_to_string(etc.join("certsync.yaml"))
        .expect("certsync.yaml")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("target: /etc/kubernetes/"))
        .map(|t| etc.join(t))
        .collect()
}

/// The live certificate's notAfter of a target (Unix seconds).
fn live_end(target: &Path) -> Option<i64> {
    Some(pem_not_after(&std::fs::read(target.join("tls.crt")).ok()?))
}

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

/// Adopted with pairs of minutes; certsync's pod out until every pair,
/// kubeadm's and certsync's, has ended; adopt again (the API server
/// refusing admin.conf's ended pair) issues every target afresh, says so
/// (never "every target has a live pair"), and the node serves certsync's
/// new certificate; then revert hands back a serving node.
#[test]
fn a_node_past_every_end_is_adopted_again_then_reverted_serving() {
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

    let (ok, text) = kubeadm_cmd(&node, &ADOPT_SHORT);
    assert!(ok, "{text}");
    // The outage: certsync's pod out at once (its pairs are minutes old).
    let away = node.dir.join("certsync-pod.yaml");
    std::fs::rename(etc.join("manifests/certsync.yaml"), &away).expect("pod out");
    wait_long("certsync's pod stopped", Duration::from_secs(90), || {
        (!containers(&node)
            .iter()
            .any(|(n, _, _)| n.starts_with("certsync-")))
        .then_some(())
    });
    let targets = targets(&etc);
    assert_eq!(targets.len(), 11, "{targets:?}");
    wait_long("every pair ended", Duration::from_secs(660), || {
        let now = unix_now();
        (kubeadms_end < now && targets.iter().all(|t| live_end(t).is_some_and(|n| n < now)))
            .then_some(())
    });
    assert!(!ready(&kubectl, &admin), "admin.conf's pair has ended");

    let (ok, text) = kubeadm_cmd(&node, &ADOPT_SHORT);
    assert!(ok, "{text}");
    assert!(
        text.contains("it issued every target whose pair had ended or was missing (11 of 11)"),
        "{text}"
    );
    assert!(!text.contains("every target has a live pair"), "{text}");
    let start = unix_now();
    for t in &targets {
        let n = live_end(t).expect("a pair");
        assert!(n > start + 300, "{}: ends at {n}", t.display());
    }
    let api = etc.join("pki/certsync/apiserver");
    wait_long("the node serving again", Duration::from_secs(240), || {
        let live = live_der(&api)?;
        served(&node, &format!("{}:6443", node.ip), None).filter(|s| *s == live)?;
        settled(&node, 5)?;
        ready(&kubectl, &admin).then_some(())
    });
    // The first adoption's backup (kubeadm's files; adopt again after the
    // outage made one of its own, for certsync's pod).
    let backup = std::fs::read_dir(etc.join("certsync/backup"))
        .expect("backup")
        .map(|e| e.expect("entry").path())
        .min()
        .expect("a backup");
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
    // (Printed only when it fails: CI shows a failing test's output cut to
    // its first and last lines, and the panic is at the end.)
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
    // The API server re-reads its renewed serving pair from disk: a
    // request or two may meet it (or a busy CI machine) in between.
    let mut last = String::new();
    let ready_again = (0..60).any(|_| match readyz(&kubectl, &admin) {
        Ok(()) => true,
        Err(e) => {
            last = e;
            std::thread::sleep(Duration::from_secs(1));
            false
        }
    });
    assert!(ready_again, "after kubeadm certs renew all: {last}");
}
