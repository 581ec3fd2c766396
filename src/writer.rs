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
//! - Every access inside the target goes through a directory handle
//!   (`cap_std::fs::Dir`: `openat` and friends relative to the target's fd,
//!   never resolving out of it) one name at a time, without following
//!   symlinks. A name certsync owns (`..data`, `..rev-*`, `..history` and
//!   everything in it, `..owner`, `..pin`, `..tmp*`) that turns out
//!   to be a symlink, FIFO, device or the wrong kind of entry is removed and
//!   made anew, never followed or opened; a file is read only after `fstat`
//!   on the opened descriptor says it is a regular file, with a size cap.
//! - `..data` only ever names a complete revision: files are created with
//!   their final mode (never more permissive, never by umask), written,
//!   fsynced, the revision directory fsynced, and only then `..data` is
//!   replaced by `rename(2)` of a fresh symlink; the parent is fsynced.
//! - A revision's name carries its number and the first 8 hex digits of its
//!   content hash, so an edited revision is detected even across restarts.
//! - After a flip the previous live *files* are moved (one `rename` each) into
//!   `..history/`, so an inotify watch on them gets `IN_MOVE_SELF`: this is
//!   what makes kube-apiserver & co. re-read their certificates.
//! - Everything that changes the target (publish, start-up clean-up,
//!   rollback) holds a flock on the target directory itself; a daemon also
//!   holds `..owner` for its lifetime, so a second daemon on the same target
//!   is refused. (A lock on the directory rather than a `..lock` file: one
//!   inode fewer per target, which is 1/9 of a first sync's inode
//!   allocations.)
//! - At most `keep` revisions (live included) stay on disk; `certsync
//!   rollback` never prunes (the daemon's setting is not known to it).
//! - The target directory is opened by path on every operation, so a
//!   deleted (or replaced) target is recreated on the next publish.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

use cap_fs_ext::{DirExt, FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, DirBuilder, DirBuilderExt, MetadataExt, OpenOptions, OpenOptionsExt};
use nix::fcntl::{Flock, FlockArg, OFlag};

use crate::bundle::{Bundle, ContentHash, KEY_FILE};
use crate::validate::MAX_BUNDLE_SIZE;

/// The target's one atomic switch: a symlink to the live revision.
pub const DATA: &str = "..data";
const HISTORY: &str = "..history";
const REV_PREFIX: &str = "..rev-";
const TMP_PREFIX: &str = "..tmp";
/// Where earlier builds kept the write lock (now a flock on the target
/// directory); a leftover is removed by [`Writer::tidy`].
const OLD_LOCK: &str = "..lock";
/// Held (flock) by the daemon that owns the target, for its lifetime.
const OWNER: &str = "..owner";
/// Present after `certsync rollback`: the content the operator chose and
/// the content it replaced (see [`Writer::publish`]).
const PIN: &str = "..pin";
/// Revision number of the files found in a fresh target before certsync.
const FOUND_REVISION: u64 = 0;

#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("target {0} is not a directory")]
    NotADirectory(PathBuf),
    #[error("{path} is {what}; refusing to replace it")]
    Foreign { path: PathBuf, what: &'static str },
    #[error("target {target}: {problem}")]
    Rollback { target: PathBuf, problem: String },
    #[error(
        "target {target} is already managed by another certsync (pid {pid}); \
         two daemons on one target would undo each other's work"
    )]
    Owned { target: PathBuf, pid: String },
}

trait Ctx<T> {
    fn ctx(self, op: &'static str, path: &Path) -> Result<T, WriterError>;
}

impl<T> Ctx<T> for io::Result<T> {
    fn ctx(self, op: &'static str, path: &Path) -> Result<T, WriterError> {
        self.map_err(|source| WriterError::Io {
            op,
            path: path.to_owned(),
            source,
        })
    }
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
}

impl Default for WriterOptions {
    fn default() -> Self {
        Self {
            keep: 3,
            cert_mode: 0o644,
            key_mode: 0o600,
            owner: None,
            group: None,
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
    pub content: Result<Bundle, String>,
}

/// What `rollback` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolledBack {
    /// The revision whose content was restored.
    pub from_history: u64,
    /// The new live revision holding it.
    pub revision: u64,
}

/// A revision name: `..rev-NNNNNN-HHHHHHHH` (live) or `NNNNNN-HHHHHHHH` (history).
fn parse_rev(name: &str) -> Option<(u64, &str)> {
    let (num, hash) = name.split_once('-')?;
    let ok = num.len() >= 6
        && num.bytes().all(|b| b.is_ascii_digit())
        && hash.len() == 8
        && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    ok.then(|| (num.parse().ok(), hash))
        .and_then(|(n, h)| Some((n?, h)))
}

fn rev_name(revision: u64, hash: &ContentHash) -> String {
    format!("{revision:06}-{}", hash.short())
}

/// A file's (mode, uid, gid).
type FileMeta = (u32, u32, u32);

/// A revision's files as read, with each file's mode and owner.
struct Revision {
    bundle: Bundle,
    meta: BTreeMap<String, FileMeta>,
}

/// The daemon's claim on a target (`..owner` flock), released on drop.
#[derive(Debug)]
pub struct Claim {
    _lock: Flock<File>,
}

/// Owns one target directory.
#[derive(Debug, Clone)]
pub struct Writer {
    target: PathBuf,
    opts: WriterOptions,
}

impl Writer {
    /// Opens (creating if needed) `target` and, under the lock, cleans up
    /// what a crash may have left: temporary entries, unfinished or
    /// unretired revisions.
    pub fn open(target: impl Into<PathBuf>, opts: WriterOptions) -> Result<Self, WriterError> {
        let w = Self {
            target: target.into(),
            opts: WriterOptions {
                keep: opts.keep.max(1),
                ..opts
            },
        };
        let root = w.root(true)?;
        let _lock = w.lock(&root)?;
        w.tidy(&root)?;
        Ok(w)
    }

    /// A target that must already exist, for reading (nothing is created,
    /// nothing cleaned) or for `rollback`.
    pub fn existing(target: impl Into<PathBuf>) -> Result<Self, WriterError> {
        let w = Self {
            target: target.into(),
            opts: WriterOptions::default(),
        };
        w.root(false)?;
        Ok(w)
    }

    pub fn target(&self) -> &Path {
        &self.target
    }

    fn path(&self, name: &str) -> PathBuf {
        self.target.join(name)
    }

    /// The target directory's handle, opened by path now (the target may
    /// have been deleted or replaced since the last operation).
    fn root(&self, create: bool) -> Result<Dir, WriterError> {
        match fs::metadata(&self.target) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(WriterError::NotADirectory(self.target.clone())),
            Err(e) if e.kind() == io::ErrorKind::NotFound && create => fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(&self.target)
                .ctx("create target directory", &self.target)?,
            Err(e) => return Err(e).ctx("open target directory", &self.target),
        }
        Dir::open_ambient_dir(&self.target, cap_std::ambient_authority())
            .ctx("open target directory", &self.target)
    }

