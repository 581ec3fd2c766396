//! `HostDirError`: why a `dir:` source cannot be read.

use std::io;
use std::path::PathBuf;

use crate::beneath::PathError;
use crate::bundle::BundleError;

#[derive(Debug, thiserror::Error)]
pub enum HostDirError {
    #[error("source directory {path} does not exist yet; waiting for it")]
    NotYet { path: PathBuf },
    #[error("source directory {0}")]
    Dir(#[source] PathError),
    #[error("source directory {path}: {source}")]
    List {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: required file is missing")]
    Missing { path: PathBuf },
    #[error("{path}: leads outside the source directory ({source})")]
    Escapes {
        path: PathBuf,
        #[source]
        source: PathError,
    },
    #[error(
        "{path}: a file of uid {owner} (mode {mode:04o}) in a source {writers}, who could not \
         read it themselves: certsync publishes from a source only what the users who may \
         change it could read (they may have hard-linked it there, and a link stays when its \
         other names are renamed away); give the file to the directory's owner, or copy it \
         into a directory only root may change; refusing to read it"
    )]
    Unreadable {
        path: PathBuf,
        owner: u32,
        mode: u32,
        /// Who may change the source, in words.
        writers: String,
    },
    /// Also a symlink loop, what is not a regular file (a FIFO, device or
    /// directory) and a file larger than the bundle limit
    /// (`PathError::TooLarge`).
    #[error("{0}")]
    Read(#[source] PathError),
    #[error("{path}: not a combined PEM certsync can read: {problem}")]
    Combined {
        path: PathBuf,
        problem: &'static str,
    },
    #[error(transparent)]
    Name(#[from] BundleError),
}
