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
//! - `..data` only ever names a complete revision: files are created with
//!   their final mode (never more permissive, never by umask), written,
//!   fsynced, the revision directory fsynced, and only then `..data` is
//!   replaced by `rename(2)` of a fresh symlink; the parent is fsynced.
//! - A revision's name carries its number and the first 8 hex digits of its
//!   content hash, so an edited revision is detected even across restarts.
//! - After a flip the previous live *files* are moved (one `rename` each) into
//!   `..history/`, so an inotify watch on them gets `IN_MOVE_SELF`: this is
//!   what makes kube-apiserver & co. re-read their certificates.
//! - Names starting with `..` belong to certsync. Links in the target are
//!   read with `readlink` and checked, never followed out of the target;
//!   files are opened with `O_NOFOLLOW`.
//! - At most `keep` revisions (live included) stay on disk.

use std::collections::BTreeMap;
use std::fs::{self, DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

use crate::bundle::{Bundle, ContentHash, KEY_FILE};
use crate::validate::MAX_BUNDLE_SIZE;

const DATA: &str = "..data";
const HISTORY: &str = "..history";
const REV_PREFIX: &str = "..rev-";
const TMP_PREFIX: &str = "..tmp";
/// Held (flock) by whoever writes the target: the daemon or `certsync rollback`.
const LOCK: &str = "..lock";
/// Present after `certsync rollback`: the content the operator chose and
/// the content it replaced (see [`Writer::publish`]).
const PIN: &str = "..pin";

#[derive(Debug, thiserror::Error)]
pub enum WriterError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("target {0} exists and is not a directory")]
    NotADirectory(PathBuf),
    #[error("{path} is {what}; refusing to replace it")]
    Foreign { path: PathBuf, what: &'static str },
    #[error("target {target}: {problem}")]
    Rollback { target: PathBuf, problem: String },
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

/// Owns one target directory.
#[derive(Debug, Clone)]
pub struct Writer {
    target: PathBuf,
    opts: WriterOptions,
}

impl Writer {
    /// Opens (creating if needed) `target` and cleans up what a crash may
    /// have left: temporary entries, unfinished or unretired revisions.
    pub fn open(target: impl Into<PathBuf>, opts: WriterOptions) -> Result<Self, WriterError> {
        let target = target.into();
        match fs::metadata(&target) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(WriterError::NotADirectory(target)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(&target)
                .ctx("create target directory", &target)?,
            Err(e) => return Err(e).ctx("stat", &target),
        }
        let w = Self {
            target,
            opts: WriterOptions {
                keep: opts.keep.max(1),
                ..opts
            },
        };
        w.tidy()?;
        Ok(w)
    }

    /// A target that must already exist, for reading (nothing is created,
    /// nothing cleaned) or for `rollback`.
    pub fn existing(target: impl Into<PathBuf>) -> Result<Self, WriterError> {
        let target = target.into();
        match fs::metadata(&target) {
            Ok(m) if m.is_dir() => Ok(Self {
                target,
                opts: WriterOptions::default(),
            }),
            Ok(_) => Err(WriterError::NotADirectory(target)),
            Err(e) => Err(e).ctx("stat", &target),
        }
    }

    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Serializes writers of this target across processes (the daemon and
    /// `certsync rollback`). Released when the returned guard drops.
    fn lock(&self) -> Result<nix::fcntl::Flock<File>, WriterError> {
        let path = self.target.join(LOCK);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(OFlag::O_NOFOLLOW.bits() | OFlag::O_CLOEXEC.bits())
            .open(&path)
            .ctx("open lock", &path)?;
        nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| io::Error::from(e))
            .ctx("lock", &path)
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
        let _lock = self.lock()?;
        if let Some((pinned, replaced)) = self.pin() {
            let hash = bundle.hash().to_string();
            if hash == replaced {
                return self.keep_pinned(&pinned);
            }
            if hash != pinned {
                let path = self.target.join(PIN);
                fs::remove_file(&path).ctx("remove rollback pin", &path)?;
            }
        }
        self.publish_locked(bundle, flipped)
    }

    /// The rollback pin: (pinned content hash, replaced content hash).
    pub fn pin(&self) -> Option<(String, String)> {
        let text = fs::read_to_string(self.target.join(PIN)).ok()?;
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

    /// Keeps the pinned content live, rewriting it from the live revision
    /// or history if drift damaged it.
    fn keep_pinned(&self, pinned: &str) -> Result<Outcome, WriterError> {
        let candidates = self.revisions()?;
        for info in candidates {
            let Ok(bundle) = read_revision(&info.dir) else {
                continue;
            };
            if bundle.hash().to_string() != pinned {
                continue;
            }
            let revision = self.publish_locked(&bundle, || {})?.revision();
            return Ok(Outcome::Pinned { revision });
        }
        Err(WriterError::Rollback {
            target: self.target.clone(),
            problem: "the rollback pin names content no revision on disk holds; remove ..pin"
                .into(),
        })
    }

    /// Restores the content of history revision `to` (default: the newest
    /// in history) as a new live revision, with the modes and owner its
    /// files had, after `check` accepts it; then pins it (see `publish`).
    pub fn rollback(
        &self,
        to: Option<u64>,
        check: impl Fn(&Bundle) -> Result<(), String>,
    ) -> Result<RolledBack, WriterError> {
        let _lock = self.lock()?;
        let err = |problem: String| WriterError::Rollback {
            target: self.target.clone(),
            problem,
        };
        let live = self
            .live()?
            .ok_or_else(|| err("no live revision to roll back from".into()))?;
        let history = self.history()?;
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
        let dir = self.target.join(HISTORY).join(name);
        let bundle = read_revision(&dir).map_err(|e| err(format!("revision {number}: {e}")))?;
        check(&bundle).map_err(|e| err(format!("refusing revision {number}: {e}")))?;
        let opts = options_of(&dir, &bundle, self.opts.keep);
        let restorer = Self {
            target: self.target.clone(),
            opts,
        };
        let revision = restorer.publish_locked(&bundle, || {})?.revision();
        let pin = self.target.join(PIN);
        let tmp = self.target.join(format!("{TMP_PREFIX}-pin"));
        fs::write(
            &tmp,
            format!("pinned {}\nreplaced {}\n", bundle.hash(), live.hash),
        )
        .ctx("write rollback pin", &tmp)?;
        fs::rename(&tmp, &pin).ctx("write rollback pin", &pin)?;
        self.fsync_target()?;
        Ok(RolledBack {
            from_history: *number,
            revision,
        })
    }

    /// Every revision on disk, newest first.
    pub fn revisions(&self) -> Result<Vec<RevisionInfo>, WriterError> {
        let live = self.data_link();
        let mut out: Vec<RevisionInfo> = list(&self.target)?
            .into_iter()
            .filter_map(|n| {
                let (revision, hash) = n.strip_prefix(REV_PREFIX).and_then(parse_rev)?;
                Some(RevisionInfo {
                    revision,
                    hash: hash.to_owned(),
                    dir: self.target.join(&n),
                    current: live.as_deref() == Some(n.as_str()),
                })
            })
            .collect();
        for (revision, name) in self.history()? {
            out.push(RevisionInfo {
                revision,
                hash: parse_rev(&name).map_or(String::new(), |r| r.1.to_owned()),
                dir: self.target.join(HISTORY).join(&name),
                current: false,
            });
        }
        out.sort_by_key(|r| std::cmp::Reverse(r.revision));
        Ok(out)
    }

    fn publish_locked(
        &self,
        bundle: &Bundle,
        flipped: impl FnOnce(),
    ) -> Result<Outcome, WriterError> {
        let live = self.live()?;
        let drift = match &live {
            Some(l) if l.problem.is_none() && l.hash == bundle.hash() => {
                let repaired_links = self.link_visible(bundle)?;
                if repaired_links > 0 {
                    self.fsync_target()?;
                }
                return Ok(Outcome::Unchanged {
                    revision: l.revision,
                    repaired_links,
                });
            }
            Some(l) => l.problem.clone(),
            None => None,
        };
        let revision = self.next_revision()?;
        let dir_name = format!("{REV_PREFIX}{}", rev_name(revision, &bundle.hash()));
        if let Err(e) = self.write_revision(&dir_name, bundle) {
            // No partial revision stays behind (a full disk, an I/O error);
            // the live one was never touched.
            let _ = remove_any(&self.target.join(&dir_name));
            return Err(e);
        }
        self.flip(&dir_name)?;
        self.link_visible(bundle)?;
        self.fsync_target()?;
        flipped();
        self.tidy()?;
        Ok(Outcome::Written { revision, drift })
    }

    /// Reads the live revision without following anything out of the
    /// target. `None` when there is no `..data` (or it is not ours to read).
    pub fn live(&self) -> Result<Option<Live>, WriterError> {
        let data = self.target.join(DATA);
        let link = match fs::read_link(&data) {
            Ok(l) => l,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            // Not a symlink: a foreign object under our reserved name.
            Err(e) if e.raw_os_error() == Some(nix::libc::EINVAL) => return Ok(None),
            Err(e) => return Err(e).ctx("readlink", &data),
        };
        let Some((dir_name, (revision, name_hash))) = link
            .to_str()
            .and_then(|n| Some((n, n.strip_prefix(REV_PREFIX).and_then(parse_rev)?)))
        else {
            // Points elsewhere (maybe out of the target): never followed.
            return Ok(None);
        };
        let dir = self.target.join(dir_name);
        let (bundle, mut problem) = match read_revision(&dir) {
            Ok(b) => (b, None),
            Err(problem) => (Bundle::default(), Some(problem)),
        };
        let hash = bundle.hash();
        if problem.is_none() && hash.short() != name_hash {
            problem = Some(format!(
                "{dir_name}: contents were changed after it was written"
            ));
        }
        if problem.is_none() {
            problem = self.check_modes(&dir, &bundle);
        }
        Ok(Some(Live {
            revision,
            hash,
            bundle,
            problem,
        }))
    }

    fn mode_for(&self, name: &str) -> u32 {
        if name == KEY_FILE {
            self.opts.key_mode
        } else {
            self.opts.cert_mode
        }
    }

    fn check_modes(&self, dir: &Path, bundle: &Bundle) -> Option<String> {
        for name in bundle.files().keys() {
            let path = dir.join(name);
            let Ok(m) = fs::symlink_metadata(&path) else {
                return Some(format!("{} vanished", path.display()));
            };
            let want = self.mode_for(name);
            if m.mode() & 0o7777 != want {
                return Some(format!(
                    "{} has mode {:04o}, expected {want:04o}",
                    path.display(),
                    m.mode() & 0o7777
                ));
            }
            if self.opts.owner.is_some_and(|u| u != m.uid())
                || self.opts.group.is_some_and(|g| g != m.gid())
            {
                return Some(format!("{} has the wrong owner or group", path.display()));
            }
        }
        None
    }

    /// One past the highest revision number anywhere in the target,
    /// including the one `..data` names (its directory may be gone).
    fn next_revision(&self) -> Result<u64, WriterError> {
        let revs = list(&self.target)?
            .into_iter()
            .chain(self.data_link())
            .filter_map(|n| n.strip_prefix(REV_PREFIX).and_then(parse_rev).map(|r| r.0));
        let history = self.history()?.into_keys();
        Ok(revs.chain(history).max().unwrap_or(0) + 1)
    }

    /// What `..data` says, if it is a symlink with a UTF-8 text.
    fn data_link(&self) -> Option<String> {
        let link = fs::read_link(self.target.join(DATA)).ok()?;
        link.to_str().map(str::to_owned)
    }

    /// History entries by revision number → directory name.
    fn history(&self) -> Result<BTreeMap<u64, String>, WriterError> {
        let dir = self.target.join(HISTORY);
        if !fs::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
            return Ok(BTreeMap::new());
        }
        Ok(list(&dir)?
            .into_iter()
            .filter_map(|n| Some((parse_rev(&n)?.0, n)))
            .collect())
    }

    fn write_revision(&self, dir_name: &str, bundle: &Bundle) -> Result<(), WriterError> {
        let dir = self.target.join(dir_name);
        remove_any(&dir)?; // an unfinished write with the same number
        DirBuilder::new()
            .mode(0o755)
            .create(&dir)
            .ctx("create revision", &dir)?;
        for (name, bytes) in bundle.files() {
            let path = dir.join(name);
            let mode = self.mode_for(name);
            // Created with the final mode (umask can only remove bits), then
            // chowned, then set exactly: never more permissive than `mode`.
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(mode)
                .custom_flags(OFlag::O_NOFOLLOW.bits() | OFlag::O_CLOEXEC.bits())
                .open(&path)
                .ctx("create", &path)?;
            if self.opts.owner.is_some() || self.opts.group.is_some() {
                std::os::unix::fs::fchown(&f, self.opts.owner, self.opts.group)
                    .ctx("chown", &path)?;
            }
            f.set_permissions(Permissions::from_mode(mode))
                .ctx("chmod", &path)?;
            f.write_all(bytes).ctx("write", &path)?;
            f.sync_all().ctx("fsync", &path)?;
        }
        fsync(&dir)
    }

    fn flip(&self, dir_name: &str) -> Result<(), WriterError> {
        let data = self.target.join(DATA);
        // A directory or file squatting on `..data` (not a symlink) cannot be
        // renamed over; it sits under a reserved name, so it goes.
        if fs::symlink_metadata(&data).is_ok_and(|m| !m.file_type().is_symlink()) {
            remove_any(&data)?;
        }
        replace_symlink(&self.target, DATA, dir_name)
    }

    /// Makes `<target>/<name> -> ..data/<name>` for every file, and removes
    /// our links to names the bundle no longer has. Returns links changed.
    fn link_visible(&self, bundle: &Bundle) -> Result<usize, WriterError> {
        let mut changed = 0;
        for name in bundle.files().keys() {
            let path = self.target.join(name);
            let want = format!("{DATA}/{name}");
            if fs::read_link(&path).is_ok_and(|l| l == Path::new(&want)) {
                continue;
            }
            if fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir()) {
                return Err(WriterError::Foreign {
                    path,
                    what: "a directory where a certificate link belongs",
                });
            }
            replace_symlink(&self.target, name, &want)?;
            changed += 1;
        }
        for name in list(&self.target)? {
            if name.starts_with("..") || bundle.get(&name).is_some() {
                continue;
            }
            let path = self.target.join(&name);
            if fs::read_link(&path).is_ok_and(|l| l.starts_with(DATA)) {
                fs::remove_file(&path).ctx("remove stale link", &path)?;
                changed += 1;
            }
        }
        Ok(changed)
    }

    /// Restores the layout's invariants: removes temporary entries, retires
    /// revisions that are no longer live into history (moving each file so
    /// watchers on it get an event), drops revisions newer than the live one
    /// (a crash before the flip), and prunes history to `keep - 1`.
    fn tidy(&self) -> Result<(), WriterError> {
        let live = self
            .data_link()
            .and_then(|l| Some((l.strip_prefix(REV_PREFIX).and_then(parse_rev)?.0, l)));
        let mut changed = false;
        for name in list(&self.target)? {
            let path = self.target.join(&name);
            if name.starts_with(TMP_PREFIX) {
                remove_any(&path)?;
                changed = true;
                continue;
            }
            let Some((revision, _)) = name.strip_prefix(REV_PREFIX).and_then(parse_rev) else {
                continue;
            };
            match &live {
                Some((_, live_name)) if *live_name == name => {}
                Some((live_rev, _)) if revision > *live_rev => remove_any(&path)?,
                _ => self.retire(&name)?,
            }
            changed = true;
        }
        let history = self.history()?;
        let excess = history.len().saturating_sub(self.opts.keep - 1);
        for name in history.values().take(excess) {
            remove_any(&self.target.join(HISTORY).join(name))?;
            changed = true;
        }
        if changed {
            self.fsync_target()?;
        }
        Ok(())
    }

    /// Moves the files of `..rev-X` into `..history/X` one by one, then
    /// removes the emptied directory. Symlinks planted inside are moved as
    /// links, never followed. With `keep == 1` the files are removed instead.
    fn retire(&self, dir_name: &str) -> Result<(), WriterError> {
        let src = self.target.join(dir_name);
        if !fs::symlink_metadata(&src).is_ok_and(|m| m.is_dir()) {
            return remove_any(&src);
        }
        let Some(rest) = dir_name.strip_prefix(REV_PREFIX) else {
            return Ok(());
        };
        let history = self.target.join(HISTORY);
        let dst = history.join(rest);
        if self.opts.keep > 1 {
            DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&dst)
                .ctx("create history", &dst)?;
        }
        for name in list(&src)? {
            let from = src.join(&name);
            if self.opts.keep > 1 {
                let to = dst.join(&name);
                fs::rename(&from, &to).ctx("move to history", &from)?;
            } else {
                remove_any(&from)?;
            }
        }
        fs::remove_dir(&src).ctx("remove retired revision", &src)?;
        if self.opts.keep > 1 {
            fsync(&dst)?;
            fsync(&history)?;
        }
        Ok(())
    }

    fn fsync_target(&self) -> Result<(), WriterError> {
        fsync(&self.target)
    }
}

