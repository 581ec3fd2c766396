//! Moving certsync's files into a backup that may be on another filesystem (EXDEV),
//! resumably: the copy is made under a temporary name, fsynced, renamed into place, and
//! only then is the original removed; the next attempt finishes a move that stopped after
//! the copy. And the directories adopt made, removed once the moves leave them empty.

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

use super::error::{FileProblem, RevertError};
use crate::beneath::{self, PathError};

/// Moves `from` (a file, symlink or directory tree) to `to`, whose parent exists.
pub fn move_path(from: &Path, to: &Path) -> Result<(), RevertError> {
    let at = |step: &'static str| {
        move |source| RevertError::Move {
            from: from.to_owned(),
            to: to.to_owned(),
            step,
            source,
        }
    };
    if std::fs::symlink_metadata(to).is_ok() {
        return match contained(from, to) {
            Ok(true) => remove(from).map_err(at("removing the original: ")),
            Ok(false) => Err(RevertError::Differ {
                from: from.to_owned(),
                to: to.to_owned(),
            }),
            Err(e) => Err(at("")(e)),
        };
    }
    match std::fs::rename(from, to) {
        Ok(()) => sync_parent(to).map_err(at("")),
        Err(e) if e.raw_os_error() == Some(nix::libc::EXDEV) => {
            // `.NAME.partial` beside `to`: where a copy is made before it is complete.
            let name = to.file_name().unwrap_or_default().to_string_lossy();
            let partial = to.with_file_name(format!(".{name}.partial"));
            if std::fs::symlink_metadata(&partial).is_ok() {
                remove(&partial).map_err(at("removing an earlier partial copy: "))?;
            }
            let mut left = MOVE_LIMIT;
            copy(from, &partial, &mut left).map_err(at("another filesystem; copying: "))?;
            std::fs::rename(&partial, to).map_err(at(""))?;
            sync_parent(to).map_err(at(""))?;
            let copied =
                "copied, but removing the original failed (a second attempt finishes it): ";
            remove(from).map_err(at(copied))?;
            sync_parent(from).map_err(at(""))
        }
        Err(e) => Err(at("")(e)),
    }
}

/// Nothing certsync writes in a target comes near this: a larger file (a sparse one its
/// container planted costs it nothing) is refused, named, never copied whole into memory
/// and the backup's filesystem (often etcd's), where it would stop every re-run of revert.
const COPY_LIMIT: u64 = 1 << 20;

/// What one move copies at the most, in bytes and entries: a target holds a few small
/// revisions; hard links to one file, or a million empty ones, would multiply what the
/// container spent on its own filesystem into the backup's.
const MOVE_LIMIT: (u64, usize) = (16 << 20, 10_000);

/// `from`'s bytes, opened as the regular file it is (no link as its last name, never
/// blocking on a FIFO), at most [`COPY_LIMIT`].
fn read_limited(from: &Path) -> std::io::Result<Vec<u8>> {
    let file = beneath::open_file(from, beneath::Links::RefuseLast);
    file.and_then(|f| beneath::read_capped(f, from, COPY_LIMIT))
        .map_err(std::io::Error::other)
}

/// Copies `from` to `to` keeping modes, owners and symlinks, fsynced, within what is `left`
/// of [`MOVE_LIMIT`]. Anything but a file, symlink or directory is refused, never skipped.
fn copy(from: &Path, to: &Path, left: &mut (u64, usize)) -> std::io::Result<()> {
    let over = || {
        let (mib, entries) = (MOVE_LIMIT.0 >> 20, MOVE_LIMIT.1);
        let why = "certsync writes far less in a target: inspect it, remove what is not its";
        std::io::Error::other(format!(
            "{}: past the {mib} MiB or {entries} entries one move copies ({why})",
            from.display()
        ))
    };
    left.1 = left.1.checked_sub(1).ok_or_else(over)?;
    let meta = std::fs::symlink_metadata(from)?;
    #[cfg(test)]
    move_tests::between_check_and_read();
    let kind = meta.file_type();
    if kind.is_symlink() {
        std::os::unix::fs::symlink(std::fs::read_link(from)?, to)?;
    } else if kind.is_dir() {
        std::fs::create_dir(to)?;
        for e in std::fs::read_dir(from)? {
            let e = e?;
            copy(&e.path(), &to.join(e.file_name()), left)?;
        }
        std::fs::set_permissions(to, std::fs::Permissions::from_mode(meta.mode() & 0o7777))?;
        std::fs::File::open(to)?.sync_all()?;
    } else if kind.is_file() {
        let bytes = read_limited(from)?;
        left.0 = left.0.checked_sub(bytes.len() as u64).ok_or_else(over)?;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(to)?;
        f.write_all(&bytes)?;
        f.set_permissions(std::fs::Permissions::from_mode(meta.mode() & 0o7777))?;
        f.sync_all()?;
    } else {
        return Err(std::io::Error::other(format!(
            "{}: not a file, symlink or directory",
            from.display()
        )));
    }
    std::os::unix::fs::lchown(to, Some(meta.uid()), Some(meta.gid()))
}

