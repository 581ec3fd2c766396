//! `kubeadm adopt --set lifetime=banana` printed a
//! plan and `dry run: nothing was changed` (exit 0); the real run wrote
//! the backup and certsync.yaml, then stopped part-adopted; on an adopted
//! node it printed `adopted` and certsync's pod crash-looped on the value
//! while every certificate expired. `--set lifetime=4m` was accepted
//! although client-go re-reads a kubeconfig's client certificate only
//! every 5 minutes. Now adopt hands the configuration it would write to
//! `certsync run`'s loader, and to client-go's rule, before it writes
//! anything: refused, exit 1, naming the option and value, nothing
//! changed. Through the binary, on a node directory made of kubeadm's
//! files (tests/fixtures/kubeadm), without an API server (adopt needs none).

mod support;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use support::run_bounded;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubeadm")
}

/// A kubeconfig as kubeadm writes one: the client pair embedded.
fn kubeconfig(user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://10.77.0.11:6443\n  \
         name: kubernetes\ncontexts:\n- context:\n    cluster: kubernetes\n    user: {user}\n  \
         name: {user}@kubernetes\ncurrent-context: {user}@kubernetes\nusers:\n- name: {user}\n  \
         user:\n    client-certificate-data: Y2VydA==\n    client-key-data: a2V5\n"
    )
}

/// A fresh control-plane node's /etc/kubernetes: kubeadm's manifests,
/// certificates (each pair's key beside it), and the components'
/// kubeconfigs. Below the tests' TMPDIR (root's, not world-writable), as
/// certsync's loader requires of a `ca:` mapping's paths.
fn fresh_node() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    for sub in ["manifests", "pki", "pki/etcd"] {
        std::fs::create_dir_all(d.join(sub)).expect("mkdir");
        for e in std::fs::read_dir(fixtures().join(sub)).expect("read_dir") {
            let e = e.expect("entry");
            if e.file_type().expect("type").is_file() {
                let to = d.join(sub).join(e.file_name());
                std::fs::copy(e.path(), &to).expect("copy");
                if let Some(stem) = to.to_str().and_then(|p| p.strip_suffix(".crt"))
                    && !stem.ends_with("ca")
                {
                    // 0600, as kubeadm writes keys.
                    let key = format!("{stem}.key");
                    std::fs::write(&key, "kubeadm's key\n").expect("key");
                    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
                        .expect("chmod");
                }
            }
        }
    }
    for (f, user) in [
        ("controller-manager.conf", "system:kube-controller-manager"),
        ("scheduler.conf", "system:kube-scheduler"),
    ] {
        std::fs::write(d.join(f), kubeconfig(user)).expect("kubeconfig");
    }
    dir
}

/// Every entry below `dir`: (type and mode, bytes or link target).
fn tree(dir: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            let m = std::fs::symlink_metadata(&p).expect("lstat");
            let content = if m.is_dir() {
                todo.push(p.clone());
                Vec::new()
            } else if m.file_type().is_symlink() {
                std::fs::read_link(&p)
                    .expect("readlink")
                    .into_os_string()
                    .into_encoded_bytes()
            } else {
                std::fs::read(&p).expect("read")
            };
            out.insert(
                p.strip_prefix(dir).expect("below").to_owned(),
                (m.permissions().mode(), content),
            );
        }
    }
    out
}

fn adopt(dir: &Path, extra: &[&str]) -> (i32, String, String) {
    let d = dir.to_str().expect("utf-8");
    let mut args = vec![
        "kubeadm",
        "adopt",
        "--kubeadm-dir",
        d,
        "--image",
        "certsync",
    ];
    args.extend(extra);
    run_bounded(&args, dir)
}

/// `adopt ARGS` exits 1 naming every one of `words`, and changes nothing.
fn refused_unchanged(dir: &Path, args: &[&str], words: &[&str]) {
    let before = tree(dir);
    let (code, out, err) = adopt(dir, args);
    assert_eq!(code, 1, "{args:?}: stdout:\n{out}\nstderr:\n{err}");
    for w in words {
        assert!(err.contains(w), "{args:?}: {w:?} not in:\n{err}");
    }
    assert!(err.contains("nothing was changed"), "{err}");
    assert!(!out.contains("dry run"), "{out}");
    assert!(before == tree(dir), "{args:?} changed the node's files");
}

#[test]
fn a_value_certsync_run_refuses_is_refused_before_anything_is_written() {
    let node = fresh_node();
    let banana = ["--set", "lifetime=banana"];
    let dry = ["--dry-run", "--set", "lifetime=banana"];
    refused_unchanged(node.path(), &dry, &["lifetime", "banana"]);
    refused_unchanged(node.path(), &banana, &["lifetime", "banana"]);
    let window = ["--set", "renew=90%-20%"];
    refused_unchanged(node.path(), &window, &["renew", "90%-20%"]);
}

