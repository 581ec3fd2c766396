//! revert against a compromised certsync container (uid 0, no
//! capabilities, may rename files in /etc/kubernetes and pki/) that races
//! it: what revert hands back is what it judged once certsync's daemon was
//! gone, written anew with kubeadm's modes; a link or a mode the container
//! chose never survives (the ninth review, F1 and F2).

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;

use super::handback::node_with_pair;
use super::revert::{BACKUP, adopted_node, forged_ending, kubeconfig_ending, revert_options};
use super::*;
use crate::kubeadm::revert::{INJECTED, Step};

/// Runs `f` at `at` inside the next revert.
fn inject(at: Step, f: impl FnOnce() + 'static) {
    INJECTED.with(|h| *h.borrow_mut() = Some((at, Box::new(f))));
}

fn injected_ran() -> bool {
    INJECTED.with(|h| h.borrow().is_none())
}

/// An admin.conf whose user runs a command (an exec credential plugin):
/// what the container swapped in, in the review, once it saw
/// manifests/certsync.yaml go.
fn exec_kubeconfig() -> String {
    "apiVersion: v1\nkind: Config\nclusters:\n- cluster: {server: \"https://127.0.0.1:1\"}\n  name: kubernetes\n\
     contexts:\n- context: {cluster: kubernetes, user: kubernetes-admin}\n  name: admin\ncurrent-context: admin\n\
     users:\n- name: kubernetes-admin\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      \
     command: /bin/sh\n      args: [\"-c\", \"id > /tmp/pwned\"]\n"
        .to_owned()
}

/// Puts `bytes` at `path` as the container does: a new file renamed over it.
fn swap_in(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("swap");
    std::fs::write(&tmp, bytes).expect("write");
    std::fs::rename(&tmp, path).expect("rename");
}

/// A node whose current admin.conf is sound and outlasts kubeadm's in
/// the backup (200 days against a year): revert keeps it, as judged.
pub(super) fn node_keeping_admin_conf() -> (tempfile::TempDir, String, Vec<u8>) {
    let dir = adopted_node();
    let d = dir.path();
    let backup = plan::backup_path(d, BACKUP, "/etc/kubernetes/admin.conf");
    std::fs::write(&backup, kubeconfig_ending(time::Duration::days(200))).expect("backup");
    let current = kubeconfig_ending(time::Duration::days(365));
    std::fs::write(d.join("admin.conf"), &current).expect("write");
    let kubeadms = std::fs::read(&backup).expect("backup");
    (dir, current, kubeadms)
}

#[tokio::test]
async fn attack_admin_conf_swapped_once_certsyncs_daemon_is_gone_is_judged_again() {
    // F1: judged before certsync's pod was removed and never again, the
    // exec admin.conf the container renamed in once the pod was gone was
    // kept, and root's next kubectl ran its command.
    let (dir, _, kubeadms) = node_keeping_admin_conf();
    let d = dir.path();
    let admin = d.join("admin.conf");
    inject(Step::DaemonGone, move || {
        swap_in(&admin, exec_kubeconfig().as_bytes())
    });
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(injected_ran(), "the swap never ran");
    assert!(
        out.contains("/etc/kubernetes/admin.conf: keeping kubeadm's backup (until ")
            && out.contains("not certsync's: no client pair to judge"),
        "{out}"
    );
    assert_eq!(std::fs::read(d.join("admin.conf")).expect("read"), kubeadms);
}

#[tokio::test]
async fn attack_admin_conf_swapped_between_judging_and_handing_back_never_survives() {
    // F1: the entry judged was kept, so a file renamed in after the read
    // stayed. Now the bytes judged are written anew over whatever is there.
    let (dir, current, _) = node_keeping_admin_conf();
    let d = dir.path();
    let admin = d.join("admin.conf");
    inject(Step::Judged, move || {
        swap_in(&admin, exec_kubeconfig().as_bytes())
    });
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(injected_ran(), "the swap never ran");
    assert!(
        out.contains("/etc/kubernetes/admin.conf: keeping certsync's (until "),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("admin.conf")).expect("read"),
        current
    );
    assert_eq!(mode(d, "admin.conf"), 0o600);
}

/// A node whose current apiserver pair is sound and outlasts kubeadm's
/// (200 days against a year); returns kubeadm's pair and the current one.
pub(super) fn node_keeping_a_pair() -> (tempfile::TempDir, (String, String), (String, String)) {
    node_with_pair(time::Duration::days(200), time::Duration::days(365))
}

pub(super) fn pair_in(d: &Path) -> (String, String) {
    let read = |f: &str| std::fs::read_to_string(d.join(f)).expect("read");
    (read("pki/apiserver.crt"), read("pki/apiserver.key"))
}

fn mode(d: &Path, f: &str) -> u32 {
    std::fs::symlink_metadata(d.join(f))
        .expect("stat")
        .permissions()
        .mode()
        & 0o7777
}

