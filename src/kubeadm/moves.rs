//! Moving certsync's files into a backup that may be on another filesystem (EXDEV),
//! resumably: the copy is made under a temporary name, fsynced, renamed into place, and
//! only then is the original removed; the next attempt finishes a move that stopped after
//! the copy. And the directories adopt made, removed once the moves leave them empty.
//! Every step works on handles: the trees moved are certsync's container's to write, and a
//! name it swaps after root's look (a directory for a symlink to a host one) must never
//! lead root to copy, compare or remove a host tree. A path checked is never re-opened by
//! name: ordering (revert stops the pod first) is no proof.

use std::ffi::OsStr;
use std::io::{self, Write as _};
use std::os::fd::{AsFd as _, OwnedFd};
use std::path::{Path, PathBuf};

use cap_std::fs::Dir;
use nix::fcntl::{AtFlags, OFlag, openat, readlinkat, renameat};
use nix::libc::{S_IFDIR, S_IFLNK, S_IFMT, S_IFREG};
use nix::sys::stat::Mode;

use super::error::{FileProblem, KubeadmError, Refusal, RevertError};
use crate::beneath::{self, PathError, Walked};

/// Moves `from` (a file, symlink or directory tree) to `to`, whose parent exists, both
/// beneath `dir`: each parent reached as [`reach`] reaches (no symlink on the way) and
/// held; the rename (`renameat`), the copy and the removals work beneath those handles.
pub fn move_path(dir: &Path, from: &Path, to: &Path) -> Result<(), RevertError> {
    let at = |step: &'static str| {
        move |source| RevertError::Move {
            from: from.to_owned(),
            to: to.to_owned(),
            step,
            source,
        }
    };
    let absent = || io::Error::from(nix::errno::Errno::ENOENT);
    let into = parent(dir, to).and_then(|p| p.ok_or_else(absent));
    let (into, name) = into.map_err(at(""))?;
    let held = match parent(dir, from).map_err(at(""))? {
        Some((out, n)) => look_absent(&out, n, from)
            .map_err(at(""))?
            .map(|s| (out, n, s)),
        None => None,
    };
    if let Some(there) = look_absent(&into, name, to).map_err(at(""))? {
        // Nothing left of `from`: an earlier attempt moved it.
        let Some((out, from_name, seen)) = held else {
            return Ok(());
        };
        return match contained(&seen, &there) {
            Ok(true) => remove_in(&out, from_name).map_err(at("removing the original: ")),
            Ok(false) => Err(RevertError::Differ {
                from: from.to_owned(),
                to: to.to_owned(),
            }),
            Err(e) => Err(at("")(e)),
        };
    }
    let (out, from_name, seen) = held.ok_or_else(absent).map_err(at(""))?;
    match renameat(&out, from_name, &into, name) {
        Ok(()) => sync(&into).map_err(at("")),
        Err(nix::errno::Errno::EXDEV) => {
            // `.NAME.partial` beside `to`: where a copy is made before it is complete.
            let partial = format!(".{}.partial", name.to_string_lossy());
            let partial = OsStr::new(&partial);
            remove_in(&into, partial).map_err(at("removing an earlier partial copy: "))?;
            let mut left = MOVE_LIMIT;
            let copying = "another filesystem; copying: ";
            copy(&seen, &into, partial, &mut left).map_err(at(copying))?;
            renameat(&into, partial, &into, name).map_err(|e| at("")(e.into()))?;
            sync(&into).map_err(at(""))?;
            let copied =
                "copied, but removing the original failed (a second attempt finishes it): ";
            remove_in(&out, from_name).map_err(at(copied))?;
            sync(&out).map_err(at(""))
        }
        Err(e) => Err(at("")(e.into())),
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

/// The directory holding `path`, beneath `dir`, reached as [`reach`] does (one name at a
/// time, no symlink followed) and held, and `path`'s last name in it; `None` if absent.
fn parent<'p>(dir: &Path, path: &'p Path) -> io::Result<Option<(Dir, &'p OsStr)>> {
    let rel = path.strip_prefix(dir).ok();
    let Some((up, name)) = rel.and_then(|r| Some((r.parent()?, r.file_name()?))) else {
        let escapes = PathError::Escapes {
            what: "a path",
            beneath: dir.into(),
        };
        return Err(io::Error::other(escapes));
    };
    let walked = held(dir, dir).and_then(|fd| {
        let start = beneath::Start::Beneath(fd.as_fd(), dir);
        beneath::walk(start, up, beneath::Links::Refuse, &mut |_| Ok(()))
    });
    let opened = walked.and_then(|w| match w.is_dir() {
        true => w.dir(),
        false => Err(PathError::NotDir { path: w.shown }),
    });
    match opened {
        Ok(d) => Ok(Some((d, name))),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(io::Error::other(e)),
    }
}

