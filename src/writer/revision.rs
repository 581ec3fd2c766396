//! A revision on disk, named, read and judged; the file-level helpers
//! (create with the final mode, replace by rename, read without
//! following, fsync) every part uses.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, MetadataExt, OpenOptions, OpenOptionsExt};
use nix::fcntl::OFlag;

use super::error::{Ctx, WriterError};
use super::layout::{NotOwn, RevisionProblem, TMP_PREFIX, own};
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

/// A file's (mode, uid, gid).
pub(super) type FileMeta = (u32, u32, u32);

/// A revision's files as read, with each file's mode and owner.
pub(super) struct Revision {
    pub(super) bundle: Bundle,
    pub(super) meta: BTreeMap<String, FileMeta>,
    /// Each file's link count.
    pub(super) links: BTreeMap<String, u64>,
}

/// Reads the revision directory `name` of `parent` (never through a
/// symlink), if it is certsync's own ([`own`]). `Err` carries why it
/// cannot be trusted.
pub(super) fn read_revision_at(
    parent: &Dir,
    name: &str,
    shown: &Path,
) -> Result<Revision, RevisionProblem> {
    let dir = parent
        .open_dir_nofollow(name)
        .map_err(|e| RevisionProblem::Unopenable {
            path: shown.to_owned(),
            problem: not_a_dir(e),
        })?;
    dir.dir_metadata()
        .map_err(|e| e.to_string())
        .and_then(|m| own(m.uid(), m.mode()).map_err(|p| p.to_string()))
        .map_err(|problem| RevisionProblem::Unopenable {
            path: shown.to_owned(),
            problem,
        })?;
    read_revision(&dir, shown)
}

pub(super) fn not_a_dir(e: io::Error) -> String {
    match e.raw_os_error() {
        Some(nix::libc::ELOOP) | Some(nix::libc::ENOTDIR) => "not a directory".into(),
        _ => e.to_string(),
    }
}

/// Reads a revision directory's regular files with their modes and owners.
/// `Err` carries why it cannot be trusted (a planted symlink or FIFO, a
/// subdirectory, an unreadable file).
pub(super) fn read_revision(dir: &Dir, shown: &Path) -> Result<Revision, RevisionProblem> {
    let unreadable = |e: &dyn std::fmt::Display| RevisionProblem::Unreadable(e.to_string());
    let mut rev = Revision {
        bundle: Bundle::default(),
        meta: BTreeMap::new(),
        links: BTreeMap::new(),
    };
    for name in list(dir, shown).map_err(|e| unreadable(&e))? {
        let path = shown.join(&name);
        let (bytes, meta, links) = read_file(dir, &name, &path).map_err(|e| unreadable(&e))?;
        rev.bundle
            .insert(&name, bytes, path.display().to_string())
            .map_err(|e| unreadable(&e))?;
        rev.meta.insert(name.clone(), meta);
        rev.links.insert(name, links);
    }
    Ok(rev)
}

/// Whether a revision's files are as certsync wrote them: one link each
/// (a second name may be anywhere: root's key linked into a history
/// entry), and one owner and group for all of them (every file of a
/// revision is written with the same). `Err` names the file and why.
pub(super) fn as_written(rev: &Revision, shown: &Path) -> Result<(), RevisionProblem> {
    if let Some((name, &links)) = rev.links.iter().find(|(_, n)| **n > 1) {
        return Err(RevisionProblem::HardLink {
            path: shown.join(name),
            links,
        });
    }
    let owners: std::collections::BTreeSet<(u32, u32)> =
        rev.meta.values().map(|m| (m.1, m.2)).collect();
    if owners.len() > 1 {
        return Err(RevisionProblem::Owners(
            rev.meta
                .iter()
                .map(|(n, m)| (shown.join(n), m.1, m.2))
                .collect(),
        ));
    }
    Ok(())
}

/// The directory of a copy outside the target (`update-pair=`,
/// `update-kubeconfig=`), opened by one walk from `/` that judges every
/// directory and symlink on the way, the directory itself included, on
/// the descriptor it opened ([`crate::files::root_only_dir`]); what the
/// copy reads and replaces is beneath that handle, never its path again.
pub(super) fn copy_dir(dir: &Path) -> Result<Dir, WriterError> {
    crate::files::root_only_dir(dir).map_err(|problem| match problem {
        crate::files::OwnedError::Way(PathError::Io { path, source }) => WriterError::Io {
            op: "open directory",
            path,
            source,
        },
        problem => WriterError::DirOthersMayChange(problem),
    })
}

/// `name` beneath a copy's directory ([`copy_dir`], shown as `shown`), as
/// [`read_file`] reads it, refused unless it is certsync's own
/// ([`own`]): whoever else may write it chooses what certsync reads there
/// and judges fit to replace.
pub(super) fn read_copy(
    dir: &Dir,
    name: &str,
    shown: &Path,
) -> Result<(Vec<u8>, FileMeta), WriterError> {
    let file = || name.to_owned();
    let (bytes, meta, _) =
        read_file(dir, name, &shown.join(name)).map_err(|problem| WriterError::CopyUnreadable {
            file: file(),
            problem,
        })?;
    let (mode, uid, _) = meta;
    own(uid, mode).map_err(|NotOwn { uid, mode }| WriterError::CopyNotOwn {
        file: file(),
        uid,
        mode,
        euid: nix::unistd::geteuid().as_raw(),
    })?;
    Ok((bytes, meta))
}

