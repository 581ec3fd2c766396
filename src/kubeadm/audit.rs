//! What a compromised certsync container could have left in
//! `/etc/kubernetes`: it runs as uid 0 without
//! capabilities on read-write hostPaths, and the owner of a file may still
//! make it set-user-ID, so it can plant a set-user-ID-root program any
//! local user runs as root, or open a directory to every user (`chmod
//! 0777`). adopt (before it starts) and revert (once it has finished)
//! report every set-user-ID or set-group-ID file, every entry the group or
//! others may write and every entry not root's, and never delete one: what
//! it is and who made it is for a person to find out.

use std::path::Path;

use cap_fs_ext::DirExt as _;
use cap_std::fs::{Dir, MetadataExt as _};

use super::error::Refusal;
use super::manifest::BOOTSTRAP_KUBELET_CONF;
use crate::beneath::{Entry, Owners, Trust};

/// Entries looked at before the walk stops saying so: `/etc/kubernetes`
/// holds a few hundred, certsync's backups included.
const LIMIT: usize = 100_000;

/// Directories deeper than any layout certsync or kubeadm makes: a
/// planted tree is said, not walked down (each level is a frame).
const MAX_DEPTH: usize = 32;

const WHY: &str = "(a compromised certsync container could have left it; inspect it)";

/// One `warning: ...` line per suspicious entry below `dir` (the node's
/// `/etc/kubernetes`), walked one directory handle at a time without
/// following a link. Empty when there is none.
pub fn warnings(dir: &Path) -> String {
    let mut out = Vec::new();
    let mut seen = 0;
    match super::moves::open_beneath(dir, super::paths::KUBEADM_DIR) {
        Ok(root) => {
            if let Ok(m) = root.dir_metadata() {
                judge("/etc/kubernetes", m.mode(), m.uid(), true, &mut out);
            }
            walk(&root, "/etc/kubernetes", &mut seen, &mut |met| match met {
                Met::Entry { path, meta, .. } => judge(
                    path,
                    meta.mode(),
                    meta.uid(),
                    !meta.file_type().is_symlink(),
                    &mut out,
                ),
                Met::Problem { path, problem } => out.push(format!("{path} {problem}")),
            });
        }
        Err(e) => out.push(format!("/etc/kubernetes could not be inspected: {e}")),
    }
    out.iter()
        .map(|w| format!("warning: {w} {WHY}\n"))
        .collect()
}

/// Whether certsync's pod mounts the kubelet's bootstrap kubeconfig
/// (read-only), from one look at the node: kubeadm's regular file on a
/// node certsync's container never ran on (`adopted` false). On an adopted
/// node that container may write `/etc/kubernetes`, and kubeadm deleted
/// the file after the join: one there now is taken only when certsync's
/// pod manifest `pod` (which the container cannot write) already mounts
/// it read-only, and is refused otherwise, any entry by that name (a link,
/// a directory) and one that cannot be looked at included. The pod mounts
/// what this one look decided: a file planted after it is never mounted,
/// so the next look still finds it.
pub fn kubelet_bootstrap(
    dir: &Path,
    adopted: bool,
    pod: Option<&super::pod::Current>,
) -> Result<bool, Box<Refusal>> {
    let path = BOOTSTRAP_KUBELET_CONF;
    let looked = std::fs::symlink_metadata(super::paths::host(dir, path));
    if matches!(&looked, Err(e) if e.kind() == std::io::ErrorKind::NotFound) {
        return Ok(false);
    }
    if !adopted {
        return Ok(looked.is_ok_and(|m| m.is_file()));
    }
    match pod.is_some_and(|p| p.mounts_read_only(path)) {
        true => Ok(true),
        false => Err(Box::new(Refusal::KubeletBootstrap { path })),
    }
}

/// What a walk meets below a directory: each entry by the path it is
/// shown as (every name escaped: a name is whatever its maker chose) and
/// its own metadata, a link never followed; or what could not be looked
/// at, and why.
pub(super) enum Met<'a> {
    Entry {
        path: &'a str,
        name: &'a std::ffi::OsStr,
        meta: &'a cap_std::fs::Metadata,
    },
    Problem {
        path: &'a str,
        problem: String,
    },
}

