//! How `certsync check` reads its inputs. Root runs it on directories
//! other users may control, so:
//! - an entry of a directory argument is resolved beneath it (as
//!   `RESOLVE_BENEATH` would): a symlink out of it is refused, named, and
//!   nothing it leads to is read, printed or matched against;
//! - every input is first opened `O_PATH` (reads nothing, makes no device
//!   act: `/dev/watchdog` would arm) and `fstat`ed: only a regular file is
//!   then opened for reading, through that descriptor, at most the bundle
//!   size limit;
//! - a file kept from others is not read when the way to it, as written
//!   ([`walk`]) or where the file really is (`Input::exposed`), leads
//!   through a directory or symlink someone other than root and its owner
//!   may change: a user there may have linked root's file in.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use nix::sys::stat::FileStat;

use super::error::{InspectError, Kept};
use crate::beneath::{self, Entry, Links, Owners, PathError, ReadOnly, Start, Trust, Walked};
use crate::validate;

/// One input of `check`: a path the operator named (followed as given),
/// or an entry of a directory they named (resolved beneath it).
#[derive(Debug, Clone)]
pub(super) struct Input {
    /// As reported.
    pub(super) shown: PathBuf,
    /// The directory argument an entry is resolved beneath.
    beneath: Option<Rc<Base>>,
}

/// A directory entries are resolved beneath, as walked.
#[derive(Debug)]
struct Base {
    walked: Walked,
    shown: PathBuf,
    /// Its owner and the first entry on the way someone else may change.
    refused: Option<(u32, Entry)>,
}

impl Base {
    /// `path` walked as written; `Ok(None)` when it is not a directory.
    fn open(path: &Path) -> Result<Option<Self>, InspectError> {
        let walked = walk(Start::Path, path)?;
        if !walked.is_dir() {
            return Ok(None);
        }
        let st = &walked.st;
        // Not listable by others: its names are kept from them too.
        let kept = st.st_mode & 0o005 != 0o005 && !own(st);
        let refused = kept
            .then(|| exposure(&walked.passed, st.st_uid))
            .flatten()
            .map(|p| (st.st_uid, p.clone()));
        Ok(Some(Self {
            walked,
            shown: path.to_owned(),
            refused,
        }))
    }

    /// Why nothing in it may be told, if so.
    fn refusal(&self) -> Option<InspectError> {
        let (uid, through) = self.refused.clone()?;
        Some(InspectError::Exposed {
            what: Kept::Directory,
            uid,
            through,
        })
    }
}

/// `path` walked from `start`, symlinks followed, everything on the way
/// kept for [`exposure`].
fn walk(start: Start<'_>, path: &Path) -> Result<Walked, InspectError> {
    beneath::walk(start, path, Links::Follow, &mut |_| Ok(())).map_err(InspectError::Way)
}

/// Who may change the way to a file kept from others: root and its owner
/// only, sticky or not (a user in /tmp may have linked root's file in),
/// except on a read-only mount, where nobody changes anything.
fn way(owner: u32) -> Trust {
    Trust {
        owners: Owners::RootOr(owner),
        writable_ok: false,
        sticky_root_ok: false,
        read_only: ReadOnly::Everything,
        volume_root_ok: false,
    }
}

/// The first of `passed` someone other than root and `owner` may change.
fn exposure(passed: &[Entry], owner: u32) -> Option<&Entry> {
    passed.iter().find(|p| way(owner).judge(p).is_err())
}

/// Whether the reader is not root and `st` is its own: the kernel already
/// decided what it may read.
fn own(st: &FileStat) -> bool {
    let euid = nix::unistd::geteuid().as_raw();
    euid != 0 && st.st_uid == euid
}

/// The refusal of the file `st`, kept from others, reached through
/// `through`.
fn file_refusal(st: &FileStat, through: &Entry) -> InspectError {
    InspectError::Exposed {
        what: Kept::File { links: st.st_nlink },
        uid: st.st_uid,
        through: through.clone(),
    }
}

impl Input {
    pub(super) fn named(path: &Path) -> Self {
        Self {
            shown: path.to_owned(),
            beneath: None,
        }
    }

    /// Reads the input if it is a regular file of at most the bundle size
    /// limit; otherwise why not, without the path.
    pub(super) fn read(&self) -> Result<Vec<u8>, InspectError> {
        let walked = self.open_path()?;
        let (st, passed) = (&walked.st, &walked.passed);
        // Only a regular file is opened, through the descriptor walked to.
        let file = walked.open_read().map_err(InspectError::Unread)?;
        if st.st_mode & 0o004 == 0 && !own(st) {
            if let Some(p) = exposure(passed, st.st_uid) {
                return Err(file_refusal(st, p));
            }
            if let Some(problem) = Self::exposed(&walked.fd, st) {
                return Err(problem);
            }
        }
        beneath::read_capped(file, &self.shown, validate::MAX_PUBLISHED_SIZE as u64)
            .map_err(InspectError::Unread)
    }

    /// Why a file kept from others must not be read: a directory above
    /// where it really is that others may change ([`way`]) may hold a hard
    /// link someone made to a file they may not read
    /// (`fs.protected_hardlinks=0`), or what is left of one once the owner
    /// renamed its own name away. Found on descriptors, `..` up to `/`.
    fn exposed(fd: &OwnedFd, st: &FileStat) -> Option<InspectError> {
        let holder = match beneath::holder(fd.as_fd(), st) {
            Ok(found) => found,
            Err(PathError::Replaced { .. }) => return Some(InspectError::Moved),
            Err(e) => return Some(InspectError::Unlocated(e)),
        };
        for up in beneath::upward(holder.fd, holder.shown) {
            match up {
                Err(e) => return Some(InspectError::Unlocated(e)),
                Ok((here, _)) if way(st.st_uid).judge(&here).is_err() => {
                    return Some(file_refusal(st, &here));
                }
                Ok(_) => {}
            }
        }
        None
    }

