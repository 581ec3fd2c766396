//! Opening what certsync does not own, and the one rule of who may change
//! it. Every path root certsync reads, walks or removes in a place others
//! share goes through here:
//!
//! - [`walk`] resolves a path one name at a time beneath the directory
//!   handle opened before it (`O_PATH | O_NOFOLLOW`), the way `openat2`'s
//!   `RESOLVE_NO_SYMLINKS` / `RESOLVE_BENEATH` would, reading each symlink
//!   from its own descriptor and following it by hand (or refusing it,
//!   [`Links::Refuse`]). Every directory a name is looked up in and every
//!   symlink followed is handed to the caller's judge *before* the next
//!   name is looked up, on what was opened (`fstat`), never on a name:
//!   nothing judged is looked up by its path again, so a directory swapped
//!   for a link between the check and the open is never what is read.
//! - [`Trust`] is the ownership and mode rule: owned by root or certsync's
//!   user and written by no one else, with each caller's exceptions (a
//!   root sticky directory, a read-only mount, a volume's root, a loose CA
//!   directory) as explicit fields.
//! - [`Walked::open_read`] upgrades the `O_PATH` descriptor to a reading
//!   one through `/proc/self/fd/N` (the very inode judged, no lookup of a
//!   name) if it is a regular file, never blocking on a FIFO.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd as _, BorrowedFd, OwnedFd};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::{FileStat, Mode, SFlag};

/// Linux's own limit on symlinks in one lookup (`MAXSYMLINKS`).
pub const MAX_LINKS: usize = 40;

/// Why a path was not opened, or what the rule refused; the path as shown
/// (as written, or as the link that led there reads).
#[derive(Debug, thiserror::Error)]
pub enum PathError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A name on the way that is neither a directory nor a symlink.
    #[error("{path}: not a directory")]
    NotDir { path: PathBuf },
    /// A symlink on the way where [`Links::Refuse`] follows none.
    #[error("{path} is a symlink, not followed")]
    Link { path: PathBuf },
    #[error("more than {MAX_LINKS} symlinks on the way (at {path}); refusing to follow them")]
    Loop { path: PathBuf },
    /// A `..` above, or an absolute symlink out of, a [`Start::Beneath`].
    #[error("{what} that leads out of {beneath}; refusing to follow it")]
    Escapes {
        what: &'static str,
        beneath: PathBuf,
    },
    /// What the way ended on is not a regular file.
    #[error("{path}: is {what}, not a regular file; refusing to read it")]
    NotRegular { path: PathBuf, what: &'static str },
    /// The file opened for reading is not the one judged.
    #[error("{path}: replaced while it was being opened; refusing to read it")]
    Replaced { path: PathBuf },
    /// What [`Trust`] refused.
    #[error("{}", .0)]
    Untrusted(#[from] Untrusted),
}

impl PathError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }

    fn io(path: &Path, e: impl Into<io::Error>) -> Self {
        Self::Io {
            path: path.to_owned(),
            source: e.into(),
        }
    }
}

/// One directory a name was looked up in, one symlink followed, or a file:
/// what [`Trust`] judges.
#[derive(Debug, Clone)]
pub struct Entry {
    /// As written (or as the link that led there reads).
    pub shown: PathBuf,
    pub uid: u32,
    /// Permission bits (`0o7777`).
    pub mode: u32,
    pub link: bool,
    /// On a read-only mount (a symlink: its directory is): nobody changes
    /// it there.
    pub read_only: bool,
}

impl Entry {
    /// `st` of `fd`, shown as `shown`; a symlink is on a read-only mount
    /// when the directory holding it is (`holder_read_only`).
    pub fn of(shown: PathBuf, fd: BorrowedFd<'_>, st: &FileStat, holder_read_only: bool) -> Self {
        let link = kind(st) == SFlag::S_IFLNK;
        Self {
            shown,
            uid: st.st_uid,
            mode: st.st_mode & 0o7777,
            link,
            read_only: if link {
                holder_read_only
            } else {
                read_only(fd)
            },
        }
    }