/// Every entry below `dir` (shown as `at`), one directory handle at a time:
/// each directory opened beneath the one before without following a link
/// (one swapped for a link meanwhile is a problem, never followed), by its
/// own name, never by a path made again from text.
pub(super) fn walk(dir: &Dir, at: &str, seen: &mut usize, visit: &mut dyn FnMut(Met<'_>)) {
    walk_at(dir, at, 0, seen, visit);
}

fn walk_at(dir: &Dir, at: &str, depth: usize, seen: &mut usize, visit: &mut dyn FnMut(Met<'_>)) {
    let entries = match dir.entries() {
        Ok(e) => e,
        Err(e) => {
            return visit(Met::Problem {
                path: at,
                problem: format!("could not be listed: {e}"),
            });
        }
    };
    for entry in entries {
        *seen += 1;
        if *seen > LIMIT {
            return visit(Met::Problem {
                path: at,
                problem: format!(
                    "holds more than {LIMIT} entries below it, the rest not inspected"
                ),
            });
        }
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                return visit(Met::Problem {
                    path: at,
                    problem: format!("could not be listed: {e}"),
                });
            }
        };
        let name = entry.file_name();
        let path = format!("{at}/{}", crate::escape(&name.to_string_lossy()));
        // The entry itself: a symlink is not followed.
        let meta = match dir.symlink_metadata(&name) {
            Ok(m) => m,
            Err(e) => {
                visit(Met::Problem {
                    path: &path,
                    problem: format!("could not be inspected: {e}"),
                });
                continue;
            }
        };
        visit(Met::Entry {
            path: &path,
            name: &name,
            meta: &meta,
        });
        if meta.file_type().is_dir() {
            if depth + 1 >= MAX_DEPTH {
                visit(Met::Problem {
                    path: &path,
                    problem: format!("is deeper than {MAX_DEPTH} directories, not inspected"),
                });
                continue;
            }
            // Swapped for a link since: an error, reported, never followed.
            match dir.open_dir_nofollow(&name) {
                Ok(sub) => walk_at(&sub, &path, depth + 1, seen, visit),
                Err(e) => visit(Met::Problem {
                    path: &path,
                    problem: format!("could not be opened: {e}"),
                }),
            }
        }
    }
}

/// What is wrong with an entry of `mode` owned by `uid`, if anything; the
/// mode of a symlink (`has_mode` false) means nothing and is not judged.
fn judge(path: &str, mode: u32, uid: u32, has_mode: bool, out: &mut Vec<String>) {
    let mut why = Vec::new();
    let is_dir = mode & 0o170_000 == 0o040_000;
    if has_mode && mode & 0o4000 != 0 {
        why.push("set-user-ID");
    }
    if has_mode && !is_dir && mode & 0o2000 != 0 {
        why.push("set-group-ID");
    }
    // Owned by root, as certsync kubeadm runs (a test run by another user
    // judges against that user): what kubeadm hands the kubelet and the
    // control plane is changed by no one else. A symlink's mode means
    // nothing and is not judged.
    let trust = Trust {
        owners: Owners::Me,
        ..Trust::STRICT
    };
    let faults = trust.faults(&Entry {
        shown: path.into(),
        uid,
        mode: mode & 0o7777,
        link: !has_mode,
        read_only: false,
    });
    if faults.group_writable {
        why.push("writable by its group");
    }
    if faults.others_writable {
        why.push("writable by others");
    }
    let owner = nix::unistd::geteuid().as_raw();
    let not_owner;
    if faults.owner {
        not_owner = format!(
            "owned by uid {uid}, not {}",
            if owner == 0 {
                "root".to_owned()
            } else {
                format!("uid {owner}")
            }
        );
        why.push(&not_owner);
    }
    if !why.is_empty() {
        out.push(format!(
            "{path} is {} (mode {:04o}, owner uid {uid})",
            why.join(", "),
            mode & 0o7777
        ));
    }
}
