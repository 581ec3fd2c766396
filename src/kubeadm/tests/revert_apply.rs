//! revert carried out: what it hands back, where certsync's files go,
//! certsync's daemon, the directories adopt made.

use std::path::{Path, PathBuf};

use super::adopted::*;
use super::*;

#[tokio::test]
async fn revert_issues_again_from_kubeadms_copy_what_ends_within_a_day() {
    // kubeadm's copies in the backup end a year after `kubeadm
    // init`, when certsync has long been serving its own; revert refused
    // ("both ... end that soon", untrue) and --force handed back expired
    // files. Now each that ends within a day is issued again from kubeadm's
    // copy: its TBSCertificate but serial and validity, its key kept, in a
    // kubeconfig only the certificate's base64 replaced.
    let dir = adopted_node();
    let d = dir.path();
    let apiserver = "/etc/kubernetes/pki/apiserver";
    let crt_backup = plan::backup_path(d, BACKUP, &format!("{apiserver}.crt"));
    let key_backup = plan::backup_path(d, BACKUP, &format!("{apiserver}.key"));
    let (crt, key) = pair_ending(time::Duration::hours(23));
    std::fs::write(&crt_backup, &crt).expect("crt");
    std::fs::write(&key_backup, &key).expect("key");
    let conf_backup = plan::backup_path(d, BACKUP, "/etc/kubernetes/scheduler.conf");
    let conf = kubeconfig_ending(-time::Duration::hours(1));
    std::fs::write(&conf_backup, &conf).expect("conf");
    let handed_back = handed_back(d);

    let out = dry_run(revert_options(d)).await;
    for said in [
        format!("would issue {apiserver}.crt again from kubeadm's copy in {BACKUP}/ (that ends "),
        format!(
            "would issue /etc/kubernetes/scheduler.conf again from kubeadm's copy in {BACKUP}/ (that ends "
        ),
        format!("would restore {apiserver}.key from {BACKUP}/"),
        format!("would restore /etc/kubernetes/pki/etcd/peer.crt from {BACKUP}/"),
    ] {
        assert!(out.contains(&said), "{said:?} not in\n{out}");
    }

    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(out.ends_with("reverted\n"), "{out}");
    let now = std::fs::read(d.join("pki/apiserver.crt")).expect("crt");
    assert_issued_again(&der_of(crt.as_bytes()), &der_of(&now), "apiserver.crt");
    assert_eq!(
        std::fs::read_to_string(d.join("pki/apiserver.key")).expect("key"),
        key
    );
    let now = std::fs::read_to_string(d.join("scheduler.conf")).expect("conf");
    let ((old_der, old_b64), (new_der, new_b64)) = (embedded(&conf), embedded(&now));
    assert_issued_again(&old_der, &new_der, "scheduler.conf");
    assert_eq!(
        now.replace(&new_b64, &old_b64),
        conf,
        "only the base64 changed"
    );
    // Every other file is kubeadm's copy, byte for byte.
    for f in handed_back {
        if f == format!("{apiserver}.crt") || f.ends_with("scheduler.conf") {
            continue;
        }
        assert_eq!(
            std::fs::read(host(d, &f)).expect("handed back"),
            std::fs::read(plan::backup_path(d, BACKUP, &f)).expect("backup"),
            "{f}"
        );
    }
}

#[tokio::test]
async fn revert_moves_certsyncs_files_into_the_backup_or_purges_them() {
    for purge in [false, true] {
        let dir = adopted_node();
        let d = dir.path();
        let own = own_files(d);
        assert_eq!(own.len(), 10 + 3);
        revert(&RevertOptions {
            purge,
            ..revert_options(d)
        })
        .await
        .expect("revert");
        for (f, b) in &own {
            assert!(!host(d, f).exists(), "purge={purge}: {f} left in place");
            let kept = std::fs::read(plan::backup_path(d, BACKUP, f)).ok();
            assert_eq!(kept.as_ref(), (!purge).then_some(b), "purge={purge}: {f}");
        }
    }
}