    /// Serializes writers of this target across processes (the daemon and
    /// `certsync rollback`): a flock on the directory `root` was opened as
    /// (nothing in the target can be planted in its way). Released when
    /// the returned guard drops.
    fn lock(&self, root: &Dir) -> Result<Flock<File>, WriterError> {
        // A read-only open of `.`: cap-std's handle is `O_PATH`, which
        // flock refuses.
        let dir = root.open(".").ctx("lock", &self.target)?.into_std();
        Flock::lock(dir, FlockArg::LockExclusive)
            .map_err(|(_, e)| io::Error::from(e))
            .ctx("lock", &self.target)
    }

    /// Claims the target for this daemon, or says which process owns it.
    pub fn claim(&self) -> Result<Claim, WriterError> {
        let root = self.root(true)?;
        let path = self.path(OWNER);
        let file = lock_file(&root, OWNER, &path)?;
        let mut lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(l) => l,
            Err((mut file, nix::errno::Errno::EWOULDBLOCK)) => {
                let mut pid = String::new();
                let _ = (&mut file).take(32).read_to_string(&mut pid);
                return Err(WriterError::Owned {
                    target: self.target.clone(),
                    pid: pid.trim().to_owned(),
                });
            }
            Err((_, e)) => return Err(io::Error::from(e)).ctx("lock", &path),
        };
        lock.set_len(0)
            .and_then(|()| lock.rewind())
            .and_then(|()| writeln!(lock, "{}", std::process::id()))
            .ctx("write", &path)?;
        Ok(Claim { _lock: lock })
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
        let _lock = self.lock(&root)?;
        if let Some((pinned, replaced)) = read_pin(&root) {
            let hash = bundle.hash().to_string();
            if hash == replaced {
                return self.keep_pinned(&root, &pinned);
            }
            if hash != pinned {
                remove_any(&root, PIN, &self.path(PIN))?;
            }
        }
        self.publish_locked(&root, bundle, flipped)
    }

    /// The rollback pin: (pinned content hash, replaced content hash).
    pub fn pin(&self) -> Option<(String, String)> {
        read_pin(&self.root(false).ok()?)
    }

    /// Keeps the pinned content live, rewriting it from the live revision
    /// or history if drift damaged it.
    fn keep_pinned(&self, root: &Dir, pinned: &str) -> Result<Outcome, WriterError> {
        for info in self.revisions_in(root)? {
            let Ok(bundle) = info.content else { continue };
            if bundle.hash().to_string() != pinned {
                continue;
            }
            let revision = self.publish_locked(root, &bundle, || {})?.revision();
            return Ok(Outcome::Pinned { revision });
        }
        Err(WriterError::Rollback {
            target: self.target.clone(),
            problem: "the rollback pin names content no revision on disk holds; remove ..pin"
                .into(),
        })
    }

    /// Restores the content of history revision `to` (default: the newest
    /// in history, i.e. the one live before the current one) as a new live
    /// revision, with the modes and owner its files had, after `check`
    /// accepts it; then pins it (see `publish`). Nothing is pruned: the
    /// daemon prunes to its own `--keep-revisions` on its next write.
    pub fn rollback(
        &self,
        to: Option<u64>,
        check: impl Fn(&Bundle) -> Result<(), String>,
    ) -> Result<RolledBack, WriterError> {
        let root = self.root(false)?;
        let _lock = self.lock(&root)?;
        let err = |problem: String| WriterError::Rollback {
            target: self.target.clone(),
            problem,
        };
        let live = self
            .live_in(&root)?
            .ok_or_else(|| err("no live revision to roll back from".into()))?;
        let history = history_names(&root)?;
        let (number, name) = match to {
            Some(n) => history.get_key_value(&n).ok_or_else(|| {
                err(format!(
                    "revision {n} is not in history (see `certsync revisions`)"
                ))
            })?,
            None => history
                .iter()
                .next_back()
                .ok_or_else(|| err("no earlier revision in history".into()))?,
        };
        let shown = self.path(HISTORY).join(name);
        let revision = history_dir(&root)
            .ok_or_else(|| err("no earlier revision in history".into()))
            .and_then(|h| {
                let dir = h.open_dir_nofollow(name).map_err(|e| err(e.to_string()))?;
                read_revision(&dir, &shown).map_err(|e| err(format!("revision {number}: {e}")))
            })?;
        check(&revision.bundle).map_err(|e| err(format!("refusing revision {number}: {e}")))?;
        let restorer = Self {
            target: self.target.clone(),
            opts: options_of(&revision, usize::MAX),
        };
        let new = restorer
            .publish_locked(&root, &revision.bundle, || {})?
            .revision();
        let text = format!(
            "pinned {}\nreplaced {}\n",
            revision.bundle.hash(),
            live.hash
        );
        let tmp = format!("{TMP_PREFIX}-pin");
        remove_any(&root, &tmp, &self.path(&tmp))?;
        let tmp_path = self.path(&tmp);
        create_file(&root, &tmp, 0o644, None, None, text.as_bytes(), &tmp_path)?
            .sync_all()
            .ctx("fsync", &tmp_path)?;
        root.rename(&tmp, &root, PIN)
            .ctx("write rollback pin", &self.path(PIN))?;
        fsync(&root, &self.target)?;
        Ok(RolledBack {
            from_history: *number,
            revision: new,
        })
    }

    /// Every revision on disk, newest first, each with its content.
    pub fn revisions(&self) -> Result<Vec<RevisionInfo>, WriterError> {
        self.revisions_in(&self.root(false)?)
    }

    fn revisions_in(&self, root: &Dir) -> Result<Vec<RevisionInfo>, WriterError> {
        let live = read_link(root, DATA);
        let mut out = Vec::new();
        for n in list(root, &self.target)? {
            let Some((revision, hash)) = n.strip_prefix(REV_PREFIX).and_then(parse_rev) else {
                continue;
            };
            let dir = self.path(&n);
            let content = read_revision_at(root, &n, &dir).map(|r| r.bundle);
            out.push(RevisionInfo {
                revision,
                hash: hash.to_owned(),
                current: live.as_deref() == Some(n.as_str()),
                dir,
                content,
            });
        }
        if let Some(h) = history_dir(root) {
            let base = self.path(HISTORY);
            for (revision, name) in history_names(root)? {
                let dir = base.join(&name);
                let content = read_revision_at(&h, &name, &dir).map(|r| r.bundle);
                out.push(RevisionInfo {
                    revision,
                    hash: parse_rev(&name).map_or(String::new(), |r| r.1.to_owned()),
                    dir,
                    current: false,
                    content,
                });
            }
        }
        out.sort_by_key(|r| std::cmp::Reverse(r.revision));
        Ok(out)
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
                let repaired_links = self.link_visible(root, bundle)?;
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
        if let Err(e) = self.write_revision(root, &dir_name, bundle) {
            // No partial revision stays behind (a full disk, an I/O error);
            // the live one was never touched.
            let _ = remove_any(root, &dir_name, &self.path(&dir_name));
            return Err(e);
        }
        self.flip(root, &dir_name)?;
        self.link_visible(root, bundle)?;
        fsync(root, &self.target)?;
        flipped();
        self.tidy(root)?;
        Ok(Outcome::Written { revision, drift })
    }

