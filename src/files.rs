//! Reading files certsync is handed: sources, pidfiles, kubeconfigs, token
//! and CA files, `check` inputs.
//!
//! Invariants: a file is read only if the *opened* descriptor is a regular
//! file (checked with `fstat`, so a swap between check and open cannot
//! slip a FIFO or device in); the open never blocks (`O_NONBLOCK`: opening a
//! FIFO with no writer would otherwise hang forever); at most `limit` bytes
//! are read, so `/dev/zero` or a runaway log cannot grow memory.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

mod owned;
mod yaml;

pub use owned::{
    OwnedError, no_other_user_may_recreate, no_other_user_may_write, only_root_may_change,
    owned_dir, read_owned, read_steering, steering_or_absent,
};
pub use yaml::{MAX_YAML_FLOW_DEPTH, YamlError, check_yaml, parse_yaml};

/// Size cap of small text files: pidfiles, tokens (1 MiB is generous).
pub const SMALL_FILE: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{path}: is {what}, not a regular file; refusing to read it")]
    NotRegular { path: PathBuf, what: &'static str },
    #[error("{path}: larger than the {limit}-byte limit")]
    TooLarge { path: PathBuf, limit: u64 },
}

impl FileError {
    /// What is wrong, without the path (for callers that name it).
    pub fn problem(&self) -> String {
        match self {
            Self::Io { source, .. } => source.to_string(),
            Self::NotRegular { what, .. } => {
                format!("is {what}, not a regular file; refusing to read it")
            }
            Self::TooLarge { limit, .. } => format!("larger than the {limit}-byte limit"),
        }
    }

    /// True when the file does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.kind() == io::ErrorKind::NotFound)
    }
}

/// What kind of non-regular file `t` is, for messages.
pub fn kind_of(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_symlink() {
        "a symlink"
    } else {
        "a regular file"
    }
}

/// Opens `path` (following symlinks, as a user-given path should) for
/// reading if it is a regular file.
pub fn open_regular(path: &Path) -> Result<File, FileError> {
    open_regular_with(path, OFlag::empty())
}

/// Opens `path` for reading if it is a regular file, refusing a symlink in
/// its last component (`O_NOFOLLOW`): for a file root reads in a directory
/// another, less trusted writer shares (certsync's container may replace
/// a kubeadm file in /etc/kubernetes with a link to a root-only host file,
/// which root would then copy into a backup that container reads).
pub fn open_regular_nofollow(path: &Path) -> Result<File, FileError> {
    open_regular_with(path, OFlag::O_NOFOLLOW)
}

fn open_regular_with(path: &Path, extra: OFlag) -> Result<File, FileError> {
    let io_err = |source| FileError::Io {
        path: path.to_owned(),
        source,
    };
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | extra).bits())
        .open(path)
        .map_err(|e| {
            // O_NOFOLLOW on a symlink: ELOOP, said as what it is.
            if extra.contains(OFlag::O_NOFOLLOW) && e.raw_os_error() == Some(nix::libc::ELOOP) {
                FileError::NotRegular {
                    path: path.to_owned(),
                    what: "a symlink",
                }
            } else {
                io_err(e)
            }
        })?;
    let t = file.metadata().map_err(io_err)?.file_type();
    if !t.is_file() {
        return Err(FileError::NotRegular {
            path: path.to_owned(),
            what: kind_of(t),
        });
    }
    Ok(file)
}

/// Reads all of an opened regular file, refusing more than `limit` bytes.
pub fn read_capped(mut file: impl Read, path: &Path, limit: u64) -> Result<Vec<u8>, FileError> {
    let mut bytes = Vec::new();
    (&mut file)
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| FileError::Io {
            path: path.to_owned(),
            source,
        })?;
    if bytes.len() as u64 > limit {
        return Err(FileError::TooLarge {
            path: path.to_owned(),
            limit,
        });
    }
    Ok(bytes)
}

/// Reads `path` if it is a regular file of at most `limit` bytes.
pub fn read_regular(path: &Path, limit: u64) -> Result<Vec<u8>, FileError> {
    read_capped(open_regular(path)?, path, limit)
}

/// [`read_regular`] as UTF-8 text.
pub fn read_text(path: &Path, limit: u64) -> Result<String, FileError> {
    String::from_utf8(read_regular(path, limit)?).map_err(|_| FileError::Io {
        path: path.to_owned(),
        source: io::Error::new(io::ErrorKind::InvalidData, "not UTF-8 text"),
    })
}

/// Device and inode of what `path` names (symlinks followed), from
/// `fstat` of an `O_PATH` handle; `None` when it cannot be opened (it does
/// not exist yet). Two paths are the same file exactly when these are
/// equal, whatever bind mount, hard link or symlink leads to each: a path
/// comparison sees none of the first two.
pub fn identity(path: &Path) -> Option<(u64, u64)> {
    let fd = nix::fcntl::open(
        path,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .ok()?;
    let st = nix::sys::stat::fstat(&fd).ok()?;
    Some((st.st_dev, st.st_ino))
}

/// The identities ([`identity`]) of the nearest existing directory at or
/// above `dir` and of every directory above that one, by `..` from its
/// handle up to `/`. `..` of a bind mount's root is where it is mounted,
/// and the root itself has the identity of the directory bound there, so
/// a directory reached through a bind mount is found below that one.
pub fn directory_and_ancestors(dir: &Path) -> Vec<(u64, u64)> {
    use nix::fcntl::OFlag;
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let Some(mut fd) = dir
        .ancestors()
        .find_map(|d| nix::fcntl::open(d, flags, nix::sys::stat::Mode::empty()).ok())
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    while let Ok(st) = nix::sys::stat::fstat(&fd) {
        let id = (st.st_dev, st.st_ino);
        if out.contains(&id) {
            break;
        }
        out.push(id);
        match nix::fcntl::openat(&fd, "..", flags, nix::sys::stat::Mode::empty()) {
            Ok(up) => fd = up,
            Err(_) => break,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifos_devices_and_directories_are_refused_without_blocking() {
        let d = tempfile::tempdir().unwrap();
        let fifo = d.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        for (path, what) in [
            (fifo.as_path(), "a FIFO"),
            (Path::new("/dev/zero"), "a device"),
            (d.path(), "a directory"),
        ] {
            let e = read_regular(path, 10).unwrap_err().to_string();
            assert!(e.contains(what) && e.contains("not a regular file"), "{e}");
        }
        let big = d.path().join("big");
        std::fs::write(&big, [b'x'; 11]).unwrap();
        let e = read_regular(&big, 10).unwrap_err();
        assert!(matches!(e, FileError::TooLarge { limit: 10, .. }), "{e}");
        std::fs::write(&big, [b'x'; 10]).unwrap();
        assert_eq!(read_regular(&big, 10).unwrap().len(), 10);
        assert!(
            read_regular(&d.path().join("none"), 10)
                .unwrap_err()
                .is_not_found()
        );
    }
}