/// A test that needs root (mounting a filesystem): `false` after saying
/// why it cannot run here; under `CI=true` it fails instead (CI runs as
/// root), as `tests/support/tools.rs` does for integration tests.
fn as_root(why: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{why} needs root; a skipped test fails under CI=true"
    );
    eprintln!("skipped: {why} needs root");
    false
}

/// A tmpfs mounted at a path, unmounted on drop (a failing test too).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path) -> Tmpfs {
        std::fs::create_dir_all(at).expect("mkdir");
        nix::mount::mount(
            Some("tmpfs"),
            at,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("mode=0700,size=16m"),
        )
        .expect("mount tmpfs");
        Tmpfs(at.to_owned())
    }
}

impl Tmpfs {
    /// A tmpfs mounted over the directory `at`, holding a copy of what
    /// was in it.
    fn mount_over(at: &Path) -> Tmpfs {
        let before = snapshot(at);
        let mounted = Tmpfs::mount(at);
        for (p, bytes) in &before {
            if bytes.as_slice() == b"<dir>" {
                std::fs::create_dir_all(p).expect("mkdir");
            } else {
                std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
                std::fs::write(p, bytes).expect("write");
            }
        }
        mounted
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// An adopted node whose backups are on a filesystem of their own (a
/// tmpfs at `/etc/kubernetes/certsync/backup`): a rename from `pki/` into
/// it fails with EXDEV.
/// `None` (said) where this process may not mount one: it is not root.
fn adopted_node_with_backup_on_tmpfs() -> Option<(tempfile::TempDir, Tmpfs)> {
    if !as_root("mounting a tmpfs as the backup") {
        return None;
    }
    let dir = adopted_node();
    let mounted = Tmpfs::mount_over(&host(dir.path(), plan::BACKUPS));
    Some((dir, mounted))
}

/// certsync's own files on the node (node paths) and their bytes.
fn own_files(d: &Path) -> Vec<(String, Vec<u8>)> {
    all_targets(d)
        .into_iter()
        .map(|t| format!("{t}/tls.crt"))
        .chain([
            plan::CONFIG.to_owned(),
            "/etc/kubernetes/certsync/controller-manager.conf".to_owned(),
            "/etc/kubernetes/certsync/scheduler.conf".to_owned(),
        ])
        .map(|f| {
            let b = std::fs::read(host(d, &f)).expect("own file");
            (f, b)
        })
        .collect()
}

#[tokio::test]
async fn revert_moves_certsyncs_files_into_a_backup_on_another_filesystem() {
    let Some((dir, _tmpfs)) = adopted_node_with_backup_on_tmpfs() else {
        return;
    };
    let d = dir.path();
    let own = own_files(d);
    // A target as certsync leaves it: a revision directory, `..data` and
    // the file names as symlinks through it.
    let api = host(d, "/etc/kubernetes/pki/certsync/apiserver");
    std::fs::create_dir(api.join("..2026_11_25")).expect("mkdir");
    std::fs::write(api.join("..2026_11_25/tls.key"), "key\n").expect("write");
    std::fs::set_permissions(
        api.join("..2026_11_25/tls.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("chmod");
    std::os::unix::fs::symlink("..2026_11_25", api.join("..data")).expect("symlink");
    std::os::unix::fs::symlink("..data/tls.key", api.join("tls.key")).expect("symlink");

    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(out.ends_with("reverted\n"), "{out}");
    for (f, b) in &own {
        assert!(!host(d, f).exists(), "{f} left in place");
        let kept = std::fs::read(plan::backup_path(d, BACKUP, f)).ok();
        assert_eq!(kept.as_ref(), Some(b), "{f} in the backup");
    }
    let kept = plan::backup_path(d, BACKUP, "/etc/kubernetes/pki/certsync/apiserver");
    assert_eq!(
        std::fs::read_link(kept.join("..data")).expect("..data"),
        Path::new("..2026_11_25")
    );
    assert_eq!(
        std::fs::read(kept.join("tls.key")).expect("through the links"),
        b"key\n"
    );
    let mode = std::fs::metadata(kept.join("..2026_11_25/tls.key"))
        .expect("key")
        .permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    assert!(
        !host(d, plan::STATE).exists(),
        "adopt's record left in place"
    );
    let leftovers: Vec<_> = snapshot(&host(d, plan::BACKUPS))
        .into_keys()
        .filter(|p| p.to_string_lossy().contains(".partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let again = revert(&revert_options(d)).await.expect("again");
    assert!(again.contains("nothing to do"), "{again}");
}

#[tokio::test]
async fn a_move_that_stopped_after_the_copy_is_finished_by_the_next_revert() {
    // The copy into the backup is complete, the original half removed (a
    // crash in remove_dir_all): the next revert finishes, never refuses
    // over its own copy; an original that differs from the copy is refused.
    let dir = adopted_node();
    let d = dir.path();
    let api = "/etc/kubernetes/pki/certsync/apiserver";
    std::fs::write(host(d, &format!("{api}/tls.key")), "key\n").expect("write");
    let kept = plan::backup_path(d, BACKUP, api);
    std::fs::create_dir_all(&kept).expect("mkdir");
    for f in ["tls.crt", "tls.key"] {
        std::fs::copy(host(d, api).join(f), kept.join(f)).expect("copy");
    }
    std::fs::remove_file(host(d, api).join("tls.key")).expect("half removed");
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(out.ends_with("reverted\n"), "{out}");
    assert!(!host(d, api).exists());
    assert_eq!(std::fs::read(kept.join("tls.key")).expect("kept"), b"key\n");

    // The backup holds something else under the name (an earlier copy):
    // it stays as it is, and the original is kept beside it.
    let dir = adopted_node();
    let d = dir.path();
    let kept = plan::backup_path(d, BACKUP, api);
    std::fs::create_dir_all(&kept).expect("mkdir");
    std::fs::write(kept.join("tls.crt"), "another\n").expect("write");
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(out.ends_with("reverted\n"), "{out}");
    assert_eq!(
        std::fs::read(kept.join("tls.crt")).expect("earlier"),
        b"another\n"
    );
    assert_eq!(
        std::fs::read(kept.with_file_name("apiserver.reverted-1").join("tls.crt"))
            .expect("beside it"),
        format!("target {api}\n").as_bytes()
    );
    assert!(!host(d, api).exists());
}

#[tokio::test]
async fn a_revert_stopped_partway_is_finished_by_a_re_run() {
    // A local step fails (a file where the backup's pki/certsync/
    // directory goes, which certsync's targets move into): part-reverted,
    // and the re-run, once it is out of the way, finishes.
    let dir = adopted_node();
    let d = dir.path();
    let kept = plan::backup_path(d, BACKUP, "/etc/kubernetes/pki/certsync");
    std::fs::write(&kept, "in the way\n").expect("write");
    let why = match revert(&revert_options(d)).await {
        Err(KubeadmError::Revert(e)) => *e,
        Err(e) => panic!("stopped, but not as revert stops: {e}"),
        Ok(out) => panic!("not refused:\n{out}"),
    };
    assert!(matches!(why, RevertError::PartReverted { .. }), "{why}");
    std::fs::remove_file(&kept).expect("remove");
    let out = revert(&revert_options(d)).await.expect("re-run");
    assert!(out.ends_with("reverted\n"), "{out}");
    assert!(!host(d, plan::CONFIG).exists());
    assert_kubeadms_manifests(d);
}

/// An adopted node whose apiserver target a daemon (this process) holds
/// claimed: (the node, the target, the claim).
fn adopted_with_a_daemon() -> (tempfile::TempDir, PathBuf, crate::writer::Claim) {
    let dir = adopted_node();
    let api = host(dir.path(), "/etc/kubernetes/pki/certsync/apiserver");
    let claim = crate::writer::Writer::existing(&api)
        .expect("target")
        .claim()
        .expect("claim");
    (dir, api, claim)
}

#[tokio::test]
async fn revert_waits_for_certsyncs_daemon_to_let_go_of_its_targets() {
    // The daemon whose static pod revert removes is still stopping (the
    // kubelet gives it its grace period) and publishes once more before it
    // exits: revert moves the target only once the daemon's claim is gone,
    // so the last publish is in the backup, not a target recreated in place.
    let (dir, api, claim) = adopted_with_a_daemon();
    let d = dir.path().to_owned();
    let daemon = {
        let api = api.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(2));
            std::fs::create_dir_all(&api).expect("mkdir");
            std::fs::write(api.join("late"), "last publish\n").expect("publish");
            drop(claim);
        })
    };
    let out = revert(&revert_options(&d)).await.expect("revert");
    daemon.join().expect("daemon");
    assert!(out.ends_with("reverted\n"), "{out}");
    assert!(!api.exists(), "a target recreated in place after revert");
    let kept = plan::backup_path(&d, BACKUP, "/etc/kubernetes/pki/certsync/apiserver");
    assert_eq!(
        std::fs::read(kept.join("late")).expect("the last publish, kept"),
        b"last publish\n"
    );
}

#[tokio::test]
async fn a_daemon_that_never_lets_go_of_its_targets_stops_revert_naming_it() {
    // The daemon outlives the wait (a kubelet that never stops it, a
    // certsync started by hand): revert gives up naming the process and
    // the target, and leaves the target where it is for the next run.
    let (dir, api, claim) = adopted_with_a_daemon();
    let d = dir.path().to_owned();
    let Err(err) = crate::kubeadm::revert_apply::claim_targets(
        &d,
        &all_targets(&d),
        std::time::Duration::from_millis(600),
    )
    .await
    else {
        panic!("revert waited past its limit and claimed the target");
    };
    let text = err.to_string();
    for said in [
        format!("(pid {})", std::process::id()),
        "still holds /etc/kubernetes/pki/certsync/apiserver".into(),
        "stop it, then run revert again".into(),
    ] {
        assert!(text.contains(&said), "{said:?} not in {text}");
    }
    assert!(api.is_dir(), "the target stays for the next revert");
    drop(claim);
    let out = revert(&revert_options(&d))
        .await
        .expect("revert once it let go");
    assert!(out.ends_with("reverted\n"), "{out}");
    assert!(!api.exists());
}

#[tokio::test]
async fn revert_removes_the_directories_adopt_made_once_empty() {
    // pki/certsync/ and pki/etcd/certsync/ are not left behind, empty:
    // each directory adopt made is removed once empty (dry run: said, not done); the one holding the
    // backups stays, saying so; a second revert has nothing to do.
    let made = [
        "/etc/kubernetes/pki/certsync",
        "/etc/kubernetes/pki/etcd/certsync",
    ];
    for purge in [false, true] {
        let dir = adopted_node();
        let d = dir.path();
        let out = dry_run(RevertOptions {
            purge,
            ..revert_options(d)
        })
        .await;
        for m in made {
            let said =
                format!("would remove {m}/ (adopt made it; empty once certsync's files are out)\n");
            assert!(out.contains(&said), "purge={purge}: {said:?} not in\n{out}");
        }
        let out = revert(&RevertOptions {
            purge,
            ..revert_options(d)
        })
        .await
        .expect("revert");
        for m in made {
            assert!(
                !host(d, m).exists(),
                "purge={purge}: {m} left behind:\n{out}"
            );
            let said = format!("removed {m}/ (adopt made it; now empty)\n");
            assert!(out.contains(&said), "purge={purge}: {said:?} not in\n{out}");
        }
        assert!(
            out.contains(
                "left /etc/kubernetes/certsync/ in place: it holds backup (private keys and \
                 admin.conf's credential: remove it once the node serves and they are no longer \
                 needed)\n"
            ),
            "{out}"
        );
        assert!(host(d, plan::BACKUPS).is_dir());
        assert!(out.ends_with("reverted\n"), "{out}");
        let again = revert(&revert_options(d)).await.expect("again");
        assert!(again.contains("nothing to do"), "{again}");
    }

    // Something else in one of them: left in place, naming what it holds.
    let dir = adopted_node();
    let d = dir.path();
    std::fs::write(host(d, "/etc/kubernetes/pki/certsync/stray"), "someone's\n").expect("write");
    let said = "/etc/kubernetes/pki/certsync/ in place: it holds stray\n";
    let out = dry_run(revert_options(d)).await;
    assert!(out.contains(&format!("would leave {said}")), "{out}");
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(out.contains(&format!("left {said}")), "{out}");
    assert_eq!(
        std::fs::read(host(d, "/etc/kubernetes/pki/certsync/stray")).expect("kept"),
        b"someone's\n"
    );
    assert!(!host(d, made[1]).exists(), "{out}");

    // Not root's: left in place.
    if !as_root("chown") {
        return;
    }
    let dir = adopted_node();
    let d = dir.path();
    std::os::unix::fs::chown(host(d, made[1]), Some(1000), Some(1000)).expect("chown");
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(
        out.contains(&format!(
            "left {}/ in place: owned by uid 1000, not root\n",
            made[1]
        )),
        "{out}"
    );
    assert!(host(d, made[1]).is_dir());
}

#[tokio::test]
async fn a_directory_revert_cannot_remove_never_stops_it() {
    // pki/etcd/certsync is a mount point on the host (EBUSY on rmdir):
    // removing it is tidying, not reverting, so revert finishes, leaving
    // it in place and saying why; a re-run would otherwise stop there
    // every time.
    if !as_root("mounting a tmpfs") {
        return;
    }
    let dir = adopted_node();
    let d = dir.path();
    let _mounted = Tmpfs::mount_over(&host(d, "/etc/kubernetes/pki/etcd/certsync"));
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(out.ends_with("reverted\n"), "{out}");
    assert!(
        out.contains("left /etc/kubernetes/pki/etcd/certsync/ in place: ") && out.contains("busy"),
        "{out}"
    );
    assert!(!host(d, "/etc/kubernetes/pki/certsync").exists(), "{out}");
}

#[test]
fn attack_an_empty_directory_is_never_removed_through_a_symlink() {
    // A compromised certsync container swaps pki/etcd for a symlink to a
    // host directory holding an empty `certsync` (or makes pki/certsync a
    // symlink to one): the directory is reached one name at a time
    // beneath a handle, never through a link, so the host's stays.
    let node = tempfile::tempdir().expect("node");
    let decoy = tempfile::tempdir().expect("decoy");
    let d = node.path();
    std::fs::create_dir_all(decoy.path().join("certsync")).expect("mkdir");
    std::fs::create_dir_all(d.join("pki")).expect("mkdir");
    std::os::unix::fs::symlink(decoy.path(), d.join("pki/etcd")).expect("symlink");
    std::os::unix::fs::symlink(decoy.path().join("certsync"), d.join("pki/certsync"))
        .expect("symlink");
    for m in [
        "/etc/kubernetes/pki/etcd/certsync",
        "/etc/kubernetes/pki/certsync",
    ] {
        let left = super::super::moves::remove_empty_dir(d, m, &[], false).expect(m);
        assert!(
            matches!(&left, super::super::moves::Left::Kept(why) if why.contains("symlink")),
            "{m}: {left:?}"
        );
    }
    assert!(
        decoy.path().join("certsync").is_dir(),
        "the host's directory was removed"
    );
}

/// certsync's pod manifest answering `/readyz` on `addr`, generation `g`.
fn pod_manifest(addr: std::net::SocketAddr, g: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: certsync, namespace: kube-system}}\n\
         spec:\n  containers:\n  - name: certsync\n    image: certsync\n    args:\n    \
         - run\n    - --generation={g}\n    - --admin-addr={addr}\n    readinessProbe:\n      \
         httpGet: {{host: \"{}\", port: {}, path: /readyz}}\n",
        addr.ip(),
        addr.port()
    )
}

#[tokio::test]
async fn attack_a_pod_that_keeps_running_gets_nothing_handed_back() {
    // The compromised container drops its locks and keeps running after
    // its manifest is taken out: revert waits for the pod itself, as adopt
    // does, and hands nothing back to a container that could still swap
    // kubeconfigs root's tools then run (before, the free locks were its
    // only wait).
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let dir = adopted_node();
    let d = dir.path().to_owned();
    let (listener, _) = bind().await;
    let addr = listener.local_addr().expect("addr");
    let _pod = Aborting(tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf).await;
            let _ = s
                .write_all(
                    b"HTTP/1.1 200 OK\r\nCertsync-Generation: g1\r\ncontent-length: 3\r\n\
                      connection: close\r\n\r\nok\n",
                )
                .await;
        }
    }));
    std::fs::write(host(&d, plan::POD), pod_manifest(addr, "g1")).expect("pod");
    let admin = host(&d, "/etc/kubernetes/admin.conf");
    let before = std::fs::read(&admin).expect("admin.conf");
    let err = revert(&revert_options(&d))
        .await
        .expect_err("revert handed back to a running pod");
    let KubeadmError::Revert(e) = &err else {
        panic!("{err}");
    };
    let RevertError::PartReverted { source } = e.as_ref() else {
        panic!("{err}");
    };
    assert!(
        matches!(source.as_ref(), KubeadmError::Revert(r)
            if matches!(r.as_ref(), RevertError::PodRunning { .. })),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&admin).expect("admin.conf"),
        before,
        "nothing of kubeadm's handed back"
    );
}