/// Whether everything left of `from` is in `to` with the same content.
fn contained(from: &Path, to: &Path) -> std::io::Result<bool> {
    let Ok(meta) = std::fs::symlink_metadata(from) else {
        return Ok(true);
    };
    let Ok(there) = std::fs::symlink_metadata(to) else {
        return Ok(false);
    };
    #[cfg(test)]
    move_tests::between_check_and_read();
    let (a, b) = (meta.file_type(), there.file_type());
    if a.is_symlink() {
        return Ok(b.is_symlink() && std::fs::read_link(from)? == std::fs::read_link(to)?);
    }
    if a.is_dir() {
        if !b.is_dir() {
            return Ok(false);
        }
        for e in std::fs::read_dir(from)? {
            let e = e?;
            // Lock state: revert's own claim rewrote `..owner` since.
            if crate::writer::LOCK_FILES
                .iter()
                .any(|l| e.file_name() == *l)
            {
                continue;
            }
            if !contained(&e.path(), &to.join(e.file_name()))? {
                return Ok(false);
            }
        }
        return Ok(true);
    }
    Ok(a.is_file() && b.is_file() && read_limited(from)? == read_limited(to)?)
}

/// Removes `path` (a file, symlink or directory tree), never following a link.
pub fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
    }
}

fn sync_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(p) => std::fs::File::open(p)?.sync_all(),
        None => Ok(()),
    }
}

/// What became (in a dry run: would become) of a directory adopt made.
#[derive(Debug, PartialEq, Eq)]
pub enum Left {
    Removed,
    Absent,
    Kept(String),
}

/// Removes the directory at `node_path` if it is a directory, root's, and empty but for the
/// names in `moving` (what revert is about to move out of it). Reached one name at a time
/// without following a link, judged on its own handle and removed by `unlinkat` beneath
/// its parent's: a symlink a compromised certsync container swapped in never leads revert
/// (root) to remove a directory elsewhere. With `dry`, only says what it would do.
pub fn remove_empty_dir(
    dir: &Path,
    node_path: &str,
    moving: &[String],
    dry: bool,
) -> Result<Left, RevertError> {
    use cap_std::fs::MetadataExt as _;
    let named = |e: std::io::Error| RevertError::At {
        path: node_path.into(),
        problem: Box::new(e.into()),
    };
    let last = match node_path.rsplit_once('/') {
        Some((up, last)) if up.starts_with(super::paths::KUBEADM_DIR) && !last.is_empty() => last,
        _ => {
            return Err(RevertError::NotBelow {
                node_path: node_path.to_owned(),
            });
        }
    };
    let handles = reach_dir(dir, node_path).and_then(|w| Ok((w.dir()?, w.parent_dir()?)));
    let (opened, parent) = match handles {
        Ok(both) => both,
        Err(FileProblem::Missing) => return Ok(Left::Absent),
        Err(FileProblem::Way(e)) => return Err(RevertError::Way(e)),
        Err(b) => return Ok(Left::Kept(b.to_string())),
    };
    let uid = opened.dir_metadata().map_err(named)?.uid();
    if uid != 0 {
        return Ok(Left::Kept(format!("owned by uid {uid}, not root")));
    }
    let mut held = Vec::new();
    for e in opened.entries().map_err(named)? {
        let name = e.map_err(named)?.file_name();
        let name = name.to_string_lossy();
        if !moving.iter().any(|m| *m == name) {
            held.push(crate::escape(&name).into_owned());
        }
    }
    if !held.is_empty() {
        held.sort();
        return Ok(Left::Kept(format!("it holds {}", held.join(", "))));
    }
    if dry {
        return Ok(Left::Removed);
    }
    match parent.remove_dir(last) {
        Ok(()) => {
            // The handle may be O_PATH (no fsync): "." opened for reading.
            parent.open(".").and_then(|d| d.sync_all()).map_err(named)?;
            Ok(Left::Removed)
        }
        Err(e) if e.raw_os_error() == Some(nix::libc::ENOTEMPTY) => Ok(Left::Kept(
            "something was put in it while revert ran".into(),
        )),
        Err(e) => Err(named(e)),
    }
}

/// The directory at `node_dir`, reached as [`reach`] does: a handle to read and write
/// beneath, never a path a symlink planted on the way leads elsewhere.
pub fn open_beneath(dir: &Path, node_dir: &str) -> Result<cap_std::fs::Dir, FileProblem> {
    reach_dir(dir, node_dir)?.dir().map_err(FileProblem::Way)
}

