//! How `certsync check` reads its inputs. Root runs it on directories
//! other users may control (a user's certificate directory, a pod's
//! volume), so:
//! - an entry of a directory argument is resolved beneath it (as
//!   `openat2`'s `RESOLVE_BENEATH` would, by the walk): a symlink that stays
//!   inside works (a certsync target's visible files are such links), one
//!   that leads out of it is refused, named, and nothing it leads to is
//!   read, printed or matched against;
//! - every input is first opened `O_PATH`, which reads nothing and makes
//!   no device act (opening `/dev/ptmx` allocates a terminal,
//!   `/dev/watchdog` arms the watchdog), and `fstat`ed: only a regular
//!   file is then opened for reading, at most the bundle size limit;
//! - a path is walked as written, one component at a time beneath
//!   descriptors (see [`walk`]);
//! - a file kept from others is not read when the way to it leads through
//!   a directory or symlink someone other than root and its owner may
//!   change, as written (the walk) or where the file really is (see
//!   `Input::exposed`): a user there may have linked root's file in.
//!
//! The reading open is of `/proc/self/fd/N` for the `O_PATH` descriptor:
//! a magic link to that descriptor's own file, so the kernel opens the very
//! inode that was checked, with no lookup of a name someone could swap
//! meanwhile (an `O_PATH` descriptor cannot be read, and Linux has no other
//! way to upgrade one). Device and inode are compared after, in case
//! `/proc` is not what it should be.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd as _, OwnedFd};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::FileStat;

use crate::beneath::{self, Entry, Links, Owners, ReadOnly, Start, Trust, Walked};
use crate::validate;

/// One input of `check`: a path the operator named (followed as given),
/// or an entry of a directory they named (resolved beneath it).
#[derive(Debug, Clone)]
pub(super) struct Input {
    /// As reported.
    pub(super) shown: PathBuf,
    /// The directory argument an entry is resolved beneath.
    beneath: Option<Rc<Base>>,
}

/// A directory entries are resolved beneath: an `O_PATH` descriptor,
/// its path as shown, what the walk to it passed, and why nothing in it
/// may be told (kept from others, reached through what others may
/// change), if so.
#[derive(Debug)]
struct Base {
    fd: OwnedFd,
    shown: PathBuf,
    passed: Vec<Entry>,
    refused: Option<String>,
}

impl Base {
    /// `path` walked as written; `Ok(None)` when it is not a directory.
    fn open(path: &Path) -> Result<Option<Self>, String> {
        let Walked { fd, st, passed, .. } = walk(Start::Path, path)?;
        if kind(&st) != nix::sys::stat::SFlag::S_IFDIR {
            return Ok(None);
        }
        // A directory others may not list or enter: its names are kept
        // from them too.
        let kept = st.st_mode & 0o005 != 0o005 && !own(&st);
        let refused = kept
            .then(|| exposure(&passed, st.st_uid))
            .flatten()
            .map(|p| refusal("a directory", &st, &p.describe()));
        Ok(Some(Self {
            fd,
            shown: path.to_owned(),
            passed,
            refused,
        }))
    }
}

/// `path` walked from `start`, symlinks followed, everything on the way
/// kept for [`exposure`]: a path as written, or an entry beneath its
/// directory argument (no `..` above it, no absolute symlink).
fn walk(start: Start<'_>, path: &Path) -> Result<Walked, String> {
    beneath::walk(start, path, Links::Follow, &mut |_| Ok(())).map_err(|e| match e {
        beneath::PathError::Loop { .. } => {
            "a symlink loop (or too many symlinks); refusing to follow it".to_owned()
        }
        e => e.to_string(),
    })
}

/// Who may change the way to a file kept from others without it being
/// read: root and the file's owner (who chose its way anyway), and no one
/// else, sticky or not (a user in /tmp may have linked root's file in).
/// A read-only mount is an exception: nobody changes a directory or a
/// symlink there.
fn way(owner: u32) -> Trust {
    Trust {
        owners: Owners::RootOr(owner),
        writable_ok: false,
        sticky_root_ok: false,
        read_only: ReadOnly::Everything,
        volume_root_ok: false,
    }
}

/// The first of `passed` someone other than root and `owner` may change.
fn exposure(passed: &[Entry], owner: u32) -> Option<&Entry> {
    passed.iter().find(|p| way(owner).judge(p).is_err())
}

/// Whether the reader is not root and `st` is its own: the kernel already
/// decided what it may read.
fn own(st: &FileStat) -> bool {
    let euid = nix::unistd::geteuid().as_raw();
    euid != 0 && st.st_uid == euid
}

