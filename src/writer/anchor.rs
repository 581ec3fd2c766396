//! Where a missing target is made from: a handle opened at start on the
//! directory the start-up checks judged, and `mkdirat` one name at a time
//! beneath it, never a path `mkdir` that would follow a link a user put on
//! the way (a user who may rename entries in a volume's root swaps a
//! directory on the path for a link, and root makes a directory where the
//! link leads).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use cap_fs_ext::DirExt;
use cap_std::fs::{Dir, DirBuilder, DirBuilderExt};

use super::error::{Ctx, WriterError};
use crate::beneath::{Entry, Trust};

/// A handle on the directory a missing target is made beneath, and the
/// names from it to the target, as resolved at start. It is the deepest
/// directory above the target that others may write (a volume's root: a
/// mount point no one renames, while its writers may rename what is in
/// it), else the nearest that existed.
#[derive(Debug)]
pub(super) struct Anchor {
    dir: Dir,
    path: PathBuf,
    below: Vec<std::ffi::OsString>,
}

impl Anchor {
    /// The anchor of `target`; `None` for `/`.
    pub(super) fn of(target: &Path) -> Result<Option<Self>, WriterError> {
        // A relative target (`dir:src=t`) is the working directory's.
        let absolute = std::path::absolute(target).ctx("resolve target directory", target)?;
        let mut missing = Vec::new();
        let mut cur = absolute.as_path();
        while let Err(e) = cur.symlink_metadata() {
            match (e.kind(), cur.parent(), cur.file_name()) {
                (io::ErrorKind::NotFound, Some(parent), Some(name)) => {
                    missing.push(name.to_owned());
                    cur = parent;
                }
                _ => return Err(e).ctx("open target directory", target),
            }
        }
        let mut full = fs::canonicalize(cur).ctx("resolve target directory", target)?;
        full.extend(missing.iter().rev());
        let Some(parent) = full.parent() else {
            return Ok(None);
        };
        let dirs = || {
            parent
                .ancestors()
                .filter_map(|p| Some((p, fs::metadata(p).ok().filter(|m| m.is_dir())?)))
        };
        let Some(path) = dirs()
            .find(|(_, m)| std::os::unix::fs::MetadataExt::mode(m) & 0o022 != 0)
            .or_else(|| dirs().next())
            .map(|(p, _)| p.to_owned())
        else {
            return Ok(None);
        };
        let dir = Dir::open_ambient_dir(&path, cap_std::ambient_authority())
            .ctx("open target directory", &path)?;
        let below = full
            .strip_prefix(&path)
            .map(|rest| rest.iter().map(ToOwned::to_owned).collect())
            .unwrap_or_default();
        Ok(Some(Self { dir, path, below }))
    }

    /// Makes what is missing of `target` beneath the anchor, one name at a
    /// time (`mkdirat`, 0755), each opened without following links and
    /// judged on its handle: root's or certsync's, written by no one else.
    pub(super) fn make(&self, target: &Path) -> Result<(), WriterError> {
        let mut dir = self
            .dir
            .try_clone()
            .ctx("open target directory", &self.path)?;
        let mut shown = self.path.clone();
        for name in &self.below {
            shown.push(name);
            let way = |problem: String| WriterError::Way {
                target: target.to_owned(),
                path: shown.clone(),
                problem,
            };
            let opened = match dir.open_dir_nofollow(name) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    match dir.create_dir_with(name, DirBuilder::new().mode(0o755)) {
                        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                            return Err(e).ctx("create target directory", &shown);
                        }
                        _ => dir.open_dir_nofollow(name),
                    }
                }
                other => other,
            };
            dir = opened.map_err(|e| {
                way(match (dir.symlink_metadata(name), e.raw_os_error()) {
                    (Ok(m), _) if m.file_type().is_symlink() => "a symlink".into(),
                    (_, Some(nix::libc::ELOOP | nix::libc::ENOTDIR)) => "not a directory".into(),
                    _ => e.to_string(),
                })
            })?;
            // No exception: certsync made it, or will write beneath it.
            let m = Entry::held(&shown, std::os::fd::AsFd::as_fd(&dir))
                .map_err(|e| way(e.to_string()))?;
            if Trust::STRICT.judge(&m).is_err() {
                return Err(way(format!(
                    "owner {}, mode {:04o}: another user's, or writable by others",
                    m.uid, m.mode
                )));
            }
        }
        Ok(())
    }
}