    /// A held directory or file, by `fstat` of its descriptor.
    pub fn held(shown: &Path, fd: BorrowedFd<'_>) -> Result<Self, PathError> {
        let st = nix::sys::stat::fstat(fd).map_err(|e| PathError::io(shown, e))?;
        Ok(Self::of(shown.to_owned(), fd, &st, false))
    }

    /// By path, for what is judged where nothing is opened now (a target
    /// written later, a program another process runs); a symlink followed
    /// when `follow`.
    pub fn at_path(path: &Path, follow: bool) -> Result<Self, PathError> {
        let m = if follow {
            std::fs::metadata(path)
        } else {
            std::fs::symlink_metadata(path)
        }
        .map_err(|e| PathError::io(path, e))?;
        Ok(Self::from_metadata(path, &m))
    }

    /// `m`, of what is shown as `shown` (its mount not looked at).
    pub fn from_metadata(shown: &Path, m: &std::fs::Metadata) -> Self {
        Self {
            shown: shown.to_owned(),
            uid: m.uid(),
            mode: m.mode() & 0o7777,
            link: m.file_type().is_symlink(),
            read_only: false,
        }
    }

    /// "the symlink P (owner U)" or "P (owner U, mode M)".
    pub fn describe(&self) -> String {
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

/// Whose entries are accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owners {
    /// Root's and certsync's effective user's.
    RootOrMe,
    /// Root's and this user's (a file's owner, who chose its way anyway).
    RootOr(u32),
    /// Only certsync's effective user's (root, as `certsync kubeadm` runs).
    Me,
    /// Anyone's: only who else may write it is judged.
    Anyone,
}

impl Owners {
    fn accepts(self, uid: u32) -> bool {
        let me = nix::unistd::geteuid().as_raw();
        match self {
            Self::RootOrMe => uid == 0 || uid == me,
            Self::RootOr(other) => uid == 0 || uid == other,
            Self::Me => uid == me,
            Self::Anyone => true,
        }
    }
}

/// What a read-only mount excuses: nobody changes an entry there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOnly {
    Never,
    /// A directory there counts as not writable; its owner is still
    /// judged, as is a symlink's.
    Writable,
    /// Nothing there is refused, owner or mode.
    Everything,
}

/// The one rule of who may change what certsync reads or writes: an entry
/// is trusted when [`Owners`] accepts its owner and (a directory or file)
/// group and others may not write it. A symlink's mode means nothing; its
/// owner does. Each field past `owners` is an exception a caller takes on
/// purpose and says why where it builds its `Trust`.
#[derive(Debug, Clone, Copy)]
pub struct Trust {
    pub owners: Owners,
    /// Group- or other-writable is accepted (the owner check stays).
    pub writable_ok: bool,
    /// A root-owned sticky directory counts as not writable: others may
    /// not rename or remove root's entries in it.
    pub sticky_root_ok: bool,
    pub read_only: ReadOnly,
    /// A root-owned, not sticky directory others may write is accepted
    /// where it is a mount point (a pod volume's root); judged by path.
    pub volume_root_ok: bool,
}

/// What [`Trust`] found wrong, each on its own, for a caller that reports
/// all of them (an audit); [`Trust::judge`] refuses on the first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    pub owner: bool,
    pub group_writable: bool,
    pub others_writable: bool,
}

/// An entry [`Trust`] refused, and why.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Untrusted {
    #[error("{} (a symlink of uid {uid}) may be changed by another user", path.display())]
    Link { path: PathBuf, uid: u32 },
    #[error("{} (owner {uid}, mode {mode:04o}) may be changed by another user", path.display())]
    Changeable { path: PathBuf, uid: u32, mode: u32 },
}

