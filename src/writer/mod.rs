//! The target directory: revision directories, the atomic `..data` flip,
//! history, pruning and drift repair (kubelet's `atomic_writer.go` layout,
//! plus fsync, history and a drift check).
//!
//! ```text
//! <target>/..data -> ..rev-000042-3f9a1c2e        the one atomic switch
//! <target>/..rev-000042-3f9a1c2e/tls.crt tls.key  live, complete, fsynced
//! <target>/..history/000041-77b0d1aa/...          earlier revisions
//! <target>/tls.crt -> ..data/tls.crt              visible files
//! ```
//!
//! Invariants:
//! - Every access inside the target goes through the target's directory
//!   handle (`cap_std::fs::Dir`, `openat` and friends) one name at a time,
//!   never following a symlink. A name certsync owns (`..data`, `..rev-*`,
//!   `..history` and all in it, `..owner`, `..pin`, `..tmp*`) that is a
//!   symlink, FIFO, device, the wrong kind of entry or not certsync's own
//!   ([`own`]) is removed and made anew, never followed or obeyed; a file
//!   is read only after `fstat` on its descriptor says regular, size capped.
//! - `..data` only ever names a complete revision: files created with their
//!   final mode (never by umask), written, fsynced, the revision directory
//!   fsynced, then `..data` replaced by `rename(2)` of a fresh symlink and
//!   the parent fsynced.
//! - A revision's name carries its number and the first 8 hex digits of its
//!   content hash, so an edited revision is detected across restarts.
//! - After a flip the previous live *files* are moved into `..history/`, so
//!   an inotify watch on them gets `IN_MOVE_SELF`: what makes kube-apiserver
//!   & co. re-read their certificates.
//! - Everything that changes the target holds a flock on `..lock`; a daemon
//!   also holds `..owner` for its lifetime (taken again on a target it made
//!   again), so a second daemon is refused (`lock.rs`: why files, not the
//!   directory).
//! - At most `keep` revisions (live included) stay; `certsync rollback`
//!   never prunes (it does not know the daemon's setting).
//! - The target is opened by path on every operation and must be the
//!   directory opened at start (device and inode, on the handle): one a user
//!   renamed away and made again (in a volume's root every container of the
//!   pod writes) is refused until restart. Only a target that is gone is
//!   made again, by certsync, beneath its [`Anchor`] (never a path `mkdir`).

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, DirBuilder, DirBuilderExt, MetadataExt, OpenOptions, OpenOptionsExt};
use nix::fcntl::{Flock, FlockArg, OFlag};

use crate::beneath::{self, Links, PathError, Start};
use crate::bundle::{Bundle, ContentHash, KEY_FILE};
use crate::validate::{MAX_BUNDLE_SIZE, MAX_PUBLISHED_SIZE};

mod anchor;
#[cfg(test)]
mod copy_tests;
mod drift;
mod error;
mod history;
mod kubeconfig;
mod lock;
mod pair;
#[cfg(test)]
mod planted_tests;
mod revision;
mod rollback;
#[cfg(test)]
mod tests;

use anchor::Anchor;
use error::Ctx;
pub use error::WriterError;
use history::*;
pub use kubeconfig::{
    CaCluster, ca_data, check_kubeconfig, embedded_pair, kubeconfig_certificate, update_kubeconfig,
    update_kubeconfig_ca, with_ca_data,
};
pub use lock::stop_waiting;
pub use pair::{CopyUpdate, check_pair, update_pair};
pub use revision::RevisionProblem;
use revision::*;
pub use revision::{read_beneath, replace_beneath, replace_file};
use rollback::*;

/// The target's one atomic switch: a symlink to the live revision.
pub const DATA: &str = "..data";
const HISTORY: &str = "..history";
const REV_PREFIX: &str = "..rev-";
const TMP_PREFIX: &str = "..tmp";
/// The write lock (flock), and the daemon's claim held for its lifetime.
const LOCK: &str = "..lock";
const OWNER: &str = "..owner";
/// Lock state, not data (whoever copies a target compares everything else).
pub const LOCK_FILES: [&str; 2] = [LOCK, OWNER];
/// After `certsync rollback`: the content chosen and the content it
/// replaced (see [`Writer::publish`]).
const PIN: &str = "..pin";
/// Revision number of the files found in a fresh target before certsync.
const FOUND_REVISION: u64 = 0;

/// Whether an entry certsync made in a target is still only certsync's:
/// its user's, written by no one else. Anything else may have been put
/// there by whoever else may write the target (a user's `..pin` in a volume
/// root would be obeyed as an operator's rollback): removed and made anew,
/// never obeyed. `Err` says why not, without the path.
fn own(uid: u32, mode: u32) -> Result<(), NotOwn> {
    if uid == nix::unistd::geteuid().as_raw() && mode & 0o022 == 0 {
        return Ok(());
    }
    Err(NotOwn {
        uid,
        mode: mode & 0o7777,
    })
}

