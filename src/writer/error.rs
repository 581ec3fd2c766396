//! What the writer refuses or fails at, with the target and path named.

use std::io;
use std::path::{Path, PathBuf};

use super::{KubeconfigProblem, PairProblem, RollbackProblem};

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
    #[error(
        "target {target} is now {now}, not {was} as when certsync started (a symlink on its \
         path was replaced?); refusing to write there"
    )]
    Moved {
        target: PathBuf,
        was: PathBuf,
        now: PathBuf,
    },
    #[error(
        "target {target} is no longer the directory certsync opened at start (inode {was}, now \
         {now}: renamed away and made again, by hand or by whoever may write the directory \
         above it); refusing to write there; restart certsync to adopt a directory made by hand"
    )]
    Replaced { target: PathBuf, was: u64, now: u64 },
    #[error(
        "target {target} (owner {uid}, mode {mode:04o}) may now be changed by a user other than \
         root and certsync's, who could plant or swap what certsync writes and obeys there; \
         refusing to publish into it (the last good files stay); make it writable by its owner \
         only (chmod go-w) and root's"
    )]
    OthersMayWrite {
        target: PathBuf,
        uid: u32,
        mode: u32,
    },
    /// The directory of a file written by path may be changed by another
    /// user, or its way cannot be walked.
    #[error("{}: {problem}; refusing to write there", dir.display())]
    Unowned {
        dir: PathBuf,
        #[source]
        problem: crate::files::OwnedError,
    },
    #[error("{path} is {what}; refusing to replace it")]
    Foreign { path: PathBuf, what: &'static str },
    #[error("target {target}: {problem}")]
    Rollback {
        target: PathBuf,
        #[source]
        problem: Box<RollbackProblem>,
    },
    /// Another process held the write lock (`held_by`, as its lock file
    /// says) until shutdown.
    #[error(
        "target {target}: waiting for the write lock: {} is held by {held_by}; stopped waiting \
         for it at shutdown; nothing was written",
        lock.display()
    )]
    LockWaitStopped {
        target: PathBuf,
        lock: PathBuf,
        held_by: String,
    },
    /// Another process held the write lock (`held_by`, as its lock file
    /// says) for longer than `--once-timeout`.
    #[error(
        "target {target}: waiting for the write lock: {} is held by {held_by}; gave up after {} \
         (--once-timeout); nothing was written",
        lock.display(),
        humantime::format_duration(*after)
    )]
    LockWaitTimeout {
        target: PathBuf,
        lock: PathBuf,
        held_by: String,
        after: std::time::Duration,
    },
    #[error("update-kubeconfig {path}: {problem}")]
    Kubeconfig {
        path: PathBuf,
        #[source]
        problem: Box<KubeconfigProblem>,
    },
    #[error("update-pair {prefix}: {problem}")]
    Pair {
        prefix: PathBuf,
        #[source]
        problem: Box<PairProblem>,
    },
    #[error(
        "target {target} is already managed by another certsync (pid {pid}); \
         two daemons on one target would undo each other's work"
    )]
    Owned { target: PathBuf, pid: String },
    #[error(
        "target {target} is gone, and {path}: {problem}; certsync makes a missing target only \
         through directories it opens without following links, owned by root or itself and \
         written by no one else; nothing was made"
    )]
    Way {
        target: PathBuf,
        path: PathBuf,
        problem: String,
    },
}

pub(super) trait Ctx<T> {
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
