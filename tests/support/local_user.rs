//! The local-user attacker position (docs/security.md): certsync runs as
//! root, the attacker as uid 65534 through `setpriv`. Shared by the tests
//! of that position.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use super::tools;

/// The attacker: nobody, no groups.
pub const USER: u32 = 65534;
pub const AS_USER: [&str; 5] = ["--reuid", "65534", "--regid", "65534", "--clear-groups"];

/// A scratch directory (root's, 0755, so the attacker may enter it) when
/// running as root with `setpriv`; `None`, having said why, otherwise.
/// Under the test's own target/tmp, not /tmp: certsync refuses targets
/// below a directory every user may write.
pub fn as_root() -> Option<tempfile::TempDir> {
    if !(nix::unistd::geteuid().is_root() && tools::have(&["setpriv"])) {
        tools::skip("needs root (to create files of another user and run it with setpriv)");
        return None;
    }
    let d = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    fs::set_permissions(d.path(), fs::Permissions::from_mode(0o755)).unwrap();
    Some(d)
}

pub fn chown(path: &Path, uid: u32) {
    std::os::unix::fs::lchown(path, Some(uid), Some(uid)).unwrap();
}

/// Runs `script` with `sh -c` as the attacker; panics if it fails.
pub fn as_user(script: &str) {
    let out = Command::new("setpriv")
        .args(AS_USER)
        .args(["sh", "-c", script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "as the user: {script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Mounts a tmpfs at `dir` with `mode` (as root); `false`, having said
/// why, when the machine does not let it.
pub fn mount_tmpfs(dir: &Path, mode: &str) -> bool {
    fs::create_dir_all(dir).unwrap();
    let ok = Command::new("mount")
        .args([
            "-t",
            "tmpfs",
            "-o",
            &format!("size=1m,mode={mode}"),
            "tmpfs",
        ])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        tools::skip("root but cannot mount a tmpfs (a volume root)");
    }
    ok
}

/// The rows of root's `certsync check -o json ARGS` run in `cwd` (exit
/// code, rows, stderr).
pub fn check_json_in(cwd: &Path, args: &[&str]) -> (i32, Vec<serde_json::Value>, String) {
    let mut all = vec!["check", "-o", "json"];
    all.extend_from_slice(args);
    let (code, out, err) = super::run_bounded(&all, cwd);
    let rows = serde_json::from_str(&out).unwrap_or_default();
    (code, rows, err)
}

/// [`check_json_in`] from the test's own directory.
pub fn check_json(args: &[&str]) -> (i32, Vec<serde_json::Value>, String) {
    check_json_in(Path::new("."), args)
}

/// The row of `path` among `rows`; panics naming it when there is none.
pub fn row<'a>(rows: &'a [serde_json::Value], path: &Path) -> &'a serde_json::Value {
    let p = path.display().to_string();
    rows.iter()
        .find(|r| r["certificate"] == p.as_str())
        .unwrap_or_else(|| panic!("no row for {p}: {rows:?}"))
}
