//! `certsync kubeadm status` on a control-plane node kubeadm v1.36 made
//! (`../shared/realkube/kubeadm/node.sh`, see tests/kubeadm.rs), run on the
//! node as a person or cron would: inside its network namespace (certsync's
//! pod has the host's network) with its `/etc/kubernetes`.

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use support::certsync_bin;
use support::kubeadm_node::{Node, kubeadm_cmd, kubectl, ready, realkube, settled, wait_long};

/// Adopt with pairs of an hour, renewed 12-15 minutes in: this test judges
/// what status says of a node, not renewals, so no renewal window may
/// open while it runs (~5 minutes after adopt). With `ADOPT_SHORT`'s 8
/// minutes the window opened a minute after adopt, and on a loaded runner
/// certsync's pod had renewed 4 of the 11 pairs a minute after it closed,
/// so a status taken then rightly said exit 6.
const ADOPT: [&str; 7] = [
    "adopt",
    "--image",
    "certsync",
    "--set",
    "lifetime=1h",
    "--set",
    "renew=20%-25%",
];

/// `certsync kubeadm status ARGS` on the node: (exit code, stdout, stderr).
fn status(node: &Node, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(&node.node_sh)
        .arg("exec")
        .arg(&node.dir)
        .arg(certsync_bin())
        .args(["kubeadm", "status"])
        .args(args)
        .output()
        .expect("node.sh exec");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(node: &Node) -> (i32, serde_json::Value) {
    let (code, out, err) = status(node, &["-o", "json"]);
    let v = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    (code, v)
}

/// The status once it exits `code`, waited for (certsync and the
/// components take seconds to start or stop).
fn status_becomes(node: &Node, code: i32, what: &str) -> serde_json::Value {
    // What status last said, in the failure: a wait that times out must
    // say why status was not yet `code`.
    let start = std::time::Instant::now();
    loop {
        let (c, v) = json(node);
        if c == code {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "timed out after 120s waiting for {what}: status last exited {c} saying {v}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

fn causes(v: &serde_json::Value) -> Vec<String> {
    v["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .map(|p| p["cause"].as_str().expect("cause").to_owned())
        .collect()
}

/// The scheduler's manifest as kubeadm writes it from the node's own
/// configuration (no adoption in it), put in place by rename: what a
/// `kubeadm upgrade` from a ClusterConfiguration without adopt's fields does.
fn regenerate_scheduler(node: &Node) {
    let generated = node.dir.join("status-regenerated");
    std::fs::create_dir_all(&generated).expect("mkdir");
    let config = node.dir.join("kubeadm.yaml");
    let out = Command::new(&node.node_sh)
        .args(["kubeadm".as_ref(), node.dir.as_os_str()])
        .args(["init", "phase", "control-plane", "scheduler", "--dry-run"])
        .arg("--config")
        .arg(&config)
        .env("KUBEADM_INIT_DRYRUN_DIR", &generated)
        .output()
        .expect("node.sh kubeadm");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let manifests = node.etc().join("manifests");
    let tmp = manifests.join(".kube-scheduler.yaml.new");
    std::fs::copy(generated.join("kube-scheduler.yaml"), &tmp).expect("copy");
    std::fs::rename(&tmp, manifests.join("kube-scheduler.yaml")).expect("rename");
}

fn five_pods(node: &Node, admin: &Path, kubectl: &Path) {
    wait_long("five pods running", Duration::from_secs(180), || {
        let now = settled(node, 5)?;
        now.iter()
            .any(|(n, _, _)| n.starts_with("certsync-"))
            .then_some(())?;
        ready(kubectl, admin).then_some(())
    });
}

#[test]
fn status_says_healthy_after_adopt_and_names_a_stopped_certsync_and_a_regenerated_manifest() {
    let Some(realkube) = realkube() else { return };
    let image = format!("certsync={}", certsync_bin());
    let node = Node::up(&realkube, "status", &["--", "--image", &image]);
    let (etc, kubectl) = (node.etc(), kubectl(&realkube));
    let admin = etc.join("admin.conf");

    // Not adopted yet.
    let (code, v) = json(&node);
    assert_eq!((code, &v["adopted"]), (2, &serde_json::json!(false)), "{v}");

    let (ok, text) = kubeadm_cmd(&node, &ADOPT);
    assert!(ok, "{text}");
    five_pods(&node, &admin, &kubectl);

    // Healthy: exit 0 once certsync's /readyz answers.
    let v = status_becomes(&node, 0, "status healthy after adopt");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    assert_eq!(v["adopted"], true, "{v}");
    assert!(
        v["adopted_since"]
            .as_str()
            .is_some_and(|s| s.ends_with('Z')),
        "{v}"
    );
    assert!(
        v["backups"][0]
            .as_str()
            .is_some_and(|b| b.starts_with("/etc/kubernetes/certsync/backup/")),
        "{v}"
    );
    assert_eq!(v["pod"]["state"], "ready", "{v}");
    assert_eq!(v["pod"]["image"], "certsync", "{v}");
    assert_eq!(v["pod"]["admin_addr"], "127.0.0.1:9814", "{v}");
    assert_eq!(v["pod"]["readyz"], "http://127.0.0.1:9814/readyz", "{v}");
    assert_eq!(v["last_renewal_error"], "none", "{v}");
    assert_eq!(v["problems"], serde_json::json!([]), "{v}");
    let certs = v["certificates"].as_array().expect("certificates");
    assert!(certs.len() >= 9, "{v}");
    for c in certs {
        let (end, by) = (
            c["not_after_seconds"].as_i64().expect("not after"),
            c["renew_by_seconds"].as_i64().expect("renew by"),
        );
        // lifetime=1h, renew=20%-25%: the window ends a quarter in, at
        // least 45 minutes before the end (more with a backdated notBefore).
        assert!(end > now && end <= now + 60 * 60 + 60, "{c}");
        assert!(by < end && end - by >= 45 * 60, "{c}");
        assert!(
            c["options"]
                .as_str()
                .is_some_and(|o| o.contains("lifetime=1h") && o.contains("renew=20%-25%")),
            "{c}"
        );
    }
    let manifests = v["manifests"].as_array().expect("manifests");
    assert_eq!(manifests.len(), 4, "{v}");
    assert!(manifests.iter().all(|m| m["adopted"] == true), "{v}");
    let (code, text, _) = status(&node, &[]);
    assert_eq!(code, 0, "{text}");
    assert!(text.ends_with("healthy\n"), "{text}");
    eprintln!("healthy:\n{text}");
    let (code, prom, _) = status(&node, &["-o", "prometheus"]);
    assert_eq!(code, 0, "{prom}");
    for line in [
        "certsync_kubeadm_adopted 1\n",
        "certsync_kubeadm_certsync_ready 1\n",
        "certsync_kubeadm_status_problem{cause=\"certsync-down\"} 0\n",
        "certsync_kubeadm_manifest_adopted{manifest=\"/etc/kubernetes/manifests/etcd.yaml\"} 1\n",
    ] {
        assert!(prom.contains(line), "{line:?} not in\n{prom}");
    }

    // certsync's pod gone: exit 3, and the certificates still read.
    let pod = etc.join("manifests/certsync.yaml");
    let aside = node.dir.join("certsync-pod.yaml");
    std::fs::rename(&pod, &aside).expect("move the pod manifest out");
    let v = status_becomes(&node, 3, "status naming a missing certsync");
    assert_eq!(causes(&v), ["certsync-down"], "{v}");
    assert_eq!(v["pod"]["state"], "no-manifest", "{v}");
    assert_eq!(
        v["last_renewal_error"], "unknown: certsync not running",
        "{v}"
    );
    assert!(
        v["certificates"]
            .as_array()
            .expect("certificates")
            .iter()
            .all(|c| c["not_after_seconds"].as_i64() > Some(0)),
        "read with certsync down: {v}"
    );
    let (code, text, _) = status(&node, &[]);
    assert_eq!(code, 3, "{text}");
    eprintln!("certsync's pod gone:\n{text}");
    assert!(
        text.contains("problem (certsync-down): certsync's pod manifest"),
        "{text}"
    );
    // Back: healthy again once it answers.
    std::fs::rename(&aside, &pod).expect("put the pod manifest back");
    status_becomes(&node, 0, "status healthy with certsync back");

    // The scheduler's manifest regenerated without adoption: exit 5,
    // naming it and the way back.
    regenerate_scheduler(&node);
    let (code, text, _) = status(&node, &[]);
    assert_eq!(code, 5, "{text}");
    eprintln!("the scheduler regenerated:\n{text}");
    for part in [
        "/etc/kubernetes/manifests/kube-scheduler.yaml: regenerated without adoption",
        "--kubeconfig=/etc/kubernetes/scheduler.conf",
        "`certsync kubeadm adopt` puts adoption back",
    ] {
        assert!(text.contains(part), "{part:?} not in\n{text}");
    }
    let (_, v) = json(&node);
    assert_eq!(causes(&v), ["adoption-lost"], "{v}");
    let (ok, text) = kubeadm_cmd(&node, &ADOPT);
    assert!(ok, "{text}");
    assert!(
        text.contains("changed /etc/kubernetes/manifests/kube-scheduler.yaml"),
        "{text}"
    );
    five_pods(&node, &admin, &kubectl);
    status_becomes(&node, 0, "status healthy after adopting again");
}
