//! Moving certsync's files into a backup that may be on another filesystem
//! than `/etc/kubernetes/pki` (a backup directory that is its own mount:
//! `rename` answers EXDEV). Either way the move is resumable: the copy is
//! made under a temporary name, fsynced, renamed into place, and only then
//! is the original removed; a move that stopped after the copy (a crash, an
//! error removing) is finished by the next attempt, which finds the
//! complete copy and what is left of the original inside it. And the
//! directories adopt made, removed once the moves leave them empty.

use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use crate::beneath::{self, PathError};

/// Moves `from` (a file, symlink or directory tree) to `to`, whose parent
/// exists. `Err` names both paths.
pub fn move_path(from: &Path, to: &Path) -> Result<(), String> {
    let named = |what: &str, e: &dyn std::fmt::Display| {
        format!("move {} to {}: {what}{e}", from.display(), to.display())
    };
    if std::fs::symlink_metadata(to).is_ok() {
        // A previous attempt copied everything and stopped before the
        // original was gone: finish it, unless the two differ.
        return match contained(from, to) {
            Ok(true) => remove(from).map_err(|e| named("removing the original: ", &e)),
            Ok(false) => Err(named(
                "",
                &"both exist and differ; move one of them away by hand",
            )),
            Err(e) => Err(named("", &e)),
        };
    }
    match std::fs::rename(from, to) {
        Ok(()) => sync_parent(to).map_err(|e| named("", &e)),
        Err(e) if e.raw_os_error() == Some(nix::libc::EXDEV) => {
            let partial = partial_name(to);
            if std::fs::symlink_metadata(&partial).is_ok() {
                remove(&partial).map_err(|e| named("removing an earlier partial copy: ", &e))?;
            }
            copy(from, &partial).map_err(|e| named("another filesystem; copying: ", &e))?;
            std::fs::rename(&partial, to).map_err(|e| named("", &e))?;
            sync_parent(to).map_err(|e| named("", &e))?;
            remove(from).map_err(|e| {
                named(
                    "copied, but removing the original failed (a second attempt finishes it): ",
                    &e,
                )
            })?;
            sync_parent(from).map_err(|e| named("", &e))
        }
        Err(e) => Err(named("", &e)),
    }
}

/// `.NAME.partial` beside `to`: where a copy is made before it is complete.
fn partial_name(to: &Path) -> PathBuf {
    let name = to
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    to.with_file_name(format!(".{name}.partial"))
}

/// Copies `from` to `to` (absent) keeping modes, owners and symlinks, every
/// file and directory fsynced. Anything but a file, symlink or directory is
/// refused, never skipped.
fn copy(from: &Path, to: &Path) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(from)?;
    let kind = meta.file_type();
    if kind.is_symlink() {
        std::os::unix::fs::symlink(std::fs::read_link(from)?, to)?;
    } else if kind.is_dir() {
        std::fs::create_dir(to)?;
        for e in std::fs::read_dir(from)? {
            let e = e?;
            copy(&e.path(), &to.join(e.file_name()))?;
        }
        std::fs::set_permissions(to, std::fs::Permissions::from_mode(meta.mode() & 0o7777))?;
        std::fs::File::open(to)?.sync_all()?;
    } else if kind.is_file() {
        let bytes = std::fs::read(from)?;
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

/// Whether everything left of `from` is in `to` with the same content (a
/// file's bytes, a symlink's target, a directory's entries).
pub fn contained(from: &Path, to: &Path) -> std::io::Result<bool> {
    let Ok(meta) = std::fs::symlink_metadata(from) else {
        return Ok(true);
    };
    let Ok(there) = std::fs::symlink_metadata(to) else {
        return Ok(false);
    };
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
    Ok(a.is_file() && b.is_file() && std::fs::read(from)? == std::fs::read(to)?)
}

fn remove(path: &Path) -> std::io::Result<()> {
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

/// What became of a directory adopt made, once revert moved certsync's
/// files out of it.
#[derive(Debug, PartialEq, Eq)]
pub enum Left {
    /// Removed (in a dry run: would be).
    Removed,
    /// Not there (an earlier revert removed it).
    Absent,
    /// Left in place, and why.
    Kept(String),
}

/// Removes the directory at `node_path` (below `/etc/kubernetes`) if it
/// is a directory, not a symlink, root's, and empty but for the names in
/// `moving` (what revert is about to move out of it: in a dry run, the
/// prediction). It is reached from `dir` one name at a time without
/// following a link, judged on its own handle and removed by `unlinkat`
/// beneath its parent's handle: a path a compromised certsync container
/// swapped for a symlink never leads revert (root, on the host) to remove
/// a directory elsewhere; `rmdir` itself removes only an empty directory.
/// With `dry`, only says what it would do.
pub fn remove_empty_dir(
    dir: &Path,
    node_path: &str,
    moving: &[String],
    dry: bool,
) -> Result<Left, String> {
    use cap_std::fs::MetadataExt as _;
    let named = |e: &dyn std::fmt::Display| format!("{node_path}: {e}");
    let last = match node_path.rsplit_once('/') {
        Some((up, last)) if up.starts_with(crate::kubeadm::KUBEADM_DIR) && !last.is_empty() => last,
        _ => return Err(named(&"not below /etc/kubernetes")),
    };
    let (parent, opened) = match walk(dir, node_path) {
        Ok(both) => both,
        Err(Blocked::Absent) => return Ok(Left::Absent),
        Err(Blocked::Io(e)) => return Err(e.to_string()),
        Err(b) => return Ok(Left::Kept(b.to_string())),
    };
    let uid = opened.dir_metadata().map_err(|e| named(&e))?.uid();
    if uid != 0 {
        return Ok(Left::Kept(format!("owned by uid {uid}, not root")));
    }
    let mut held = Vec::new();
    for e in opened.entries().map_err(|e| named(&e))? {
        let name = e.map_err(|e| named(&e))?.file_name();
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
            parent
                .open(".")
                .and_then(|d| d.sync_all())
                .map_err(|e| named(&e))?;
            Ok(Left::Removed)
        }
        Err(e) if e.raw_os_error() == Some(nix::libc::ENOTEMPTY) => Ok(Left::Kept(
            "something was put in it while revert ran".into(),
        )),
        Err(e) => Err(named(&e)),
    }
}

/// Why a path below `/etc/kubernetes` was not opened.
#[derive(Debug)]
pub enum Blocked {
    /// A name on the way does not exist.
    Absent,
    /// The node path of a name on the way that is a symlink.
    Link(String),
    /// The node path of a name on the way that is not a directory.
    NotDir(String),
    Io(PathError),
}

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Absent => f.write_str("missing"),
            Self::Link(at) => write!(f, "{at} is a symlink, not followed"),
            Self::NotDir(at) => write!(f, "{at} is not a directory"),
            Self::Io(e) => write!(f, "{e}"),
        }
    }
}