/// Reads `name` in `dir` without following it or blocking on it
/// ([`crate::beneath`], [`Links::Refuse`]: a symlink is no regular file),
/// if the descriptor walked to is a regular file within the published
/// size limit. Returns the bytes, (mode, uid, gid) and the link count.
pub(super) fn read_file(
    dir: &Dir,
    name: &str,
    path: &Path,
) -> Result<(Vec<u8>, FileMeta, u64), PathError> {
    use std::os::fd::AsFd as _;
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
    let file = walked.open_read()?;
    let st = &walked.st;
    let meta = (st.st_mode & 0o7777, st.st_uid, st.st_gid);
    let bytes = beneath::read_capped(file, path, MAX_PUBLISHED_SIZE as u64)?;
    Ok((bytes, meta, st.st_nlink))
}

/// Creates `name` in `dir` with exactly `mode` (never more permissive on
/// the way: created with it, then chowned, then set) and writes it. The
/// fsync is the caller's: a revision's files are all written first.
pub(super) fn create_file(
    dir: &Dir,
    name: &str,
    mode: u32,
    owner: Option<u32>,
    group: Option<u32>,
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
/// created with `mode`, written and fsynced, renamed over `name`, then the
/// directory fsynced. Readers see the old file or the new one, never part.
///
/// `owner` (uid, gid) for the new file, else whoever runs certsync. A
/// temporary file left by a failure is removed.
pub(super) fn replace_file_in(
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
    let written = create_file(
        dir,
        &tmp,
        mode,
        owner.map(|o| o.0),
        owner.map(|o| o.1),
        bytes,
        &tmp_path,
    )
    .and_then(|f| f.sync_all().ctx("fsync", &tmp_path))
    .and_then(|()| dir.rename(&tmp, dir, name).ctx("rename", &shown.join(name)));
    if let Err(e) = written {
        let _ = remove_any(dir, &tmp, &tmp_path);
        return Err(e);
    }
    fsync(dir, shown)
}

/// The temporary entry a replacement of `name` is written to first: a
/// dot name that does not end as `name` does, so a reader that picks files
/// by their ending (node_exporter's `*.prom`, a `*.crt` glob) never reads
/// one half-written; `name` cut so that it fits the 255 bytes of a file
/// name (a Secret key may have 253). Two long names may share one: each
/// replacement removes, makes and renames it before the next begins.
pub(super) fn tmp_name(name: &str) -> String {
    const FITS: usize = 255 - TMP_PREFIX.len() - "-.tmp".len();
    let name = name.trim_start_matches('.');
    let mut cut = name.len().min(FITS);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{TMP_PREFIX}-{}.tmp", &name[..cut])
}

/// [`replace_file_in`] for a path: its directory opened through
/// [`crate::files::owned_dir`] (every directory on the way, and symlink
/// followed, root's or certsync's user's and written by no one else), the
/// file owned by whoever runs certsync (root on a node). For files that
/// are not targets (kubeadm's manifests, certsync's own config, the status
/// textfile): a directory another user could swap for a link would choose
/// where root writes.
pub fn replace_file(path: &Path, mode: u32, bytes: &[u8]) -> Result<(), WriterError> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str()))
    else {
        return Err(WriterError::Foreign {
            path: path.to_owned(),
            what: "not a file path",
        });
    };
    let dir = crate::files::owned_dir(parent).map_err(|problem| WriterError::Unowned {
        dir: parent.to_owned(),
        problem,
    })?;
    replace_file_in(&dir, name, mode, None, bytes, parent)
}

/// Reads `name` beneath the handle `dir` once: never through a symlink,
/// never blocking on a FIFO, a regular file of at most the published size
/// (`shown` names it in errors). For a caller that judges the bytes and
/// then writes them, never the path, again (kubeadm revert).
pub fn read_beneath(dir: &Dir, name: &str, shown: &Path) -> Result<Vec<u8>, PathError> {
    read_file(dir, name, shown).map(|r| r.0)
}

/// [`replace_file_in`] beneath a handle the caller opened, the new file
/// whoever runs certsync's (root on a node) with exactly `mode`; `shown`
/// is the directory's path for errors.
pub fn replace_beneath(
    dir: &Dir,
    name: &str,
    mode: u32,
    bytes: &[u8],
    shown: &Path,
) -> Result<(), WriterError> {
    replace_file_in(dir, name, mode, None, bytes, shown)
}

/// What the symlink `name` in `dir` says, if it is a symlink with UTF-8 text.
pub(super) fn read_link(dir: &Dir, name: &str) -> Option<String> {
    let link = dir.read_link_contents(name).ok()?;
    link.to_str().map(str::to_owned)
}

/// Names in `dir` (not following anything).
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

/// Atomically points `<dir>/<name>` at `text`: a fresh temporary symlink
/// renamed over the old entry (`rename(2)` replaces the link itself).
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

/// Removes the entry `name` of `dir`, a file, symlink, FIFO or directory
/// tree, never following a symlink. Missing is fine.
pub(super) fn remove_any(dir: &Dir, name: &str, path: &Path) -> Result<(), WriterError> {
    match dir.symlink_metadata(name) {
        Ok(m) if m.is_dir() => dir.remove_dir_all(name).ctx("remove", path),
        Ok(_) => dir.remove_file(name).ctx("remove", path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).ctx("stat", path),
    }
}

/// fsync of a directory: through a read-only open of `.` (cap-std's
/// directory handles are `O_PATH`, which cannot be synced).
pub(super) fn fsync(dir: &Dir, path: &Path) -> Result<(), WriterError> {
    dir.open(".").and_then(|d| d.sync_all()).ctx("fsync", path)
}