#[test]
fn adopting_again_with_a_value_run_refuses_leaves_the_adopted_node_as_it_was() {
    let node = fresh_node();
    let d = node.path();
    // A node adopted earlier: adopt's record, certsync's configuration and
    // its pod (their contents are not read: a re-adopt replaces them, and a
    // refused one must leave them as they are). A real adopt here would
    // wait for certsync's pod to be ready, which no kubelet runs.
    std::fs::create_dir_all(d.join("certsync")).expect("mkdir");
    std::fs::write(
        d.join("certsync/adopted.json"),
        "{\"manifests\": {}, \"backups\": [], \"made_dirs\": []}\n",
    )
    .expect("record");
    std::fs::write(d.join("certsync.yaml"), "# adopted earlier: lifetime: 8m\n").expect("config");
    std::fs::write(d.join("manifests/certsync.yaml"), "# adopted earlier\n").expect("pod");
    refused_unchanged(d, &["--set", "lifetime=banana"], &["lifetime", "banana"]);
    refused_unchanged(
        d,
        &["--dry-run", "--set", "lifetime=banana"],
        &["lifetime", "banana"],
    );
    refused_unchanged(d, &["--set", "lifetime=4m"], &["client-go", "lifetime=1h"]);
}

#[test]
fn a_lifetime_that_leaves_client_go_an_expired_certificate_is_refused() {
    let node = fresh_node();
    let d = node.path();
    // 4m renewed at 70-90 %: 24 s left at the latest point.
    refused_unchanged(
        d,
        &["--dry-run", "--set", "lifetime=4m"],
        &[
            "kube-controller-manager",
            "client-go",
            "every 5m",
            "at least 6m",
            "lifetime=1h or longer",
            "--set lifetime=4m",
        ],
    );
    // 8m at 20-30 %: 5m36s left, under the 6 minutes.
    refused_unchanged(
        d,
        &["--set", "lifetime=8m", "--set", "renew=20%-30%"],
        &["client-go", "5m 36s", "lifetime=9m or longer"],
    );
}

/// The pilot values `adopt --help` and the guide suggest.
fn pilot() -> Vec<String> {
    let (code, help, err) = run_bounded(&["kubeadm", "adopt", "--help"], Path::new("."));
    assert_eq!(code, 0, "{err}");
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    let pilot = "--set lifetime=8m --set renew=20%-25%";
    assert!(help.contains(pilot), "adopt --help:\n{help}");
    let guide = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/guides/kubeadm-control-plane.md"),
    )
    .expect("guide");
    let guide = guide.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(guide.contains(pilot), "the guide does not suggest {pilot}");
    pilot.split(' ').map(str::to_owned).collect()
}

#[test]
fn the_pilot_lifetime_help_and_guide_suggest_is_accepted() {
    let node = fresh_node();
    let d = node.path();
    let pilot = pilot();
    let mut args: Vec<&str> = vec!["--dry-run"];
    args.extend(pilot.iter().map(String::as_str));
    let (code, out, err) = adopt(d, &args);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(out.ends_with("dry run: nothing was changed\n"), "{out}");
    assert!(
        out.contains("controller-manager-client -> ")
            && out.contains("(lifetime=8m, renew=20%-25%)"),
        "{out}"
    );
    assert!(
        out.contains(
            "  etcd and kube-apiserver restart for their new manifests: this node's API server \
             is unavailable for about 40 s"
        ),
        "{out}"
    );
}

/// A failed adopt is never silent: its plan, what it wrote, and every few
/// seconds what it waits for and what it saw reach a pipe while it runs
/// (they came only at its exit, minutes later). No kubelet runs certsync's
/// pod here, so adopt waits for it; the test stops it once it has said so.
#[test]
fn adopt_says_what_it_waits_for_while_it_waits() {
    use std::io::BufRead as _;
    let node = fresh_node();
    let mut child = std::process::Command::new(support::certsync_bin())
        .args([
            "kubeadm",
            "adopt",
            "--image",
            "certsync",
            "--ready-timeout",
            "10m",
        ])
        .arg("--kubeadm-dir")
        .arg(node.path())
        .current_dir(node.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if tx.send(line.expect("utf-8")).is_err() {
                return;
            }
        }
    });
    let mut seen = Vec::new();
    let progress = loop {
        // A bound on a hang: the line is due about 5 s into the wait.
        let line = rx
            .recv_timeout(std::time::Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("{e}: after {seen:#?}"));
        if line.starts_with("  still waiting (") {
            break line;
        }
        seen.push(line);
    };
    let running = child.try_wait().expect("try_wait").is_none();
    let _ = child.kill();
    let _ = child.wait();
    assert!(running, "adopt had exited: its lines came at the end");
    let at = |prefix: &str| {
        seen.iter()
            .position(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} in {seen:#?}"))
    };
    assert!(at("backed up into ") < at("wrote /etc/kubernetes/manifests/certsync.yaml"));
    assert!(
        at("wrote /etc/kubernetes/manifests/certsync.yaml")
            < at("waiting up to 10m for certsync's pod")
    );
    assert!(
        progress.contains("127.0.0.1:9814"),
        "says what it saw where it asks: {progress}"
    );
}
