//! Private keys on the node that others may read: every `*.key` under
//! `pki/` (kubeadm's, and certsync's targets there) and under certsync's
//! own directory (adopt's backups hold kubeadm's keys). A CA key that a
//! group or every local user may read lets any of them mint certificates
//! the cluster trusts (front-proxy clients, kubelet identities), whatever
//! certsync renews; OpenSSH refuses a key like that outright. Judged by
//! each entry's own metadata, symlinks never followed (certsync's visible
//! `tls.key` links point into a revision that is judged itself).

use std::os::unix::fs::MetadataExt as _;
use std::path::Path;

/// Where keys live, as node paths.
const UNDER: [&str; 2] = ["/etc/kubernetes/pki", "/etc/kubernetes/certsync"];

/// Deeper than any layout adopt makes (pki/certsync/NAME/..history/REV/):
/// a walk stops there rather than following a planted tree down.
const MAX_DEPTH: usize = 8;

/// Why a key file is exposed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Exposed {
    #[error("{path} (mode {mode:04o}) may be read by its group or other users: chmod 0600 it")]
    Readable { path: String, mode: u32 },
    #[error(
        "{path} belongs to uid {uid}, not root: that user may read or replace it; chown root:root it"
    )]
    NotRoots { path: String, uid: u32 },
    #[error("{path}: cannot be judged ({error})")]
    Unreadable { path: String, error: String },
}

/// Every exposed private key under [`UNDER`] of the node at `dir`, by node
/// path, in walk order. A directory that cannot be listed is a problem
/// too: an unknown is not healthy.
pub fn exposed(dir: &Path) -> Vec<Exposed> {
    let mut out = Vec::new();
    for node_path in UNDER {
        walk(dir, node_path, 0, &mut out);
    }
    out
}

fn walk(dir: &Path, node_path: &str, depth: usize, out: &mut Vec<Exposed>) {
    let at = super::super::paths::host(dir, node_path);
    let entries = match std::fs::read_dir(&at) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && depth == 0 => return,
        Err(e) => {
            return out.push(Exposed::Unreadable {
                path: node_path.to_owned(),
                error: e.to_string(),
            });
        }
    };
    let mut names: Vec<_> = entries.filter_map(Result::ok).collect();
    names.sort_by_key(std::fs::DirEntry::file_name);
    for e in names {
        let name = e.file_name().to_string_lossy().into_owned();
        let path = format!("{node_path}/{}", crate::escape(&name));
        // The entry's own metadata: a symlink is judged as a link, never
        // through it.
        let meta = match e.path().symlink_metadata() {
            Ok(m) => m,
            Err(error) => {
                out.push(Exposed::Unreadable {
                    path,
                    error: error.to_string(),
                });
                continue;
            }
        };
        if meta.is_dir() {
            if depth + 1 >= MAX_DEPTH {
                out.push(Exposed::Unreadable {
                    path,
                    error: format!("deeper than {MAX_DEPTH} directories"),
                });
            } else {
                walk(dir, &format!("{node_path}/{name}"), depth + 1, out);
            }
        } else if meta.is_file() && name.ends_with(".key") {
            let mode = meta.mode() & 0o7777;
            if meta.uid() != 0 {
                out.push(Exposed::NotRoots {
                    path,
                    uid: meta.uid(),
                });
            } else if mode & 0o077 != 0 {
                out.push(Exposed::Readable { path, mode });
            }
        }
    }
}