#[tokio::test]
async fn revert_moves_the_ca_bundles_so_the_node_can_be_adopted_again() {
    // kubeadm's manifests trust pki/ca.crt (the renewal) after revert; a
    // bundle left in pki/ was refused by the next adopt as one it had not
    // written (the record is in the backup by then).
    let dir = adopted_node();
    let d = dir.path().to_owned();
    let ca = std::fs::read(host(&d, "/etc/kubernetes/pki/ca.crt")).expect("ca.crt");
    let bundle = host(&d, manifest::CA_BUNDLE);
    std::fs::write(&bundle, &ca).expect("bundle");
    let out = revert(&revert_options(&d)).await.expect("revert");
    assert!(out.ends_with("reverted\n"), "{out}");
    assert!(!bundle.exists(), "the bundle left in pki/");
    assert_eq!(
        std::fs::read(plan::backup_path(&d, BACKUP, manifest::CA_BUNDLE)).expect("in the backup"),
        ca
    );
    crate::kubeadm::trust::plan(
        &d,
        crate::kubeadm::trust::Cas::read(&d).all().expect("the CAs"),
        std::time::SystemTime::now(),
        &Default::default(),
        false,
        None,
    )
    .expect("a first adopt again finds no bundle to refuse");
}

/// Attack (review of `moves::copy`): certsync's container (uid 0, no
/// capabilities) leaves in one of its targets a sparse file that costs it
/// no disk (`truncate -s 1G`), before revert starts: no race, the pod's
/// stop changes nothing. With the backup on another filesystem, revert
/// (root) reads the file whole into memory (`std::fs::read`, no size cap)
/// and writes every byte of it into the backup's filesystem (the one
/// holding `/etc/kubernetes/certsync`, often etcd's too), until it is full;
/// each re-run does it again and stops at the same file, so revert never
/// finishes. Nothing certsync writes in a target comes near a megabyte: a
/// file that large is refused (named) or moved without being blown up,
/// never copied whole.
#[tokio::test]
async fn attack_a_sparse_file_in_a_target_never_fills_the_backups_filesystem() {
    let Some((dir, _tmpfs)) = adopted_node_with_backup_on_tmpfs() else {
        return;
    };
    let d = dir.path();
    let api = host(d, "/etc/kubernetes/pki/certsync/apiserver");
    let sparse = std::fs::File::create(api.join("..planted")).expect("create");
    sparse.set_len(1 << 30).expect("truncate -s 1G");
    drop(sparse);
    let free = || {
        let v = nix::sys::statvfs::statvfs(&host(d, plan::BACKUPS)).expect("statvfs");
        v.blocks_free() as u64 * v.fragment_size() as u64
    };
    let before = free();
    let result = revert(&revert_options(d)).await;
    let used = before.saturating_sub(free());
    if let Err(e) = &result {
        // Refused by name, never skipped: the operator removes it and runs revert again.
        assert!(e.to_string().contains("..planted: larger than"), "{e}");
    } else {
        panic!("revert moved a 1 GiB file across filesystems");
    }
    assert!(
        used < 1 << 20,
        "revert wrote {used} bytes of a 0-block file into the backup's filesystem ({before} \
         free before); revert: {}",
        match &result {
            Ok(out) => out.clone(),
            Err(e) => e.to_string(),
        }
    );
}