impl Trust {
    /// Root's or certsync's, written by no one else: no exception.
    pub const STRICT: Self = Self {
        owners: Owners::RootOrMe,
        writable_ok: false,
        sticky_root_ok: false,
        read_only: ReadOnly::Never,
        volume_root_ok: false,
    };

    /// Each fault of `e`, the exceptions applied.
    pub fn faults(&self, e: &Entry) -> Faults {
        if self.read_only == ReadOnly::Everything && e.read_only {
            return Faults::default();
        }
        let writable_excused = e.link
            || self.writable_ok
            || (self.read_only == ReadOnly::Writable && e.read_only)
            || (self.sticky_root_ok && e.uid == 0 && e.mode & 0o1000 != 0);
        let mut f = Faults {
            owner: !self.owners.accepts(e.uid),
            group_writable: !writable_excused && e.mode & 0o020 != 0,
            others_writable: !writable_excused && e.mode & 0o002 != 0,
        };
        if (f.group_writable || f.others_writable)
            && self.volume_root_ok
            && e.uid == 0
            && e.mode & 0o1000 == 0
            && is_mount_point(&e.shown)
        {
            f.group_writable = false;
            f.others_writable = false;
        }
        f
    }

    /// `Ok` when `e` is trusted, else what refuses it.
    pub fn judge(&self, e: &Entry) -> Result<(), Untrusted> {
        if self.faults(e) == Faults::default() {
            return Ok(());
        }
        Err(if e.link {
            Untrusted::Link {
                path: e.shown.clone(),
                uid: e.uid,
            }
        } else {
            Untrusted::Changeable {
                path: e.shown.clone(),
                uid: e.uid,
                mode: e.mode,
            }
        })
    }
}

/// Whether `dir` (symlinks resolved) is where a file system is mounted in
/// this process's mount namespace (`/proc/self/mountinfo`'s fifth field);
/// false when that cannot be read.
fn is_mount_point(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStringExt as _;
    let Ok(real) = std::fs::canonicalize(dir) else {
        return false;
    };
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| Path::new(&OsString::from_vec(unescape_octal(m))) == real)
}

/// mountinfo writes space, tab, newline and backslash as `\NNN`.
fn unescape_octal(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push(
                    d.iter()
                        .fold(0u8, |n, c| n.wrapping_mul(8).wrapping_add(c - b'0')),
                );
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// Where a walk starts.
#[derive(Clone, Copy)]
pub enum Start<'a> {
    /// A path as given: from `/` when absolute, else from the working
    /// directory (shown by its name).
    Path,
    /// Beneath a held directory, shown as the path: the walk must stay
    /// beneath it (`RESOLVE_BENEATH`): no `..` above it, no absolute
    /// symlink.
    Beneath(BorrowedFd<'a>, &'a Path),
}

/// What a walk does with a symlink on the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Judged, then followed.
    Follow,
    /// Refused ([`PathError::Link`]), final name included.
    Refuse,
}

/// Where a walk ended: an `O_PATH` descriptor of what the path names (the
/// directory it ended on, when it ended on one by `..`, `/` or a link),
/// its status, the directory it is in (`None` when it ended on a
/// directory it had entered), and everything passed on the way.
#[derive(Debug)]
pub struct Walked {
    pub fd: OwnedFd,
    pub st: FileStat,
    pub shown: PathBuf,
    pub parent: Option<OwnedFd>,
    pub passed: Vec<Entry>,
}

