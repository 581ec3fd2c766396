//! The local-user attacker position (docs/security.md), for the files root
//! certsync reads to decide whom it trusts: the HTTP hook's
//! `--reload-ca-file`, a `csr:` mapping's `ca=file:` and its
//! `bootstrap-kubeconfig=`. Each must be one only root may change, as the
//! token file and the kubeconfig are, refused at start naming the path.
//! As root with the attacker as uid 65534; without root it skips (and
//! fails under CI, which runs as root).

mod support;

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

use support::local_user::*;

fn ca_pem() -> Vec<u8> {
    fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/certs/ca.crt"
    ))
    .unwrap()
}

/// The four ways a user had its CA accepted: a
/// file of the user's in the user's directory, the user's symlink to
/// root's file, root's own file left 0666, and the user's file in root's
/// directory. Returns them with root's directory (for a control).
fn users_ca_files(d: &Path) -> (Vec<PathBuf>, PathBuf) {
    let user = d.join("user");
    fs::create_dir(&user).unwrap();
    chown(&user, USER);
    let root_dir = d.join("root-dir");
    fs::create_dir(&root_dir).unwrap();
    fs::write(root_dir.join("own.crt"), ca_pem()).unwrap();
    fs::write(user.join("ca.crt"), ca_pem()).unwrap();
    chown(&user.join("ca.crt"), USER);
    symlink(root_dir.join("own.crt"), user.join("link.crt")).unwrap();
    chown(&user.join("link.crt"), USER);
    fs::write(root_dir.join("open.crt"), ca_pem()).unwrap();
    fs::set_permissions(root_dir.join("open.crt"), fs::Permissions::from_mode(0o666)).unwrap();
    fs::write(root_dir.join("users.crt"), ca_pem()).unwrap();
    chown(&root_dir.join("users.crt"), USER);
    (
        vec![
            user.join("ca.crt"),
            user.join("link.crt"),
            root_dir.join("open.crt"),
            root_dir.join("users.crt"),
        ],
        root_dir,
    )
}

fn run_once(args: &[&str]) -> (i32, String) {
    let (code, _, err) = support::run_bounded(args, Path::new("."));
    (code, err)
}

/// Root sent its bearer token to the user's https server, which a
/// CA the user may change vouched for.
#[test]
fn a_reload_ca_file_another_user_may_change_is_refused_at_start() {
    let Some(d) = as_root() else {
        return;
    };
    let (files, root_dir) = users_ca_files(d.path());
    let sync = format!(
        "dir:{}/examples/certs={}",
        env!("CARGO_MANIFEST_DIR"),
        d.path().join("t").display()
    );
    let run = |ca: &Path| {
        run_once(&[
            "run",
            "--once",
            "--sync",
            &sync,
            "--reload-url",
            "https://127.0.0.1:1/-/reload",
            "--reload-ca-file",
            ca.to_str().unwrap(),
        ])
    };
    for ca in &files {
        let (code, err) = run(ca);
        assert_eq!(code, 64, "{}: {err}", ca.display());
        assert!(
            err.contains(&ca.display().to_string()) && err.contains("may be changed"),
            "{}: {err}",
            ca.display()
        );
    }
    // Not there yet (a ca.crt certsync will publish) in the user's
    // directory: whoever may write there chooses what appears.
    let later = d.path().join("user/later.crt");
    let (code, err) = run(&later);
    assert_eq!(code, 64, "{err}");
    assert!(err.contains(&later.display().to_string()), "{err}");
    // The controls: root's own file, and one not there yet in root's
    // directory.
    for ca in [root_dir.join("own.crt"), root_dir.join("later.crt")] {
        let (code, err) = run(&ca);
        assert_eq!(code, 0, "{}: {err}", ca.display());
    }
}

/// The user appended its CA to a `ca=file:` and certsync published
/// it as the consumer's `ca.crt`.
#[test]
fn a_csr_ca_file_another_user_may_change_is_refused_at_start() {
    let Some(d) = as_root() else {
        return;
    };
    let (files, _) = users_ca_files(d.path());
    for ca in files {
        assert_csr_refused(d.path(), &format!("ca=file:{}", ca.display()), &ca);
    }
}

/// A `bootstrap-kubeconfig=` of the user's was refused only when the
/// mapping first built its client, and `run --once` retried instead of
/// exiting 64.
#[test]
fn a_bootstrap_kubeconfig_another_user_may_change_is_refused_at_start() {
    let Some(d) = as_root() else {
        return;
    };
    let user = d.path().join("user");
    fs::create_dir(&user).unwrap();
    chown(&user, USER);
    let kubeconfig = user.join("boot.kubeconfig");
    fs::write(&kubeconfig, "apiVersion: v1\nkind: Config\n").unwrap();
    chown(&kubeconfig, USER);
    let option = format!("bootstrap-kubeconfig={}", kubeconfig.display());
    assert_csr_refused(d.path(), &option, &kubeconfig);
    // Not there yet, in the user's directory: refused by its directory.
    let later = user.join("later.kubeconfig");
    let option = format!("bootstrap-kubeconfig={}", later.display());
    assert_csr_refused(d.path(), &option, &later);
}

/// A `csr:` mapping with `option` exits 64 at start, naming `path` and
/// why, before any request (there is no API server to ask).
fn assert_csr_refused(d: &Path, option: &str, path: &Path) {
    let sync = format!(
        "csr:kubernetes.io/kube-apiserver-client={},cn=u,usage=client-auth,{option}",
        d.join("t").display()
    );
    let (code, err) = run_once(&["run", "--once", "--once-timeout", "3s", "--sync", &sync]);
    assert_eq!(code, 64, "{option}: {err}");
    assert!(
        err.contains(&path.display().to_string()) && err.contains("may be changed"),
        "{option}: {err}"
    );
}
