//! A revision on disk, named, read and judged; the file-level helpers
//! every part uses.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, MetadataExt, OpenOptions, OpenOptionsExt};
use nix::fcntl::OFlag;

use super::error::{Ctx, WriterError};
use super::layout::{DATA, NotOwn, REV_PREFIX, RevisionProblem, TMP_PREFIX, own};
use crate::beneath::{self, Links, PathError, Start};
use crate::bundle::{Bundle, ContentHash};
use crate::validate::MAX_PUBLISHED_SIZE;

/// A revision name: `..rev-NNNNNN-HHHHHHHH` (live) or `NNNNNN-HHHHHHHH` (history).
pub(super) fn parse_rev(name: &str) -> Option<(u64, &str)> {
    let (num, hash) = name.split_once('-')?;
    let ok = num.len() >= 6
        && num.bytes().all(|b| b.is_ascii_digit())
        && hash.len() == 8
        && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    ok.then(|| (num.parse().ok(), hash))
        .and_then(|(n, h)| Some((n?, h)))
}

pub(super) fn rev_name(revision: u64, hash: &ContentHash) -> String {
    format!("{revision:06}-{}", hash.short())
}

/// (mode, uid, gid, links).
pub(super) type FileMeta = (u32, u32, u32, u64);

#[derive(Default)]
pub(super) struct Revision {
    pub(super) bundle: Bundle,
    pub(super) meta: BTreeMap<String, FileMeta>,
}

/// Whether `e`, from an open of a file in a target, is one its planter can
/// cause at will: EWOULDBLOCK while its owner holds a lease (root's open
/// too), EACCES or EPERM for another user's file, ELOOP a link, ENOTDIR,
/// EISDIR or ENXIO not a regular file, ETXTBSY. Such a file is not
/// certsync's (removed) or unreadable (drift), never a stop of every write.
/// Any other failure (out of descriptors, a volume's EIO or ESTALE) says
/// nothing of the file: an error, never taken for "not ours", which would
/// remove what certsync keeps (the operator's pin, a held `..lock`).
pub(super) fn said_by_the_file(e: &io::Error) -> bool {
    use nix::libc::{EACCES, EISDIR, ELOOP, ENOTDIR, ENXIO, EPERM, ETXTBSY, EWOULDBLOCK};
    let errno = e.raw_os_error();
    matches!(
        errno,
        Some(EACCES | EISDIR | ELOOP | ENOTDIR | ENXIO | EPERM | ETXTBSY | EWOULDBLOCK)
    )
}

/// A read in a target whose failure, if any, is the file's (`Ok`); one
/// that says nothing of the file (not [`said_by_the_file`]) is an error,
/// never taken for what is there.
pub(super) fn said<T>(read: Result<T, PathError>) -> Result<Result<T, PathError>, WriterError> {
    match read {
        Err(PathError::Io { path, source }) if !said_by_the_file(&source) => Err(WriterError::Io {
            op: "read",
            path,
            source,
        }),
        read => Ok(read),
    }
}

/// What [`judged`] found under a name in a target.
pub(super) enum Found {
    /// A directory of certsync's own ([`own`]), opened.
    Own(Dir),
    Missing,
    /// A link or not a directory (`None`), or a directory that is not
    /// certsync's own: whoever may write the target may have put it there.
    Planted(Option<NotOwn>),
}

/// `name` in `parent` (`shown` in messages), opened without following and
/// judged as opened (`fstat` of the handle), never by a look at the name
/// and an open of it: a swap between the two would be trusted. A failure
/// that says nothing of what is there (EMFILE at the open-file limit) is an
/// error, never taken for "not ours", which would remove what certsync
/// keeps (the rollback revisions, the revision just retired).
pub(super) fn judged(parent: &Dir, name: &str, shown: &Path) -> Result<Found, WriterError> {
    #[cfg(test)]
    super::planted_tests::fails(name).ctx("open", shown)?;
    match parent.open_dir_nofollow(name) {
        Ok(dir) => {
            let m = dir.dir_metadata().ctx("stat", shown)?;
            Ok(match own(m.uid(), m.mode()) {
                Ok(()) => Found::Own(dir),
                Err(not) => Found::Planted(Some(not)),
            })
        }
        Err(e) if e.raw_os_error() == Some(nix::libc::ENOENT) => Ok(Found::Missing),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(nix::libc::ELOOP | nix::libc::ENOTDIR)
            ) =>
        {
            Ok(Found::Planted(None))
        }
        Err(e) => Err(e).ctx("open", shown),
    }
}

