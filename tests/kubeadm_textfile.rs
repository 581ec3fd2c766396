//! `certsync kubeadm status --textfile PATH` through the binary, on node
//! directories without a cluster: the report lands whole at PATH (0644,
//! no temporary left, valid to `promtool check metrics`), also when the
//! node is unhealthy; when status fails before it can report (adopt's
//! record damaged), PATH says so rather than losing the node's series.

mod support;

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use support::run_bounded;

fn status(node: &Path, textfile: &Path) -> i32 {
    let (code, _, err) = run_bounded(
        &[
            "kubeadm",
            "status",
            "--kubeadm-dir",
            node.to_str().unwrap(),
            "--textfile",
            textfile.to_str().unwrap(),
        ],
        node,
    );
    assert!(code == 1 || code >= 2, "{err}");
    code
}

fn promtool_accepts(text: &str) {
    if !support::tools::have(&["promtool"]) {
        return;
    }
    use std::io::Write as _;
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    // Lint remarks (no unit suffix...) are not errors; a parse error is.
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("error while linting"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_textfile_is_written_whole_and_says_when_status_failed() {
    let node = tempfile::tempdir().unwrap();
    let collector = tempfile::tempdir().unwrap();
    let textfile = collector.path().join("certsync.prom");

    // A node never adopted: unhealthy (exit 2), the report written anyway.
    assert_eq!(status(node.path(), &textfile), 2);
    let text = std::fs::read_to_string(&textfile).unwrap();
    assert!(
        text.contains("certsync_kubeadm_status_complete 1\n"),
        "{text}"
    );
    assert!(
        text.contains("certsync_kubeadm_status_problem{cause=\"not-adopted\"} 1\n"),
        "{text}"
    );
    let mode = std::fs::metadata(&textfile).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644);
    promtool_accepts(&text);

    // adopt's record damaged: status fails (exit 1) before it can report;
    // the textfile says so instead of keeping the last report or nothing.
    std::fs::create_dir_all(node.path().join("certsync")).unwrap();
    std::fs::write(node.path().join("certsync/adopted.json"), "{not json").unwrap();
    assert_eq!(status(node.path(), &textfile), 1);
    let failed = std::fs::read_to_string(&textfile).unwrap();
    assert!(
        failed.contains("certsync_kubeadm_status_complete 0\n"),
        "{failed}"
    );
    assert!(
        failed.contains("certsync_kubeadm_status_timestamp_seconds "),
        "{failed}"
    );
    assert!(
        !failed.contains("certsync_kubeadm_status_problem"),
        "{failed}"
    );
    promtool_accepts(&failed);

    // Only the textfile is left in the collector's directory, and no name
    // the collector reads (*.prom) was ever a temporary.
    let names: Vec<String> = std::fs::read_dir(collector.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["certsync.prom"]);
}

/// Attack: a user who may write the directory above the textfile's
/// replaces its directory with a link to a root-only one: root's status
/// (from cron) then replaced a file of the textfile's name there and
/// removed what was at its temporary name. The way to the textfile is
/// opened one directory at a time, each root's and written by no one
/// else, as ssh's StrictModes: refused (exit 1), nothing written there.
#[test]
fn attack_a_textfile_directory_another_user_may_replace_is_refused() {
    use std::os::unix::fs::symlink;
    if !nix::unistd::geteuid().is_root() {
        support::tools::skip("needs root: the attacker's directory is another user's");
        return;
    }
    let node = tempfile::tempdir().unwrap();
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let victim = d.path().join("victim");
    std::fs::create_dir(&victim).unwrap();
    std::fs::write(victim.join("certsync.prom"), "precious").unwrap();
    let home = d.path().join("home");
    std::fs::create_dir(&home).unwrap();
    symlink(&victim, home.join("textfile")).unwrap();
    for p in [home.join("textfile"), home.clone()] {
        std::os::unix::fs::lchown(&p, Some(65534), Some(65534)).unwrap();
    }
    let (code, _, err) = run_bounded(
        &[
            "kubeadm",
            "status",
            "--kubeadm-dir",
            node.path().to_str().unwrap(),
            "--textfile",
            home.join("textfile/certsync.prom").to_str().unwrap(),
        ],
        node.path(),
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("--textfile"), "{err}");
    assert_eq!(
        std::fs::read(victim.join("certsync.prom")).unwrap(),
        b"precious"
    );
}
