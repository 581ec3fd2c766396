//! The walk: a path resolved one name at a time beneath held directory handles, each step judged before the next.

use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd as _, BorrowedFd, OwnedFd};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::OFlag;
use nix::sys::stat::{FileStat, Mode, SFlag};

/// Linux's own limit on symlinks in one lookup (`MAXSYMLINKS`).
const MAX_LINKS: usize = 40;

/// How many directories deep a walk goes. It holds a descriptor for each
/// directory it entered (`..` goes back to it), so a deeper way (none a
/// certificate lies on) is refused by name rather than failing on the
/// process's descriptor limit.
pub const MAX_DEPTH: usize = 256;

/// Why a path was not opened or read, or what the rule refused; the path as
/// shown (as written, or as the link that led there reads).
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
    #[error(
        "a symlink loop (or more than {MAX_LINKS} symlinks on the way) at {path}; refusing \
         to follow it"
    )]
    Loop { path: PathBuf },
    #[error("more than {MAX_DEPTH} directories deep (at {path}); refusing to walk further")]
    TooDeep { path: PathBuf },
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
    /// More bytes than the reader's limit ([`super::read_capped`]).
    #[error("{path}: larger than the {limit}-byte limit")]
    TooLarge { path: PathBuf, limit: u64 },
    // What [`Trust`] refused.
    #[error("{} (a symlink of uid {uid}) may be changed by another user", path.display())]
    LinkChangeable { path: PathBuf, uid: u32 },
    #[error("{} (owner {uid}, mode {mode:04o}) may be changed by another user", path.display())]
    Changeable { path: PathBuf, uid: u32, mode: u32 },
    /// A target directory another user may write, who could plant the
    /// entries certsync keeps there.
    #[error(
        "{} (owner {uid}, mode {mode:04o}) may be changed by another user, who could plant \
         the entries certsync keeps there (..data, ..pin, ..history) for it to obey; a \
         directory others may write (a volume's root) is no target: name a subdirectory \
         of it (as /certs/web in a /certs volume), which certsync makes root's, 0755",
        target.display()
    )]
    Target {
        target: PathBuf,
        uid: u32,
        mode: u32,
    },
    // What concerns the file (or directory) a caller names itself, said
    // without its path: the caller names it, as the kernel would.
    /// The file read (or a directory certsync made and holds) may be
    /// changed by another user.
    #[error("owner {uid}, mode {mode:04o}: may be changed by another user")]
    FileChangeable { uid: u32, mode: u32 },
    /// The file read has another name, which may be another user's.
    #[error(
        "a hard link (links {links}): another name of the file may be another user's, or \
         root's file linked where a user chose; give it one link"
    )]
    HardLink { links: u64 },
    /// A symlink whose destination does not exist (yet): where it will
    /// lead, and who may change that, cannot be judged.
    #[error("is a symbolic link to a path that does not exist yet, which may be made by anyone")]
    Dangling,
    /// The current directory, to make a relative path absolute.
    #[error("the working directory: {0}")]
    WorkingDirectory(#[source] io::Error),
}

impl PathError {
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }

    /// What is wrong with the file itself, without its path (for callers
    /// that name it); what concerns the way to it, whole.
    pub fn problem(&self) -> String {
        let whole = self.to_string();
        match self {
            Self::Io { path, .. }
            | Self::NotRegular { path, .. }
            | Self::Replaced { path }
            | Self::TooLarge { path, .. } => whole
                .strip_prefix(&format!("{}: ", path.display()))
                .map_or_else(|| whole.clone(), str::to_owned),
            _ => whole,
        }
    }

    pub(super) fn io(path: &Path, e: impl Into<io::Error>) -> Self {
        Self::Io {
            path: path.to_owned(),
            source: e.into(),
        }
    }
}

/// One directory a name was looked up in, one symlink followed, or a file:
/// what [`super::Trust`] judges.
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
    /// As [`Start::Beneath`], except that an absolute symlink naming the
    /// held directory (as shown, or by the kernel's name for it) leads back
    /// into it: kubelet links `kubelet-server-current.pem` to the dated
    /// file by its full path. Any other absolute symlink is refused.
    Volume(BorrowedFd<'a>, &'a Path),
}

/// What a walk does with a symlink on the way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Links {
    /// Judged, then followed.
    Follow,
    /// Refused ([`PathError::Link`]), final name included.
    Refuse,
    /// Judged, then followed on the way; the final name refused
    /// ([`PathError::Link`]) as `O_NOFOLLOW` does: for a file whose name
    /// another writer shares (a pidfile, a file in /etc/kubernetes), where
    /// a link planted there would lead root to another file.
    RefuseLast,
}