/// `name` in `dir` as it is, no link followed: an `O_PATH` handle whose `fstat` judges
/// its type, and through which it is then read (never by the name again, which the
/// container may have swapped since), shown as `shown`.
fn look(dir: &Dir, name: &OsStr, shown: PathBuf) -> io::Result<Walked> {
    let fd = openat(dir, name, OFlag::O_PATH | NO_FOLLOW, Mode::empty())?;
    let st = nix::sys::stat::fstat(&fd)?;
    #[cfg(test)]
    move_tests::between_check_and_read();
    Ok(Walked {
        fd,
        st,
        shown,
        parent: None,
        passed: Vec::new(),
    })
}

/// Every handle this module opens: no link as its last name, none leaked to a child.
const NO_FOLLOW: OFlag = OFlag::O_NOFOLLOW.union(OFlag::O_CLOEXEC);

/// [`look`]; `None` when `name` is absent.
fn look_absent(dir: &Dir, name: &OsStr, shown: &Path) -> io::Result<Option<Walked>> {
    match look(dir, name, shown.to_owned()) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        seen => seen.map(Some),
    }
}

/// What a symlink [`look`]ed at says, read through its handle (an empty name: the link).
fn link_of(seen: &Walked) -> io::Result<std::ffi::OsString> {
    Ok(readlinkat(&seen.fd, "")?)
}

/// Copies what `seen` holds to `name` in `to` keeping modes, owners and symlinks,
/// fsynced, within what is `left` of [`MOVE_LIMIT`]: each entry [`look`]ed at and read
/// through that handle, made beneath the handle of the directory it goes in. Anything
/// but a file, symlink or directory is refused, never skipped.
fn copy(seen: &Walked, to: &Dir, name: &OsStr, left: &mut (u64, usize)) -> io::Result<()> {
    let over = || {
        let (mib, entries) = (MOVE_LIMIT.0 >> 20, MOVE_LIMIT.1);
        let why = "certsync writes far less in a target: inspect it, remove what is not its";
        io::Error::other(format!(
            "{}: past the {mib} MiB or {entries} entries one move copies ({why})",
            seen.shown.display()
        ))
    };
    left.1 = left.1.checked_sub(1).ok_or_else(over)?;
    let uid = Some(nix::unistd::Uid::from_raw(seen.st.st_uid));
    let gid = Some(nix::unistd::Gid::from_raw(seen.st.st_gid));
    let made = match seen.st.st_mode & S_IFMT {
        S_IFLNK => {
            nix::unistd::symlinkat(link_of(seen)?.as_os_str(), to, name)?;
            // A symlink has no handle to chown: its name, beneath the directory held.
            let no_follow = AtFlags::AT_SYMLINK_NOFOLLOW;
            return Ok(nix::unistd::fchownat(to, name, uid, gid, no_follow)?);
        }
        S_IFDIR => {
            nix::sys::stat::mkdirat(to, name, Mode::S_IRWXU)?;
            let made = openat(to, name, OFlag::O_DIRECTORY | NO_FOLLOW, Mode::empty())?;
            let made = Dir::from_std_file(made.into());
            let from = seen.dir().map_err(io::Error::other)?;
            for e in from.entries()? {
                let name = e?.file_name();
                let entry = look(&from, &name, seen.shown.join(&name))?;
                copy(&entry, &made, &name, left)?;
            }
            made.into_std_file()
        }
        S_IFREG => {
            let bytes = seen.read(COPY_LIMIT).map_err(io::Error::other)?;
            left.0 = left.0.checked_sub(bytes.len() as u64).ok_or_else(over)?;
            let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | NO_FOLLOW;
            let made = openat(to, name, flags, Mode::from_bits_truncate(0o600))?;
            let mut made = std::fs::File::from(made);
            made.write_all(&bytes)?;
            made
        }
        _ => {
            let shown = seen.shown.display();
            return Err(io::Error::other(format!(
                "{shown}: not a file, symlink or directory"
            )));
        }
    };
    nix::sys::stat::fchmod(&made, Mode::from_bits_truncate(seen.st.st_mode & 0o7777))?;
    nix::unistd::fchown(&made, uid, gid)?;
    made.sync_all()
}

