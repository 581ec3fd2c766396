//! The local-user attacker position (docs/security.md): root's `certsync
//! check` walks the path as the operator wrote it. A root-only
//! certificate was read (its subject printed, its key
//! "matches") when the path went through a user's symlink, a relative
//! path from inside the user's directory, or `..` out of the user's
//! directory, because only the resolved path was judged. certsync runs as
//! root, the attacker as uid 65534 through `setpriv`; without root this
//! skips (and fails under CI).

mod support;

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use support::certs::Pair;
use support::local_user::*;

/// A root 0700 directory `dir` holding `s.crt`/`s.key` (0600) of `pair`.
fn root_only(dir: &Path, pair: &Pair) {
    fs::create_dir_all(dir).unwrap();
    fs::write(dir.join("s.crt"), &pair.cert).unwrap();
    fs::write(dir.join("s.key"), &pair.key).unwrap();
    for f in ["s.crt", "s.key"] {
        fs::set_permissions(dir.join(f), fs::Permissions::from_mode(0o600)).unwrap();
    }
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700)).unwrap();
}

/// `check ARGS` run in `cwd` refused, naming `component`, and told
/// nothing of the root-only pair: each row refused, or (a directory) the
/// whole argument.
fn refused(cwd: &Path, arg: &str, component: &str, shape: &str) {
    let (code, rows, err) = check_json_in(cwd, &[arg]);
    assert_ne!(code, 0, "{shape}: {arg}: {rows:?} {err}");
    let text = serde_json::to_string(&rows).unwrap();
    assert!(!text.contains("ROOT-SECRET"), "{shape}: {text}");
    if rows.is_empty() {
        assert!(
            err.contains("others may not read") && err.contains(component),
            "{shape}: {arg}: the refusal does not name {component}: {err}"
        );
        return;
    }
    for r in &rows {
        let p = r["problem"].as_str().unwrap_or_default();
        assert!(
            p.contains("others may not read") && p.contains(component),
            "{shape}: {arg}: the refusal does not name {component}: {r}"
        );
        assert_eq!(r["subject"], "", "{shape}: {r}");
        assert_ne!(r["key"], "matches", "{shape}: {r}");
    }
}

#[test]
fn check_walks_the_path_as_written_through_a_users_links_and_dot_dot() {
    let Some(d) = as_root() else {
        return;
    };
    let b = d.path();
    let secret = Pair::new("ROOT-SECRET");
    root_only(&b.join("secret"), &secret);
    // The user's directories: `ua` with the user's symlink to root's
    // directory, `duser` an empty one the path climbs out of.
    for u in ["ua", "duser"] {
        fs::create_dir(b.join(u)).unwrap();
        chown(&b.join(u), USER);
    }
    let ua = b.join("ua");
    as_user(&format!(
        "ln -s {} {}",
        b.join("secret").display(),
        ua.join("lnk").display()
    ));

    // 1. Through the user's symlink: by file and by directory. Named: the
    // user's directory that holds the link, the first component on the
    // way that the user may change.
    let lnk = ua.join("lnk");
    let named = format!("{} (owner {USER}", ua.display());
    for arg in [lnk.join("s.crt"), lnk.clone()] {
        refused(b, arg.to_str().unwrap(), &named, "symlink");
    }
    // 2. A relative path from inside the user's directory: the working
    // directory is the first on the way.
    refused(
        &ua,
        "lnk/s.crt",
        &named,
        "relative path in the user's directory",
    );
    // 3. `..` out of the user's directory.
    let duser = b.join("duser");
    let dotdot = format!("{}/../secret/s.crt", duser.display());
    let named = format!("{} (owner {USER}", duser.display());
    refused(b, &dotdot, &named, "`..` out of it");
    // A kubeconfig (root's 0600 admin.conf, with its client key) is read
    // the same way.
    let b64 = |v: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, v);
    let conf = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: k\n  cluster:\n    \
         server: https://127.0.0.1:6443\ncontexts:\n- name: c\n  context:\n    cluster: k\n    \
         user: u\nusers:\n- name: u\n  user:\n    client-certificate-data: {}\n    \
         client-key-data: {}\n",
        b64(&secret.cert),
        b64(&secret.key)
    );
    fs::write(b.join("secret/admin.conf"), conf).unwrap();
    fs::set_permissions(
        b.join("secret/admin.conf"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let named = format!("{} (owner {USER}", ua.display());
    refused(
        b,
        lnk.join("admin.conf").to_str().unwrap(),
        &named,
        "kubeconfig",
    );

    // Controls that still read: a root symlink in an /etc/kubernetes-style
    // tree, kubelet's `kubelet-server-current.pem` link, a relative path
    // in a root directory, `..` between root's directories.
    let pki = b.join("etc/kubernetes/pki");
    fs::create_dir_all(&pki).unwrap();
    symlink(b.join("secret"), pki.join("current")).unwrap();
    let kubelet = b.join("var/lib/kubelet/pki");
    root_only(&kubelet, &secret);
    let mut pem = secret.cert.clone();
    pem.extend_from_slice(&secret.key);
    fs::write(kubelet.join("kubelet-server-2026-11-25.pem"), &pem).unwrap();
    fs::set_permissions(
        kubelet.join("kubelet-server-2026-11-25.pem"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    symlink(
        kubelet.join("kubelet-server-2026-11-25.pem"),
        kubelet.join("kubelet-server-current.pem"),
    )
    .unwrap();
    let read = |cwd: &Path, arg: &str, key: &str| {
        let (code, rows, err) = check_json_in(cwd, &[arg]);
        assert_eq!(
            rows[0]["subject"], "CN=ROOT-SECRET",
            "{arg}: {rows:?} {err}"
        );
        assert_eq!(rows[0]["key"], key, "{arg}: {rows:?}");
        assert_eq!(code, i32::from(key != "matches"), "{arg}: {rows:?} {err}");
    };
    let p = |p: &Path| p.display().to_string();
    read(b, &p(&pki.join("current/s.crt")), "matches");
    read(b, &p(&pki.join("current")), "matches");
    // (Read, its subject told; `check` words a combined file's key as one
    // certsync would not publish, a separate matter.)
    read(
        b,
        &p(&kubelet.join("kubelet-server-current.pem")),
        "unreadable",
    );
    read(b, "secret/s.crt", "matches");
    read(&pki, "current/s.crt", "matches");
    read(
        b,
        &format!("{}/etc/../secret/s.crt", b.display()),
        "matches",
    );
    read(&pki, "current/admin.conf", "matches");
}