#[tokio::test]
async fn attack_a_pair_swapped_once_certsyncs_daemon_is_gone_is_judged_again() {
    // F1, repro B: a forged pair renamed in once certsync's pod was gone
    // was kept and served. Now it is judged: self-signed, refused.
    let (dir, kubeadms, _) = node_keeping_a_pair();
    let d = dir.path().to_owned();
    let at = d.clone();
    inject(Step::DaemonGone, move || {
        let (crt, key) = forged_ending(time::Duration::days(365 * 100));
        swap_in(&at.join("pki/apiserver.key"), key.as_bytes());
        swap_in(&at.join("pki/apiserver.crt"), crt.as_bytes());
    });
    let out = revert(&revert_options(&d)).await.expect("revert");
    assert!(injected_ran(), "the swap never ran");
    assert!(
        out.contains("/etc/kubernetes/pki/apiserver.crt and .key: keeping kubeadm's backup")
            && out.contains("not issued by the node's CA"),
        "{out}"
    );
    assert_eq!(pair_in(&d), kubeadms);

    // Swapped after the judgement: the pair judged is what stays.
    let (dir, _, current) = node_keeping_a_pair();
    let d = dir.path().to_owned();
    let at = d.clone();
    inject(Step::Judged, move || {
        let (crt, key) = forged_ending(time::Duration::days(365 * 100));
        swap_in(&at.join("pki/apiserver.key"), key.as_bytes());
        swap_in(&at.join("pki/apiserver.crt"), crt.as_bytes());
    });
    revert(&revert_options(&d)).await.expect("revert");
    assert!(injected_ran(), "the swap never ran");
    assert_eq!(pair_in(&d), current);
}

#[tokio::test]
async fn attack_a_symlink_where_kubeadms_file_should_be_is_never_kept() {
    // F2: pki/apiserver.crt and .key made links into certsync's own
    // target, which holds a sound pair: revert kept the links, then moved
    // the target away, leaving them dangling (in the review, etcd's
    // server pair: etcd in CrashLoopBackOff). Now the backup is restored
    // as regular files, and the line says why.
    let (dir, kubeadms, current) = node_keeping_a_pair();
    let d = dir.path();
    let target = d.join("pki/certsync/apiserver");
    for (f, bytes) in [("tls.crt", &current.0), ("tls.key", &current.1)] {
        std::fs::write(target.join(f), bytes).expect("target");
    }
    for ext in ["crt", "key"] {
        let p = d.join(format!("pki/apiserver.{ext}"));
        std::fs::remove_file(&p).expect("rm");
        std::os::unix::fs::symlink(format!("certsync/apiserver/tls.{ext}"), &p).expect("link");
    }
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(
        out.contains(
            "/etc/kubernetes/pki/apiserver.crt and .key: keeping kubeadm's backup (until "
        ) && out.contains(
            "not certsync's: /etc/kubernetes/pki/apiserver.crt is a symlink, not a regular file"
        ),
        "{out}"
    );
    for f in ["pki/apiserver.crt", "pki/apiserver.key"] {
        let m = std::fs::symlink_metadata(d.join(f)).expect("stat");
        assert!(m.file_type().is_file(), "{f} is not a regular file");
    }
    assert_eq!(pair_in(d), kubeadms);

    // admin.conf a link to a kubeconfig in certsync's target: the same.
    let (dir, _, kubeadms) = node_keeping_admin_conf();
    let d = dir.path();
    std::fs::rename(
        d.join("admin.conf"),
        d.join("pki/certsync/admin-client/zz.conf"),
    )
    .expect("move");
    std::os::unix::fs::symlink("pki/certsync/admin-client/zz.conf", d.join("admin.conf"))
        .expect("link");
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(
        out.contains("/etc/kubernetes/admin.conf is a symlink, not a regular file"),
        "{out}"
    );
    assert!(
        std::fs::symlink_metadata(d.join("admin.conf"))
            .expect("stat")
            .file_type()
            .is_file()
    );
    assert_eq!(std::fs::read(d.join("admin.conf")).expect("read"), kubeadms);
}

#[tokio::test]
async fn attack_modes_the_container_chose_never_survive_revert() {
    // F2: certsync's sound pair, its key made 0666 and its certificate
    // 0666 by the container, was kept with those modes: a local user read
    // and wrote the key after revert. Now what is kept is written anew,
    // root's, the key 0600 and the certificate 0644, a new inode.
    let (dir, _, current) = node_keeping_a_pair();
    let d = dir.path();
    for f in ["pki/apiserver.crt", "pki/apiserver.key"] {
        std::fs::set_permissions(d.join(f), std::fs::Permissions::from_mode(0o666)).expect("chmod");
    }
    let inode = std::fs::metadata(d.join("pki/apiserver.key"))
        .expect("stat")
        .ino();
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(
        out.contains("/etc/kubernetes/pki/apiserver.crt and .key: keeping certsync's (until "),
        "{out}"
    );
    assert_eq!(pair_in(d), current);
    assert_eq!(
        (mode(d, "pki/apiserver.crt"), mode(d, "pki/apiserver.key")),
        (0o644, 0o600)
    );
    let key = std::fs::metadata(d.join("pki/apiserver.key")).expect("stat");
    assert_ne!(key.ino(), inode, "the key's inode was kept");
    let euid = nix::unistd::geteuid().as_raw();
    assert_eq!(key.uid(), euid, "not revert's user's (root's on a node)");
    assert!(
        out.contains(
            "wrote /etc/kubernetes/pki/apiserver.key anew from the bytes judged (mode 0600)"
        ),
        "{out}"
    );

    // The dry run judges what is there now, says the real run judges
    // again, and changes no mode.
    let (dir, _, _) = node_keeping_a_pair();
    let d = dir.path();
    std::fs::set_permissions(
        d.join("pki/apiserver.key"),
        std::fs::Permissions::from_mode(0o666),
    )
    .expect("chmod");
    let out = revert(&Options {
        dry_run: true,
        ..revert_options(d)
    })
    .await
    .expect("dry run");
    assert!(
        out.contains("the real run judges each kubeconfig and pair below again once certsync's daemon is gone"),
        "{out}"
    );
    assert_eq!(mode(d, "pki/apiserver.key"), 0o666);
}