/// Whether everything left of what `from` holds is in what `to` holds with the same
/// content, each entry [`look`]ed at and read through its handle as [`copy`] does.
fn contained(from: &Walked, to: &Walked) -> io::Result<bool> {
    let kind = from.st.st_mode & S_IFMT;
    if kind != to.st.st_mode & S_IFMT {
        return Ok(false);
    }
    match kind {
        S_IFLNK => Ok(link_of(from)? == link_of(to)?),
        S_IFDIR => {
            let here = from.dir().map_err(io::Error::other)?;
            let there = to.dir().map_err(io::Error::other)?;
            for e in here.entries()? {
                let name = e?.file_name();
                // Lock state: revert's own claim rewrote `..owner` since.
                if crate::writer::LOCK_FILES.iter().any(|l| name == *l) {
                    continue;
                }
                let Some(a) = look_absent(&here, &name, &from.shown.join(&name))? else {
                    continue;
                };
                let Some(b) = look_absent(&there, &name, &to.shown.join(&name))? else {
                    return Ok(false);
                };
                if !contained(&a, &b)? {
                    return Ok(false);
                }
            }
            Ok(true)
        }
        S_IFREG => {
            let read = |w: &Walked| w.read(COPY_LIMIT).map_err(io::Error::other);
            Ok(read(from)? == read(to)?)
        }
        _ => Ok(false),
    }
}

/// Removes `path` (a file, symlink or directory tree) beneath `dir`, never following a
/// link: its parent reached as [`reach`] reaches, the rest removed beneath that handle.
pub fn remove(dir: &Path, path: &Path) -> io::Result<()> {
    match parent(dir, path)? {
        Some((d, name)) => remove_in(&d, name),
        None => Ok(()),
    }
}

/// Removes `name` in `d` (a file, symlink or directory tree), never following a link.
fn remove_in(d: &Dir, name: &OsStr) -> io::Result<()> {
    match d.symlink_metadata(name) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => d.remove_dir_all(name),
        Ok(_) => d.remove_file(name),
    }
}

/// Makes lasting what was renamed, made or removed in `d`.
fn sync(d: &Dir) -> io::Result<()> {
    Ok(nix::unistd::fsync(d)?)
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
) -> Result<Left, KubeadmError> {
    use cap_std::fs::MetadataExt as _;
    let named = |e: std::io::Error| KubeadmError::file(Path::new(node_path), e);
    let last = match node_path.rsplit_once('/') {
        Some((up, last)) if up.starts_with(super::paths::KUBEADM_DIR) && !last.is_empty() => last,
        _ => {
            let node_path = node_path.to_owned();
            return Err(RevertError::NotBelow { node_path }.into());
        }
    };
    let handles = reach_dir(dir, node_path).and_then(|w| Ok((w.dir()?, w.parent_dir()?)));
    let (opened, parent) = match handles {
        Ok(both) => both,
        Err(FileProblem::Missing) => return Ok(Left::Absent),
        Err(e @ FileProblem::Way(_)) => return Err(KubeadmError::file(Path::new(node_path), e)),
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
            sync(&parent).map_err(named)?;
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
pub fn reach_again(dir: &Path, node_path: &str) -> Result<Option<beneath::Walked>, KubeadmError> {
    let path = node_path.to_owned();
    match reach(dir, node_path) {
        Ok(walked) => Ok(Some(walked)),
        Err(FileProblem::Missing | FileProblem::NotDir(_)) => Ok(None),
        Err(FileProblem::Link(link)) => {
            Err(RevertError::Planted(Box::new(Refusal::Link { path, link })).into())
        }
        Err(e) => Err(KubeadmError::file(Path::new(node_path), e)),
    }
}

/// What `node_path` names, reached from `dir` one name at a time, no symlink followed, the
/// last name included: certsync's container may plant one anywhere below /etc/kubernetes.
pub fn reach(dir: &Path, node_path: &str) -> Result<beneath::Walked, FileProblem> {
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
    let held = held(dir, top).map_err(FileProblem::Way)?;
    let start = beneath::Start::Beneath(held.as_fd(), top);
    let rel = Path::new(rel.trim_start_matches('/'));
    beneath::walk(start, rel, beneath::Links::Refuse, &mut |_| Ok(())).map_err(|e| match e {
        e if e.is_not_found() => FileProblem::Missing,
        PathError::Link { path } => FileProblem::Link(path.display().to_string()),
        PathError::NotDir { path } => FileProblem::NotDir(path.display().to_string()),
        e => FileProblem::Way(e),
    })
}

/// `dir` (the operator's, opened as given) held to walk beneath, shown as `shown`.
fn held(dir: &Path, shown: &Path) -> Result<OwnedFd, PathError> {
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    nix::fcntl::open(dir, flags, Mode::empty()).map_err(|e| PathError::Io {
        path: shown.into(),
        source: e.into(),
    })
}

#[cfg(test)]
#[path = "moves_tests.rs"]
mod move_tests;
