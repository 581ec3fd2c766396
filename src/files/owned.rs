//! Reading what steers root certsync, and judging the paths it writes
//! later ([`Trust`]): on the descriptors opened (a file read) or by path (a
//! target written later).

use std::os::fd::AsFd as _;
use std::path::Path;

use crate::beneath::{self, Entry, Links, Owners, PathError, ReadOnly, Start, Trust};

/// Whether only root (or certsync's user) can change what `path` names:
/// the file, if it exists, and every directory above it, as written and
/// where symlinks lead, owned by root or that user and writable by no one
/// else (as ssh's StrictModes: whoever can rename an entry on the way can
/// swap what is read or written). A sticky directory such as /tmp is no
/// exception: once a cleaner removes root's entry, anyone may make it
/// again. A missing path is judged by its nearest existing ancestor.
pub fn only_root_may_change(path: &Path) -> Result<(), PathError> {
    guard(path, false)
}

/// Reads a file that steers root certsync (a bearer token, a config file,
/// a kubeconfig and the files it names): walked one name at a time from
/// `/`, each name opened beneath the directory before it and judged on its
/// descriptor ([`OWNED_WAY`]), never opened again by path (a name swapped
/// meanwhile is never what is read); then the file is a regular file owned
/// by root or certsync's user, writable by no one else, with one link (a
/// second name may be another user's), at most `limit` bytes. What is
/// wrong with the file itself is said without its path (callers name it).
pub fn read_owned(path: &Path, limit: u64) -> Result<Vec<u8>, PathError> {
    // A FIFO or device says what it is; this `stat` only words a refusal.
    if let Ok(st) = nix::sys::stat::stat(path)
        && let Some(what) = beneath::not_regular(&st)
    {
        let path = path.to_owned();
        return Err(PathError::NotRegular { path, what });
    }
    let absolute = std::path::absolute(path).map_err(PathError::WorkingDirectory)?;
    let walked = beneath::walk(Start::Path, &absolute, Links::Follow, &mut |e| {
        OWNED_WAY.judge(e)
    })?;
    // The file itself, as walked to (the very inode read): no exception
    // at all.
    let entry = Entry::of(path.to_owned(), walked.fd.as_fd(), &walked.st, false);
    Trust::STRICT
        .judge(&entry)
        .map_err(|_| PathError::FileChangeable {
            uid: entry.uid,
            mode: entry.mode,
        })?;
    if walked.st.st_nlink > 1 {
        return Err(PathError::HardLink {
            links: walked.st.st_nlink,
        });
    }
    walked.read(limit)
}

/// A directory root writes into by name, walked and judged by `trust`,
/// itself included: whoever could rename or re-link a directory on the way
/// would choose where root writes. [`OWNED_WAY`] (as [`read_owned`] judges
/// the way to a file) for a kubeadm node's files and the status textfile;
/// [`Trust::STRICT`] ([`only_root_may_change`]'s rule: no sticky directory
/// or read-only mount either) for a directory root replaces files in with
/// no second look (`update-pair=`, `update-kubeconfig=`).
pub fn owned_dir(path: &Path, trust: Trust) -> Result<cap_std::fs::Dir, PathError> {
    let absolute = std::path::absolute(path).map_err(PathError::WorkingDirectory)?;
    walk_judged(&absolute, trust)?.dir()
}

/// `path` walked from `/` with every entry on the way, and the last,
/// judged by `trust` on its descriptor.
fn walk_judged(path: &Path, trust: Trust) -> Result<beneath::Walked, PathError> {
    let walked = beneath::walk(Start::Path, path, Links::Follow, &mut |e| trust.judge(e))?;
    trust.judge(&Entry::held(&walked.shown, walked.fd.as_fd())?)?;
    Ok(walked)
}

/// The way to a file [`read_owned`] reads: every directory and symlink
/// root's or certsync's user's. A root-owned sticky directory (/tmp:
/// others may not rename or remove root's entries) and a directory on a
/// read-only mount (kubelet's ConfigMap and Secret volumes, their roots
/// 0777 or 1777) count as not writable; the file is judged at each read.
pub const OWNED_WAY: Trust = Trust {
    owners: Owners::RootOrMe,
    writable_ok: false,
    sticky_root_ok: true,
    read_only: ReadOnly::Writable,
    volume_root_ok: false,
};

