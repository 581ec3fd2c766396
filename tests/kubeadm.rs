//! certsync on control-plane nodes that kubeadm v1.36 itself made:
//! `../shared/realkube/kubeadm/node.sh` runs kubeadm's init phases in a
//! network namespace of the node's own and a kubelet stand-in in which every
//! static pod sees only the hostPath mounts its manifest declares. Driven
//! through the binary, as a person on the node would.
//!
//! The environment's tools are found at `CERTSYNC_REALKUBE`, else at
//! `shared/realkube` beside the checkout (`/work/shared/realkube` for a
//! checkout in `/work/NAME`). Without them, or without root, a test skips
//! (and fails under `CI=true`: CI always has them). Each node takes ~10-20 s
//! to come up; nodes get their own DIR under the temp dir and the lowest free
//! address (node.sh allocates it under a lock), so tests run in parallel.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use support::{certsync_bin, tools};

/// The realkube tools, or `None` after saying why a test cannot run.
fn realkube() -> Option<PathBuf> {
    let dir = support::control_plane::tools_dir();
    if !dir.join("kubeadm/node.sh").is_file() {
        tools::skip(&format!(
            "needs the realkube environment ({}/kubeadm/node.sh; set CERTSYNC_REALKUBE)",
            dir.display()
        ));
        return None;
    }
    if !nix::unistd::geteuid().is_root() {
        tools::skip("kubeadm nodes need root (network namespaces, bubblewrap)");
        return None;
    }
    if !tools::have(&["bwrap", "ip", "python3", "openssl", "xz"]) {
        return None;
    }
    Some(dir)
}

/// A node brought up by `node.sh up`; `node.sh down` and its DIR removed on
/// drop, so a failing test (a panic unwinds through it) leaves no runner,
/// namespace or address behind.
struct Node {
    node_sh: PathBuf,
    dir: PathBuf,
    /// The node's address, port and name (`DIR/run/node.env`).
    ip: String,
    name: String,
}

