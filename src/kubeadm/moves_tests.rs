use super::{
    FileProblem, KubeadmError, Left, MOVE_LIMIT, RevertError, contained, copy, look, move_path,
    parent, reach, remove, remove_empty_dir,
};
use std::cell::RefCell;
use std::os::unix::fs::symlink;
use std::path::Path;

type Step = Option<Box<dyn FnOnce()>>;
thread_local! {
    /// A step a test runs once, between the look that judged an entry's type and the
    /// read of it.
    static BETWEEN_CHECK_AND_READ: RefCell<Step> = const { RefCell::new(None) };
}

/// Runs the step a test injected, once ([`copy`] and [`contained`] call it in tests only).
pub(super) fn between_check_and_read() {
    let step = BETWEEN_CHECK_AND_READ.with(|h| h.borrow_mut().take());
    if let Some(step) = step {
        step();
    }
}

/// [`copy`] of `from` to `to`, both in `d`, as a move to another filesystem makes it.
fn copy_at(d: &Path, from: &Path, to: &Path) -> std::io::Result<()> {
    let (out, name) = parent(d, from)?.expect("from's directory");
    let (into, to_name) = parent(d, to)?.expect("to's directory");
    let seen = look(&out, name, from.to_owned())?;
    copy(&seen, &into, to_name, &mut MOVE_LIMIT.clone())
}

/// [`contained`] of `from` in `to`, both in `d`, as a move that finds `to` asks it.
fn contained_at(d: &Path, from: &Path, to: &Path) -> std::io::Result<bool> {
    let (out, name) = parent(d, from)?.expect("from's directory");
    let (into, to_name) = parent(d, to)?.expect("to's directory");
    let seen = look(&out, name, from.to_owned())?;
    contained(&seen, &look(&into, to_name, to.to_owned())?)
}

/// Attack: certsync's container swaps its target (a directory) for a symlink to a host
/// directory between revert's look (a directory) and its read: copied (the backup on
/// another filesystem) or compared (a move that finds its backup there), what root
/// reads is the directory it judged, through the handle it judged, never the host
/// directory the link names: none of it lands in the backup, nor passes for the
/// target's content (revert would then remove the target).
#[test]
fn attack_a_directory_swapped_for_a_link_between_look_and_read_is_never_followed() {
    let d = tempfile::tempdir().unwrap();
    let [target, host, kept, copied, backup] =
        ["target", "host", "kept", "copy", "backup"].map(|n| d.path().join(n));
    for (at, bytes) in [(&target, "target"), (&host, "host"), (&backup, "host")] {
        std::fs::create_dir(at).unwrap();
        std::fs::write(at.join("tls.crt"), bytes).unwrap();
    }
    let swap = || {
        let (target, host, kept) = (target.clone(), host.clone(), kept.clone());
        let step = move || {
            std::fs::rename(&target, &kept).unwrap();
            std::os::unix::fs::symlink(&host, &target).unwrap();
        };
        BETWEEN_CHECK_AND_READ.with(|h| *h.borrow_mut() = Some(Box::new(step)));
    };
    let unswap = || {
        assert!(
            BETWEEN_CHECK_AND_READ.with(|h| h.borrow().is_none()),
            "the swap ran"
        );
        std::fs::remove_file(&target).unwrap();
        std::fs::rename(&kept, &target).unwrap();
    };
    swap();
    let result = copy_at(d.path(), &target, &copied);
    unswap();
    result.unwrap();
    assert_eq!(std::fs::read(copied.join("tls.crt")).unwrap(), b"target");

    swap();
    let result = contained_at(d.path(), &target, &backup);
    unswap();
    assert!(!result.unwrap(), "the host directory passed for the target");
    assert_eq!(std::fs::read(host.join("tls.crt")).unwrap(), b"host");
}

