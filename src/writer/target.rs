//! One target's writer: how it publishes, and the target directory it
//! owns, refused unless it is the directory opened first.

use std::fs::{self, File};
use std::io;
use std::os::fd::AsFd as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cap_std::fs::{Dir, MetadataExt};
use nix::fcntl::Flock;

use super::anchor::Anchor;
use super::error::{Ctx, WriterError};
use crate::beneath::{Entry, Trust};
use crate::bundle::KEY_FILE;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterOptions {
    /// Revisions kept on disk, the live one included (at least 1).
    pub keep: usize,
    pub cert_mode: u32,
    pub key_mode: u32,
    pub owner: Option<u32>,
    pub group: Option<u32>,
    /// The source issues its own pairs (`ca:`, `csr:`): every pair it
    /// offers is new, so none can release a rollback pin.
    pub issuing: bool,
    /// How long to wait for a write lock another process holds (`None`:
    /// until released or shutdown).
    pub lock_timeout: Option<std::time::Duration>,
}

impl Default for WriterOptions {
    fn default() -> Self {
        Self {
            keep: 3,
            cert_mode: 0o644,
            key_mode: 0o600,
            owner: None,
            group: None,
            issuing: false,
            lock_timeout: None,
        }
    }
}

/// The `..owner` flock a `Claim` holds, shared by the writer's clones.
pub(super) type ClaimSlot = Arc<Mutex<Option<Flock<File>>>>;

#[derive(Debug, Clone)]
pub struct Writer {
    pub(super) target: PathBuf,
    pub(super) opts: WriterOptions,
    /// The directory `target` led to when opened: the overlap checks were
    /// made against it, so every later open must lead there too, however
    /// the path's symlinks change meanwhile.
    pub(super) resolved: Option<PathBuf>,
    /// The target directory's (device, inode) when opened first.
    pub(super) identity: Arc<Mutex<Option<(u64, u64)>>>,
    pub(super) claimed: ClaimSlot,
    /// Where a missing target is made from (`None`: never made).
    pub(super) anchor: Option<Arc<Anchor>>,
}

impl Writer {
    /// A target that must already exist, for reading or `rollback`.
    pub fn existing(target: impl Into<PathBuf>) -> Result<Self, WriterError> {
        Ok(Self::start(target.into(), WriterOptions::default(), false)?.0)
    }

    /// The writer of `target`, its directory opened (made if missing when
    /// `make`).
    pub(super) fn start(
        target: PathBuf,
        opts: WriterOptions,
        make: bool,
    ) -> Result<(Self, Dir), WriterError> {
        let anchor = match make {
            true => Anchor::of(&target)?.map(Arc::new),
            false => None,
        };
        let mut w = Self {
            target,
            opts,
            resolved: None,
            identity: Arc::default(),
            claimed: Arc::default(),
            anchor,
        };
        let root = w.root(make)?;
        w.resolved =
            Some(crate::beneath::fd_path(root.as_fd()).ctx("resolve target directory", &w.target)?);
        Ok((w, root))
    }

    pub fn target(&self) -> &Path {
        &self.target
    }

    pub(super) fn path(&self, name: &str) -> PathBuf {
        self.target.join(name)
    }

    /// The target directory's handle, opened by path now (the target may
    /// have been deleted or replaced since), only if it is the directory
    /// opened first.
    pub(super) fn root(&self, create: bool) -> Result<Dir, WriterError> {
        let mut made = false;
        match fs::metadata(&self.target) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(WriterError::NotADirectory(self.target.clone())),
            Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                let Some(anchor) = &self.anchor else {
                    return Err(e).ctx("open target directory", &self.target);
                };
                anchor.make(&self.target)?;
                made = true;
            }
            Err(e) => return Err(e).ctx("open target directory", &self.target),
        }
        let dir = Dir::open_ambient_dir(&self.target, cap_std::ambient_authority())
            .ctx("open target directory", &self.target)?;
        // What was opened, not what the path says now: no window between
        // a check and the open.
        if let Some(was) = &self.resolved {
            let now = crate::beneath::fd_path(dir.as_fd())
                .ctx("resolve target directory", &self.target)?;
            if &now != was {
                return Err(WriterError::Moved {
                    target: self.target.clone(),
                    was: was.clone(),
                    now,
                });
            }
        }
        self.same_directory(&dir, made)?;
        Ok(dir)
    }

    /// Checks on the handle that `dir` is the directory opened first. One
    /// certsync just `made` is adopted if empty and certsync's own: one
    /// swapped in between the `mkdir` and the open is someone else's, or
    /// holds something.
    fn same_directory(&self, dir: &Dir, made: bool) -> Result<(), WriterError> {
        let m = dir
            .dir_metadata()
            .ctx("stat target directory", &self.target)?;
        let now = (m.dev(), m.ino());
        let mut known = self.identity.lock().unwrap_or_else(|e| e.into_inner());
        match *known {
            None => *known = Some(now),
            Some(was) if was == now => {}
            Some(_)
                if made
                    && m.uid() == nix::unistd::geteuid().as_raw()
                    && dir.entries().ctx("list", &self.target)?.next().is_none() =>
            {
                tracing::warn!(target_dir = %self.target.display(), "the target directory was gone; made it again");
                *known = Some(now);
            }
            Some(was) => {
                return Err(WriterError::Replaced {
                    target: self.target.clone(),
                    was: was.1,
                    now: now.1,
                });
            }
        }
        Ok(())
    }

    /// Refuses a target directory someone other than root and certsync's
    /// user may now write: a `chmod` or `chown` after start must not make
    /// every publish one into a directory others may plant in. The one rule
    /// ([`Trust::STRICT`]), judged on the handle opened.
    pub(super) fn only_ours(&self, dir: &Dir) -> Result<(), WriterError> {
        let st = nix::sys::stat::fstat(dir.as_fd()).map_err(io::Error::from);
        let st = st.ctx("stat target directory", &self.target)?;
        let e = Entry::of(self.target.clone(), dir.as_fd(), &st, false);
        Trust::STRICT
            .judge(&e)
            .map_err(|_| WriterError::OthersMayWrite {
                target: self.target.clone(),
                uid: e.uid,
                mode: e.mode,
            })
    }

    pub(super) fn mode_for(&self, name: &str, bytes: &[u8]) -> u32 {
        match is_key(name, bytes) {
            true => self.opts.key_mode,
            false => self.opts.cert_mode,
        }
    }
}

/// Whether file `name` gets the key mode: the key, or anything that is not
/// certificates only.
pub(super) fn is_key(name: &str, bytes: &[u8]) -> bool {
    name == KEY_FILE || !crate::validate::certificates_only(bytes)
}