/// Reads the revision directory `name` of `parent` (never through a
/// symlink), if it is certsync's own ([`judged`]; one that is not is never
/// read): its regular files with their modes and owners. `Err`: it could not
/// be looked at (an open or read failing for a reason that says nothing of
/// what is there: not [`said_by_the_file`]), never taken for a revision that is unreadable,
/// which drift would write again and a rollback would refuse.
pub(super) fn read_revision_at(
    parent: &Dir,
    name: &str,
    shown: &Path,
) -> Result<Result<Revision, RevisionProblem>, WriterError> {
    use RevisionProblem::{NotADirectory, NotOwn};
    let not = |problem| Ok(Err(problem));
    let dir = match judged(parent, name, shown)? {
        Found::Own(dir) => dir,
        Found::Missing => return not(NotADirectory(shown.to_owned(), "missing")),
        Found::Planted(None) => return not(NotADirectory(shown.to_owned(), "not a directory")),
        Found::Planted(Some(why)) => return not(NotOwn(shown.to_owned(), why)),
    };
    let mut rev = Revision::default();
    for name in list(&dir, shown)? {
        let path = shown.join(&name);
        let (bytes, meta) = match said(read_file(&dir, &name, &path))? {
            Ok(read) => read,
            Err(e) => return not(RevisionProblem::File(e)),
        };
        if let Err(e) = rev.bundle.insert(&name, bytes, path.display().to_string()) {
            return not(RevisionProblem::Bundle(e));
        }
        rev.meta.insert(name, meta);
    }
    Ok(Ok(rev))
}

/// The directory of a copy outside the target (`update-pair=`,
/// `update-kubeconfig=`), opened by one walk judging each step on its
/// descriptor ([`crate::files::owned_dir`], strictly); the copy is read and
/// replaced beneath that handle, never its path again.
pub(super) fn copy_dir(dir: &Path) -> Result<Dir, WriterError> {
    crate::files::owned_dir(dir, crate::beneath::Trust::STRICT).map_err(|problem| match problem {
        PathError::Io { path, source } => WriterError::Io {
            op: "open directory",
            path,
            source,
        },
        problem => WriterError::DirOthersMayChange(problem),
    })
}

/// `name` beneath a copy's directory ([`copy_dir`]), refused unless it is
/// certsync's own ([`own`]): whoever else may write it chooses what
/// certsync reads there and judges fit to replace.
pub(super) fn read_copy(
    dir: &Dir,
    name: &str,
    shown: &Path,
) -> Result<(Vec<u8>, FileMeta), WriterError> {
    let file = || name.to_owned();
    let (bytes, meta) =
        read_file(dir, name, &shown.join(name)).map_err(|problem| WriterError::CopyUnreadable {
            file: file(),
            problem,
        })?;
    let (mode, uid, ..) = meta;
    own(uid, mode).map_err(|NotOwn { uid, mode }| WriterError::CopyNotOwn {
        file: file(),
        uid,
        mode,
        euid: nix::unistd::geteuid().as_raw(),
    })?;
    Ok((bytes, meta))
}

/// Reads `name` in `dir` without following it or blocking on it, if the
/// descriptor walked to is a regular file (by its `fstat`; a symlink is
/// none) within the published size limit: the bytes and its [`FileMeta`].
pub(super) fn read_file(
    dir: &Dir,
    name: &str,
    path: &Path,
) -> Result<(Vec<u8>, FileMeta), PathError> {
    use std::os::fd::AsFd as _;
    #[cfg(test)]
    super::planted_tests::fails(name).map_err(|source| PathError::Io {
        path: path.to_owned(),
        source,
    })?;
    let start = Start::Beneath(dir.as_fd(), path.parent().unwrap_or(Path::new("")));
    let walked = beneath::walk(start, Path::new(name), Links::Refuse, &mut |_| Ok(())).map_err(
        |e| match e {
            PathError::Link { path } => PathError::NotRegular {
                path,
                what: "a symlink",
            },
            e => e,
        },
    )?;
    let st = &walked.st;
    let bytes = walked.read(MAX_PUBLISHED_SIZE as u64)?;
    Ok((
        bytes,
        (st.st_mode & 0o7777, st.st_uid, st.st_gid, st.st_nlink),
    ))
}