fn kind(st: &FileStat) -> nix::sys::stat::SFlag {
    nix::sys::stat::SFlag::from_bits_truncate(st.st_mode) & nix::sys::stat::SFlag::S_IFMT
}

/// The refusal of `what` (of status `st`, kept from others) reached
/// through `through`, which someone other than root and its owner may
/// change.
fn refusal(what: &str, st: &FileStat, through: &str) -> String {
    format!(
        "{what} of uid {} that others may not read, reached through {through}, which users \
         other than root and the file's owner may change: it may be a link someone made to \
         a file they may not read; refusing to read it",
        st.st_uid
    )
}

impl Input {
    pub(super) fn named(path: &Path) -> Self {
        Self {
            shown: path.to_owned(),
            beneath: None,
        }
    }

    /// Reads the input if it is a regular file of at most the bundle size
    /// limit; otherwise why not, without the path.
    pub(super) fn read(&self) -> Result<Vec<u8>, String> {
        let walked = self.open_path()?;
        let (st, passed) = (&walked.st, &walked.passed);
        let kind = kind(st);
        if kind != nix::sys::stat::SFlag::S_IFREG {
            return Err(format!(
                "is {}, not a regular file; refusing to open it",
                kind_name(kind)
            ));
        }
        let kept = st.st_mode & 0o004 == 0 && !own(st);
        if let Some(p) = kept.then(|| exposure(passed, st.st_uid)).flatten() {
            return Err(refusal(&file_kind(st), st, &p.describe()));
        }
        if let Some(problem) = Self::exposed(&walked.fd, st) {
            return Err(problem);
        }
        let file = walked.open_read().map_err(|e| match e {
            beneath::PathError::Replaced { .. } => {
                "changed while it was opened; refusing to read it".to_owned()
            }
            e => e.to_string(),
        })?;
        crate::files::read_capped(file, &self.shown, validate::MAX_PUBLISHED_SIZE as u64)
            .map_err(|e| e.problem())
    }

    /// Why a regular file must not be read: it is kept from others (not
    /// world-readable), not the reader's own when the reader is not root,
    /// and the way to it leads through a directory that someone other
    /// than root and the file's owner may change (owned by another user,
    /// writable by group or others, sticky or not, unless on a read-only
    /// mount). There it may be a hard link someone made to a file they may
    /// not read (`fs.protected_hardlinks=0`: root's key, for one), or, with
    /// one link, what is left of such a link once the owner renamed its own
    /// name away (a rotation). Found on descriptors: the directory that
    /// holds the opened file and then each `..` above it, up to `/`.
    fn exposed(fd: &OwnedFd, st: &FileStat) -> Option<String> {
        if st.st_mode & 0o004 != 0 || own(st) {
            return None;
        }
        let (mut dir, mut shown) = match holding_directory(fd, st) {
            Ok(found) => found,
            Err(problem) => return Some(problem),
        };
        loop {
            let m = match nix::sys::stat::fstat(&dir) {
                Ok(m) => m,
                Err(e) => return Some(format!("{}: {}", shown.display(), io::Error::from(e))),
            };
            let here = Entry::of(shown.clone(), dir.as_fd(), &m, false);
            if way(st.st_uid).judge(&here).is_err() {
                return Some(refusal(&file_kind(st), st, &here.describe()));
            }
            let up = match nix::fcntl::openat(
                &dir,
                "..",
                OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            )
            .and_then(|up| nix::sys::stat::fstat(&up).map(|u| (up, u)))
            {
                Ok(up) => up,
                Err(e) => return Some(format!("{}/..: {}", shown.display(), io::Error::from(e))),
            };
            if (up.1.st_dev, up.1.st_ino) == (m.st_dev, m.st_ino) {
                return None;
            }
            dir = up.0;
            shown.pop();
        }
    }

    /// An `O_PATH` descriptor (nothing read, no device opened) and what
    /// the way to it passed: the path as written, or the entry beneath its
    /// directory.
    fn open_path(&self) -> Result<Walked, String> {
        let Some(base) = &self.beneath else {
            return walk(Start::Path, &self.shown);
        };
        if let Some(refused) = &base.refused {
            return Err(refused.clone());
        }
        let name = Path::new(self.shown.file_name().unwrap_or_default());
        let mut walked = walk(Start::Beneath(base.fd.as_fd(), &base.shown), name)?;
        let mut passed = base.passed.clone();
        passed.append(&mut walked.passed);
        walked.passed = passed;
        Ok(walked)
    }
}

/// "a file", or "a hard link (links N) to a file": how a refusal names
/// what it would not read.
fn file_kind(st: &FileStat) -> String {
    if st.st_nlink > 1 {
        format!("a hard link (links {}) to a file", st.st_nlink)
    } else {
        "a file".to_owned()
    }
}