/// The modes and owner the files of a revision have, so a rollback
/// restores them as they were.
fn options_of(dir: &Path, bundle: &Bundle, keep: usize) -> WriterOptions {
    let meta = |name: &str| fs::symlink_metadata(dir.join(name)).ok();
    let defaults = WriterOptions::default();
    let key = meta(KEY_FILE);
    let cert = bundle
        .files()
        .keys()
        .find(|n| n.as_str() != KEY_FILE)
        .and_then(|n| meta(n));
    let any = key.as_ref().or(cert.as_ref());
    WriterOptions {
        keep,
        cert_mode: cert
            .as_ref()
            .map_or(defaults.cert_mode, |m| m.mode() & 0o7777),
        key_mode: key
            .as_ref()
            .map_or(defaults.key_mode, |m| m.mode() & 0o7777),
        owner: any.map(|m| m.uid()),
        group: any.map(|m| m.gid()),
    }
}

/// Reads a revision directory's regular files. `Err` carries why it cannot
/// be trusted (a planted symlink, a subdirectory, an unreadable file).
fn read_revision(dir: &Path) -> Result<Bundle, String> {
    match fs::symlink_metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => return Err(format!("{} is not a directory", dir.display())),
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    }
    let names = list(dir).map_err(|e| e.to_string())?;
    let mut bundle = Bundle::default();
    for name in names {
        let path = dir.join(&name);
        let mut f = match OpenOptions::new()
            .read(true)
            .custom_flags(OFlag::O_NOFOLLOW.bits() | OFlag::O_CLOEXEC.bits())
            .open(&path)
        {
            Ok(f) if f.metadata().is_ok_and(|m| m.is_file()) => f,
            Ok(_) => return Err(format!("{} is not a regular file", path.display())),
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let mut bytes = Vec::new();
        (&mut f)
            .take(MAX_BUNDLE_SIZE as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        if let Err(e) = bundle.insert(&name, bytes, path.display().to_string()) {
            return Err(e.to_string());
        }
    }
    Ok(bundle)
}

/// Names in `dir` (not following anything).
fn list(dir: &Path) -> Result<Vec<String>, WriterError> {
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).ctx("list", dir)? {
        let entry = entry.ctx("list", dir)?;
        if let Some(n) = entry.file_name().to_str() {
            names.push(n.to_owned());
        }
    }
    names.sort();
    Ok(names)
}

