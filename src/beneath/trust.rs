//! The one rule of who may change what certsync reads, walks or writes
//! beneath: [`Trust`], judged on an [`Entry`] the walk (or a caller's
//! `fstat`) took, each caller's exceptions as explicit fields.

use std::ffi::OsString;
use std::path::Path;

use super::walk::{Entry, PathError};

/// Whose entries are accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owners {
    /// Root's and certsync's effective user's.
    RootOrMe,
    /// Root's and this user's (a file's owner, who chose its way anyway).
    RootOr(u32),
    /// Only certsync's effective user's (root, as `certsync kubeadm` runs).
    Me,
    /// Anyone's: only who else may write it is judged.
    Anyone,
}

impl Owners {
    fn accepts(self, uid: u32) -> bool {
        let me = nix::unistd::geteuid().as_raw();
        match self {
            Self::RootOrMe => uid == 0 || uid == me,
            Self::RootOr(other) => uid == 0 || uid == other,
            Self::Me => uid == me,
            Self::Anyone => true,
        }
    }
}

/// What a read-only mount excuses: nobody changes an entry there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOnly {
    Never,
    /// A directory there counts as not writable; its owner is still
    /// judged, as is a symlink's.
    Writable,
    /// Nothing there is refused, owner or mode.
    Everything,
}

/// The one rule of who may change what certsync reads or writes: an entry
/// is trusted when [`Owners`] accepts its owner and (a directory or file)
/// group and others may not write it. A symlink's mode means nothing; its
/// owner does. Each field past `owners` is an exception a caller takes on
/// purpose and says why where it builds its `Trust`.
#[derive(Debug, Clone, Copy)]
pub struct Trust {
    pub owners: Owners,
    /// Group- or other-writable is accepted (the owner check stays).
    pub writable_ok: bool,
    /// A root-owned sticky directory counts as not writable: others may
    /// not rename or remove root's entries in it.
    pub sticky_root_ok: bool,
    pub read_only: ReadOnly,
    /// A root-owned, not sticky directory others may write is accepted
    /// where it is a mount point (a pod volume's root); judged by path.
    pub volume_root_ok: bool,
}

/// What [`Trust`] found wrong, each on its own, for a caller that reports
/// all of them (an audit); [`Trust::judge`] refuses on the first.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    pub owner: bool,
    pub group_writable: bool,
    pub others_writable: bool,
}

impl Trust {
    /// Root's or certsync's, written by no one else: no exception.
    pub const STRICT: Self = Self {
        owners: Owners::RootOrMe,
        writable_ok: false,
        sticky_root_ok: false,
        read_only: ReadOnly::Never,
        volume_root_ok: false,
    };

    /// Each fault of `e`, the exceptions applied.
    pub fn faults(&self, e: &Entry) -> Faults {
        if self.read_only == ReadOnly::Everything && e.read_only {
            return Faults::default();
        }
        let writable_excused = e.link
            || self.writable_ok
            || (self.read_only == ReadOnly::Writable && e.read_only)
            || (self.sticky_root_ok && e.uid == 0 && e.mode & 0o1000 != 0);
        let mut f = Faults {
            owner: !self.owners.accepts(e.uid),
            group_writable: !writable_excused && e.mode & 0o020 != 0,
            others_writable: !writable_excused && e.mode & 0o002 != 0,
        };
        if (f.group_writable || f.others_writable)
            && self.volume_root_ok
            && e.uid == 0
            && e.mode & 0o1000 == 0
            && is_mount_point(&e.shown)
        {
            f.group_writable = false;
            f.others_writable = false;
        }
        f
    }

    /// `Ok` when `e` is trusted, else what refuses it.
    pub fn judge(&self, e: &Entry) -> Result<(), PathError> {
        if self.faults(e) == Faults::default() {
            return Ok(());
        }
        Err(if e.link {
            PathError::LinkChangeable {
                path: e.shown.clone(),
                uid: e.uid,
            }
        } else {
            PathError::Changeable {
                path: e.shown.clone(),
                uid: e.uid,
                mode: e.mode,
            }
        })
    }
}

/// Whether `dir` (symlinks resolved) is where a file system is mounted in
/// this process's mount namespace (`/proc/self/mountinfo`'s fifth field);
/// false when that cannot be read.
fn is_mount_point(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStringExt as _;
    let Ok(real) = std::fs::canonicalize(dir) else {
        return false;
    };
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| Path::new(&OsString::from_vec(unescape_octal(m))) == real)
}

/// mountinfo writes space, tab, newline and backslash as `\NNN`.
fn unescape_octal(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push(
                    d.iter()
                        .fold(0u8, |n, c| n.wrapping_mul(8).wrapping_add(c - b'0')),
                );
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}