/// The directory that holds the file open as `fd` (of status `st`) and
/// its name: the kernel's name for the descriptor, its parent opened with
/// no symlink on the way (that name has none, unless someone swapped one
/// in meanwhile) and checked to hold this very file.
fn holding_directory(fd: &OwnedFd, st: &FileStat) -> Result<(OwnedFd, PathBuf), String> {
    let real = PathBuf::from(
        nix::fcntl::readlink(format!("/proc/self/fd/{}", fd.as_raw_fd()).as_str())
            .map_err(|e| format!("cannot tell where it is: {}", io::Error::from(e)))?,
    );
    let moved = || "moved while it was being checked; refusing to read it".to_owned();
    let (Some(parent), Some(name)) = (real.parent(), real.file_name()) else {
        return Err(moved());
    };
    let dir = nix::fcntl::openat2(
        nix::fcntl::AT_FDCWD,
        parent,
        OpenHow::new()
            .flags(OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC)
            .resolve(ResolveFlag::RESOLVE_NO_SYMLINKS),
    )
    .map_err(|_| moved())?;
    let there = nix::sys::stat::fstatat(&dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(|_| moved())?;
    if (there.st_dev, there.st_ino) != (st.st_dev, st.st_ino) {
        return Err(moved());
    }
    Ok((dir, parent.to_owned()))
}

fn kind_name(kind: nix::sys::stat::SFlag) -> &'static str {
    use nix::sys::stat::SFlag;
    match kind {
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFIFO => "a FIFO",
        SFlag::S_IFSOCK => "a socket",
        SFlag::S_IFCHR | SFlag::S_IFBLK => "a device",
        _ => "not a regular file",
    }
}

/// The key file named after `cert` (`x.crt` → `x.key`), if there is one,
/// resolved beneath the certificate's directory like a directory's
/// entry: the operator named the certificate, not where its key's links
/// lead.
pub(super) fn key_beside(cert: &Path) -> Option<Input> {
    let key = cert.with_extension("key");
    let parent = match cert.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let base = Base::open(parent).ok()??;
    // Whether the key is there is told only when the directory may be.
    if base.refused.is_none() {
        nix::sys::stat::fstatat(
            &base.fd,
            key.file_name()?,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .ok()?;
    }
    Some(Input {
        shown: key,
        beneath: Some(Rc::new(base)),
    })
}

/// Certificate inputs, each with the key file named after it, if any.
pub(super) type WithKeys = Vec<(Input, Option<Input>)>;

/// The entries of the directory `path` (walked as written) whose names
/// look like certificates (`*.crt`, `*.pem`, not hidden), sorted, each
/// with the entry named after it with `.key` if there is one.
/// `Ok(None)` when `path` is not a directory.
pub(super) fn directory(path: &Path) -> Result<Option<WithKeys>, String> {
    let Some(base) = Base::open(path)? else {
        return Ok(None);
    };
    if let Some(refused) = base.refused {
        return Err(refused);
    }
    // Listed through the walked descriptor itself (see `Input::read` for
    // why `/proc/self/fd`), checked to be the same directory.
    let dir = File::options()
        .read(true)
        .custom_flags((OFlag::O_DIRECTORY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits())
        .open(format!("/proc/self/fd/{}", base.fd.as_raw_fd()))
        .map_err(|e| e.to_string())?;
    let (m, st) = (
        dir.metadata().map_err(|e| e.to_string())?,
        nix::sys::stat::fstat(&base.fd).map_err(|e| io::Error::from(e).to_string())?,
    );
    if m.dev() != st.st_dev || m.ino() != st.st_ino {
        return Err("changed while it was opened; refusing to list it".into());
    }
    let listing = cap_std::fs::Dir::from_std_file(dir);
    let mut names = std::collections::BTreeSet::new();
    for entry in listing.entries().map_err(|e| e.to_string())? {
        let entry = entry.map_err(|e| e.to_string())?;
        names.insert(entry.file_name().to_string_lossy().into_owned());
    }
    let base = Rc::new(base);
    let beneath = |name: &str| Input {
        shown: path.join(name),
        beneath: Some(Rc::clone(&base)),
    };
    Ok(Some(
        names
            .iter()
            .filter(|n| !n.starts_with('.') && (n.ends_with(".crt") || n.ends_with(".pem")))
            .map(|n| {
                let stem = n.rsplit_once('.').map_or(n.as_str(), |(s, _)| s);
                let key = format!("{stem}.key");
                (beneath(n), names.contains(&key).then(|| beneath(&key)))
            })
            .collect(),
    ))
}