/// A copy keeps each entry's mode and owner, a symlink's too (changed by its name
/// beneath the directory held, never through it), and symlinks as symlinks.
#[test]
fn a_copy_keeps_modes_owners_and_symlinks() {
    use std::os::unix::fs::{MetadataExt as _, PermissionsExt};
    let d = tempfile::tempdir().unwrap();
    let (from, to) = (d.path().join("from"), d.path().join("to"));
    std::fs::create_dir(&from).unwrap();
    std::fs::write(from.join("tls.key"), "key").unwrap();
    std::os::unix::fs::symlink("tls.key", from.join("link")).unwrap();
    let mode = |p: &Path, m| std::fs::set_permissions(p, PermissionsExt::from_mode(m));
    mode(&from, 0o750).unwrap();
    mode(&from.join("tls.key"), 0o640).unwrap();
    let root = nix::unistd::geteuid().is_root();
    if root {
        for p in [from.clone(), from.join("tls.key"), from.join("link")] {
            std::os::unix::fs::lchown(p, Some(1234), Some(4321)).unwrap();
        }
    }
    copy_at(d.path(), &from, &to).unwrap();
    for (name, m) in [("", 0o750), ("tls.key", 0o640)] {
        let (a, b) = (from.join(name), to.join(name));
        let (a, b) = (a.symlink_metadata().unwrap(), b.symlink_metadata().unwrap());
        assert_eq!(
            (b.mode() & 0o7777, b.uid(), b.gid()),
            (m, a.uid(), a.gid()),
            "{name}"
        );
    }
    let (a, b) = (from.join("link"), to.join("link"));
    assert_eq!(std::fs::read_link(&b).unwrap(), Path::new("tls.key"));
    let (a, b) = (a.symlink_metadata().unwrap(), b.symlink_metadata().unwrap());
    assert_eq!((b.uid(), b.gid()), (a.uid(), a.gid()));
    if root {
        assert_eq!((b.uid(), b.gid()), (1234, 4321));
    }
}

/// Attack: a symlink on the way to what a move or a removal names (the container
/// made one of the directories above a target a link to a host directory) is refused,
/// never followed: nothing of the host directory is moved or removed.
#[test]
fn attack_a_symlink_above_what_is_moved_or_removed_is_never_followed() {
    let d = tempfile::tempdir().unwrap();
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("x"), "host").unwrap();
    std::fs::create_dir(d.path().join("backup")).unwrap();
    std::os::unix::fs::symlink(host.path(), d.path().join("link")).unwrap();
    let (from, to) = (d.path().join("link/x"), d.path().join("backup/x"));
    let e = move_path(d.path(), &from, &to);
    assert!(
        matches!(&e, Err(RevertError::Move { source, .. })
            if source.to_string().contains("is a symlink, not followed")),
        "{e:?}"
    );
    let e = remove(d.path(), &from).expect_err("removed through a link");
    assert!(e.to_string().contains("is a symlink, not followed"), "{e}");
    let e = move_path(d.path(), &to, &from);
    assert!(matches!(&e, Err(RevertError::Move { .. })), "{e:?}");
    assert_eq!(std::fs::read(host.path().join("x")).unwrap(), b"host");
    assert!(!to.exists());
}

/// Hard links to one file multiply what the container spent into the backup's
/// filesystem; empty files, its inodes: each refused once past what one move copies.
#[test]
fn attack_hard_links_and_empty_files_never_copy_past_one_moves_limit() {
    let d = tempfile::tempdir().unwrap();
    let (linked, empty) = (d.path().join("linked"), d.path().join("empty"));
    std::fs::create_dir(&linked).unwrap();
    std::fs::write(linked.join("real"), vec![0u8; 900 << 10]).unwrap();
    for n in 0..20 {
        std::fs::hard_link(linked.join("real"), linked.join(format!("{n}"))).unwrap();
    }
    std::fs::create_dir(&empty).unwrap();
    for n in 0..=MOVE_LIMIT.1 {
        std::fs::write(empty.join(format!("{n}")), b"").unwrap();
    }
    for from in [linked, empty] {
        let to = d.path().join("copy");
        let e = copy_at(d.path(), &from, &to).expect_err("copied past the limit");
        assert!(e.to_string().contains("one move copies"), "{e}");
        remove(d.path(), &to).unwrap();
    }
    // Under the limit: copied whole.
    let small = d.path().join("small");
    std::fs::create_dir(&small).unwrap();
    std::fs::write(small.join("tls.crt"), b"certificate").unwrap();
    copy_at(d.path(), &small, &d.path().join("copy")).unwrap();
    assert_eq!(
        std::fs::read(d.path().join("copy/tls.crt")).unwrap(),
        b"certificate"
    );
}

