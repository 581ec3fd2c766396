//! What a compromised certsync container could have left in `/etc/kubernetes`: it runs as
//! uid 0 without capabilities on read-write hostPaths, so it can plant a set-user-ID-root
//! program (a file's owner may set that bit) or open a directory to every user. adopt
//! (before it starts) and revert (once finished) report every set-user-ID or set-group-ID
//! file, every entry the group or others may write and every entry not root's, and never
//! delete one: that is for a person to judge.
//!
//! And private keys on the node that others may read ([`exposed`]): every `*.key` under
//! `pki/` and certsync's own directory (adopt's backups hold kubeadm's keys). A CA key a
//! group or every local user may read lets any of them mint certificates the cluster
//! trusts. Walked as [`walk`] walks, a link never followed (certsync's `tls.key` links point
//! into a revision judged itself). Keys are known by their name only: this finds mistakes,
//! it is no boundary against whoever may write there.

use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use cap_fs_ext::DirExt as _;
use cap_std::fs::{Dir, Metadata, MetadataExt as _};
use nix::libc::{S_IFMT, S_IFREG};

use super::error::{FileProblem, Refusal};
use super::manifest::BOOTSTRAP_KUBELET_CONF;
use crate::beneath::{Entry, Owners, Trust};

/// Entries looked at before the walk stops (a node has a few hundred).
const LIMIT: usize = 100_000;

/// Deeper than any layout certsync or kubeadm makes: a planted tree is said, not walked
/// down (each level is a frame).
const MAX_DEPTH: usize = 32;

const WHY: &str = "(a compromised certsync container could have left it; inspect it)";

/// One `warning: ...` line per suspicious entry below `dir` (the node's `/etc/kubernetes`).
pub fn warnings(dir: &Path) -> String {
    let mut out = Vec::new();
    let at = super::paths::KUBEADM_DIR;
    match super::moves::open_beneath(dir, at) {
        Ok(root) => {
            match root.dir_metadata() {
                Ok(m) => out.extend(judge(at, m.mode(), m.uid(), true)),
                Err(e) => out.push(format!("{at} could not be inspected: {e}")),
            }
            walk(&root, at, 0, &mut 0, &mut |path, met| match met {
                Ok((_, m)) => out.extend(judge(path, m.mode(), m.uid(), !m.is_symlink())),
                Err(problem) => out.push(format!("{path} {problem}")),
            });
        }
        Err(e) => out.push(format!("{at} could not be inspected: {e}")),
    }
    out.iter()
        .map(|w| format!("warning: {w} {WHY}\n"))
        .collect()
}

