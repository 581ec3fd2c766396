//! The path as the operator wrote it, walked one component at a time
//! beneath descriptors (`O_PATH | O_NOFOLLOW`), the way `openat2`'s
//! `RESOLVE_NO_SYMLINKS` would, with each symlink read from its own
//! descriptor and followed by hand. Every directory a name is looked up
//! in and every symlink followed is kept ([`Passed`]): whoever may change
//! one of them chose what the path leads to, so a file kept from others
//! must not be read through it (root's `check` read a root-only certificate
//! through each of these: a user's symlink to root's 0700 directory, a
//! relative path from inside the user's directory, `duser/..`). The resolved
//! location alone does not show any of these.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{FileStat, Mode, SFlag};

/// Linux's own limit on symlinks in one lookup (`ELOOP` past it).
const MAX_LINKS: usize = 40;

/// A directory a name was looked up in, or a symlink followed.
#[derive(Debug, Clone)]
pub(super) struct Passed {
    /// As written (or as the link that led there reads).
    shown: PathBuf,
    link: bool,
    uid: u32,
    mode: u32,
    /// On a read-only mount: nobody changes it there.
    read_only: bool,
}

impl Passed {
    fn of(shown: PathBuf, fd: BorrowedFd<'_>, st: &FileStat, holder_read_only: bool) -> Self {
        let link = kind(st) == SFlag::S_IFLNK;
        Self {
            shown,
            link,
            uid: st.st_uid,
            mode: st.st_mode & 0o7777,
            read_only: holder_read_only || (!link && read_only(fd)),
        }
    }

    /// Whether someone other than root and `owner` may change it: owned by
    /// another user, or (a directory) writable by group or others, sticky
    /// or not. A symlink's own mode means nothing; its owner does.
    fn others_may_change(&self, owner: u32) -> bool {
        !self.read_only
            && ((self.uid != 0 && self.uid != owner) || (!self.link && self.mode & 0o022 != 0))
    }

    /// How it reads in a refusal: the path and why others may change it.
    pub(super) fn describe(&self) -> String {
        if self.link {
            format!("the symlink {} (owner {})", self.shown.display(), self.uid)
        } else {
            format!(
                "{} (owner {}, mode {:04o})",
                self.shown.display(),
                self.uid,
                self.mode
            )
        }
    }
}

/// The first of `passed` that someone other than root and `owner` may
/// change.
pub(super) fn exposure(passed: &[Passed], owner: u32) -> Option<&Passed> {
    passed.iter().find(|p| p.others_may_change(owner))
}

/// Where a walk ended: an `O_PATH` descriptor of what the path names, and
/// what it passed on the way.
#[derive(Debug)]
pub(super) struct Walked {
    pub(super) fd: OwnedFd,
    pub(super) passed: Vec<Passed>,
}

/// Where a walk starts.
pub(super) enum Start<'a> {
    /// An operator's path: from `/`, or the working directory when
    /// relative; symlinks anywhere are followed.
    Path,
    /// An entry of a directory argument, shown as `.0`: it must stay
    /// beneath that directory (`RESOLVE_BENEATH`): no `..` above it, no
    /// absolute symlink.
    Beneath(BorrowedFd<'a>, &'a Path),
}

/// Walks `path` from `start`. Errors read like the kernel's, naming the
/// component where it helps.
pub(super) fn walk(start: &Start<'_>, path: &Path) -> Result<Walked, String> {
    let err = |e: Errno| io::Error::from(e).to_string();
    let open_dir = |at: BorrowedFd<'_>, name: &str| {
        nix::fcntl::openat(
            at,
            name,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
    };
    let (mut dir, mut shown, beneath) = match start {
        Start::Beneath(fd, shown) => (
            open_dir(*fd, ".").map_err(err)?,
            (*shown).to_owned(),
            Some(*shown),
        ),
        Start::Path if path.is_absolute() => {
            (open_dir(cwd(), "/").map_err(err)?, PathBuf::from("/"), None)
        }
        Start::Path => (
            open_dir(cwd(), ".").map_err(err)?,
            std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
            None,
        ),
    };
    let mut todo: VecDeque<OsString> = components(path);
    let mut passed = Vec::new();
    let mut depth = 0usize;
    let mut links = 0usize;
    let leaves = |what: &str| {
        format!(
            "{what} that leads out of {}; refusing to follow it",
            beneath.unwrap_or(Path::new("")).display()
        )
    };
    while let Some(name) = todo.pop_front() {
        if name == "/" {
            if beneath.is_some() {
                return Err(leaves("a symlink"));
            }
            dir = open_dir(cwd(), "/").map_err(err)?;
            shown = PathBuf::from("/");
            continue;
        }
        let dst = nix::sys::stat::fstat(&dir).map_err(err)?;
        let dir_read_only = read_only(dir.as_fd());
        passed.push(Passed::of(shown.clone(), dir.as_fd(), &dst, false));
        if name == ".." {
            if beneath.is_some() {
                depth = depth.checked_sub(1).ok_or_else(|| leaves("a path"))?;
            }
            dir = open_dir(dir.as_fd(), "..").map_err(err)?;
            shown.push("..");
            continue;
        }
        let here = shown.join(&name);
        let fd = nix::fcntl::openat(
            &dir,
            name.as_os_str(),
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("{}: {}", here.display(), err(e)))?;
        let st = nix::sys::stat::fstat(&fd).map_err(err)?;
        match kind(&st) {
            SFlag::S_IFLNK => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(
                        "a symlink loop (or too many symlinks); refusing to follow it".into(),
                    );
                }
                // Read from the link's own descriptor: the very link
                // just checked, not whatever the name holds now.
                let target = nix::fcntl::readlinkat(&fd, "").map_err(err)?;
                passed.push(Passed::of(here, fd.as_fd(), &st, dir_read_only));
                let target = Path::new(&target);
                if target.is_absolute() && beneath.is_some() {
                    return Err(leaves("a symlink"));
                }
                for c in components(target).into_iter().rev() {
                    todo.push_front(c);
                }
            }
            SFlag::S_IFDIR if !todo.is_empty() => {
                dir = fd;
                shown = here;
                depth += 1;
            }
            _ if !todo.is_empty() => {
                return Err(format!("{}: {}", here.display(), err(Errno::ENOTDIR)));
            }
            _ => return Ok(Walked { fd, passed }),
        }
    }
    // The path ended on a directory reached by `..`, `/` or a link to a
    // directory (or named none at all: `.`).
    Ok(Walked { fd: dir, passed })
}

/// The components of `path` to look up: `/` (restart at the root), `..`
/// and names; `.` dropped.
fn components(path: &Path) -> VecDeque<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::RootDir | Component::Prefix(_) => Some(OsString::from("/")),
            Component::ParentDir => Some(OsString::from("..")),
            Component::CurDir => None,
            Component::Normal(n) => Some(n.to_owned()),
        })
        .collect()
}

fn cwd() -> BorrowedFd<'static> {
    // AT_FDCWD: a descriptor number that stands for the working directory
    // in every *at call.
    nix::fcntl::AT_FDCWD
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT
}

fn read_only(fd: BorrowedFd<'_>) -> bool {
    nix::sys::statvfs::fstatvfs(fd)
        .is_ok_and(|v| v.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
}