    /// An `O_PATH` descriptor and what the way to it passed.
    fn open_path(&self) -> Result<Walked, InspectError> {
        let Some(base) = &self.beneath else {
            return walk(Start::Path, &self.shown);
        };
        if let Some(refused) = base.refusal() {
            return Err(refused);
        }
        let name = Path::new(self.shown.file_name().unwrap_or_default());
        let mut walked = walk(Start::Beneath(base.walked.fd.as_fd(), &base.shown), name)?;
        let mut passed = base.walked.passed.clone();
        passed.append(&mut walked.passed);
        walked.passed = passed;
        Ok(walked)
    }
}

/// The key file named after `cert` (`x.crt` → `x.key`), if there is one,
/// resolved beneath the certificate's directory (the operator named the
/// certificate, not where its key's links lead).
pub(super) fn key_beside(cert: &Path) -> Option<Input> {
    let key = cert.with_extension("key");
    let parent = match cert.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let base = Base::open(parent).ok()??;
    // Whether the key is there is told only when the directory may be.
    if base.refused.is_none() {
        nix::sys::stat::fstatat(
            &base.walked.fd,
            key.file_name()?,
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        )
        .ok()?;
    }
    Some(Input {
        shown: key,
        beneath: Some(Rc::new(base)),
    })
}

/// Certificate inputs, each with the key file named after it, if any.
pub(super) type WithKeys = Vec<(Input, Option<Input>)>;

/// The entries of the directory `path` (walked as written) whose names
/// look like certificates (`*.crt`, `*.pem`, not hidden), sorted, each
/// with the entry named after it with `.key` if there is one.
/// `Ok(None)` when `path` is not a directory.
pub(super) fn directory(path: &Path) -> Result<Option<WithKeys>, InspectError> {
    let Some(base) = Base::open(path)? else {
        return Ok(None);
    };
    if let Some(refused) = base.refusal() {
        return Err(refused);
    }
    // Through the walked descriptor: the very directory judged.
    let listing = base.walked.dir().map_err(InspectError::Way)?;
    let mut names = std::collections::BTreeSet::new();
    for entry in listing.entries().map_err(InspectError::Io)? {
        let entry = entry.map_err(InspectError::Io)?;
        names.insert(entry.file_name().to_string_lossy().into_owned());
    }
    let base = Rc::new(base);
    let beneath = |name: &str| Input {
        shown: path.join(name),
        beneath: Some(Rc::clone(&base)),
    };
    Ok(Some(
        names
            .iter()
            .filter(|n| !n.starts_with('.') && (n.ends_with(".crt") || n.ends_with(".pem")))
            .map(|n| {
                let stem = n.rsplit_once('.').map_or(n.as_str(), |(s, _)| s);
                let key = format!("{stem}.key");
                (beneath(n), names.contains(&key).then(|| beneath(&key)))
            })
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    /// Each refusal of `check`'s reading is its own variant, with what was
    /// seen: the loop's link, the kind of file, the size limit, the
    /// directory others may write on the way to a file kept from them.
    #[test]
    fn each_refusal_of_checks_reading_says_what_it_saw() {
        let d = tempfile::tempdir().unwrap();
        let at = |n: &str| d.path().join(n);
        std::os::unix::fs::symlink("loop.crt", at("loop.crt")).unwrap();
        nix::unistd::mkfifo(
            &at("fifo.crt"),
            nix::sys::stat::Mode::from_bits_truncate(0o644),
        )
        .unwrap();
        std::fs::write(at("big.crt"), vec![b'x'; validate::MAX_PUBLISHED_SIZE + 1]).unwrap();
        let read = |n: &str| Input::named(&at(n)).read();

        let e = read("loop.crt");
        assert!(
            matches!(&e, Err(InspectError::Way(PathError::Loop { path })) if *path == at("loop.crt")),
            "{e:?}"
        );
        let e = read("fifo.crt");
        assert!(
            matches!(
                e,
                Err(InspectError::Unread(PathError::NotRegular {
                    what: "a FIFO",
                    ..
                }))
            ),
            "{e:?}"
        );
        let e = read("big.crt");
        assert!(
            matches!(e, Err(InspectError::Unread(PathError::TooLarge { limit, .. })) if limit == validate::MAX_PUBLISHED_SIZE as u64),
            "{e:?}"
        );
        // Beneath a directory argument: the same loop, named as listed.
        let listed = directory(d.path()).unwrap().unwrap();
        let (looped, _) = listed
            .iter()
            .find(|(c, _)| c.shown == at("loop.crt"))
            .unwrap();
        assert!(
            matches!(
                looped.read(),
                Err(InspectError::Way(PathError::Loop { .. }))
            ),
            "{:?}",
            looped.read()
        );

        // A file kept from others (0600, root's) in a directory others may
        // write: not read when the reader is root.
        if !nix::unistd::geteuid().is_root() {
            return;
        }
        let open = at("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(open.join("kept.crt"), b"x").unwrap();
        std::fs::set_permissions(
            open.join("kept.crt"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        let e = Input::named(&open.join("kept.crt")).read();
        assert!(
            matches!(
                &e,
                Err(InspectError::Exposed { what: Kept::File { links: 1 }, uid: 0, through })
                    if through.shown == open
            ),
            "{e:?}"
        );
    }
}
