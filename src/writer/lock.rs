//! The write lock (a flock on `..lock`) and the claim a daemon holds for
//! its life (`..owner`). Both are files only certsync's user may open: a
//! target is 0755 so its consumer can read it, and a flock needs no more
//! than a read-only descriptor, so a lock on the directory itself could be
//! taken (and held forever) by any local user.

use std::fs::{self, File};
use std::io::{self, Read, Seek, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use cap_fs_ext::{FollowSymlinks, OpenOptionsFollowExt};
use cap_std::fs::{Dir, MetadataExt, OpenOptions, OpenOptionsExt};
use nix::fcntl::{Flock, FlockArg, OFlag};

use super::error::{Ctx, WriterError};
use super::layout::{LOCK, OWNER};
use super::revision::remove_any;
use super::target::{ClaimSlot, Writer};

/// The daemon's claim on a target (`..owner` flock), released on drop;
/// kept in the writer's `ClaimSlot`, so that a target made again is
/// claimed again before anything is written there.
#[derive(Debug)]
pub struct Claim {
    slot: ClaimSlot,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.slot.lock().unwrap_or_else(|e| e.into_inner()).take();
    }
}

/// Set at shutdown: a wait for a write lock ends, nothing written.
static STOP_WAITING: AtomicBool = AtomicBool::new(false);

/// How often a held write lock is tried again (interruptible).
const LOCK_RETRY: Duration = Duration::from_millis(50);

/// Ends every wait for a target's write lock, now and later.
pub fn stop_waiting() {
    STOP_WAITING.store(true, Ordering::SeqCst);
}

/// Who holds the flock on `file`, if `/proc/locks` says.
fn holder(file: &File) -> Option<String> {
    use std::os::unix::fs::MetadataExt as _;
    let m = file.metadata().ok()?;
    let inode = format!(
        "{:02x}:{:02x}:{}",
        nix::sys::stat::major(m.dev()),
        nix::sys::stat::minor(m.dev()),
        m.ino()
    );
    let locks = fs::read_to_string("/proc/locks").ok()?;
    // `1: FLOCK  ADVISORY  WRITE 2406 fd:01:1054834 0 EOF`; a waiter's
    // line has `->` after the number, and is not the holder.
    let pid = locks.lines().find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.get(1) == Some(&"FLOCK") && f.get(5) == Some(&inode.as_str()))
            .then(|| f.get(4).and_then(|p| p.parse::<u32>().ok()))
            .flatten()
    })?;
    let comm = fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    Some(format!("pid {pid} ({})", comm.trim().escape_debug()))
}

/// Opens (creating if needed) a lock file, a regular file only certsync's
/// user may open: whoever can open it can hold its flock. Anything else
/// there is removed first: a planted entry must neither be followed nor
/// block every write forever, and a descriptor someone opened on a file
/// others could open locks nothing once that file is gone.
pub(super) fn lock_file(root: &Dir, name: &str, path: &Path) -> Result<File, WriterError> {
    let open = || {
        #[cfg(test)]
        super::planted_tests::fails(name)?;
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
    let private = |f: &cap_std::fs::File| {
        f.metadata().is_ok_and(|m| {
            m.is_file() && m.uid() == nix::unistd::geteuid().as_raw() && m.mode() & 0o077 == 0
        })
    };
    match open() {
        Ok(f) if private(&f) => return Ok(f.into_std()),
        // Out of descriptors or a volume's EIO says nothing of the file:
        // removed, another writer's held lock would exclude no one.
        Err(e) if !super::revision::said_by_the_file(&e) => return Err(e).ctx("open lock", path),
        _ => {}
    }
    remove_any(root, name, path)?;
    let f = open().ctx("open lock", path)?;
    if !private(&f) {
        return Err(WriterError::Foreign {
            path: path.to_owned(),
            what: "not a regular 0600 file of certsync's user",
        });
    }
    Ok(f.into_std())
}

/// Whether `name` still is the file `locked` (another writer may have
/// replaced a bad lock file meanwhile).
fn still_named(root: &Dir, name: &str, locked: &File) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (root.symlink_metadata(name), locked.metadata()) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

impl Writer {
    /// Serializes writers of this target across processes: a flock on
    /// `..lock`, opened through the target's directory handle, never
    /// following a link, held until the guard drops. A lock held elsewhere
    /// is waited for, said once, until [`stop_waiting`] or `lock_timeout`.
    pub(super) fn lock(&self, root: &Dir) -> Result<Flock<File>, WriterError> {
        let path = self.path(LOCK);
        let start = Instant::now();
        let mut holder_said: Option<String> = None;
        loop {
            let mut file = lock_file(root, LOCK, &path)?;
            let lock = loop {
                match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                    Ok(lock) => break lock,
                    Err((f, nix::errno::Errno::EWOULDBLOCK)) => file = f,
                    Err((_, e)) => return Err(io::Error::from(e)).ctx("lock", &path),
                }
                let held_by = holder_said.get_or_insert_with(|| {
                    let who = holder(&file).unwrap_or_else(|| "another process".into());
                    tracing::warn!(target_dir = %self.target.display(), holder = %who, "waiting for the write lock on {}: {} is held by {who}", self.target.display(), path.display());
                    who
                });
                let stopped = STOP_WAITING.load(Ordering::SeqCst);
                let timed_out = self.opts.lock_timeout.filter(|l| start.elapsed() >= *l);
                if stopped || timed_out.is_some() {
                    return Err(WriterError::LockWait {
                        target: self.target.clone(),
                        lock: path.clone(),
                        held_by: held_by.clone(),
                        after: timed_out.filter(|_| !stopped),
                    });
                }
                std::thread::sleep(LOCK_RETRY);
            };
            if still_named(root, LOCK, &lock) {
                if holder_said.is_some() {
                    tracing::info!(target_dir = %self.target.display(), "got the write lock");
                }
                return Ok(lock);
            }
        }
    }

    pub fn claim(&self) -> Result<Claim, WriterError> {
        let root = self.root(true)?;
        let lock = self.take_claim(&root)?;
        *self.claimed.lock().unwrap_or_else(|e| e.into_inner()) = Some(lock);
        Ok(Claim {
            slot: Arc::clone(&self.claimed),
        })
    }

    /// Keeps a held claim on the directory the target is now: a target
    /// made again has a new `..owner` a `run --once` or second daemon would
    /// take. If another process got it first, nothing is written.
    pub(super) fn hold_claim(&self, root: &Dir) -> Result<(), WriterError> {
        let mut slot = self.claimed.lock().unwrap_or_else(|e| e.into_inner());
        match slot.as_ref() {
            None => return Ok(()),
            Some(held) if still_named(root, OWNER, held) => return Ok(()),
            Some(_) => {}
        }
        let lock = self.take_claim(root)?;
        tracing::warn!(target_dir = %self.target.display(), "{} was made again; claimed it again", self.path(OWNER).display());
        *slot = Some(lock);
        Ok(())
    }

    /// The flock on `..owner`, this process's id written in it.
    fn take_claim(&self, root: &Dir) -> Result<Flock<File>, WriterError> {
        let path = self.path(OWNER);
        let file = lock_file(root, OWNER, &path)?;
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
        Ok(lock)
    }
}