    /// Reads the live revision without following anything out of the
    /// target. `None` when there is no `..data` (or it is not ours to read).
    pub fn live(&self) -> Result<Option<Live>, WriterError> {
        match self.root(false) {
            Ok(root) => self.live_in(&root),
            Err(WriterError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn live_in(&self, root: &Dir) -> Result<Option<Live>, WriterError> {
        // Not a symlink, or one that names anything but one of our
        // revisions (maybe out of the target): never followed.
        let Some(dir_name) = read_link(root, DATA) else {
            return Ok(None);
        };
        let Some((revision, name_hash)) = dir_name.strip_prefix(REV_PREFIX).and_then(parse_rev)
        else {
            return Ok(None);
        };
        let (bundle, mut problem) = match read_revision_at(root, &dir_name, &self.path(&dir_name)) {
            Ok(r) => {
                let problem = self.check_modes(&self.path(&dir_name), &r);
                (r.bundle, problem)
            }
            Err(problem) => (Bundle::default(), Some(problem)),
        };
        let hash = bundle.hash();
        if problem.is_none() && hash.short() != name_hash {
            problem = Some(format!(
                "{dir_name}: contents were changed after it was written"
            ));
        }
        Ok(Some(Live {
            revision,
            hash,
            bundle,
            problem,
        }))
    }

    fn mode_for(&self, name: &str, bytes: &[u8]) -> u32 {
        if name == KEY_FILE || !crate::validate::certificates_only(bytes) {
            self.opts.key_mode
        } else {
            self.opts.cert_mode
        }
    }

    fn check_modes(&self, dir: &Path, rev: &Revision) -> Option<String> {
        for (name, &(mode, uid, gid)) in &rev.meta {
            let want = self.mode_for(name, rev.bundle.get(name).unwrap_or_default());
            if mode != want {
                return Some(format!(
                    "{} has mode {mode:04o}, expected {want:04o}",
                    dir.join(name).display(),
                ));
            }
            if self.opts.owner.is_some_and(|u| u != uid)
                || self.opts.group.is_some_and(|g| g != gid)
            {
                return Some(format!(
                    "{} has the wrong owner or group",
                    dir.join(name).display()
                ));
            }
        }
        None
    }

    /// One past the highest revision number anywhere in the target,
    /// including the one `..data` names (its directory may be gone).
    fn next_revision(&self, root: &Dir) -> Result<u64, WriterError> {
        let revs = list(root, &self.target)?
            .into_iter()
            .chain(read_link(root, DATA))
            .filter_map(|n| n.strip_prefix(REV_PREFIX).and_then(parse_rev).map(|r| r.0));
        let history = history_names(root)?.into_keys();
        Ok(revs.chain(history).max().unwrap_or(0) + 1)
    }

    /// History entries by revision number → directory name.
    pub fn history(&self) -> Result<BTreeMap<u64, String>, WriterError> {
        history_names(&self.root(false)?)
    }

    fn write_revision(
        &self,
        root: &Dir,
        dir_name: &str,
        bundle: &Bundle,
    ) -> Result<(), WriterError> {
        let path = self.path(dir_name);
        remove_any(root, dir_name, &path)?; // an unfinished write with the same number
        let mut builder = DirBuilder::new();
        builder.mode(0o755);
        root.create_dir_with(dir_name, &builder)
            .ctx("create revision", &path)?;
        let dir = root
            .open_dir_nofollow(dir_name)
            .ctx("open revision", &path)?;
        // Every file is written before any is fsynced. On ext4 an fsync
        // also writes a new file's directory entry (without a journal, the
        // directory itself, and its parent for a new directory), so
        // fsyncing each file as it was written wrote the revision directory
        // again for the next one: a two-file revision took 1.7 ms to
        // become durable, p50, and 1.0 ms this way (this machine class's
        // ext4 without a journal; 3.1-3.9 → 2.3-3.1 ms on one with).
        let mut written = Vec::with_capacity(3);
        for (name, bytes) in bundle.files() {
            let (owner, group) = (self.opts.owner, self.opts.group);
            let file = path.join(name);
            let f = create_file(
                &dir,
                name,
                self.mode_for(name, bytes),
                owner,
                group,
                bytes,
                &file,
            )?;
            written.push((f, file));
        }
        for (f, file) in &written {
            f.sync_all().ctx("fsync", file)?;
        }
        fsync(&dir, &path)
    }

    fn flip(&self, root: &Dir, dir_name: &str) -> Result<(), WriterError> {
        // A directory or file squatting on `..data` (not a symlink) cannot be
        // renamed over; it sits under a reserved name, so it goes.
        if root
            .symlink_metadata(DATA)
            .is_ok_and(|m| !m.file_type().is_symlink())
        {
            remove_any(root, DATA, &self.path(DATA))?;
        }
        replace_symlink(root, DATA, dir_name, &self.target)
    }

    /// Makes `<target>/<name> -> ..data/<name>` for every file, and removes
    /// our links to names the bundle no longer has. Returns links changed.
    fn link_visible(&self, root: &Dir, bundle: &Bundle) -> Result<usize, WriterError> {
        let mut changed = 0;
        for name in bundle.names() {
            let want = format!("{DATA}/{name}");
            if read_link(root, name).as_deref() == Some(want.as_str()) {
                continue;
            }
            if root.symlink_metadata(name).is_ok_and(|m| m.is_dir()) {
                return Err(WriterError::Foreign {
                    path: self.path(name),
                    what: "a directory where a certificate link belongs",
                });
            }
            replace_symlink(root, name, &want, &self.target)?;
            changed += 1;
        }
        for name in list(root, &self.target)? {
            if name.starts_with("..") || bundle.get(&name).is_some() {
                continue;
            }
            if read_link(root, &name).is_some_and(|l| l.starts_with(&format!("{DATA}/"))) {
                root.remove_file(&name)
                    .ctx("remove stale link", &self.path(&name))?;
                changed += 1;
            }
        }
        Ok(changed)
    }

    /// A target certsync has never published to may hold the files it is
    /// about to replace with links (a migration). They are moved, not
    /// lost: into history as revision 0, where `certsync revisions` lists
    /// them and `certsync rollback` can restore them.
    fn keep_found_files(&self, root: &Dir, bundle: &Bundle) -> Result<(), WriterError> {
        let found: Vec<&str> = bundle
            .names()
            .filter(|n| root.symlink_metadata(n).is_ok_and(|m| m.is_file()))
            .collect();
        if found.is_empty() {
            return Ok(());
        }
        if self.opts.keep < 2 {
            return Err(WriterError::Foreign {
                path: self.path(found[0]),
                what: "a file certsync did not write, and --keep-revisions 1 keeps no history \
                       to move it to",
            });
        }
        let mut kept = Bundle::default();
        for name in &found {
            if let Ok(bytes) = read_file_at(root, name, &self.path(name)) {
                let _ = kept.insert(name, bytes, "found");
            }
        }
        let entry = rev_name(FOUND_REVISION, &kept.hash());
        let history = open_history(root, &self.target)?;
        let dest_path = self.path(HISTORY).join(&entry);
        remove_any(&history, &entry, &dest_path)?;
        history
            .create_dir_with(&entry, DirBuilder::new().mode(0o700))
            .ctx("create history", &dest_path)?;
        let dest = history
            .open_dir_nofollow(&entry)
            .ctx("open history", &dest_path)?;
        for name in &found {
            root.rename(name, &dest, name)
                .ctx("move to history", &self.path(name))?;
        }
        fsync(&dest, &dest_path)?;
        fsync(&history, &self.path(HISTORY))?;
        tracing::warn!(dir = %self.target.display(), files = ?found, kept_in = %dest_path.display(), "the target held files certsync did not write; moved them to history before publishing");
        Ok(())
    }

    /// Restores the layout's invariants: removes temporary entries, retires
    /// revisions that are no longer live into history (moving each file so
    /// watchers on it get an event), drops revisions newer than the live one
    /// (a crash before the flip), and prunes history to `keep - 1`.
    fn tidy(&self, root: &Dir) -> Result<(), WriterError> {
        let live = read_link(root, DATA)
            .and_then(|l| Some((l.strip_prefix(REV_PREFIX).and_then(parse_rev)?.0, l)));
        let mut changed = false;
        for name in list(root, &self.target)? {
            if name.starts_with(TMP_PREFIX) || name == OLD_LOCK {
                remove_any(root, &name, &self.path(&name))?;
                changed = true;
                continue;
            }
            let Some((revision, _)) = name.strip_prefix(REV_PREFIX).and_then(parse_rev) else {
                continue;
            };
            match &live {
                Some((_, live_name)) if *live_name == name => continue,
                Some((live_rev, _)) if revision > *live_rev => {
                    remove_any(root, &name, &self.path(&name))?
                }
                _ => self.retire(root, &name)?,
            }
            changed = true;
        }
        let history = history_names(root)?;
        let excess = history
            .len()
            .saturating_sub(self.opts.keep.saturating_sub(1));
        if excess > 0
            && let Some(h) = history_dir(root)
        {
            for name in history.values().take(excess) {
                remove_any(&h, name, &self.path(HISTORY).join(name))?;
            }
            fsync(&h, &self.path(HISTORY))?;
            changed = true;
        }
        if changed {
            fsync(root, &self.target)?;
        }
        Ok(())
    }

    /// Moves the files of `..rev-X` into `..history/X` one by one, then
    /// removes the emptied directory. Whatever sits in the way under our
    /// names (a planted `..history` or `..history/X` symlink) is removed, not
    /// followed; symlinks planted inside the revision are moved as links.
    /// With `keep == 1` the files are removed instead.
    fn retire(&self, root: &Dir, dir_name: &str) -> Result<(), WriterError> {
        let src_path = self.path(dir_name);
        let Some(rest) = dir_name.strip_prefix(REV_PREFIX) else {
            return Ok(());
        };
        let Ok(src) = root.open_dir_nofollow(dir_name) else {
            // A symlink or a file under a revision name: not ours to keep.
            return remove_any(root, dir_name, &src_path);
        };
        if self.opts.keep > 1 {
            let history = open_history(root, &self.target)?;
            let dst_path = self.path(HISTORY).join(rest);
            remove_any(&history, rest, &dst_path)?;
            history
                .create_dir_with(rest, DirBuilder::new().mode(0o700))
                .ctx("create history", &dst_path)?;
            let dst = history
                .open_dir_nofollow(rest)
                .ctx("open history", &dst_path)?;
            for name in list(&src, &src_path)? {
                src.rename(&name, &dst, &name)
                    .ctx("move to history", &src_path.join(&name))?;
            }
            fsync(&dst, &dst_path)?;
            fsync(&history, &self.path(HISTORY))?;
        } else {
            for name in list(&src, &src_path)? {
                remove_any(&src, &name, &src_path.join(&name))?;
            }
        }
        root.remove_dir(dir_name)
            .ctx("remove retired revision", &src_path)
    }
}

/// Opens (creating if needed) a lock file under a reserved name. Whatever
/// else sits there (a symlink, FIFO, directory) is removed first: a planted
/// entry must neither be followed nor block every write forever.
fn lock_file(root: &Dir, name: &str, path: &Path) -> Result<File, WriterError> {
    let open = || {
        root.open_with(
            name,
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .mode(0o600)
                .custom_flags((OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits())
                .follow(FollowSymlinks::No),
        )
    };
    if let Ok(f) = open()
        && f.metadata().is_ok_and(|m| m.is_file())
    {
        return Ok(f.into_std());
    }
    remove_any(root, name, path)?;
    let f = open().ctx("open lock", path)?;
    if !f.metadata().ctx("stat", path)?.is_file() {
        return Err(WriterError::Foreign {
            path: path.to_owned(),
            what: "not a regular file",
        });
    }
    Ok(f.into_std())
}

/// The rollback pin, if `..pin` is a regular file holding one.
fn read_pin(root: &Dir) -> Option<(String, String)> {
    let bytes = read_file_at(root, PIN, Path::new(PIN)).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let mut pinned = None;
    let mut replaced = None;
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("pinned", h)) => pinned = Some(h.trim().to_owned()),
            Some(("replaced", h)) => replaced = Some(h.trim().to_owned()),
            _ => {}
        }
    }
    Some((pinned?, replaced?))
}

/// `..history`, opened without following and created if missing; a
/// symlink, file or FIFO under that name is removed first, never followed.
fn open_history(root: &Dir, target: &Path) -> Result<Dir, WriterError> {
    let path = target.join(HISTORY);
    match root.symlink_metadata(HISTORY) {
        Ok(m) if m.is_dir() => {}
        other => {
            if other.is_ok() {
                remove_any(root, HISTORY, &path)?;
            }
            root.create_dir_with(HISTORY, DirBuilder::new().mode(0o700))
                .ctx("create history", &path)?;
        }
    }
    root.open_dir_nofollow(HISTORY).ctx("open history", &path)
}

/// `..history` if it is a real directory (for reading and pruning).
fn history_dir(root: &Dir) -> Option<Dir> {
    root.open_dir_nofollow(HISTORY).ok()
}

/// History entries by revision number → directory name.
fn history_names(root: &Dir) -> Result<BTreeMap<u64, String>, WriterError> {
    let Some(h) = history_dir(root) else {
        return Ok(BTreeMap::new());
    };
    Ok(list(&h, Path::new(HISTORY))?
        .into_iter()
        .filter_map(|n| Some((parse_rev(&n)?.0, n)))
        .collect())
}

/// The modes and owner the files of a revision have, so a rollback
/// restores them as they were.
fn options_of(rev: &Revision, keep: usize) -> WriterOptions {
    let defaults = WriterOptions::default();
    let is_key = |n: &str| {
        n == KEY_FILE || !crate::validate::certificates_only(rev.bundle.get(n).unwrap_or_default())
    };
    let key = rev.meta.iter().find(|(n, _)| is_key(n)).map(|(_, m)| m);
    let cert = rev.meta.iter().find(|(n, _)| !is_key(n)).map(|(_, m)| m);
    let any = key.or(cert);
    WriterOptions {
        keep,
        cert_mode: cert.map_or(defaults.cert_mode, |m| m.0),
        key_mode: key.map_or(defaults.key_mode, |m| m.0),
        owner: any.map(|m| m.1),
        group: any.map(|m| m.2),
    }
}

/// Reads the revision directory `name` of `parent` (never through a
/// symlink). `Err` carries why it cannot be trusted.
fn read_revision_at(parent: &Dir, name: &str, shown: &Path) -> Result<Revision, String> {
    let dir = parent
        .open_dir_nofollow(name)
        .map_err(|e| format!("{}: {}", shown.display(), not_a_dir(e)))?;
    read_revision(&dir, shown)
}

fn not_a_dir(e: io::Error) -> String {
    match e.raw_os_error() {
        Some(nix::libc::ELOOP) | Some(nix::libc::ENOTDIR) => "not a directory".into(),
        _ => e.to_string(),
    }
}

/// Reads a revision directory's regular files with their modes and owners.
/// `Err` carries why it cannot be trusted (a planted symlink or FIFO, a
/// subdirectory, an unreadable file).
fn read_revision(dir: &Dir, shown: &Path) -> Result<Revision, String> {
    let mut rev = Revision {
        bundle: Bundle::default(),
        meta: BTreeMap::new(),
    };
    for name in list(dir, shown).map_err(|e| e.to_string())? {
        let path = shown.join(&name);
        let (bytes, meta) = read_file_meta(dir, &name, &path).map_err(|e| e.to_string())?;
        rev.bundle
            .insert(&name, bytes, path.display().to_string())
            .map_err(|e| e.to_string())?;
        rev.meta.insert(name, meta);
    }
    Ok(rev)
}

fn read_file_at(dir: &Dir, name: &str, path: &Path) -> Result<Vec<u8>, crate::files::FileError> {
    read_file_meta(dir, name, path).map(|r| r.0)
}

/// Opens `name` in `dir` without following it or blocking on it, and
/// reads it if the opened descriptor is a regular file within the bundle
/// size limit. Returns the bytes and (mode, uid, gid).
fn read_file_meta(
    dir: &Dir,
    name: &str,
    path: &Path,
) -> Result<(Vec<u8>, FileMeta), crate::files::FileError> {
    use crate::files::FileError;
    let io_err = |source| FileError::Io {
        path: path.to_owned(),
        source,
    };
    let f = dir
        .open_with(
            name,
            OpenOptions::new()
                .read(true)
                .custom_flags((OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY).bits())
                .follow(FollowSymlinks::No),
        )
        .map_err(|e| match e.raw_os_error() {
            Some(nix::libc::ELOOP) => FileError::NotRegular {
                path: path.to_owned(),
                what: "a symlink",
            },
            _ => io_err(e),
        })?;
    let m = f.metadata().map_err(io_err)?;
    if !m.is_file() {
        return Err(FileError::NotRegular {
            path: path.to_owned(),
            what: crate::files::kind_of(f.into_std().metadata().map_err(io_err)?.file_type()),
        });
    }
    let meta = (m.mode() & 0o7777, m.uid(), m.gid());
    let bytes = crate::files::read_capped(f.into_std(), path, MAX_BUNDLE_SIZE as u64)?;
    Ok((bytes, meta))
}

/// Creates `name` in `dir` with exactly `mode` (never more permissive on
/// the way: created with it, then chowned, then set) and writes it. The
/// fsync is the caller's: a revision's files are all written first.
fn create_file(
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

/// What the symlink `name` in `dir` says, if it is a symlink with UTF-8 text.
fn read_link(dir: &Dir, name: &str) -> Option<String> {
    let link = dir.read_link_contents(name).ok()?;
    link.to_str().map(str::to_owned)
}

/// Names in `dir` (not following anything).
fn list(dir: &Dir, shown: &Path) -> Result<Vec<String>, WriterError> {
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
fn replace_symlink(dir: &Dir, name: &str, text: &str, shown: &Path) -> Result<(), WriterError> {
    let tmp = format!("{TMP_PREFIX}-{}", name.trim_start_matches('.'));
    remove_any(dir, &tmp, &shown.join(&tmp))?;
    dir.symlink_contents(text, &tmp)
        .ctx("symlink", &shown.join(&tmp))?;
    dir.rename(&tmp, dir, name).ctx("rename", &shown.join(name))
}

/// Removes the entry `name` of `dir`, a file, symlink, FIFO or directory
/// tree, never following a symlink. Missing is fine.
fn remove_any(dir: &Dir, name: &str, path: &Path) -> Result<(), WriterError> {
    match dir.symlink_metadata(name) {
        Ok(m) if m.is_dir() => dir.remove_dir_all(name).ctx("remove", path),
        Ok(_) => dir.remove_file(name).ctx("remove", path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).ctx("stat", path),
    }
}

/// fsync of a directory: through a read-only open of `.` (cap-std's
/// directory handles are `O_PATH`, which cannot be synced).
fn fsync(dir: &Dir, path: &Path) -> Result<(), WriterError> {
    dir.open(".").and_then(|d| d.sync_all()).ctx("fsync", path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::{CA_FILE, CERT_FILE};
    use std::fs::Permissions;
    use std::os::unix::fs::MetadataExt as _;

    /// A real certificate, the same for the same tag: the writer gives
    /// anything but certificate PEM the key mode.
    fn cert(tag: &str) -> Vec<u8> {
        static MADE: std::sync::Mutex<BTreeMap<String, Vec<u8>>> =
            std::sync::Mutex::new(BTreeMap::new());
        let mut made = MADE.lock().unwrap();
        made.entry(tag.to_owned())
            .or_insert_with(|| crate::test_certs::Pair::new(&format!("cert-{tag}")).cert)
            .clone()
    }

    fn bundle(tag: &str) -> Bundle {
        let mut b = Bundle::default();
        b.insert(CERT_FILE, cert(tag), "t").unwrap();
        b.insert(KEY_FILE, format!("key {tag}").into_bytes(), "t")
            .unwrap();
        b
    }

    fn setup(keep: usize) -> (tempfile::TempDir, Writer) {
        let dir = tempfile::tempdir().unwrap();
        let w = Writer::open(
            dir.path().join("target"),
            WriterOptions {
                keep,
                ..Default::default()
            },
        )
        .unwrap();
        (dir, w)
    }

    fn entries(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    /// The visible files resolve through `..data` to one complete revision
    /// with exactly `b`'s bytes and the configured modes.
    fn assert_live(w: &Writer, b: &Bundle) {
        let t = w.target();
        let data = fs::read_link(t.join(DATA)).unwrap();
        let data = data.to_str().unwrap();
        assert!(data.starts_with(REV_PREFIX), "{data}");
        assert!(data.ends_with(&b.hash().short()), "{data}");
        for (name, bytes) in b.files() {
            assert_eq!(
                fs::read_link(t.join(name)).unwrap(),
                Path::new(DATA).join(name)
            );
            assert_eq!(fs::read(t.join(name)).unwrap(), bytes, "{name}");
            let mode = fs::metadata(t.join(name)).unwrap().mode() & 0o7777;
            assert_eq!(mode, if name == KEY_FILE { 0o600 } else { 0o644 }, "{name}");
        }
        let in_rev = entries(&t.join(data));
        let want: Vec<_> = b.names().map(str::to_owned).collect();
        assert_eq!(in_rev, want, "revision holds exactly the bundle");
    }

    fn revisions_on_disk(w: &Writer) -> usize {
        let live = entries(w.target())
            .iter()
            .filter(|n| n.starts_with(REV_PREFIX))
            .count();
        live + w.history().unwrap().len()
    }

    #[test]
    fn publish_rotate_and_prune() {
        let (_d, w) = setup(3);
        for i in 1..=10u64 {
            let b = bundle(&i.to_string());
            assert_eq!(
                w.publish(&b).unwrap(),
                Outcome::Written {
                    revision: i,
                    drift: None
                }
            );
            assert_live(&w, &b);
            assert_eq!(revisions_on_disk(&w), (i as usize).min(3));
        }
        let history: Vec<u64> = w.history().unwrap().into_keys().collect();
        assert_eq!(history, vec![8, 9]);
        // History keeps the files of each retired revision, key mode intact.
        let h9 = w
            .target()
            .join(HISTORY)
            .join(rev_name(9, &bundle("9").hash()));
        assert_eq!(fs::read(h9.join(KEY_FILE)).unwrap(), b"key 9");
        assert_eq!(
            fs::metadata(h9.join(KEY_FILE)).unwrap().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn identical_content_creates_no_revision_even_after_reopen() {
        let (_d, w) = setup(3);
        let b = bundle("same");
        w.publish(&b).unwrap();
        let before = entries(w.target());
        assert_eq!(
            w.publish(&b).unwrap(),
            Outcome::Unchanged {
                revision: 1,
                repaired_links: 0
            }
        );
        let reopened = Writer::open(w.target(), WriterOptions::default()).unwrap();
        assert!(matches!(
            reopened.publish(&b).unwrap(),
            Outcome::Unchanged { revision: 1, .. }
        ));
        assert_eq!(entries(w.target()), before);
    }

    #[test]
    fn keep_one_removes_old_files() {
        let (_d, w) = setup(1);
        for i in 0..4 {
            w.publish(&bundle(&i.to_string())).unwrap();
        }
        assert_eq!(revisions_on_disk(&w), 1);
        assert!(!w.target().join(HISTORY).exists() || w.history().unwrap().is_empty());
    }

    #[test]
    fn files_that_disappear_lose_their_links() {
        let (_d, w) = setup(3);
        let mut with_ca = bundle("1");
        with_ca.insert(CA_FILE, cert("ca"), "t").unwrap();
        w.publish(&with_ca).unwrap();
        assert_eq!(fs::read(w.target().join(CA_FILE)).unwrap(), cert("ca"));
        let without = bundle("2");
        w.publish(&without).unwrap();
        assert_live(&w, &without);
        assert!(fs::symlink_metadata(w.target().join(CA_FILE)).is_err());
    }

    #[test]
    fn crash_leftovers_are_cleaned_at_open() {
        let (_d, w) = setup(3);
        w.publish(&bundle("1")).unwrap();
        w.publish(&bundle("2")).unwrap();
        let t = w.target().to_owned();
        // A crash mid-write: an unfinished newer revision, temporary links,
        // and an older revision that was never moved to history.
        fs::create_dir(t.join("..rev-000009-00000000")).unwrap();
        fs::write(t.join("..rev-000009-00000000").join(CERT_FILE), b"half").unwrap();
        std::os::unix::fs::symlink("..rev-000009-00000000", t.join("..tmp-data")).unwrap();
        fs::create_dir(t.join("..tmp-stray")).unwrap();
        let old = format!("{REV_PREFIX}{}", rev_name(1, &bundle("1").hash()));
        fs::create_dir(t.join(&old)).unwrap();
        fs::write(t.join(&old).join(CERT_FILE), cert("1")).unwrap();

        let w = Writer::open(&t, WriterOptions::default()).unwrap();
        let names: Vec<_> = entries(&t)
            .into_iter()
            .filter(|n| n.starts_with(".."))
            .collect();
        let live = fs::read_link(t.join(DATA)).unwrap();
        assert_eq!(names, vec![DATA, HISTORY, live.to_str().unwrap()]);
        assert_live(&w, &bundle("2"));
        // The next revision continues after the highest number ever seen.
        w.publish(&bundle("3")).unwrap();
        assert!(
            fs::read_link(t.join(DATA))
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("..rev-000003")
        );
    }

    #[test]
    fn drift_is_repaired() {
        type Damage = fn(&Path, &str);
        let cases: Vec<(&str, Damage, bool)> = vec![
            (
                "visible link deleted",
                |t, _| fs::remove_file(t.join(CERT_FILE)).unwrap(),
                false,
            ),
            (
                "visible link replaced by a file",
                |t, _| {
                    fs::remove_file(t.join(KEY_FILE)).unwrap();
                    fs::write(t.join(KEY_FILE), b"edited").unwrap();
                },
                false,
            ),
            (
                "..data deleted",
                |t, _| fs::remove_file(t.join(DATA)).unwrap(),
                true,
            ),
            (
                "revision file edited",
                |t, live| fs::write(t.join(live).join(CERT_FILE), b"edited").unwrap(),
                true,
            ),
            (
                "revision file deleted",
                |t, live| fs::remove_file(t.join(live).join(KEY_FILE)).unwrap(),
                true,
            ),
            (
                "key mode loosened",
                |t, live| {
                    fs::set_permissions(t.join(live).join(KEY_FILE), Permissions::from_mode(0o644))
                        .unwrap()
                },
                true,
            ),
            (
                "revision deleted",
                |t, live| fs::remove_dir_all(t.join(live)).unwrap(),
                true,
            ),
            (
                "..data replaced by a directory",
                |t, _| {
                    fs::remove_file(t.join(DATA)).unwrap();
                    fs::create_dir(t.join(DATA)).unwrap();
                },
                true,
            ),
        ];
        for (name, damage, new_revision) in cases {
            let (_d, w) = setup(3);
            let b = bundle("good");
            w.publish(&b).unwrap();
            let live = fs::read_link(w.target().join(DATA)).unwrap();
            damage(w.target(), live.to_str().unwrap());
            let out = w.publish(&b).unwrap();
            match out {
                Outcome::Written { revision: 2, .. } => assert!(new_revision, "{name}: {out:?}"),
                Outcome::Unchanged {
                    revision: 1,
                    repaired_links: 1,
                } => {
                    assert!(!new_revision, "{name}: {out:?}")
                }
                other => panic!("{name}: unexpected {other:?}"),
            }
            assert_live(&w, &b);
        }
    }

    #[test]
    fn planted_symlinks_are_not_followed_out_of_the_target() {
        let outside = tempfile::tempdir().unwrap();
        let outside_file = outside.path().join(CERT_FILE);
        fs::write(&outside_file, b"do not touch").unwrap();
        fs::set_permissions(&outside_file, Permissions::from_mode(0o640)).unwrap();

        // `..data` pointing outside the target.
        let (_d, w) = setup(3);
        w.publish(&bundle("1")).unwrap();
        fs::remove_file(w.target().join(DATA)).unwrap();
        std::os::unix::fs::symlink(outside.path(), w.target().join(DATA)).unwrap();
        assert_eq!(w.live().unwrap(), None, "an escaping ..data is not read");
        assert!(matches!(
            w.publish(&bundle("1")).unwrap(),
            Outcome::Written { .. }
        ));
        assert_live(&w, &bundle("1"));

        // The live revision directory replaced by a symlink to outside.
        let live = fs::read_link(w.target().join(DATA)).unwrap();
        fs::remove_dir_all(w.target().join(&live)).unwrap();
        std::os::unix::fs::symlink(outside.path(), w.target().join(&live)).unwrap();
        assert!(w.live().unwrap().unwrap().problem.is_some());
        w.publish(&bundle("1")).unwrap();
        assert_live(&w, &bundle("1"));

        // A file inside the live revision replaced by a symlink to outside.
        let live = fs::read_link(w.target().join(DATA)).unwrap();
        let planted = w.target().join(&live).join(CERT_FILE);
        fs::remove_file(&planted).unwrap();
        std::os::unix::fs::symlink(&outside_file, &planted).unwrap();
        w.publish(&bundle("1")).unwrap();
        assert_live(&w, &bundle("1"));

        // Outside stayed exactly as it was, through rotation and pruning.
        for i in 2..6 {
            w.publish(&bundle(&i.to_string())).unwrap();
        }
        assert_eq!(fs::read(&outside_file).unwrap(), b"do not touch");
        assert_eq!(fs::metadata(&outside_file).unwrap().mode() & 0o777, 0o640);
        assert_eq!(entries(outside.path()), vec![CERT_FILE.to_owned()]);
    }

    /// Every name certsync owns, planted as a symlink to a victim
    /// directory or file (or as a FIFO): rotation and pruning neither
    /// follow it nor hang on it, and the victim is untouched.
    #[test]
    fn planted_owned_names_are_replaced_not_followed() {
        let victim = tempfile::tempdir().unwrap();
        fs::write(victim.path().join(CERT_FILE), b"victim").unwrap();
        let fifo = |p: &Path| {
            nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap()
        };
        let link = |p: &Path| std::os::unix::fs::symlink(victim.path(), p).unwrap();
        type Plant = fn(&Path, &str, &dyn Fn(&Path), &dyn Fn(&Path));
        let cases: Vec<(&str, Plant)> = vec![
            ("..history -> victim", |t, _, link, _| {
                fs::remove_dir_all(t.join(HISTORY)).unwrap();
                link(&t.join(HISTORY));
            }),
            ("..history/<live> -> victim", |t, live, link, _| {
                link(&t.join(HISTORY).join(live.trim_start_matches(REV_PREFIX)))
            }),
            ("..pin is a FIFO", |t, _, _, fifo| fifo(&t.join(PIN))),
            ("..pin -> victim file", |t, _, _, _| {
                std::os::unix::fs::symlink("/etc/hostname", t.join(PIN)).unwrap()
            }),
            ("..tmp-data -> victim", |t, _, link, _| {
                link(&t.join("..tmp-data"))
            }),
        ];
        for (name, plant) in cases {
            let (_d, w) = setup(3);
            w.publish(&bundle("1")).unwrap();
            w.publish(&bundle("2")).unwrap();
            let live = fs::read_link(w.target().join(DATA)).unwrap();
            plant(w.target(), live.to_str().unwrap(), &link, &fifo);
            for i in 3..7 {
                w.publish(&bundle(&i.to_string())).unwrap();
                assert_live(&w, &bundle(&i.to_string()));
            }
            assert_eq!(entries(victim.path()), vec![CERT_FILE.to_owned()], "{name}");
            assert_eq!(fs::read(victim.path().join(CERT_FILE)).unwrap(), b"victim");
            assert!(
                fs::symlink_metadata(w.target().join(HISTORY))
                    .unwrap()
                    .is_dir(),
                "{name}: ..history is a real directory again"
            );
            assert_eq!(
                w.history().unwrap().len(),
                2,
                "{name}: history pruned to keep-1"
            );
        }
    }

    #[test]
    fn writers_are_serialized_by_a_flock_on_the_target_directory() {
        let (_d, w) = setup(3);
        w.publish(&bundle("1")).unwrap();
        // Another writer (`certsync rollback`, another process) holds it.
        let held = Flock::lock(File::open(w.target()).unwrap(), FlockArg::LockExclusive).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let writer = Writer::existing(w.target()).unwrap();
        let t = std::thread::spawn(move || {
            let out = writer.publish(&bundle("2"));
            tx.send(()).unwrap();
            out
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(300))
                .is_err(),
            "published while another writer held the lock"
        );
        assert_live(&w, &bundle("1"));
        drop(held);
        rx.recv().unwrap();
        t.join().unwrap().unwrap();
        assert_live(&w, &bundle("2"));
        assert!(
            fs::symlink_metadata(w.target().join(OLD_LOCK)).is_err(),
            "no lock file in the target"
        );
    }

    #[test]
    fn a_leftover_lock_file_is_removed_on_open_never_followed() {
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("victim"), b"victim").unwrap();
        type Plant<'a> = (&'a str, &'a dyn Fn(&Path));
        let plants: [Plant; 4] = [
            ("a file (an earlier build's)", &|p| {
                fs::write(p, b"").unwrap()
            }),
            ("a symlink to a directory outside", &|p| {
                std::os::unix::fs::symlink(outside.path(), p).unwrap()
            }),
            ("a symlink to a file outside", &|p| {
                std::os::unix::fs::symlink(outside.path().join("victim"), p).unwrap()
            }),
            ("a FIFO", &|p| {
                nix::unistd::mkfifo(p, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap()
            }),
        ];
        for (what, plant) in plants {
            let (_d, w) = setup(3);
            w.publish(&bundle("1")).unwrap();
            plant(&w.target().join(OLD_LOCK));
            let again = Writer::open(w.target(), WriterOptions::default()).unwrap();
            assert!(
                fs::symlink_metadata(again.target().join(OLD_LOCK)).is_err(),
                "{what}: still there"
            );
            assert_live(&again, &bundle("1"));
            assert_eq!(entries(outside.path()), vec!["victim".to_owned()], "{what}");
            assert_eq!(fs::read(outside.path().join("victim")).unwrap(), b"victim");
        }
    }

    #[test]
    fn files_found_in_a_fresh_target_are_kept_in_history() {
        let (_d, w) = setup(3);
        fs::write(w.target().join(CERT_FILE), b"old cert").unwrap();
        fs::write(w.target().join(KEY_FILE), b"old key").unwrap();
        w.publish(&bundle("1")).unwrap();
        assert_live(&w, &bundle("1"));
        let history = w.history().unwrap();
        let kept = w.target().join(HISTORY).join(&history[&FOUND_REVISION]);
        assert_eq!(fs::read(kept.join(CERT_FILE)).unwrap(), b"old cert");
        assert_eq!(fs::read(kept.join(KEY_FILE)).unwrap(), b"old key");

        let (_d, w) = setup(1);
        fs::write(w.target().join(CERT_FILE), b"old cert").unwrap();
        let e = w.publish(&bundle("1")).unwrap_err().to_string();
        assert!(
            e.contains("did not write") && e.contains("--keep-revisions"),
            "{e}"
        );
        assert_eq!(fs::read(w.target().join(CERT_FILE)).unwrap(), b"old cert");
    }

    #[test]
    fn rollback_prunes_nothing_and_a_second_daemon_is_refused() {
        let (_d, w) = setup(10);
        for i in 1..=6 {
            w.publish(&bundle(&i.to_string())).unwrap();
        }
        Writer::existing(w.target())
            .unwrap()
            .rollback(None, |_| Ok(()))
            .unwrap();
        let numbers: Vec<u64> = w.revisions().unwrap().iter().map(|r| r.revision).collect();
        assert_eq!(
            numbers,
            vec![7, 6, 5, 4, 3, 2, 1],
            "nothing pruned by rollback"
        );

        let claim = w.claim().unwrap();
        let e = w.claim().unwrap_err().to_string();
        let me = std::process::id().to_string();
        assert!(
            e.contains("already managed by another certsync") && e.contains(&me),
            "{e}"
        );
        drop(claim);
        w.claim().unwrap();
    }

    #[test]
    fn target_that_is_a_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("file");
        fs::write(&f, b"x").unwrap();
        let err = Writer::open(&f, WriterOptions::default()).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
    }

    #[test]
    fn modes_ignore_umask_and_owner_is_applied() {
        let dir = tempfile::tempdir().unwrap();
        let me = nix::unistd::getuid().as_raw();
        let w = Writer::open(
            dir.path().join("t"),
            WriterOptions {
                cert_mode: 0o640,
                key_mode: 0o400,
                owner: Some(me),
                group: Some(nix::unistd::getgid().as_raw()),
                ..Default::default()
            },
        )
        .unwrap();
        let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o077));
        let r = w.publish(&bundle("1"));
        nix::sys::stat::umask(old);
        r.unwrap();
        let t = w.target();
        assert_eq!(
            fs::metadata(t.join(CERT_FILE)).unwrap().mode() & 0o7777,
            0o640
        );
        assert_eq!(
            fs::metadata(t.join(KEY_FILE)).unwrap().mode() & 0o7777,
            0o400
        );
        assert_eq!(fs::metadata(t.join(KEY_FILE)).unwrap().uid(), me);
        // Same content, same modes: nothing to do.
        assert!(matches!(
            w.publish(&bundle("1")).unwrap(),
            Outcome::Unchanged { .. }
        ));
    }

    /// What kube-apiserver's dynamic certificate loader does: an inotify
    /// watch on the `tls.crt` path (landing on the file the symlinks resolve
    /// to), re-added after a remove or move. Every flip must reach it, with
    /// history kept and without, and a directory watch must see `..data`.
    #[test]
    fn every_flip_wakes_file_and_directory_watchers() {
        use nix::sys::inotify::{AddWatchFlags as F, InitFlags, Inotify};
        for keep in [3, 1] {
            let (_d, w) = setup(keep);
            w.publish(&bundle("0")).unwrap();
            let ino = Inotify::init(InitFlags::IN_NONBLOCK).unwrap();
            let cert_path = w.target().join(CERT_FILE);
            let mut file_wd = ino.add_watch(&cert_path, F::IN_ALL_EVENTS).unwrap();
            let dir_wd = ino.add_watch(w.target(), F::IN_MOVED_TO).unwrap();
            for i in 1..=5 {
                w.publish(&bundle(&i.to_string())).unwrap();
                let mut events = Vec::new();
                while let Ok(batch) = ino.read_events() {
                    events.extend(batch);
                }
                let file_moved = events.iter().any(|e| {
                    e.wd == file_wd && e.mask.intersects(F::IN_MOVE_SELF | F::IN_DELETE_SELF)
                });
                assert!(
                    file_moved,
                    "keep={keep} flip {i}: no move/delete on tls.crt: {events:?}"
                );
                let data_flipped = events.iter().any(|e| {
                    e.wd == dir_wd && e.name.as_deref() == Some(std::ffi::OsStr::new(DATA))
                });
                assert!(
                    data_flipped,
                    "keep={keep} flip {i}: no ..data event: {events:?}"
                );
                let _ = ino.rm_watch(file_wd); // may already be gone (IN_IGNORED)
                file_wd = ino.add_watch(&cert_path, F::IN_ALL_EVENTS).unwrap();
                assert_eq!(fs::read(&cert_path).unwrap(), cert(&i.to_string()));
            }
        }
    }

    #[test]
    fn rollback_restores_history_and_pins_until_the_source_changes() {
        let (_d, w) = setup(4);
        for tag in ["a", "b", "c"] {
            w.publish(&bundle(tag)).unwrap();
        }
        let ok = |_: &Bundle| Ok(());
        let e = w.rollback(Some(9), ok).unwrap_err().to_string();
        assert!(e.contains("revision 9 is not in history"), "{e}");
        let e = w
            .rollback(None, |_| Err("expired".into()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("refusing revision 2: expired"), "{e}");
        assert_live(&w, &bundle("c"));

        let done = w.rollback(None, ok).unwrap();
        assert_eq!(
            done,
            RolledBack {
                from_history: 2,
                revision: 4
            }
        );
        assert_live(&w, &bundle("b"));
        assert_eq!(
            w.pin(),
            Some((
                bundle("b").hash().to_string(),
                bundle("c").hash().to_string()
            ))
        );

        // The source still offers "c": the rollback holds, and is repaired.
        assert_eq!(
            w.publish(&bundle("c")).unwrap(),
            Outcome::Pinned { revision: 4 }
        );
        let live = fs::read_link(w.target().join(DATA)).unwrap();
        fs::remove_file(w.target().join(live).join(KEY_FILE)).unwrap();
        assert_eq!(
            w.publish(&bundle("c")).unwrap(),
            Outcome::Pinned { revision: 5 }
        );
        assert_live(&w, &bundle("b"));

        // New source content releases the pin.
        assert!(matches!(
            w.publish(&bundle("d")).unwrap(),
            Outcome::Written { revision: 6, .. }
        ));
        assert_live(&w, &bundle("d"));
        assert_eq!(w.pin(), None);
    }

    #[test]
    fn rollback_keeps_the_modes_the_revision_had() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("t");
        let w = Writer::open(
            &t,
            WriterOptions {
                key_mode: 0o640,
                ..Default::default()
            },
        )
        .unwrap();
        w.publish(&bundle("old")).unwrap();
        let w = Writer::open(&t, WriterOptions::default()).unwrap();
        w.publish(&bundle("new")).unwrap();
        Writer::existing(&t)
            .unwrap()
            .rollback(None, |_| Ok(()))
            .unwrap();
        assert_eq!(fs::read(t.join(KEY_FILE)).unwrap(), b"key old");
        assert_eq!(
            fs::metadata(t.join(KEY_FILE)).unwrap().mode() & 0o777,
            0o640
        );
        let revs: Vec<(u64, bool)> = Writer::existing(&t)
            .unwrap()
            .revisions()
            .unwrap()
            .iter()
            .map(|r| (r.revision, r.current))
            .collect();
        assert_eq!(revs, vec![(3, true), (2, false), (1, false)]);
    }

    #[test]
    fn revision_names_parse() {
        assert_eq!(parse_rev("000042-3f9a1c2e"), Some((42, "3f9a1c2e")));
        assert_eq!(parse_rev("1234567-3f9a1c2e"), Some((1_234_567, "3f9a1c2e")));
        for bad in [
            "42-3f9a1c2e",
            "000042-3F9A1C2E",
            "000042-3f9a1c2",
            "x/000042-3f9a1c2e",
            "000042",
        ] {
            assert_eq!(parse_rev(bad), None, "{bad}");
        }
    }
}
