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

use crate::beneath::{self, Links, Owners, PathError, ReadOnly, Start, Trust};

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

#[cfg(test)]
mod yaml_tests {
    use super::check_yaml;

    #[test]
    fn aliases_and_deep_flow_nesting_are_refused_quoted_text_is_not() {
        assert!(
            check_yaml("a: &x [1]\nb: *x\n")
                .unwrap_err()
                .contains("alias")
        );
        assert!(check_yaml("b: [*x]\n").is_err());
        // What go-yaml (kubeadm) reads and certsync's reader would not.
        for other in [
            "apiServer: {<<: {certSANs: [\"192.168.1.98\"]}}\n",
            "apiServer:\n  <<:\n    certSANs: [a]\n",
            "certSANs: [!!binary MTkyLjE2OC4xLjEwMg==]\n",
            "a: !custom x\n",
        ] {
            let e = check_yaml(other).unwrap_err();
            assert!(e.contains("merge key") || e.contains("tag"), "{other}: {e}");
        }
        assert!(
            check_yaml(&"[".repeat(33))
                .unwrap_err()
                .contains("deeper than 32")
        );
        assert!(check_yaml(&format!("{}{}", "[".repeat(32), "]".repeat(32))).is_ok());
        for fine in [
            "a: \"*x [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\"\n",
            "a: '*x {{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{{'\n",
            "# *x [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[\na: /etc/*.crt\n",
            "mappings:\n  - \"secret:ns/n=/x\"\n",
            "a: \"!!binary <<\"\nb: x!y<<z\n",
        ] {
            assert!(check_yaml(fine).is_ok(), "{fine}");
        }
    }

    /// A ClusterConfiguration that starts
    /// with a UTF-8 byte-order mark is read by kubeadm (go-yaml, under
    /// sigs.k8s.io/yaml, skips it: checked with kubeadm v1.36.2, the
    /// certSAN was in the certificate) and was refused by certsync as
    /// "more than one document". One leading mark is skipped, as go-yaml
    /// skips it; a second one is refused, naming it (kubeadm v1.36.2
    /// refuses that text too: "kind and apiVersion is mandatory").
    #[test]
    fn one_leading_byte_order_mark_is_read_as_go_yaml_reads_it() {
        let text = "kind: ClusterConfiguration\napiServer:\n  certSANs:\n  - 192.168.1.117\n";
        let plain: serde_yaml_ng::Value = super::parse_yaml(text).unwrap();
        let marked: Result<serde_yaml_ng::Value, String> =
            super::parse_yaml(&format!("\u{feff}{text}"));
        assert_eq!(marked, Ok(plain));
        let twice: Result<serde_yaml_ng::Value, String> =
            super::parse_yaml(&format!("\u{feff}\u{feff}{text}"));
        assert!(twice.unwrap_err().contains("byte-order mark"));
    }
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

/// Whether only root (or certsync's own user) can change what `path`
/// names: the file, if it exists, and every directory above it, both as
/// written and where its symlinks lead, must be owned by root or the
/// effective user and not writable by group or others. A sticky directory
/// such as /tmp is no exception: others cannot rename root's entries in
/// it, but once a cleaner removes one, anyone may make it again. A path
/// that does not exist yet is judged
/// by its nearest existing ancestor. As ssh's StrictModes, for every
/// ancestor: whoever can rename an entry on the way can swap what is read
/// or written. The problem, in words, or `Ok`.
pub fn only_root_may_change(path: &Path) -> Result<(), String> {
    guard(path, false)
}

/// Reads a file that steers what root certsync does (a bearer token, a
/// config file, a kubeconfig and the files it names). The path is walked
/// one name at a time from `/` ([`open_owned`]), each name opened beneath
/// the directory opened before it without following it, and judged on the
/// descriptor opened: every directory owned by root or certsync's user and
/// written by no one else, except that a root-owned sticky directory
/// (/tmp: others may not rename or remove root's entries in it) and a
/// directory on a read-only mount (kubelet mounts ConfigMap and Secret
/// volumes read-only, their roots 0777 or 1777) count as not writable; a
/// symlink followed only if root or certsync's user made it; then the file
/// read is a regular file owned by root or certsync's user, not writable
/// by group or others, with one link (a second name may be another
/// user's), at most `limit` bytes. Nothing judged is opened again by its
/// path, so a name swapped meanwhile is never what is read. The problem,
/// in words, without the path (callers name it).
pub fn read_owned(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    use std::os::unix::fs::MetadataExt as _;
    // What is not a regular file is named as such, before the rest (a
    // FIFO or device in a user's directory says what it is). This `stat`
    // only words a refusal: it opens nothing and lets nothing through.
    if let Ok(m) = std::fs::metadata(path)
        && !m.is_file()
    {
        return Err(FileError::NotRegular {
            path: path.to_owned(),
            what: kind_of(m.file_type()),
        }
        .problem());
    }
    let absolute = if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()
            .map_err(|e| format!("the working directory: {e}"))?
            .join(path)
    };
    // Said without the path the caller names, as the kernel would.
    let problem = |e: PathError| match e {
        PathError::Io { path, source } if path == absolute => source.to_string(),
        PathError::NotRegular { path, what } if path == absolute => {
            format!("is {what}, not a regular file; refusing to read it")
        }
        e => e.to_string(),
    };
    let walked = beneath::walk(Start::Path, &absolute, Links::Follow, &mut |e| {
        Ok(OWNED_WAY.judge(e)?)
    })
    .map_err(problem)?;
    let file = walked.open_read().map_err(problem)?;
    let m = file.metadata().map_err(|e| e.to_string())?;
    let entry = beneath::Entry::from_metadata(path, &m);
    // The file itself: no exception at all.
    if Trust::STRICT.judge(&entry).is_err() {
        return Err(format!(
            "owner {}, mode {:04o}: may be changed by another user",
            entry.uid, entry.mode
        ));
    }
    if m.nlink() > 1 {
        return Err(format!(
            "a hard link (links {}): another name of the file may be another user's, or \
             root's file linked where a user chose; give it one link",
            m.nlink()
        ));
    }
    read_capped(file, path, limit).map_err(|e| e.problem())
}