/// [`reach`], refused unless it is a directory.
fn reach_dir(dir: &Path, node_dir: &str) -> Result<beneath::Walked, FileProblem> {
    let walked = reach(dir, node_dir)?;
    let not_dir = || FileProblem::NotDir(node_dir.to_owned());
    walked.is_dir().then_some(walked).ok_or_else(not_dir)
}

/// `node_path` looked at again just before root claims, moves or purges it: a symlink the
/// container made since the plan's look (it would lead root into the host directory it
/// names), or a way not walked, is refused; `None`: absent, or a file on its way.
pub fn reach_again(dir: &Path, node_path: &str) -> Result<Option<beneath::Walked>, RevertError> {
    let path = node_path.to_owned();
    match reach(dir, node_path) {
        Ok(walked) => Ok(Some(walked)),
        Err(FileProblem::Missing | FileProblem::NotDir(_)) => Ok(None),
        Err(FileProblem::Link(link)) => Err(RevertError::SymlinkNow { link, path }),
        Err(e) => Err(RevertError::At {
            path: path.into(),
            problem: Box::new(e),
        }),
    }
}

/// What `node_path` names, reached from `dir` one name at a time, no symlink followed, the
/// last name included: certsync's container may plant one anywhere below /etc/kubernetes.
pub fn reach(dir: &Path, node_path: &str) -> Result<beneath::Walked, FileProblem> {
    use nix::fcntl::OFlag;
    let top = Path::new(super::paths::KUBEADM_DIR);
    let rel = node_path
        .strip_prefix(super::paths::KUBEADM_DIR)
        .filter(|r| r.is_empty() || r.starts_with('/'))
        .ok_or_else(|| {
            FileProblem::Way(PathError::Escapes {
                what: "a path",
                beneath: top.into(),
            })
        })?;
    let held = nix::fcntl::open(
        dir,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| {
        FileProblem::Way(PathError::Io {
            path: top.into(),
            source: e.into(),
        })
    })?;
    let start = beneath::Start::Beneath(std::os::fd::AsFd::as_fd(&held), top);
    let rel = Path::new(rel.trim_start_matches('/'));
    beneath::walk(start, rel, beneath::Links::Refuse, &mut |_| Ok(())).map_err(|e| match e {
        e if e.is_not_found() => FileProblem::Missing,
        PathError::Link { path } => FileProblem::Link(path.display().to_string()),
        PathError::NotDir { path } => FileProblem::NotDir(path.display().to_string()),
        e => FileProblem::Way(e),
    })
}

#[cfg(test)]
mod reach_tests {
    use super::{FileProblem, reach};
    use std::os::unix::fs::symlink;

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
}

#[cfg(test)]
mod move_tests {
    use super::{
        Left, MOVE_LIMIT, RevertError, contained, copy, move_path, remove, remove_empty_dir,
    };
    use std::cell::RefCell;

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
        let result = copy(&target, &copied, &mut MOVE_LIMIT.clone());
        unswap();
        result.unwrap();
        assert_eq!(std::fs::read(copied.join("tls.crt")).unwrap(), b"target");

        swap();
        let result = contained(&target, &backup);
        unswap();
        assert!(!result.unwrap(), "the host directory passed for the target");
        assert_eq!(std::fs::read(host.join("tls.crt")).unwrap(), b"host");
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
            let e = copy(&from, &to, &mut MOVE_LIMIT.clone()).expect_err("copied past the limit");
            assert!(e.to_string().contains("one move copies"), "{e}");
            remove(&to).unwrap();
        }
        // Under the limit: copied whole.
        let small = d.path().join("small");
        std::fs::create_dir(&small).unwrap();
        std::fs::write(small.join("tls.crt"), b"certificate").unwrap();
        copy(&small, &d.path().join("copy"), &mut MOVE_LIMIT.clone()).unwrap();
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
        let e = move_path(&from, &to);
        assert!(
            matches!(&e, Err(RevertError::Differ { from: f, to: t }) if *f == from && *t == to),
            "{e:?}"
        );
        assert_eq!(std::fs::read(&from).unwrap(), b"new");
        assert_eq!(std::fs::read(&to).unwrap(), b"other");

        std::fs::write(&to, "new").unwrap();
        move_path(&from, &to).unwrap();
        assert!(!from.exists());
        assert_eq!(std::fs::read(&to).unwrap(), b"new");

        let e = move_path(&from, &d.path().join("none/to"));
        assert!(
            matches!(&e, Err(RevertError::Move { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound),
            "{e:?}"
        );

        let e = remove_empty_dir(d.path(), "/etc/other/x", &[], true);
        assert!(
            matches!(&e, Err(RevertError::NotBelow { node_path }) if node_path == "/etc/other/x"),
            "{e:?}"
        );
        assert_eq!(
            remove_empty_dir(d.path(), "/etc/kubernetes/none", &[], true).unwrap(),
            Left::Absent
        );
    }
}
