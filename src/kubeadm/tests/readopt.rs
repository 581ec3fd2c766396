//! A node adopt recorded, adopted again: what certsync's container may have done to
//! `/etc/kubernetes` since (a kubeconfig planted, deleted or made a link, a target made a
//! link) is refused, naming it, never taken for kubeadm's or followed.

use super::*;

/// The backup [`recorded`] names.
pub(super) const FIRST: &str = "20261124T000000Z";

/// The backups on the node at `d`, by name.
pub(super) fn backups(d: &Path) -> Vec<String> {
    let at = host(d, plan::BACKUPS);
    let names = std::fs::read_dir(at).map(|e| e.map(|e| e.expect("entry").file_name()));
    let mut names: Vec<_> = names
        .into_iter()
        .flatten()
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// adopt's record on the fixture node as a first adoption leaves it: every
/// kubeadm file it keeps in step backed up (in [`FIRST`]).
pub(super) fn recorded(d: &Path) {
    let mut state = super::record::State::default();
    for k in plan::EMBEDDED {
        if host(d, k).is_file() {
            let first = format!("{}/{FIRST}", plan::BACKUPS);
            let kept = plan::backup_path(d, &first, k);
            std::fs::create_dir_all(kept.parent().expect("parent")).expect("mkdir");
            std::fs::copy(host(d, k), kept).expect("backup");
            state.kubeconfigs.insert(k.to_owned(), first);
        }
    }
    for p in plan::pairs() {
        state.pairs.insert(p, format!("{}/{FIRST}", plan::BACKUPS));
    }
    state.write(d).expect("record");
}

/// The fixture node with adopt's record of a first adoption ([`recorded`]).
pub(super) fn recorded_node() -> tempfile::TempDir {
    let dir = node_dir();
    std::fs::create_dir_all(dir.path().join("certsync")).expect("mkdir");
    recorded(dir.path());
    dir
}

#[tokio::test]
async fn attack_a_kubeadm_file_that_appeared_after_adoption_is_never_taken_for_kubeadms() {
    // certsync's container may write /etc/kubernetes: it planted a
    // super-admin.conf (a joined node has none) whose user it signed and
    // whose server is its own; a re-adopt backed it up as kubeadm's, and
    // the next revert handed it back as root's. Now adopt refuses, naming
    // it, before anything is written.
    let dir = recorded_node();
    let d = dir.path();
    assert!(!d.join("super-admin.conf").exists());
    let planted = std::fs::read_to_string(d.join("controller-manager.conf"))
        .expect("a kubeconfig")
        .replace("https://10.77.0.11:6443", "https://10.9.9.9:6443");
    std::fs::write(d.join("super-admin.conf"), planted).expect("planted");
    let why = refusal(d).await;
    assert!(
        matches!(&why, Refusal::Unrecorded { missing }
            if missing == &["/etc/kubernetes/super-admin.conf"]),
        "{why}"
    );
    assert_eq!(backups(d), [FIRST], "nothing was written");

    // A link where kubeadm's file was, to a root-only host file: never
    // followed (root would have copied the host file into a backup the
    // container reads).
    std::fs::remove_file(d.join("super-admin.conf")).expect("rm");
    let secret = d.join("root-only");
    std::fs::write(&secret, "secret\n").expect("secret");
    std::fs::rename(d.join("scheduler.conf"), d.join("scheduler.conf.kubeadm")).expect("mv");
    std::os::unix::fs::symlink(&secret, d.join("scheduler.conf")).expect("symlink");
    let why = match plan(&options(d)).await {
        Err(e) => e,
        Ok(p) => panic!("not refused:\n{}", p.text()),
    };
    assert!(
        // Refused by certsync run's loader, as the pod would refuse it;
        // its reason is that module's sentence.
        matches!(&why, KubeadmError::Refused { reason, .. }
        if matches!(&**reason, Refusal::Config { source: ConfigError::Copy {
            mapping,
            source: crate::writer::WriterError::Of { what: "update-kubeconfig", path, problem },
        }, .. } if mapping == "scheduler-client"
            && path.ends_with("scheduler.conf")
            && matches!(&**problem,
                crate::writer::WriterError::CopyUnreadable {
                    problem: crate::beneath::PathError::NotRegular { what: "a symlink", .. },
                    ..
                }))),
        "{why}"
    );
    assert_eq!(backups(d), [FIRST], "nothing was written");
}

/// Attack (medium): certsync's container may write `/etc/kubernetes`. It deleted a
/// recorded `scheduler.conf`, and the next adopt dropped `scheduler-client` (its mapping
/// and its mount) while kube-scheduler still ran on `pki/certsync/scheduler-client`,
/// renewed by nothing, and a target no pod mounts is the container's to make a link. A
/// client adopt's record names stays a mapping; adopt refuses while its kubeconfig is gone,
/// naming the backup to put it back from, and goes on once it is back.
#[tokio::test]
async fn attack_a_kubeconfig_deleted_by_the_container_never_drops_its_client_mapping() {
    let dir = recorded_node();
    let d = dir.path();
    let kept = d.join("scheduler.conf.kubeadm");
    std::fs::rename(d.join("scheduler.conf"), &kept).expect("mv scheduler.conf");
    let why = refusal(d).await;
    assert!(
        matches!(&why, Refusal::RecordedGone { path, backup }
            if path == "/etc/kubernetes/scheduler.conf" && backup.ends_with(FIRST)),
        "{why}"
    );
    assert_eq!(backups(d), [FIRST], "nothing was written");
    std::fs::rename(&kept, d.join("scheduler.conf")).expect("put back");
    let p = plan(&options(d)).await.expect("plan once it is back");
    let target = "/etc/kubernetes/pki/certsync/scheduler-client";
    assert!(
        p.mappings.iter().any(|(_, t, _)| t == target),
        "{}",
        p.text()
    );
}

/// Attack (high): `mkdir -p` and the kubelet's hostPath follow a link, and a target that is
/// no mount point of the running pod is the container's to replace with one: the next
/// adopt's pod mounted the host directory it names (`/etc/cron.d`) read-write into a uid 0
/// container. A target reached through a link is refused, naming it; nothing is made there.
#[tokio::test]
async fn attack_a_target_the_container_made_a_symlink_is_never_mounted_into_its_pod() {
    let dir = recorded_node();
    let d = dir.path();
    let host_dir = tempfile::tempdir().expect("the host's /etc/cron.d");
    std::fs::create_dir_all(d.join("pki/certsync")).expect("mkdir");
    std::os::unix::fs::symlink(host_dir.path(), d.join("pki/certsync/scheduler-client"))
        .expect("planted link");
    let why = refusal(d).await;
    assert!(
        matches!(&why, Refusal::Link { path, .. }
            if path == "/etc/kubernetes/pki/certsync/scheduler-client"),
        "{why}"
    );
    assert_eq!(std::fs::read_dir(host_dir.path()).expect("ls").count(), 0);
}