/// An entry in a target that is not certsync's own ([`own`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("owner {uid}, mode {mode:04o}: not certsync's own (its user's, written by no one else)")]
pub struct NotOwn {
    pub uid: u32,
    pub mode: u32,
}

/// The path of the directory `dir` is open on, as the kernel names it.
fn opened_path(dir: &Dir) -> io::Result<PathBuf> {
    use std::os::fd::{AsFd as _, AsRawFd as _};
    fs::read_link(format!("/proc/self/fd/{}", dir.as_fd().as_raw_fd()))
}

/// How files are published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterOptions {
    /// Revisions kept on disk, the live one included (at least 1).
    pub keep: usize,
    pub cert_mode: u32,
    pub key_mode: u32,
    pub owner: Option<u32>,
    pub group: Option<u32>,
    /// The source issues its own pairs (`ca:`, `csr:`): every pair it
    /// offers is new, so none can release a rollback pin; the pin holds
    /// until it is removed.
    pub issuing: bool,
    /// How long to wait for a target's write lock another process holds
    /// (`run --once`: `--once-timeout`); `None`: until it is released or
    /// the process shuts down.
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

/// What `publish` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The live revision already holds this content; nothing was flipped.
    /// `repaired_links` counts visible symlinks that had to be restored.
    Unchanged {
        revision: u64,
        repaired_links: usize,
    },
    /// A rollback pin holds: the source's content (the one the operator
    /// rolled back from) was not published; the pinned content is live.
    Pinned { revision: u64 },
    /// A new revision was written and `..data` flipped to it.
    Written {
        revision: u64,
        /// Why the previous live revision was not kept (`None` when the
        /// content changed, `Some` when drift forced a rewrite).
        drift: Option<String>,
    },
}

impl Outcome {
    /// The live revision after the operation.
    pub fn revision(&self) -> u64 {
        match self {
            Self::Unchanged { revision, .. }
            | Self::Pinned { revision }
            | Self::Written { revision, .. } => *revision,
        }
    }
}

/// The revision `..data` points at, as found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    pub revision: u64,
    /// The hash of what is on disk (not of what the name claims).
    pub hash: ContentHash,
    pub bundle: Bundle,
    /// Why this revision cannot be trusted as is, if it cannot.
    pub problem: Option<String>,
}

/// One revision on disk, for `certsync revisions`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevisionInfo {
    pub revision: u64,
    /// First 8 hex digits of the content hash, from the name.
    pub hash: String,
    pub dir: PathBuf,
    pub current: bool,
    /// Its files, or why they cannot be read.
    pub content: Result<Bundle, RevisionProblem>,
}

/// What `rollback` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolledBack {
    /// The revision whose content was restored.
    pub from_history: u64,
    /// The new live revision holding it.
    pub revision: u64,
}

/// The daemon's claim on a target (`..owner` flock), released on drop.
/// The flock itself sits in the writer's [`ClaimSlot`], so that a target
/// certsync makes again (it was removed while the daemon ran) is claimed
/// again before anything is written there.
#[derive(Debug)]
pub struct Claim {
    slot: ClaimSlot,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// The `..owner` flock a [`Claim`] holds, shared by the writer's clones.
type ClaimSlot = Arc<Mutex<Option<Flock<File>>>>;

/// Owns one target directory.
#[derive(Debug, Clone)]
pub struct Writer {
    target: PathBuf,
    opts: WriterOptions,
    /// The directory `target` led to when opened (symlinks resolved): the
    /// overlap checks were made against it, so every later open must lead
    /// there too, however the path's symlinks change meanwhile.
    resolved: Option<PathBuf>,
    /// The target directory's (device, inode) since it was opened first,
    /// shared by the clones: each later open must find the same one.
    identity: Arc<Mutex<Option<(u64, u64)>>>,
    /// The claim, while one is held: kept on whatever directory the
    /// target is now.
    claimed: ClaimSlot,
    /// Where a missing target is made from (`None`: never made, for
    /// `rollback` and reading).
    anchor: Option<Arc<Anchor>>,
}

impl Writer {
    /// Opens (creating if needed) `target` and, under the lock, cleans up
    /// what a crash may have left: temporary entries, unfinished or
    /// unretired revisions.
    pub fn open(target: impl Into<PathBuf>, opts: WriterOptions) -> Result<Self, WriterError> {
        let keep = opts.keep.max(1);
        let (w, root) = Self::start(target.into(), WriterOptions { keep, ..opts }, true)?;
        let _lock = w.lock(&root)?;
        w.tidy(&root)?;
        Ok(w)
    }

    /// A target that must already exist, for reading (nothing is created,
    /// nothing cleaned) or for `rollback`.
    pub fn existing(target: impl Into<PathBuf>) -> Result<Self, WriterError> {
        Ok(Self::start(target.into(), WriterOptions::default(), false)?.0)
    }

    /// The writer of `target`, its directory opened (made if missing when
    /// `make`) and where it leads recorded.
    fn start(target: PathBuf, opts: WriterOptions, make: bool) -> Result<(Self, Dir), WriterError> {
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
        w.resolved = Some(opened_path(&root).ctx("resolve target directory", &w.target)?);
        Ok((w, root))
    }