/// Attack (low): which of certsync's targets revert moves is worked out
/// from which kubeconfigs exist now (`plan::certs`: `is_file` on
/// `/etc/kubernetes/*.conf`), and `/etc/kubernetes` is certsync's
/// container's to write. It deletes `scheduler.conf` (recorded: revert
/// hands kubeadm's copy back all the same) and revert skips the
/// `scheduler-client` target: it is neither claimed nor moved, and a live
/// `system:kube-scheduler` pair of the container's stays under
/// `pki/certsync/` while revert says `reverted`. A target adopt's record
/// implies is moved (or revert refuses), never skipped.
#[tokio::test]
async fn attack_a_kubeconfig_deleted_by_the_container_never_leaves_its_target_behind() {
    let dir = adopted_node();
    let d = dir.path();
    let target = "/etc/kubernetes/pki/certsync/scheduler-client";
    assert!(
        host(d, target).join("tls.crt").is_file(),
        "the target is there"
    );
    std::fs::remove_file(d.join("scheduler.conf")).expect("rm scheduler.conf");
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(
        !host(d, target).exists(),
        "revert left {target} in place and said:\n{out}"
    );
}

/// Attack (low): revert checks its targets for symlinks in its plan, while
/// certsync's pod still runs, then claims each by its path
/// (`claim_targets`: `is_dir` and `Writer::existing`, which follow a link)
/// once the pod is gone. A target that is no mount point of that pod (a
/// recorded client whose kubeconfig the container deleted before the last
/// adopt) is the container's to make a symlink in between: revert (root)
/// then writes its claim (`..owner`) into the host directory the link
/// names before `put_away`'s second look refuses. A path checked is never opened again by name.
#[tokio::test]
async fn attack_a_target_linked_after_the_plan_never_leads_revert_to_claim_a_host_directory() {
    let dir = adopted_node();
    let d = dir.path();
    let target = "/etc/kubernetes/pki/certsync/scheduler-client";
    let host_dir = tempfile::tempdir().expect("a host directory");
    let at = host(d, target);
    std::fs::remove_dir_all(&at).expect("rm target");
    std::os::unix::fs::symlink(host_dir.path(), &at).expect("link");
    let claimed = super::super::revert_apply::claim_targets(
        d,
        &[target.to_owned()],
        std::time::Duration::from_millis(300),
    )
    .await;
    let left: Vec<_> = std::fs::read_dir(host_dir.path())
        .expect("ls")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(
        left.is_empty(),
        "revert claimed {} through the link (claimed: {}), leaving {left:?}",
        host_dir.path().display(),
        claimed.is_ok()
    );
    let Err(KubeadmError::Revert(e)) = claimed else {
        panic!("claimed through a link");
    };
    assert!(
        matches!(&*e, RevertError::Planted(r) if matches!(**r, Refusal::Link { .. })),
        "{e}"
    );
}