/// The way to a file [`read_owned`] reads, judged on descriptors as it is
/// walked: every directory and symlink root's or certsync's user's. A
/// root-owned sticky directory (/tmp) counts as not writable: others may
/// not rename or remove root's entries in it, and the file is judged again
/// at each read. A directory on a read-only mount counts as not writable
/// (kubelet mounts ConfigMap and Secret volumes read-only, their roots
/// 0777 or 1777); a symlink there is still judged by its owner.
const OWNED_WAY: Trust = Trust {
    owners: Owners::RootOrMe,
    writable_ok: false,
    sticky_root_ok: true,
    read_only: ReadOnly::Writable,
    volume_root_ok: false,
};

/// A file that steers certsync (`--config`, a kubeconfig and the files it
/// names): through [`read_owned`] when certsync runs as root, who would
/// otherwise act on what another user wrote (map a root-only directory to
/// a target they read, send root's token to their server); as another
/// user, [`read_regular`] (the kernel already limits what it may read).
pub fn read_steering(path: &Path, limit: u64) -> Result<Vec<u8>, String> {
    if nix::unistd::geteuid().is_root() {
        read_owned(path, limit)
    } else {
        read_regular(path, limit).map_err(|e| e.problem())
    }
}

/// A file that steers certsync but may not exist yet (a CA certificate
/// certsync itself publishes later), judged at start: where it exists, as
/// [`read_steering`] reads it; where it does not, the directories it will
/// appear in ([`only_root_may_change`]: whoever may write there chooses
/// what appears). As another user, nothing (the kernel limits what it may
/// read). Every later read goes through [`read_steering`] again.
pub fn steering_or_absent(path: &Path, limit: u64) -> Result<(), String> {
    if !nix::unistd::geteuid().is_root() {
        return Ok(());
    }
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => only_root_may_change(path),
        _ => read_owned(path, limit).map(drop),
    }
}