/// The directory at `node_dir` (`/etc/kubernetes` or below), reached from
/// `dir` one name at a time without following a link: a handle to read
/// and write beneath, never a path a symlink planted on the way leads
/// elsewhere.
pub fn open_beneath(dir: &Path, node_dir: &str) -> Result<cap_std::fs::Dir, Blocked> {
    walk(dir, node_dir).map(|(_, opened)| opened)
}

/// [`open_beneath`], with its parent's handle (`dir` itself for
/// `/etc/kubernetes`).
fn walk(dir: &Path, node_dir: &str) -> Result<(cap_std::fs::Dir, cap_std::fs::Dir), Blocked> {
    let walked = reach(dir, node_dir)?;
    if walked.st.st_mode & nix::libc::S_IFMT != nix::libc::S_IFDIR {
        return Err(Blocked::NotDir(node_dir.to_owned()));
    }
    let opened = walked.dir().map_err(Blocked::Io)?;
    let parent = match walked.parent {
        Some(_) => walked.parent_dir().map_err(Blocked::Io)?,
        None => opened.try_clone().map_err(|e| {
            Blocked::Io(PathError::Io {
                path: node_dir.into(),
                source: e,
            })
        })?,
    };
    Ok((parent, opened))
}

/// What `node_path` (`/etc/kubernetes` or below) names, reached from `dir`
/// one name at a time beneath the handle opened before it, no symlink
/// followed, the last name included ([`beneath::walk`]): certsync's
/// container may plant one anywhere below `/etc/kubernetes`.
pub fn reach(dir: &Path, node_path: &str) -> Result<beneath::Walked, Blocked> {
    use nix::fcntl::OFlag;
    let top = Path::new(crate::kubeadm::KUBEADM_DIR);
    let rel = node_path
        .strip_prefix(crate::kubeadm::KUBEADM_DIR)
        .filter(|r| r.is_empty() || r.starts_with('/'))
        .ok_or_else(|| {
            Blocked::Io(PathError::Escapes {
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
        Blocked::Io(PathError::Io {
            path: top.into(),
            source: e.into(),
        })
    })?;
    let start = beneath::Start::Beneath(std::os::fd::AsFd::as_fd(&held), top);
    let rel = Path::new(rel.trim_start_matches('/'));
    beneath::walk(start, rel, beneath::Links::Refuse, &mut |_| Ok(())).map_err(|e| match e {
        e if e.is_not_found() => Blocked::Absent,
        PathError::Link { path } => Blocked::Link(path.display().to_string()),
        PathError::NotDir { path } => Blocked::NotDir(path.display().to_string()),
        e => Blocked::Io(e),
    })
}

#[cfg(test)]
mod reach_tests {
    use super::{Blocked, reach};
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
                Err(Blocked::Link(got)) => assert_eq!(got, format!("/etc/kubernetes/{at}")),
                other => panic!("{at}: {other:?}"),
            }
        }
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("pki")).unwrap();
        std::fs::write(d.path().join("pki/f"), "x").unwrap();
        assert!(matches!(
            reach(d.path(), "/etc/kubernetes/pki/none/x"),
            Err(Blocked::Absent)
        ));
        assert!(matches!(
            reach(d.path(), "/etc/kubernetes/pki/f/x"),
            Err(Blocked::NotDir(_))
        ));
        assert!(matches!(
            reach(d.path(), "/etc/kubernetesX/pki"),
            Err(Blocked::Io(_))
        ));
        assert!(reach(d.path(), "/etc/kubernetes/pki/f").is_ok());
    }
}