/// A file that steers certsync: through [`read_owned`] as root (who would
/// otherwise act on what another user wrote: map a root-only directory to
/// their target, send root's token to their server); as another user,
/// [`beneath::read_file`] (the kernel already limits what it may read).
pub fn read_steering(path: &Path, limit: u64) -> Result<Vec<u8>, PathError> {
    if nix::unistd::geteuid().is_root() {
        read_owned(path, limit)
    } else {
        beneath::read_file(path, limit)
    }
}

/// A file that steers certsync but may not exist yet (a CA certificate
/// certsync publishes later), judged at start as root: if it exists, as
/// [`read_steering`] reads it; if not, the directories it will appear in
/// ([`only_root_may_change`]: whoever may write there chooses what
/// appears). Every later read goes through [`read_steering`] again.
pub fn steering_or_absent(path: &Path, limit: u64) -> Result<(), PathError> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => only_root_may_change(path),
        _ => read_owned(path, limit).map(drop),
    }
}

/// [`only_root_may_change`], except that a volume's root every container
/// of the pod may write is accepted (kubelet makes an emptyDir 0777, not
/// sticky; `/certs/web` lies inside one by design). Sticky directories
/// (/tmp), one another user owns and one writable by others that is no
/// mount point stay refused. For targets of mappings that do not issue from
/// a CA on the node only: never above a source or a pidfile, which are read.
pub fn no_other_user_may_recreate(path: &Path) -> Result<(), PathError> {
    guard(path, true)
}

/// A target directory itself, where it exists (where its links lead):
/// root's or certsync's user's and writable by its owner only, whatever
/// `owner=`/`group=` say (they are for the files), with no exception for a
/// volume's root: whoever may write in it may plant `..pin`, `..data`,
/// `..history` or a revision for certsync to act on. A missing target is
/// made by certsync, root's and 0755.
pub fn no_other_user_may_write(target: &Path) -> Result<(), PathError> {
    let Ok(m) = std::fs::metadata(target) else {
        return Ok(());
    };
    let e = Entry::from_metadata(target, &m);
    Trust::STRICT.judge(&e).map_err(|_| PathError::Target {
        target: target.to_owned(),
        uid: e.uid,
        mode: e.mode,
    })
}

/// The check of [`only_root_may_change`] (with `volume_roots`, of
/// [`no_other_user_may_recreate`]): the nearest existing part of `path`
/// walked as [`read_owned`] walks it, and judged. Sticky directories and
/// read-only mounts stay refused: a target written later has no second
/// look at an entry a user made again after a cleaner removed root's.
fn guard(path: &Path, volume_roots: bool) -> Result<(), PathError> {
    let trust = Trust {
        volume_root_ok: volume_roots,
        ..Trust::STRICT
    };
    let absolute = std::path::absolute(path).map_err(PathError::WorkingDirectory)?;
    match absolute.ancestors().find(|p| p.symlink_metadata().is_ok()) {
        Some(existing) => walk_judged(existing, trust).map(drop),
        None => Ok(()),
    }
}