/// Atomically points `<dir>/<name>` at `text`: a fresh temporary symlink
/// renamed over the old entry (`rename(2)` replaces the link itself).
fn replace_symlink(dir: &Path, name: &str, text: &str) -> Result<(), WriterError> {
    let tmp = dir.join(format!("{TMP_PREFIX}-{}", name.trim_start_matches('.')));
    remove_any(&tmp)?;
    std::os::unix::fs::symlink(text, &tmp).ctx("symlink", &tmp)?;
    let path = dir.join(name);
    fs::rename(&tmp, &path).ctx("rename", &path)
}

/// Removes a file, symlink or directory tree; never follows symlinks (std's
/// `remove_dir_all` does not). Missing is fine.
fn remove_any(path: &Path) -> Result<(), WriterError> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path).ctx("remove", path),
        Ok(_) => fs::remove_file(path).ctx("remove", path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).ctx("stat", path),
    }
}

fn fsync(dir: &Path) -> Result<(), WriterError> {
    File::open(dir).and_then(|d| d.sync_all()).ctx("fsync", dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::{CA_FILE, CERT_FILE};

    fn bundle(tag: &str) -> Bundle {
        let mut b = Bundle::default();
        b.insert(CERT_FILE, format!("cert {tag}").into_bytes(), "t")
            .unwrap();
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
        list(dir).unwrap()
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
            assert_eq!(&fs::read(t.join(name)).unwrap(), bytes, "{name}");
            let mode = fs::metadata(t.join(name)).unwrap().mode() & 0o7777;
            assert_eq!(mode, if name == KEY_FILE { 0o600 } else { 0o644 }, "{name}");
        }
        let in_rev = entries(&t.join(data));
        let want: Vec<_> = b.files().keys().cloned().collect();
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
        with_ca.insert(CA_FILE, b"ca".to_vec(), "t").unwrap();
        w.publish(&with_ca).unwrap();
        assert_eq!(fs::read(w.target().join(CA_FILE)).unwrap(), b"ca");
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
        fs::write(t.join(&old).join(CERT_FILE), b"cert 1").unwrap();

        let w = Writer::open(&t, WriterOptions::default()).unwrap();
        let names: Vec<_> = entries(&t)
            .into_iter()
            .filter(|n| n.starts_with(".."))
            .collect();
        let live = fs::read_link(t.join(DATA)).unwrap();
        assert_eq!(names, vec![DATA, HISTORY, LOCK, live.to_str().unwrap()]);
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
            let cert = w.target().join(CERT_FILE);
            let mut file_wd = ino.add_watch(&cert, F::IN_ALL_EVENTS).unwrap();
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
                file_wd = ino.add_watch(&cert, F::IN_ALL_EVENTS).unwrap();
                assert_eq!(fs::read(&cert).unwrap(), format!("cert {i}").into_bytes());
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