/// Where a walk ended: an `O_PATH` descriptor of what the path names (the
/// directory it ended on, when it ended on one by `..`, `/` or a link),
/// its status, the directory it is in (`None` for `/` and for a directory
/// above where the walk began), and everything passed on the way.
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
        if let Some(what) = not_regular(&self.st) {
            let path = self.shown.clone();
            return Err(PathError::NotRegular { path, what });
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

    /// Whether the walk ended on a directory.
    pub fn is_dir(&self) -> bool {
        kind(&self.st) == SFlag::S_IFDIR
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
    let (dir, shown, beneath) = begin(start, path)?;
    let last_refused = links == Links::RefuseLast;
    let mut w = Walk {
        dir,
        shown,
        beneath,
        entered: Vec::new(),
        passed: Vec::new(),
        todo: Vec::new(),
        followed: 0,
    };
    if w.beneath.is_some() && path.has_root() {
        return Err(w.escapes("an absolute path"));
    }
    push_names(&mut w.todo, path);
    while let Some(name) = w.todo.pop() {
        if name == "/" {
            w.restart_at_root()?;
            continue;
        }
        let entry = Entry::held(&w.shown, w.dir.as_fd())?;
        judge(&entry)?;
        let dir_read_only = entry.read_only;
        w.passed.push(entry);
        if name == ".." {
            w.up()?;
            continue;
        }
        let here = w.shown.join(&name);
        #[cfg(test)]
        if w.todo.is_empty() {
            super::tests::between_check_and_open();
        }
        let fd = nix::fcntl::openat(
            &w.dir,
            name.as_os_str(),
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| PathError::io(&here, e))?;
        let st = nix::sys::stat::fstat(&fd).map_err(|e| PathError::io(&here, e))?;
        match kind(&st) {
            SFlag::S_IFLNK if links == Links::Refuse || (last_refused && w.todo.is_empty()) => {
                return Err(PathError::Link { path: here });
            }
            SFlag::S_IFLNK => {
                let entry = Entry::of(here, fd.as_fd(), &st, dir_read_only);
                w.follow(&fd, entry, judge)?;
            }
            SFlag::S_IFDIR if !w.todo.is_empty() => w.enter(fd, here)?,
            _ if !w.todo.is_empty() => return Err(PathError::NotDir { path: here }),
            _ => {
                return Ok(Walked {
                    fd,
                    st,
                    shown: here,
                    parent: Some(w.dir),
                    passed: w.passed,
                });
            }
        }
    }
    // Ended on a directory reached by `..`, `/` or a link (or named none
    // at all: `.`); what holds it is the one it was entered from, if any.
    let st = nix::sys::stat::fstat(&w.dir).map_err(|e| PathError::io(&w.shown, e))?;
    Ok(Walked {
        fd: w.dir,
        st,
        shown: w.shown,
        parent: w.entered.pop().map(|(fd, _)| fd),
        passed: w.passed,
    })
}

/// A walk under way: the directory it is in (a name looked up next is
/// looked up there), as shown.
struct Walk<'a> {
    dir: OwnedFd,
    shown: PathBuf,
    /// What the walk must stay beneath ([`Start::Beneath`]).
    beneath: Option<Held<'a>>,
    /// The directories entered on the way, each with its name as shown:
    /// `..` goes back to the one the walk came from, never to where the
    /// current directory's `..` points now. A user who renames a
    /// directory while root walks in it would otherwise move the walk
    /// (and a [`Start::Beneath`] walk out of its start) to wherever they
    /// put it.
    entered: Vec<(OwnedFd, PathBuf)>,
    passed: Vec<Entry>,
    /// The names still to walk, the next last.
    todo: Vec<OsString>,
    followed: usize,
}

/// The directory a walk must stay beneath, as shown, and the absolute
/// names that lead back into it ([`Start::Volume`]; none otherwise).
struct Held<'a> {
    fd: BorrowedFd<'a>,
    shown: &'a Path,
    names: Vec<PathBuf>,
}