impl Walked {
    /// A reading descriptor on the very file walked to, if it is a
    /// regular file: `/proc/self/fd/N` of the `O_PATH` descriptor, a
    /// magic link the kernel follows to that inode with no name looked up
    /// (an `O_PATH` descriptor cannot read; Linux has no other upgrade),
    /// `O_NONBLOCK` so no FIFO blocks, device and inode compared after.
    pub fn open_read(&self) -> Result<File, PathError> {
        let k = kind(&self.st);
        if k != SFlag::S_IFREG {
            return Err(PathError::NotRegular {
                path: self.shown.clone(),
                what: kind_name(k),
            });
        }
        let file = File::options()
            .read(true)
            .custom_flags((OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC).bits())
            .open(format!("/proc/self/fd/{}", self.fd.as_raw_fd()))
            .map_err(|e| PathError::io(&self.shown, e))?;
        let m = file.metadata().map_err(|e| PathError::io(&self.shown, e))?;
        if !m.is_file() || (m.dev(), m.ino()) != (self.st.st_dev, self.st.st_ino) {
            return Err(PathError::Replaced {
                path: self.shown.clone(),
            });
        }
        Ok(file)
    }

    /// The directory walked to, as a `cap_std` handle that reads and
    /// writes beneath it (`.` of the held descriptor: the same directory,
    /// no name looked up).
    pub fn dir(&self) -> Result<cap_std::fs::Dir, PathError> {
        open_dot(self.fd.as_fd(), &self.shown)
    }

    /// The directory holding what was walked to, as [`Self::dir`] does.
    pub fn parent_dir(&self) -> Result<cap_std::fs::Dir, PathError> {
        match &self.parent {
            Some(p) => open_dot(p.as_fd(), &self.shown),
            None => Err(PathError::NotDir {
                path: self.shown.clone(),
            }),
        }
    }
}

fn open_dot(fd: BorrowedFd<'_>, shown: &Path) -> Result<cap_std::fs::Dir, PathError> {
    nix::fcntl::openat(
        fd,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map(|fd| cap_std::fs::Dir::from_std_file(File::from(fd)))
    .map_err(|e| PathError::io(shown, e))
}

/// Walks `path` from `start`, symlinks as `links` says; `judge` sees each
/// directory before a name is looked up in it and each symlink before it
/// is followed, and stops the walk with its error. Nothing judged is
/// looked up by name again.
pub fn walk(
    start: Start<'_>,
    path: &Path,
    links: Links,
    judge: &mut dyn FnMut(&Entry) -> Result<(), PathError>,
) -> Result<Walked, PathError> {
    let open_dir = |at: BorrowedFd<'_>, name: &str, shown: &Path| {
        nix::fcntl::openat(
            at,
            name,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| PathError::io(shown, e))
    };
    let root = || open_dir(nix::fcntl::AT_FDCWD, "/", Path::new("/"));
    let (mut dir, mut shown, beneath) = match start {
        Start::Beneath(fd, shown) => (open_dir(fd, ".", shown)?, shown.to_owned(), Some(shown)),
        Start::Path if path.is_absolute() => (root()?, PathBuf::from("/"), None),
        Start::Path => {
            let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
            (open_dir(nix::fcntl::AT_FDCWD, ".", &cwd)?, cwd, None)
        }
    };
    let escapes = |what| PathError::Escapes {
        what,
        beneath: beneath.unwrap_or(Path::new("")).to_owned(),
    };
    if beneath.is_some() && path.has_root() {
        return Err(escapes("an absolute path"));
    }
    let mut todo: Vec<OsString> = Vec::new();
    push_names(&mut todo, path);
    let mut parent: Option<OwnedFd> = None;
    let mut passed = Vec::new();
    let (mut depth, mut followed) = (0usize, 0usize);
    while let Some(name) = todo.pop() {
        if name == "/" {
            if beneath.is_some() {
                return Err(escapes("a symlink"));
            }
            (dir, shown, parent) = (root()?, PathBuf::from("/"), None);
            continue;
        }
        let dst = nix::sys::stat::fstat(&dir).map_err(|e| PathError::io(&shown, e))?;
        let entry = Entry::of(shown.clone(), dir.as_fd(), &dst, false);
        judge(&entry)?;
        let dir_read_only = entry.read_only;
        passed.push(entry);
        if name == ".." {
            if beneath.is_some() {
                depth = depth.checked_sub(1).ok_or_else(|| escapes("a path"))?;
            }
            dir = open_dir(dir.as_fd(), "..", &shown)?;
            (shown, parent) = (shown.parent().unwrap_or(&shown).to_owned(), None);
            continue;
        }
        let here = shown.join(&name);
        if todo.is_empty() {
            between_check_and_open();
        }
        let fd = nix::fcntl::openat(
            &dir,
            name.as_os_str(),
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| PathError::io(&here, e))?;
        let st = nix::sys::stat::fstat(&fd).map_err(|e| PathError::io(&here, e))?;
        match kind(&st) {
            SFlag::S_IFLNK if links == Links::Refuse => {
                return Err(PathError::Link { path: here });
            }
            SFlag::S_IFLNK => {
                followed += 1;
                if followed > MAX_LINKS {
                    return Err(PathError::Loop { path: here });
                }
                // Read from the link's own descriptor: the very link
                // judged, not whatever the name holds now.
                let target =
                    nix::fcntl::readlinkat(&fd, "").map_err(|e| PathError::io(&here, e))?;
                let entry = Entry::of(here, fd.as_fd(), &st, dir_read_only);
                judge(&entry)?;
                passed.push(entry);
                let target = Path::new(&target);
                if target.is_absolute() && beneath.is_some() {
                    return Err(escapes("a symlink"));
                }
                push_names(&mut todo, target);
            }
            SFlag::S_IFDIR if !todo.is_empty() => {
                parent = Some(std::mem::replace(&mut dir, fd));
                shown = here;
                depth += 1;
            }
            _ if !todo.is_empty() => return Err(PathError::NotDir { path: here }),
            _ => {
                return Ok(Walked {
                    fd,
                    st,
                    shown: here,
                    parent: Some(dir),
                    passed,
                });
            }
        }
    }
    // Ended on a directory reached by `..`, `/` or a link (or named none
    // at all: `.`).
    let st = nix::sys::stat::fstat(&dir).map_err(|e| PathError::io(&shown, e))?;
    Ok(Walked {
        fd: dir,
        st,
        shown,
        parent,
        passed,
    })
}