/// Creates `name` in `dir` with exactly `mode` (never more permissive on
/// the way: created with it, then chowned, then set) and writes it; the
/// fsync is the caller's.
pub(super) fn create_file(
    dir: &Dir,
    name: &str,
    mode: u32,
    (owner, group): (Option<u32>, Option<u32>),
    bytes: &[u8],
    path: &Path,
) -> Result<File, WriterError> {
    let mut f = dir
        .open_with(
            name,
            OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .custom_flags(OFlag::O_CLOEXEC.bits())
                .follow(FollowSymlinks::No),
        )
        .ctx("create", path)?
        .into_std();
    if owner.is_some() || group.is_some() {
        std::os::unix::fs::fchown(&f, owner, group).ctx("chown", path)?;
    }
    f.set_permissions(fs::Permissions::from_mode(mode))
        .ctx("chmod", path)?;
    f.write_all(bytes).ctx("write", path)?;
    Ok(f)
}

/// Replaces `name` in `dir` with `bytes` atomically: a temporary file
/// created with `mode` (and `owner`, else certsync's user), written,
/// fsynced, renamed over `name`, the directory fsynced. Readers see the
/// old file or the new one, never part. `dir` is a handle the caller
/// opened (never its path again).
pub fn replace_beneath(
    dir: &Dir,
    name: &str,
    mode: u32,
    owner: Option<(u32, u32)>,
    bytes: &[u8],
    shown: &Path,
) -> Result<(), WriterError> {
    let tmp = tmp_name(name);
    let tmp_path = shown.join(&tmp);
    remove_any(dir, &tmp, &tmp_path)?;
    let owner = owner.map_or((None, None), |(u, g)| (Some(u), Some(g)));
    let written = create_file(dir, &tmp, mode, owner, bytes, &tmp_path)
        .and_then(|f| f.sync_all().ctx("fsync", &tmp_path))
        .and_then(|()| dir.rename(&tmp, dir, name).ctx("rename", &shown.join(name)));
    if let Err(e) = written {
        let _ = remove_any(dir, &tmp, &tmp_path);
        return Err(e);
    }
    fsync(dir, shown)
}

/// The temporary entry a replacement of `name` is written to first: a
/// dot name not ending as `name` does, so a reader picking files by their
/// ending (`*.prom`, `*.crt`) never reads one half-written; cut to fit 255
/// bytes (two long names may share one: replacements run one at a time).
pub(super) fn tmp_name(name: &str) -> String {
    const FITS: usize = 255 - TMP_PREFIX.len() - "-.tmp".len();
    let name = name.trim_start_matches('.');
    let mut cut = name.len().min(FITS);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{TMP_PREFIX}-{}.tmp", &name[..cut])
}

/// [`replace_beneath`] for a path that is not a target: its directory
/// opened through [`crate::files::owned_dir`] (root's or certsync's user's
/// and written by no one else, all the way): a directory another user
/// could swap for a link would choose where root writes.
pub fn replace_file(path: &Path, mode: u32, bytes: &[u8]) -> Result<(), WriterError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
    else {
        return Err(WriterError::Foreign {
            path: path.to_owned(),
            what: "not a file path",
        });
    };
    let dir = crate::files::owned_dir(parent, crate::files::OWNED_WAY).map_err(|problem| {
        WriterError::Unowned {
            dir: parent.to_owned(),
            problem,
        }
    })?;
    replace_beneath(&dir, name, mode, None, bytes, parent)
}

/// A symlink's text, and whether it is certsync's user's ([`own`]).
pub(super) type Link = (String, Result<(), NotOwn>);