impl Walk<'_> {
    fn escapes(&self, what: &'static str) -> PathError {
        PathError::Escapes {
            what,
            beneath: self
                .beneath
                .as_ref()
                .map_or(Path::new(""), |b| b.shown)
                .to_owned(),
        }
    }

    /// An absolute symlink's target: from `/` again, or, beneath a start,
    /// from the start (only a link naming it leads here: see `follow`).
    fn restart_at_root(&mut self) -> Result<(), PathError> {
        (self.dir, self.shown) = match &self.beneath {
            Some(b) => (open_dir(b.fd, ".", b.shown)?, b.shown.to_owned()),
            None => (
                open_dir(nix::fcntl::AT_FDCWD, "/", Path::new("/"))?,
                PathBuf::from("/"),
            ),
        };
        self.entered.clear();
        Ok(())
    }

    /// `..`: back to the directory entered from.
    fn up(&mut self) -> Result<(), PathError> {
        (self.dir, self.shown) = match self.entered.pop() {
            Some(back) => back,
            None if self.beneath.is_some() => return Err(self.escapes("a path")),
            // Above where a walk from `/` or the working directory began:
            // `/`'s `..` is itself; the working directory's parents were
            // never entered.
            None => (
                open_dir(self.dir.as_fd(), "..", &self.shown)?,
                self.shown.parent().unwrap_or(&self.shown).to_owned(),
            ),
        };
        Ok(())
    }

    fn enter(&mut self, fd: OwnedFd, here: PathBuf) -> Result<(), PathError> {
        if self.entered.len() >= MAX_DEPTH {
            return Err(PathError::TooDeep { path: here });
        }
        let left = std::mem::replace(&mut self.dir, fd);
        let shown = std::mem::replace(&mut self.shown, here);
        self.entered.push((left, shown));
        Ok(())
    }

    /// The symlink `link` (opened `O_PATH`, judged as `entry`): its target
    /// read from its own descriptor, the very link judged, not whatever
    /// the name holds now, and walked next.
    fn follow(
        &mut self,
        link: &OwnedFd,
        entry: Entry,
        judge: &mut dyn FnMut(&Entry) -> Result<(), PathError>,
    ) -> Result<(), PathError> {
        self.followed += 1;
        if self.followed > MAX_LINKS {
            return Err(PathError::Loop { path: entry.shown });
        }
        let target =
            nix::fcntl::readlinkat(link, "").map_err(|e| PathError::io(&entry.shown, e))?;
        judge(&entry)?;
        self.passed.push(entry);
        let target = Path::new(&target);
        match &self.beneath {
            Some(b) if target.is_absolute() => {
                let inside = b.names.iter().find_map(|n| target.strip_prefix(n).ok());
                let Some(inside) = inside else {
                    return Err(self.escapes("a symlink"));
                };
                push_names(&mut self.todo, inside);
                // Back to the start, then the rest.
                self.todo.push("/".into());
            }
            _ => push_names(&mut self.todo, target),
        }
        Ok(())
    }
}

/// The directory `path` is walked from, as shown, and what it must stay
/// beneath, if anything.
fn begin<'a>(
    start: Start<'a>,
    path: &Path,
) -> Result<(OwnedFd, PathBuf, Option<Held<'a>>), PathError> {
    Ok(match start {
        Start::Beneath(fd, shown) | Start::Volume(fd, shown) => {
            // The kernel's name for the held directory: what a link by its
            // real path says, whatever symlink the start was named through.
            let names = match start {
                Start::Volume(..) => [Some(shown.to_owned()), fd_path(fd).ok()]
                    .into_iter()
                    .flatten()
                    .filter(|n| n.is_absolute())
                    .collect(),
                _ => Vec::new(),
            };
            let held = Held { fd, shown, names };
            (open_dir(fd, ".", shown)?, shown.to_owned(), Some(held))
        }
        Start::Path if path.is_absolute() => (
            open_dir(nix::fcntl::AT_FDCWD, "/", Path::new("/"))?,
            PathBuf::from("/"),
            None,
        ),
        Start::Path => {
            let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
            (open_dir(nix::fcntl::AT_FDCWD, ".", &cwd)?, cwd, None)
        }
    })
}

/// `name` beneath `at`, a directory (`O_PATH`: nothing read, no device
/// opened).
pub(super) fn open_dir(at: BorrowedFd<'_>, name: &str, shown: &Path) -> Result<OwnedFd, PathError> {
    nix::fcntl::openat(
        at,
        name,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| PathError::io(shown, e))
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

/// The type of what `st` is the status of (`S_IFMT`).
fn kind(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT
}

/// What kind of file other than a regular one `st` is, for messages;
/// `None` for a regular file.
pub fn not_regular(st: &FileStat) -> Option<&'static str> {
    Some(match kind(st) {
        SFlag::S_IFREG => return None,
        SFlag::S_IFDIR => "a directory",
        SFlag::S_IFIFO => "a FIFO",
        SFlag::S_IFSOCK => "a socket",
        SFlag::S_IFLNK => "a symlink",
        SFlag::S_IFCHR | SFlag::S_IFBLK => "a device",
        _ => "a file of no known kind",
    })
}

/// The kernel's name for what `fd` holds (`/proc/self/fd/N`): where it
/// really is, whatever way led to it.
pub fn fd_path(fd: BorrowedFd<'_>) -> io::Result<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Whether `fd` is on a read-only mount.
fn read_only(fd: BorrowedFd<'_>) -> bool {
    nix::sys::statvfs::fstatvfs(fd)
        .is_ok_and(|v| v.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
}
