//! The write lock (a flock on the target directory itself) and the
//! claim a daemon holds for its life (`..owner`).

use super::*;

/// Opens (creating if needed) a lock file under a reserved name. Whatever
/// else sits there (a symlink, FIFO, directory) is removed first: a planted
/// entry must neither be followed nor block every write forever.
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

impl Writer {
    /// Serializes writers of this target across processes (the daemon and
    /// `certsync rollback`): a flock on the directory `root` was opened as
    /// (nothing in the target can be planted in its way). Released when
    /// the returned guard drops.
    pub(super) fn lock(&self, root: &Dir) -> Result<Flock<File>, WriterError> {
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
}