/// The text of the symlink `name`, and whether it is certsync's user's
/// ([`own`]), looked at and read on one handle (`O_PATH|O_NOFOLLOW`,
/// `fstat`, `readlinkat`): a link exchanged between a look at the name and
/// a read of it would be taken for certsync's, and its number counted.
/// Missing, not a link or not UTF-8: none. Any other failure (EMFILE) says
/// nothing of the link: an error, never "none of certsync's", which had
/// tidy retire the revision just made live.
pub(super) fn link_at(dir: &Dir, name: &str, shown: &Path) -> Result<Option<Link>, WriterError> {
    use nix::fcntl::{OFlag, openat, readlinkat};
    #[cfg(test)]
    super::planted_tests::fails(name).ctx("open", shown)?;
    let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = match openat(dir, name, flags, nix::sys::stat::Mode::empty()) {
        Err(nix::errno::Errno::ENOENT) => return Ok(None),
        fd => fd.map_err(io::Error::from).ctx("open", shown)?,
    };
    let st = nix::sys::stat::fstat(&fd).map_err(io::Error::from);
    let st = st.ctx("stat", shown)?;
    if st.st_mode & nix::libc::S_IFMT != nix::libc::S_IFLNK {
        return Ok(None);
    }
    let text = readlinkat(&fd, "")
        .map_err(io::Error::from)
        .ctx("read", shown)?;
    Ok(text.into_string().ok().map(|t| (t, own(st.st_uid, 0))))
}

/// The number and name of the revision certsync's own `..data` names
/// ([`link_at`]): one of another user's names none certsync made.
pub(super) fn own_live(root: &Dir, shown: &Path) -> Result<Option<(u64, String)>, WriterError> {
    let Some((name, Ok(()))) = link_at(root, DATA, shown)? else {
        return Ok(None);
    };
    let number = name
        .strip_prefix(REV_PREFIX)
        .and_then(parse_rev)
        .map(|(n, _)| n);
    Ok(number.map(|n| (n, name)))
}

/// The text of the symlink `name`, whoever's it is, for what is shown or
/// repaired (never counted: [`link_at`] is for that).
pub(super) fn read_link(dir: &Dir, name: &str) -> Option<String> {
    let link = dir.read_link_contents(name).ok()?;
    link.to_str().map(str::to_owned)
}

/// Names in `dir`, sorted.
pub(super) fn list(dir: &Dir, shown: &Path) -> Result<Vec<String>, WriterError> {
    let mut names = Vec::new();
    for entry in dir.entries().ctx("list", shown)? {
        let entry = entry.ctx("list", shown)?;
        if let Some(n) = entry.file_name().to_str() {
            names.push(n.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// Atomically points `<dir>/<name>` at `text`: a fresh symlink renamed
/// over the old entry (`rename(2)` replaces the link itself).
pub(super) fn replace_symlink(
    dir: &Dir,
    name: &str,
    text: &str,
    shown: &Path,
) -> Result<(), WriterError> {
    let tmp = tmp_name(name);
    remove_any(dir, &tmp, &shown.join(&tmp))?;
    dir.symlink_contents(text, &tmp)
        .ctx("symlink", &shown.join(&tmp))?;
    dir.rename(&tmp, dir, name).ctx("rename", &shown.join(name))
}

/// Removes the entry `name` of `dir` of any kind, never following a
/// symlink. Missing is fine.
pub(super) fn remove_any(dir: &Dir, name: &str, path: &Path) -> Result<(), WriterError> {
    remove_at(dir, name.as_ref(), path, 0)
}

/// [`remove_any`] `depth` directories down: a directory's entries one by
/// one, at most [`beneath::MAX_DEPTH`] deep, else refused. cap-std's
/// `remove_dir_all` recurses once per level without a bound: a planted
/// chain thousands of directories deep overflowed the stack and aborted
/// certsync at every publish.
fn remove_at(
    dir: &Dir,
    name: &std::ffi::OsStr,
    path: &Path,
    depth: usize,
) -> Result<(), WriterError> {
    match dir.symlink_metadata(name) {
        Ok(m) if m.is_dir() && depth >= beneath::MAX_DEPTH => Err(WriterError::Foreign {
            path: path.to_owned(),
            what: "a directory tree deeper than certsync removes (remove it by hand)",
        }),
        Ok(m) if m.is_dir() => {
            let sub = dir.open_dir_nofollow(name).ctx("open", path)?;
            for entry in sub.entries().ctx("list", path)? {
                let name = entry.ctx("list", path)?.file_name();
                remove_at(&sub, &name, &path.join(&name), depth + 1)?;
            }
            dir.remove_dir(name).ctx("remove", path)
        }
        Ok(_) => dir.remove_file(name).ctx("remove", path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).ctx("stat", path),
    }
}

/// fsync of a directory, through `.` (cap-std's handles are `O_PATH`).
pub(super) fn fsync(dir: &Dir, path: &Path) -> Result<(), WriterError> {
    dir.open(".").and_then(|d| d.sync_all()).ctx("fsync", path)
}
