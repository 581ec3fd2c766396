//! The write lock (a flock on `..lock`) and the claim a daemon holds for
//! its life (`..owner`). Both are files only certsync's user may open: a
//! target is 0755 so its consumer can read it, and a flock needs no more
//! than a read-only descriptor, so a lock on the directory itself could be
//! taken (and held forever) by any local user.

use super::*;

/// Opens (creating if needed) a lock file under a reserved name, a regular
/// file of certsync's user that only it may open: whoever can open it can
/// hold its flock. Whatever else sits there (a symlink, FIFO, directory, a
/// file another user owns or others may open) is removed first: a planted
/// entry must neither be followed nor block every write forever, and a
/// descriptor someone opened on an old file locks nothing once it is gone.
pub(super) fn lock_file(root: &Dir, name: &str, path: &Path) -> Result<File, WriterError> {
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
    let private = |f: &cap_std::fs::File| {
        f.metadata().is_ok_and(|m| {
            m.is_file() && m.uid() == nix::unistd::geteuid().as_raw() && m.mode() & 0o077 == 0
        })
    };
    if let Ok(f) = open()
        && private(&f)
    {
        return Ok(f.into_std());
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
/// replaced a bad lock file between our open and our flock).
fn still_named(root: &Dir, name: &str, locked: &File) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    match (root.symlink_metadata(name), locked.metadata()) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

impl Writer {
    /// Serializes writers of this target across processes (the daemon and
    /// `certsync rollback`): a flock on `..lock`, opened through the
    /// target's directory handle, never following a link. Released when
    /// the returned guard drops.
    pub(super) fn lock(&self, root: &Dir) -> Result<Flock<File>, WriterError> {
        let path = self.path(LOCK);
        loop {
            let file = lock_file(root, LOCK, &path)?;
            let lock = Flock::lock(file, FlockArg::LockExclusive)
                .map_err(|(_, e)| io::Error::from(e))
                .ctx("lock", &path)?;
            if still_named(root, LOCK, &lock) {
                return Ok(lock);
            }
        }
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
}