    pub fn target(&self) -> &Path {
        &self.target
    }

    fn path(&self, name: &str) -> PathBuf {
        self.target.join(name)
    }

    /// The target directory's handle, opened by path now (the target may
    /// have been deleted or replaced since the last operation), and only
    /// if it is the directory opened first (see the module's invariants).
    fn root(&self, create: bool) -> Result<Dir, WriterError> {
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
            let now = opened_path(&dir).ctx("resolve target directory", &self.target)?;
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

    /// Checks (on the handle, never by path) that `dir` is the directory
    /// this writer opened first; records it on the first open. A directory
    /// certsync just `made` because the target was gone is adopted if it is
    /// empty and certsync's own: whoever swapped theirs in between the
    /// `mkdir` and the open made one of their own, or moved one that holds
    /// something.
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

    /// Refuses a target directory (open as `dir`, judged on the handle)
    /// that someone other than root and certsync's user may now write:
    /// start refuses one that already is
    /// ([`crate::files::no_other_user_may_write`]), and a `chmod` or `chown`
    /// later must not make every publish after it one into a directory
    /// others may plant in.
    fn only_ours(&self, dir: &Dir) -> Result<(), WriterError> {
        let m = dir
            .dir_metadata()
            .ctx("stat target directory", &self.target)?;
        let euid = nix::unistd::geteuid().as_raw();
        if (m.uid() == 0 || m.uid() == euid) && m.mode() & 0o022 == 0 {
            return Ok(());
        }
        Err(WriterError::OthersMayWrite {
            target: self.target.clone(),
            uid: m.uid(),
            mode: m.mode() & 0o7777,
        })
    }

    /// Publishes `bundle`: nothing when the live revision already holds it
    /// intact (only missing visible links are restored), otherwise a new
    /// revision and a flip.
    ///
    /// After `certsync rollback` a pin records the chosen content and the
    /// content it replaced. While the source still offers the replaced
    /// content, the pinned content is kept (and repaired) instead; any other
    /// content releases the pin and is published.
    pub fn publish(&self, bundle: &Bundle) -> Result<Outcome, WriterError> {
        self.publish_then(bundle, || {})
    }

    /// [`Writer::publish`], calling `flipped` as soon as a new revision is
    /// live and durable, before the previous one is retired to history: a
    /// reload need not wait for the bookkeeping. Not called when nothing
    /// was flipped.
    pub fn publish_then(
        &self,
        bundle: &Bundle,
        flipped: impl FnOnce(),
    ) -> Result<Outcome, WriterError> {
        let root = self.root(true)?;
        self.only_ours(&root)?;
        self.hold_claim(&root)?;
        let _lock = self.lock(&root)?;
        let pin = read_pin(&root).or_else(|problem| {
            tracing::warn!(target_dir = %self.target.display(), %problem, "removed a ..pin certsync did not write; not obeyed");
            remove_any(&root, PIN, &self.path(PIN)).map(|()| None)
        })?;
        if let Some((pinned, replaced)) = pin {
            let hash = bundle.hash().to_string();
            // An issuing source offers a new pair every time: none of them
            // is the operator's "source changed", so the pin holds.
            if hash == replaced || (self.opts.issuing && hash != pinned) {
                return self.keep_pinned(&root, &pinned);
            }
            if hash != pinned {
                remove_any(&root, PIN, &self.path(PIN))?;
            }
        }
        self.publish_locked(&root, bundle, flipped)
    }

    fn publish_locked(
        &self,
        root: &Dir,
        bundle: &Bundle,
        flipped: impl FnOnce(),
    ) -> Result<Outcome, WriterError> {
        let live = self.live_in(root)?;
        let drift = match &live {
            Some(l) if l.problem.is_none() && l.hash == bundle.hash() => {
                // Missing links made, ours to names gone removed.
                let repaired_links =
                    self.link_names(root, bundle)? + self.unlink_stale(root, bundle)?;
                if repaired_links > 0 {
                    fsync(root, &self.target)?;
                }
                return Ok(Outcome::Unchanged {
                    revision: l.revision,
                    repaired_links,
                });
            }
            Some(l) => l.problem.clone(),
            None => {
                self.keep_found_files(root, bundle)?;
                None
            }
        };
        let revision = self.next_revision(root)?;
        let dir_name = format!("{REV_PREFIX}{}", rev_name(revision, &bundle.hash()));
        let made = self
            .write_revision(root, &dir_name, bundle)
            .and_then(|()| self.link_names(root, bundle));
        if let Err(e) = made {
            // No partial revision stays behind (a full disk, an I/O error,
            // a name that cannot be linked); the live one was never touched.
            let _ = remove_any(root, &dir_name, &self.path(&dir_name));
            return Err(e);
        }
        self.flip(root, &dir_name)?;
        self.unlink_stale(root, bundle)?;
        fsync(root, &self.target)?;
        flipped();
        self.tidy(root)?;
        Ok(Outcome::Written { revision, drift })
    }
}
