//! Why an inspecting command (`check`, `revisions`, `rollback`) did not do
//! its work, or did not read an input.

use std::path::{Path, PathBuf};

/// Why `check`, `revisions` or `rollback` did not do its work, or why
/// `check` did not read an input (or list a directory), said without the
/// input's path: [`InspectError::Path`] or the report names it.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    #[error("{path}: {problem}")]
    Path {
        path: PathBuf,
        #[source]
        problem: Box<InspectError>,
    },
    #[error("not a certsync target: no live revision (..data) and no history")]
    NotTarget,
    // A target another user may change (`guarded_writer`).
    #[error("{0}; refusing to read or restore it")]
    TargetWritable(#[source] crate::beneath::PathError),
    #[error("{0}, who chooses what its history holds; refusing to read or restore it")]
    TargetRecreatable(#[source] crate::beneath::PathError),
    #[error(transparent)]
    Writer(#[from] crate::writer::WriterError),
    /// As JSON or YAML.
    #[error("cannot encode the report: {0}")]
    Encode(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The way to it: not opened, a symlink loop, or a link out of the
    /// directory argument.
    #[error("{0}")]
    Way(#[source] crate::beneath::PathError),
    /// Kept from others and reached through `through`, which someone
    /// other than root and its owner may change: it may be a link someone
    /// made to a file they may not read.
    #[error(
        "{what} of uid {uid} that others may not read, reached through {}, which users \
         other than root and the file's owner may change: it may be a link someone made to \
         a file they may not read; refusing to read it",
        through.describe()
    )]
    Exposed {
        what: Kept,
        uid: u32,
        through: crate::beneath::Entry,
    },
    /// Where the file really is, or a directory above it: not told.
    #[error("cannot tell where it is: {0}")]
    Unlocated(#[source] crate::beneath::PathError),
    #[error("moved while it was being checked; refusing to read it")]
    Moved,
    /// Not a regular file, replaced while it was opened, larger than the
    /// limit, or not read.
    #[error("{}", .0.problem())]
    Unread(#[source] crate::beneath::PathError),
    /// Listing the directory.
    #[error("{0}")]
    Io(#[source] std::io::Error),
}

impl InspectError {
    /// This problem, of `path`.
    pub(super) fn at(self, path: &Path) -> Self {
        Self::Path {
            path: path.to_owned(),
            problem: Box::new(self),
        }
    }
}

/// What a refusal names as kept from others.
#[derive(Debug, Clone, Copy)]
pub enum Kept {
    Directory,
    File { links: u64 },
}

impl std::fmt::Display for Kept {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Directory => f.write_str("a directory"),
            Self::File { links } if *links > 1 => {
                write!(f, "a hard link (links {links}) to a file")
            }
            Self::File { .. } => f.write_str("a file"),
        }
    }
}
