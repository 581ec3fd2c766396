//! What certsync does with the files it is handed, on top of the one door
//! that opens them ([`crate::beneath`]): reading what steers root certsync
//! ([`owned`]), the by-path guards of what it writes later, the one YAML
//! reader.

use std::path::Path;

use crate::beneath::{self, Links, PathError};

mod owned;
mod yaml;

pub use owned::{
    OwnedError, no_other_user_may_recreate, no_other_user_may_write, only_root_may_change,
    owned_dir, read_owned, read_steering, steering_or_absent,
};
pub use yaml::{MAX_YAML_FLOW_DEPTH, YamlError, check_yaml, parse_yaml};

/// Size cap of small text files: pidfiles, tokens (1 MiB is generous).
pub const SMALL_FILE: u64 = 1 << 20;

/// A file kubeadm's readers were handed, not read: what
/// [`crate::beneath`] refused (their errors name the file themselves).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct FileError(#[from] pub PathError);

impl FileError {
    /// What is wrong, without the path (for callers that name it).
    pub fn problem(&self) -> String {
        self.0.problem()
    }

    /// True when the file does not exist.
    pub fn is_not_found(&self) -> bool {
        self.0.is_not_found()
    }
}

/// [`beneath::open_file`], the last name not followed
/// ([`Links::RefuseLast`]), for kubeadm's readers: a file root reads in
/// a directory another, less trusted writer shares (certsync's container
/// may replace a kubeadm file in /etc/kubernetes with a link to a
/// root-only host file, which root would then copy into a backup that
/// container reads).
pub fn open_regular_nofollow(path: &Path) -> Result<std::fs::File, FileError> {
    Ok(beneath::open_file(path, Links::RefuseLast)?)
}

/// [`beneath::read_capped`], for kubeadm's readers.
pub fn read_capped(
    file: impl std::io::Read,
    path: &Path,
    limit: u64,
) -> Result<Vec<u8>, FileError> {
    Ok(beneath::read_capped(file, path, limit)?)
}

/// [`beneath::read_file`] as UTF-8 text, for kubeadm's readers.
pub fn read_text(path: &Path, limit: u64) -> Result<String, FileError> {
    String::from_utf8(beneath::read_file(path, limit)?).map_err(|_| {
        FileError(PathError::Io {
            path: path.to_owned(),
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"),
        })
    })
}