/// `p`'s names pushed so that the first is popped first: `/` (start again
/// at the root), `..` and names; `.` dropped.
fn push_names(todo: &mut Vec<OsString>, p: &Path) {
    for c in p.components().rev() {
        todo.push(match c {
            Component::RootDir | Component::Prefix(_) => "/".into(),
            Component::ParentDir => "..".into(),
            Component::CurDir => continue,
            Component::Normal(n) => n.to_owned(),
        });
    }
}

fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT
}

/// What kind of file other than a regular one `k` is, for messages.
pub fn kind_name(k: SFlag) -> &'static str {
    match k {
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFIFO => "a FIFO",
        SFlag::S_IFSOCK => "a socket",
        SFlag::S_IFCHR | SFlag::S_IFBLK => "a device",
        SFlag::S_IFLNK => "a symlink",
        _ => "a regular file",
    }
}

/// Whether `fd` is on a read-only mount.
pub fn read_only(fd: BorrowedFd<'_>) -> bool {
    nix::sys::statvfs::fstatvfs(fd)
        .is_ok_and(|v| v.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
}

#[cfg(test)]
thread_local! {
    /// A step a unit test injects into [`walk`] after it judged the way and
    /// before it opens the last name: a swap there is what an attacker
    /// racing the walk would do.
    pub(crate) static BETWEEN_CHECK_AND_OPEN: std::cell::RefCell<Option<Box<dyn FnOnce()>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs the step a unit test injected, once; nothing outside tests.
fn between_check_and_open() {
    #[cfg(test)]
    BETWEEN_CHECK_AND_OPEN.with(|h| {
        if let Some(step) = h.borrow_mut().take() {
            step();
        }
    });
}

#[cfg(test)]
mod tests;