/// [`only_root_may_change`], except that a directory every container of a
/// pod may write is accepted where it is a volume's root: kubelet makes an
/// emptyDir 0777 (not sticky), and a sidecar's target such as
/// `/certs/web` lies inside one, shared by design with the pod's own
/// containers. On a host, the directories writable by all are sticky
/// (/tmp, /var/tmp, /dev/shm) and stay refused, as does one another user
/// owns, and one writable by others that is not a mount point. For the
/// targets of mappings that do not issue from a CA on the node only: never
/// above a source or a pidfile, which are read (a swapped-in link leads
/// certsync to root's files).
pub fn no_other_user_may_recreate(path: &Path) -> Result<(), String> {
    guard(path, true)
}

/// A target directory itself, where it exists (where its links lead): owned
/// by root or certsync's user and writable by its owner only, whatever the
/// mapping's `owner=`/`group=` (they are for the files), and with no
/// exception for a volume's root. Whoever may write in the target may plant
/// the entries certsync keeps there (`..pin`, `..data`, `..history`, a
/// revision) for it to act on (a user's `..pin` in a 0777 emptyDir root
/// was obeyed as an operator's rollback).
/// A missing target is made by certsync, root's and 0755.
pub fn no_other_user_may_write(target: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(m) = std::fs::metadata(target) else {
        return Ok(());
    };
    let entry = beneath::Entry::from_metadata(target, &m);
    // No exception: not even a volume's root (see above).
    if Trust::STRICT.judge(&entry).is_ok() {
        return Ok(());
    }
    Err(format!(
        "{} (owner {}, mode {:04o}) may be changed by another user, who could plant the \
         entries certsync keeps there (..data, ..pin, ..history) for it to obey; a \
         directory others may write (a volume's root) is no target: name a subdirectory \
         of it (as /certs/web in a /certs volume), which certsync makes root's, 0755",
        target.display(),
        m.uid(),
        m.mode() & 0o7777
    ))
}

