//! The names certsync owns in a target, and what makes an entry there
//! certsync's own.

use std::path::PathBuf;

use crate::beneath::PathError;
use crate::bundle::BundleError;

/// The target's one atomic switch: a symlink to the live revision.
pub const DATA: &str = "..data";
pub(super) const HISTORY: &str = "..history";
pub(super) const REV_PREFIX: &str = "..rev-";
/// The highest number of a revision at a target's root counted for the next
/// (a publish a second for 30,000 years); the one certsync's own `..data`
/// names is counted whatever it is, so the count never comes back.
pub(super) const MAX_COUNTED: u64 = 999_999_999_999;
pub(super) const TMP_PREFIX: &str = "..tmp";
pub(super) const LOCK: &str = "..lock";
pub(super) const OWNER: &str = "..owner";
/// Lock state, not data.
pub const LOCK_FILES: [&str; 2] = [LOCK, OWNER];
/// After `certsync rollback`: the content chosen and the content it
/// replaced ([`Writer::publish_then`](super::Writer::publish_then)).
pub(super) const PIN: &str = "..pin";
/// Revision number of the files found in a fresh target before certsync.
pub(super) const FOUND_REVISION: u64 = 0;

/// Whether an entry certsync made in a target is still only certsync's:
/// its user's, written by no one else. Anything else may have been put
/// there by whoever else may write the target (a user's `..pin` would be
/// obeyed as a rollback): removed and made anew, never obeyed.
pub(super) fn own(uid: u32, mode: u32) -> Result<(), NotOwn> {
    if uid == nix::unistd::geteuid().as_raw() && mode & 0o022 == 0 {
        return Ok(());
    }
    Err(NotOwn {
        uid,
        mode: mode & 0o7777,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("owner {uid}, mode {mode:04o}: not certsync's own (its user's, written by no one else)")]
pub struct NotOwn {
    pub uid: u32,
    pub mode: u32,
}

/// Why a revision directory on disk cannot be trusted as is.
#[derive(Debug, thiserror::Error)]
pub enum RevisionProblem {
    /// Missing, or not a directory (as the text says).
    #[error("{}: {}", .0.display(), .1)]
    NotADirectory(PathBuf, &'static str),
    /// Not certsync's own ([`own`]): never read.
    #[error("{}: {}", .0.display(), .1)]
    NotOwn(PathBuf, NotOwn),
    /// A file in it that cannot be read; the path is in the text.
    #[error("{0}")]
    File(#[source] PathError),
    /// A file in it that cannot be taken into a bundle.
    #[error("{0}")]
    Bundle(#[source] BundleError),
    #[error(
        "{}: a hard link (links {links}): its other name may be any file, root's key \
         included; certsync writes every file with one link",
        path.display()
    )]
    HardLink { path: PathBuf, links: u64 },
    #[error(
        "its files have different owners: {}; certsync writes all of a revision's files \
         with one owner and group",
        .0.iter()
            .map(|(p, uid, gid)| format!("{} (owner {uid}:{gid})", p.display()))
            .collect::<Vec<_>>()
            .join(", ")
    )]
    Owners(Vec<(PathBuf, u32, u32)>),
    #[error(
        "{}: its files were changed after certsync wrote them (content hash {hash}, the name \
         says {}); it is not restored",
        path.display(),
        named.as_deref().unwrap_or("nothing")
    )]
    Changed {
        path: PathBuf,
        hash: String,
        named: Option<String>,
    },
    #[error(
        "{}: owned by uid {uid} (the mapping's owner=), who may have rewritten it; a revision \
         is restored only when its files are certsync's own (publish from the source instead)",
        path.display()
    )]
    NotCertsyncs { path: PathBuf, uid: u32 },
}