/// Every exposed private key under `pki/` and certsync's directory of the node at `dir`,
/// sorted by node path, and what cannot be looked at: an unknown is not healthy.
pub fn exposed(dir: &Path) -> Vec<Refusal> {
    let mut out = Vec::new();
    for under in ["/etc/kubernetes/pki", "/etc/kubernetes/certsync"] {
        let unreadable = |path: &str, problem| {
            let path = path.to_owned();
            (path.clone(), Refusal::KeysUnreadable { path, problem })
        };
        let root = match super::moves::open_beneath(dir, under) {
            Ok(r) => r,
            Err(FileProblem::Missing) => continue,
            Err(e) => {
                out.push(unreadable(under, e.of("could not be opened")));
                continue;
            }
        };
        walk(&root, under, 0, &mut 0, &mut |path, met| {
            let (name, meta) = match met {
                Ok(entry) => entry,
                Err(problem) => return out.push(unreadable(path, problem)),
            };
            if !meta.is_file() || !name.as_bytes().ends_with(b".key") {
                return;
            }
            let (path, mode, uid) = (path.to_owned(), meta.mode() & 0o7777, meta.uid());
            if uid != 0 || mode & 0o077 != 0 {
                out.push((path.clone(), Refusal::KeyExposed { path, mode, uid }));
            }
        });
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.into_iter().map(|(_, e)| e).collect()
}

/// Whether certsync's pod mounts the kubelet's bootstrap kubeconfig (read-only), from one
/// look: kubeadm's regular file on a node certsync's container never ran on (`adopted`
/// false). On an adopted node that container may write `/etc/kubernetes` (kubeadm deleted
/// the file after the join): any entry by that name is refused unless certsync's pod
/// manifest `pod` (which the container cannot write) already mounts it read-only. A file
/// planted after this look is never mounted, so the next look still finds it.
pub fn kubelet_bootstrap(
    dir: &Path,
    adopted: bool,
    pod: Option<&super::pod::Current>,
) -> Result<bool, Box<Refusal>> {
    let path = BOOTSTRAP_KUBELET_CONF;
    let looked = super::moves::reach(dir, path);
    if matches!(&looked, Err(FileProblem::Missing)) {
        return Ok(false);
    }
    if !adopted {
        return Ok(looked.is_ok_and(|w| w.st.st_mode & S_IFMT == S_IFREG));
    }
    match pod.is_some_and(|p| p.mounts_read_only(path)) {
        true => Ok(true),
        false => Err(Box::new(Refusal::KubeletBootstrap { path })),
    }
}

/// What a walk meets: an entry's name and own metadata, or why it could not be looked at.
pub(super) type Met<'a> = Result<(&'a std::ffi::OsStr, &'a Metadata), FileProblem>;

/// Every entry below `dir` (shown as `at`; `depth` 0), each with its path (escaped: a name
/// is whatever its maker chose), one directory handle at a time: each opened beneath the
/// one before by its own name, never following a link (one swapped in is a problem).
pub(super) fn walk(
    dir: &Dir,
    at: &str,
    depth: usize,
    seen: &mut usize,
    visit: &mut dyn FnMut(&str, Met<'_>),
) {
    let failed = |step, e: std::io::Error| FileProblem::Io(e).of(&format!("could not be {step}"));
    let entries = match dir.entries() {
        Ok(e) => e,
        Err(e) => return visit(at, Err(failed("listed", e))),
    };
    for entry in entries {
        *seen += 1;
        if *seen > LIMIT {
            return visit(at, Err(FileProblem::TooMany(LIMIT)));
        }
        let name = match entry {
            Ok(e) => e.file_name(),
            Err(e) => return visit(at, Err(failed("listed", e))),
        };
        let path = format!("{at}/{}", crate::escape(&name.to_string_lossy()));
        let meta = match dir.symlink_metadata(&name) {
            Ok(m) => m,
            Err(e) => {
                visit(&path, Err(failed("inspected", e)));
                continue;
            }
        };
        visit(&path, Ok((&name, &meta)));
        if !meta.is_dir() {
            continue;
        }
        let sub = match depth + 1 >= MAX_DEPTH {
            true => Err(FileProblem::TooDeep(MAX_DEPTH)),
            false => (dir.open_dir_nofollow(&name)).map_err(|e| failed("opened", e)),
        };
        match sub {
            Ok(sub) => walk(&sub, &path, depth + 1, seen, visit),
            Err(problem) => visit(&path, Err(problem)),
        }
    }
}

/// What is wrong with an entry of `mode` owned by `uid`, if anything; the mode of a symlink
/// (`has_mode` false) means nothing and is not judged.
fn judge(path: &str, mode: u32, uid: u32, has_mode: bool) -> Option<String> {
    let (is_dir, mode) = (mode & 0o170_000 == 0o040_000, mode & 0o7777);
    // Owned by root, as certsync kubeadm runs (a test, by its user): what kubeadm hands the
    // kubelet and the control plane is no one else's.
    let trust = Trust {
        owners: Owners::Me,
        ..Trust::STRICT
    };
    let faults = trust.faults(&Entry {
        shown: path.into(),
        uid,
        mode,
        link: !has_mode,
        read_only: false,
    });
    let found = [
        (has_mode && mode & 0o4000 != 0, "set-user-ID"),
        (has_mode && !is_dir && mode & 0o2000 != 0, "set-group-ID"),
        (faults.group_writable, "writable by its group"),
        (faults.others_writable, "writable by others"),
    ];
    let mut why: Vec<String> = found
        .iter()
        .filter(|f| f.0)
        .map(|f| f.1.to_owned())
        .collect();
    if faults.owner {
        let me = match nix::unistd::geteuid().as_raw() {
            0 => "root".to_owned(),
            owner => format!("uid {owner}"),
        };
        why.push(format!("owned by uid {uid}, not {me}"));
    }
    let why = why.join(", ");
    (!why.is_empty()).then(|| format!("{path} is {why} (mode {mode:04o}, owner uid {uid})"))
}