/// The check of [`only_root_may_change`] (and, with `volume_roots`, of
/// [`no_other_user_may_recreate`]), by path: for a target written later
/// and for a file run or read by another program, where certsync opens
/// nothing now. A file certsync reads is judged on its descriptors
/// instead ([`read_owned`]). A read-only mount and a root-owned sticky
/// directory stay refused here: a write-time target has no second look at
/// an entry a user made again after a cleaner removed root's.
fn guard(path: &Path, volume_roots: bool) -> Result<(), String> {
    // A read-only mount and a root-owned sticky directory stay refused
    // (see above); a volume's root is accepted for a target only.
    let trust = Trust {
        volume_root_ok: volume_roots,
        ..Trust::STRICT
    };
    let judge = |p: &Path| -> Result<(), String> {
        // A symlink on the way is judged by its own owner too: one a user
        // made in a sticky directory may lead to a root file of their
        // choosing.
        if let Ok(link) = beneath::Entry::at_path(p, false)
            && link.link
        {
            trust.judge(&link).map_err(|e| e.to_string())?;
        }
        let followed = beneath::Entry::at_path(p, true).map_err(|e| e.to_string())?;
        trust.judge(&followed).map_err(|e| e.to_string())
    };
    let mut seen = Vec::new();
    // As written (each parent resolved: a symlink's own directory counts),
    // and where the whole path leads.
    let mut starts = Vec::new();
    let mut cur = Some(path);
    while let Some(p) = cur {
        if p.symlink_metadata().is_ok() {
            starts.push(p.to_owned());
            break;
        }
        cur = p.parent();
    }
    if let Some(existing) = starts.first().cloned() {
        if let Ok(real) = std::fs::canonicalize(&existing) {
            starts.push(real);
        }
        if let Some(parent) = existing
            .parent()
            .and_then(|p| std::fs::canonicalize(p).ok())
        {
            starts.push(parent);
        }
    }
    for start in starts {
        for p in start.ancestors().filter(|p| !p.as_os_str().is_empty()) {
            let p = p.to_owned();
            if !seen.contains(&p) {
                judge(&p)?;
                seen.push(p);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod guard_tests {
    use super::only_root_may_change;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn every_ancestor_and_symlink_hop_must_be_root_only() {
        let d = tempfile::tempdir().unwrap();
        let ok = d.path().join("ok");
        std::fs::create_dir(&ok).unwrap();
        std::fs::write(ok.join("f"), "x").unwrap();
        only_root_may_change(&ok.join("f")).unwrap();
        only_root_may_change(&ok.join("not/yet/there")).unwrap();

        let open = d.path().join("open");
        std::fs::create_dir_all(open.join("deep")).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let e = only_root_may_change(&open.join("deep/f")).unwrap_err();
        assert!(e.contains("mode 0777") && e.contains("open"), "{e}");

        // A link in a root-only place into an open directory, and the other
        // way round.
        std::os::unix::fs::symlink(open.join("deep"), ok.join("link")).unwrap();
        assert!(only_root_may_change(&ok.join("link/f")).is_err());
        std::os::unix::fs::symlink(&ok, open.join("back")).unwrap();
        assert!(only_root_may_change(&open.join("back/f")).is_err());

        std::fs::set_permissions(ok.join("f"), std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(only_root_may_change(&ok.join("f")).is_err());

        // Sticky, as /tmp: root's entries stay, but a removed one may be
        // made again by anyone.
        let sticky = d.path().join("sticky");
        std::fs::create_dir_all(sticky.join("root-made")).unwrap();
        std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let e = only_root_may_change(&sticky.join("root-made/t")).unwrap_err();
        assert!(e.contains("mode 1777") && e.contains("sticky"), "{e}");
    }

    /// A file read now and judged again at each read (a kubeconfig in
    /// `mktemp -d /tmp/...`) may sit below a root-owned sticky directory:
    /// others cannot rename root's entries there. An entry of another
    /// user's below it, or their symlink, is still refused.
    #[test]
    fn a_read_may_pass_a_sticky_directory_through_roots_entries_only() {
        use std::os::unix::fs::PermissionsExt as _;
        if !nix::unistd::geteuid().is_root() {
            return; // needs root to make another user's entries
        }
        let d = tempfile::tempdir().unwrap();
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let sticky = d.path().join("sticky");
        std::fs::create_dir_all(sticky.join("root-made")).unwrap();
        std::fs::set_permissions(&sticky, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let file = sticky.join("root-made/kubeconfig");
        std::fs::write(&file, b"x").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(super::read_owned(&file, 10).unwrap(), b"x");
        // Not for a target, which is written with no second look.
        assert!(only_root_may_change(&file).is_err());

        let user = sticky.join("user-made");
        std::fs::create_dir(&user).unwrap();
        std::os::unix::fs::lchown(&user, Some(65534), Some(65534)).unwrap();
        std::fs::write(user.join("kubeconfig"), b"x").unwrap();
        let e = super::read_owned(&user.join("kubeconfig"), 10).unwrap_err();
        assert!(e.contains("owner 65534"), "{e}");

        let link = sticky.join("link");
        std::os::unix::fs::symlink(sticky.join("root-made"), &link).unwrap();
        std::os::unix::fs::lchown(&link, Some(65534), Some(65534)).unwrap();
        let e = super::read_owned(&link.join("kubeconfig"), 10).unwrap_err();
        assert!(e.contains("a symlink of uid 65534"), "{e}");
    }
}

#[cfg(test)]
mod race_tests {
    use std::os::unix::fs::PermissionsExt as _;

    /// What `read_owned` judged is what it reads. A step
    /// injected between its judging and its open replaces a directory on
    /// the way with a link to another directory (another user's, when the
    /// test runs as root) holding a different file of root's: the read
    /// still gives the file judged, never the other one.
    #[test]
    fn a_path_swapped_between_check_and_open_is_not_read() {
        let d = tempfile::tempdir().unwrap();
        let mode = |p: &std::path::Path, m| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        mode(d.path(), 0o755);
        let (cfg, other) = (d.path().join("cfg"), d.path().join("other"));
        for (dir, text) in [(&cfg, "judged"), (&other, "other")] {
            std::fs::create_dir(dir).unwrap();
            mode(dir, 0o755);
            std::fs::write(dir.join("kubeconfig"), text).unwrap();
            mode(&dir.join("kubeconfig"), 0o600);
        }
        if nix::unistd::geteuid().is_root() {
            std::os::unix::fs::lchown(&other, Some(65534), Some(65534)).unwrap();
        }
        let old = d.path().join("cfg.old");
        let (from, to) = (cfg.clone(), other.clone());
        crate::beneath::BETWEEN_CHECK_AND_OPEN.with(|h| {
            *h.borrow_mut() = Some(Box::new(move || {
                std::fs::rename(&from, &old).unwrap();
                std::os::unix::fs::symlink(&to, &from).unwrap();
            }))
        });
        let got = super::read_owned(&cfg.join("kubeconfig"), 100);
        assert_eq!(got, Ok(b"judged".to_vec()), "read through the swapped path");
        assert!(
            crate::beneath::BETWEEN_CHECK_AND_OPEN.with(|h| h.borrow().is_none()),
            "the swap ran"
        );
    }
}

/// Deepest flow nesting (`[` and `{`) a YAML text may have. libyaml, which
/// serde_yaml_ng runs, checks every open flow level on every token:
/// quadratic in the depth (11.6 s for 64 KiB of `[`, against 52 ms for a
/// config file of that size). serde_yaml_ng refuses more than 128 levels
/// anyway, after that work; no config file or kubeconfig needs 32.
pub const MAX_YAML_FLOW_DEPTH: usize = 32;

/// Refuses, before the parser sees it, YAML that would make it work more
/// than linearly: flow nesting deeper than [`MAX_YAML_FLOW_DEPTH`], and any
/// alias (`*name`), each of which serde_yaml_ng expands in full (aliases of
/// aliases: 57 s for 64 KiB). Quoted strings and comments are skipped; the
/// rest is looked at byte by byte, so a block scalar holding ` *x` is
/// refused too (failing closed; neither file kind needs aliases).
pub fn check_yaml(text: &str) -> Result<(), String> {
    let bytes = text.as_bytes();
    let (mut depth, mut i) = (0usize, 0usize);
    let mut quote: Option<u8> = None;
    while i < bytes.len() {
        let b = bytes[i];
        let prev = i.checked_sub(1).map(|p| bytes[p]);
        let token_start =
            prev.is_none_or(|p| matches!(p, b' ' | b'\t' | b'\n' | b'\r' | b'[' | b'{' | b','));
        match (quote, b) {
            (Some(b'"'), b'\\') => i += 1,
            (Some(q), _) if b == q => quote = None,
            (Some(_), _) => {}
            (None, b'"' | b'\'') if token_start || prev == Some(b':') => quote = Some(b),
            (None, b'#') if token_start => {
                i += bytes[i..]
                    .iter()
                    .position(|&c| c == b'\n')
                    .unwrap_or(bytes.len() - i);
            }
            (None, b'*') if token_start => {
                return Err("holds a YAML alias (*name), which certsync does not accept".into());
            }
            // Read differently by other YAML readers (kubeadm's go-yaml
            // applies `<<` merge keys and decodes
            // `!!binary`, so certSANs written that way reached the API
            // server's certificate while certsync read nothing there).
            (None, b'!') if token_start => {
                return Err("holds a YAML tag (!tag), which certsync does not accept".into());
            }
            (None, b'<') if token_start && bytes.get(i + 1) == Some(&b'<') => {
                return Err("holds a YAML merge key (<<), which certsync does not accept".into());
            }
            (None, b'[' | b'{') => {
                depth += 1;
                if depth > MAX_YAML_FLOW_DEPTH {
                    return Err(format!(
                        "nested deeper than {MAX_YAML_FLOW_DEPTH} levels of [ and {{; refusing \
                         to parse it"
                    ));
                }
            }
            (None, b']' | b'}') => depth = depth.saturating_sub(1),
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

/// YAML from outside (a config file, a kubeconfig), read as `T` after
/// [`check_yaml`]: the one way certsync parses YAML. One leading UTF-8
/// byte-order mark is skipped, as go-yaml (sigs.k8s.io/yaml: kubeadm,
/// kubectl) skips it; serde_yaml_ng read it as a second document, and refused
/// a ClusterConfiguration kubeadm reads. A second mark is refused by name, as
/// kubeadm refuses it (it reads a key that is not `apiVersion`).
pub fn parse_yaml<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text.starts_with('\u{feff}') {
        return Err("starts with more than one byte-order mark (U+FEFF)".into());
    }
    check_yaml(text)?;
    serde_yaml_ng::from_str(text).map_err(|e| e.to_string())
}