#[cfg(test)]
mod guard_tests {
    use super::only_root_may_change;
    use crate::beneath::PathError;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn every_ancestor_and_symlink_hop_must_be_root_only() {
        let d = tempfile::tempdir().unwrap();
        let ok = d.path().join("ok");
        std::fs::create_dir(&ok).unwrap();
        std::fs::write(ok.join("f"), "x").unwrap();
        only_root_may_change(&ok.join("f")).unwrap();
        only_root_may_change(&ok.join("not/yet/there")).unwrap();

        let open = d.path().join("open");
        std::fs::create_dir_all(open.join("deep")).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = only_root_may_change(&open.join("deep/f"));
        assert!(
            matches!(&e, Err(PathError::Changeable { path, mode: 0o777, .. })
                if *path == open),
            "{e:?}"
        );

        // A link in a root-only place into an open directory, and the other
        // way round.
        std::os::unix::fs::symlink(open.join("deep"), ok.join("link")).unwrap();
        assert!(only_root_may_change(&ok.join("link/f")).is_err());
        std::os::unix::fs::symlink(&ok, open.join("back")).unwrap();
        assert!(only_root_may_change(&open.join("back/f")).is_err());

        std::fs::set_permissions(ok.join("f"), std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(only_root_may_change(&ok.join("f")).is_err());

        // Sticky, as /tmp: root's entries stay, but a removed one may be
        // made again by anyone.
        let sticky = d.path().join("sticky");
        std::fs::create_dir_all(sticky.join("root-made")).unwrap();
        std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = only_root_may_change(&sticky.join("root-made/t"));
        assert!(
            matches!(&e, Err(PathError::Changeable { path, mode: 0o1777, .. })
                if *path == sticky),
            "{e:?}"
        );
    }

    /// A file read now and judged again at each read (a kubeconfig in
    /// `mktemp -d /tmp/...`) may sit below a root-owned sticky directory:
    /// others cannot rename root's entries there. An entry of another
    /// user's below it, or their symlink, is still refused.
    #[test]
    fn a_read_may_pass_a_sticky_directory_through_roots_entries_only() {
        use std::os::unix::fs::PermissionsExt as _;
        if !nix::unistd::geteuid().is_root() {
            return; // needs root to make another user's entries
        }
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let sticky = d.path().join("sticky");
        std::fs::create_dir_all(sticky.join("root-made")).unwrap();
        std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let file = sticky.join("root-made/kubeconfig");
        std::fs::write(&file, b"x").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(super::read_owned(&file, 10).unwrap(), b"x");
        // Not for a target, which is written with no second look.
        assert!(only_root_may_change(&file).is_err());

        let user = sticky.join("user-made");
        std::fs::create_dir(&user).unwrap();
        std::os::unix::fs::lchown(&user, Some(65534), Some(65534)).unwrap();
        std::fs::write(user.join("kubeconfig"), b"x").unwrap();
        let e = super::read_owned(&user.join("kubeconfig"), 10);
        assert!(
            matches!(&e, Err(PathError::Changeable { uid: 65534, .. })),
            "{e:?}"
        );

        let link = sticky.join("link");
        std::os::unix::fs::symlink(sticky.join("root-made"), &link).unwrap();
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
        let e = super::read_owned(&link.join("kubeconfig"), 10);
        assert!(
            matches!(&e, Err(PathError::LinkChangeable { uid: 65534, .. })),
            "{e:?}"
        );
    }
}

#[cfg(test)]
mod race_tests {
    use std::os::unix::fs::PermissionsExt as _;

    /// What `read_owned` judged is what it reads. A step
    /// injected between its judging and its open replaces a directory on
    /// the way with a link to another directory (another user's, when the
    /// test runs as root) holding a different file of root's: the read
    /// still gives the file judged, never the other one.
    #[test]
    fn a_path_swapped_between_check_and_open_is_not_read() {
        let d = tempfile::tempdir().unwrap();
        let mode = |p: &std::path::Path, m| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(d.path(), 0o755);
        let (cfg, other) = (d.path().join("cfg"), d.path().join("other"));
        for (dir, text) in [(&cfg, "judged"), (&other, "other")] {
            std::fs::create_dir(dir).unwrap();
            mode(dir, 0o755);
            std::fs::write(dir.join("kubeconfig"), text).unwrap();
            mode(&dir.join("kubeconfig"), 0o600);
        }
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::lchown(&other, Some(65534), Some(65534)).unwrap();
        }
        let old = d.path().join("cfg.old");
        let (from, to) = (cfg.clone(), other.clone());
        crate::beneath::BETWEEN_CHECK_AND_OPEN.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || {
                std::fs::rename(&from, &old).unwrap();
                std::os::unix::fs::symlink(&to, &from).unwrap();
            }))
        });
        let got = super::read_owned(&cfg.join("kubeconfig"), 100);
        assert_eq!(
            got.map_err(|e| e.to_string()),
            Ok(b"judged".to_vec()),
            "read through the swapped path"
        );
        assert!(
            crate::beneath::BETWEEN_CHECK_AND_OPEN.with(|h| h.borrow().is_none()),
            "the swap ran"
        );
    }
}
