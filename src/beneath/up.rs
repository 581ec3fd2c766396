//! Looking above what is held: each directory by `..` from a descriptor
//! (never a path looked up again), where the kernel says an open file
//! really is, and what file a path names (device and inode).

use std::os::fd::{AsFd as _, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::sys::stat::FileStat;

use super::walk::{Entry, Links, PathError, Start, Walked, fd_path, open_dir, walk};

/// `dir` (shown as `shown`) and every directory above it, by `..` from the
/// descriptor of the one below, up to `/`: each as an [`Entry`] with its
/// status. `..` of a bind mount's root is where it is mounted, so a
/// directory reached through a bind mount is followed up where it is
/// mounted. An error ends the walk up.
pub fn upward(
    dir: OwnedFd,
    shown: PathBuf,
) -> impl Iterator<Item = Result<(Entry, FileStat), PathError>> {
    let mut next = Some((dir, shown));
    std::iter::from_fn(move || {
        let (dir, shown) = next.take()?;
        let step = || {
            let st = nix::sys::stat::fstat(&dir).map_err(|e| PathError::io(&shown, e))?;
            let up = open_dir(dir.as_fd(), "..", &shown.join(".."))?;
            let ust = nix::sys::stat::fstat(&up).map_err(|e| PathError::io(&shown, e))?;
            // `/` is its own `..`.
            let above = ((ust.st_dev, ust.st_ino) != (st.st_dev, st.st_ino))
                .then(|| (up, shown.parent().unwrap_or(&shown).to_owned()));
            Ok((Entry::of(shown.clone(), dir.as_fd(), &st, false), st, above))
        };
        Some(step().map(|(entry, st, above)| {
            next = above;
            (entry, st)
        }))
    })
}

/// The directory holding the file open as `fd` (of status `st`): the
/// kernel's name for the descriptor, its directory walked from `/` with no
/// symlink followed, and checked to hold this very file
/// ([`PathError::Replaced`] when it was moved meanwhile). Where the file
/// really is, whatever way led to it.
pub fn holder(fd: BorrowedFd<'_>, st: &FileStat) -> Result<Walked, PathError> {
    let real = fd_path(fd).map_err(|e| PathError::io(Path::new("/proc/self/fd"), e))?;
    let moved = || PathError::Replaced { path: real.clone() };
    let (Some(parent), Some(name)) = (real.parent(), real.file_name()) else {
        return Err(moved());
    };
    let dir = walk(Start::Path, parent, Links::Refuse, &mut |_| Ok(())).map_err(|_| moved())?;
    let there = nix::sys::stat::fstatat(&dir.fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)
        .map_err(|_| moved())?;
    if !dir.is_dir() || (there.st_dev, there.st_ino) != (st.st_dev, st.st_ino) {
        return Err(moved());
    }
    Ok(dir)
}

/// Device and inode of what `path` names (symlinks followed), from `fstat`
/// of the descriptor walked to; `None` when it cannot be reached (it does
/// not exist yet). Two paths are the same file exactly when these are
/// equal, whatever bind mount, hard link or symlink leads to each: a path
/// comparison sees none of the first two.
pub fn identity(path: &Path) -> Option<(u64, u64)> {
    let w = walk(Start::Path, path, Links::Follow, &mut |_| Ok(())).ok()?;
    Some((w.st.st_dev, w.st.st_ino))
}

/// The identities ([`identity`]) of the nearest existing directory at or
/// above `dir` and of every directory above that one ([`upward`]).
pub fn directory_and_ancestors(dir: &Path) -> Vec<(u64, u64)> {
    let Some(w) = dir.ancestors().find_map(|d| {
        walk(Start::Path, d, Links::Follow, &mut |_| Ok(()))
            .ok()
            .filter(Walked::is_dir)
    }) else {
        return Vec::new();
    };
    upward(w.fd, w.shown)
        .map_while(Result::ok)
        .map(|(_, st)| (st.st_dev, st.st_ino))
        .collect()
}