impl Node {
    /// `node.sh up /tmp/h34b-TAG-PID ARGS`. The guard exists before `up`
    /// runs: a half-made node is taken down too.
    fn up(realkube: &Path, tag: &str, args: &[&str]) -> Node {
        let dir = std::env::temp_dir().join(format!("h34b-{tag}-{}", std::process::id()));
        let mut node = Node {
            node_sh: realkube.join("kubeadm/node.sh"),
            dir,
            ip: String::new(),
            name: String::new(),
        };
        let out = node.sh("up", args);
        assert!(
            out.status.success(),
            "node.sh up {} failed:\n{}{}",
            node.dir.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let env = std::fs::read_to_string(node.dir.join("run/node.env")).expect("node.env");
        let fields: Vec<&str> = env.split_whitespace().collect();
        assert_eq!(fields.len(), 3, "node.env is `IP PORT NAME`: {env:?}");
        node.ip = fields[0].to_owned();
        node.name = fields[2].to_owned();
        node
    }

    fn sh(&self, cmd: &str, args: &[&str]) -> Output {
        Command::new(&self.node_sh)
            .arg(cmd)
            .arg(&self.dir)
            .args(args)
            .output()
            .expect("run node.sh")
    }

    /// The node's `/etc/kubernetes`.
    fn etc(&self) -> PathBuf {
        self.dir.join("etc-kubernetes")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let out = self.sh("down", &[]);
        if !out.status.success() {
            // Not a panic inside a drop during a panic: say it and keep
            // the DIR for whoever looks.
            eprintln!(
                "node.sh down {} failed:\n{}",
                self.dir.display(),
                String::from_utf8_lossy(&out.stderr)
            );
            return;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn certsync(args: &[&str]) -> Output {
    Command::new(certsync_bin())
        .args(args)
        .output()
        .expect("run certsync")
}

/// What `kubeadm init` makes, as `certsync check -o json` must report it:
/// (file under pki/, subject, issuer). Every one with its key beside it.
const KUBEADM_CERTS: [(&str, &str, &str); 10] = [
    (
        "apiserver-etcd-client.crt",
        "CN=kube-apiserver-etcd-client",
        "CN=etcd-ca",
    ),
    (
        "apiserver-kubelet-client.crt",
        "CN=kube-apiserver-kubelet-client",
        "CN=kubernetes",
    ),
    ("apiserver.crt", "CN=kube-apiserver", "CN=kubernetes"),
    ("ca.crt", "CN=kubernetes", "CN=kubernetes"),
    (
        "front-proxy-ca.crt",
        "CN=front-proxy-ca",
        "CN=front-proxy-ca",
    ),
    (
        "front-proxy-client.crt",
        "CN=front-proxy-client",
        "CN=front-proxy-ca",
    ),
    ("etcd/ca.crt", "CN=etcd-ca", "CN=etcd-ca"),
    (
        "etcd/healthcheck-client.crt",
        "CN=kube-etcd-healthcheck-client",
        "CN=etcd-ca",
    ),
    ("etcd/peer.crt", "CN={node}", "CN=etcd-ca"),
    ("etcd/server.crt", "CN={node}", "CN=etcd-ca"),
];

const DAY: i64 = 86_400;

#[test]
fn check_reports_every_certificate_kubeadm_made() {
    let Some(realkube) = realkube() else { return };
    let node = Node::up(&realkube, "check", &["--no-addons"]);
    let pki = node.etc().join("pki");
    let pki_s = pki.to_str().expect("utf-8 temp dir");
    let etcd_s = format!("{pki_s}/etcd");

    let out = certsync(&["check", "-o", "json", pki_s, &etcd_s]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "check on a fresh kubeadm node must pass: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<serde_json::Value> = serde_json::from_str(&stdout).expect("check -o json");
    let mut seen: Vec<String> = rows
        .iter()
        .map(|r| r["certificate"].as_str().expect("certificate").to_owned())
        .collect();
    seen.sort();
    let mut want: Vec<String> = KUBEADM_CERTS
        .iter()
        .map(|(f, _, _)| format!("{pki_s}/{f}"))
        .collect();
    want.sort();
    assert_eq!(
        seen, want,
        "exactly kubeadm's certificates, sa.pub is no certificate"
    );

    for (file, subject, issuer) in KUBEADM_CERTS {
        let path = format!("{pki_s}/{file}");
        let row = rows
            .iter()
            .find(|r| r["certificate"] == path.as_str())
            .expect("row");
        assert_eq!(
            row["subject"],
            subject.replace("{node}", &node.name),
            "{file}"
        );
        assert_eq!(row["issuer"], issuer, "{file}");
        assert_eq!(
            row["key"], "matches",
            "{file}: kubeadm wrote its key beside it"
        );
        assert!(row["problem"].is_null(), "{file}: {row}");
        // CAs live ten years, leaves one (kubeadm's defaults), minus the
        // seconds since `init`.
        let left = row["residual_seconds"].as_i64().expect("residual_seconds");
        let years = if file.ends_with("ca.crt") { 10 } else { 1 };
        let life = years * 365 * DAY;
        assert!(
            left <= life && left > life - 3 * DAY,
            "{file}: {left} s left, kubeadm issues for {years} year(s)"
        );
    }
    // The serving certificates name the node as kubeadm saw it: its name
    // and address (and the Service address for the API server).
    let sans = |file: &str| -> Vec<String> {
        let path = format!("{pki_s}/{file}");
        let row = rows
            .iter()
            .find(|r| r["certificate"] == path.as_str())
            .expect("row");
        row["sans"]
            .as_array()
            .expect("sans")
            .iter()
            .map(|s| s.as_str().expect("san").to_owned())
            .collect()
    };
    for (file, must) in [
        (
            "apiserver.crt",
            vec![
                node.name.as_str(),
                node.ip.as_str(),
                "10.96.0.1",
                "kubernetes",
            ],
        ),
        (
            "etcd/server.crt",
            vec![
                node.name.as_str(),
                node.ip.as_str(),
                "localhost",
                "127.0.0.1",
            ],
        ),
        ("etcd/peer.crt", vec![node.name.as_str(), node.ip.as_str()]),
    ] {
        let have = sans(file);
        for m in must {
            assert!(have.iter().any(|s| s == m), "{file}: {m} not in {have:?}");
        }
    }

    // A year is within 400 days: check exits 1 for every leaf, naming it,
    // and not for the CAs.
    let out = certsync(&[
        "check",
        "-o",
        "json",
        "--warn-within",
        "400d",
        pki_s,
        &etcd_s,
    ]);
    assert_eq!(out.status.code(), Some(1), "leaves expire within 400 days");
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("check -o json");
    for (file, _, _) in KUBEADM_CERTS {
        let path = format!("{pki_s}/{file}");
        let row = rows
            .iter()
            .find(|r| r["certificate"] == path.as_str())
            .expect("row");
        assert_eq!(
            row["problem"].is_null(),
            file.ends_with("ca.crt"),
            "{file}: {row}"
        );
    }
}