/// A move that finds its target there already finishes an earlier
/// attempt only when the target holds the original; two that differ
/// are refused, both named, neither touched. A directory to tidy that
/// is not below /etc/kubernetes is refused, not looked at.
#[test]
fn a_move_onto_a_different_file_is_refused_naming_both() {
    let d = tempfile::tempdir().unwrap();
    let (from, to) = (d.path().join("from"), d.path().join("to"));
    std::fs::write(&from, "new").unwrap();
    std::fs::write(&to, "other").unwrap();
    let e = move_path(d.path(), &from, &to);
    assert!(
        matches!(&e, Err(RevertError::Differ { from: f, to: t }) if *f == from && *t == to),
        "{e:?}"
    );
    assert_eq!(std::fs::read(&from).unwrap(), b"new");
    assert_eq!(std::fs::read(&to).unwrap(), b"other");

    std::fs::write(&to, "new").unwrap();
    move_path(d.path(), &from, &to).unwrap();
    assert!(!from.exists());
    assert_eq!(std::fs::read(&to).unwrap(), b"new");

    let e = move_path(d.path(), &from, &d.path().join("none/to"));
    assert!(
        matches!(&e, Err(RevertError::Move { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound),
        "{e:?}"
    );

    let e = remove_empty_dir(d.path(), "/etc/other/x", &[], true);
    assert!(
        matches!(&e, Err(KubeadmError::Revert(r))
            if matches!(&**r, RevertError::NotBelow { node_path } if node_path == "/etc/other/x")),
        "{e:?}"
    );
    assert_eq!(
        remove_empty_dir(d.path(), "/etc/kubernetes/none", &[], true).unwrap(),
        Left::Absent
    );
}

/// What revert's symlink check and every handle below
/// `/etc/kubernetes` rest on: a symlink at any name on the way, the
/// last included, is named by its node path and never followed; a
/// name absent, a file on the way and a path outside are told apart.
#[test]
fn a_symlink_at_each_name_below_etc_kubernetes_is_named_never_followed() {
    let node = "/etc/kubernetes/pki/certsync/apiserver/tls.crt";
    for (i, at) in [
        "pki",
        "pki/certsync",
        "pki/certsync/apiserver",
        "pki/certsync/apiserver/tls.crt",
    ]
    .into_iter()
    .enumerate()
    {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("pki/certsync/apiserver");
        std::fs::create_dir_all(&real).unwrap();
        std::fs::write(real.join("tls.crt"), "x").unwrap();
        let decoy = d.path().join(format!("decoy{i}"));
        std::fs::rename(d.path().join(at), &decoy).unwrap();
        symlink(&decoy, d.path().join(at)).unwrap();
        match reach(d.path(), node) {
            Err(FileProblem::Link(got)) => assert_eq!(got, format!("/etc/kubernetes/{at}")),
            other => panic!("{at}: {other:?}"),
        }
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("pki")).unwrap();
    std::fs::write(d.path().join("pki/f"), "x").unwrap();
    assert!(matches!(
        reach(d.path(), "/etc/kubernetes/pki/none/x"),
        Err(FileProblem::Missing)
    ));
    assert!(matches!(
        reach(d.path(), "/etc/kubernetes/pki/f/x"),
        Err(FileProblem::NotDir(_))
    ));
    assert!(matches!(
        reach(d.path(), "/etc/kubernetesX/pki"),
        Err(FileProblem::Way(_))
    ));
    assert!(reach(d.path(), "/etc/kubernetes/pki/f").is_ok());
}
