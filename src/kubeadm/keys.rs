//! Private keys on the node that others may read: every `*.key` under
//! `pki/` (kubeadm's, and certsync's targets there) and under certsync's
//! own directory (adopt's backups hold kubeadm's keys). A CA key that a
//! group or every local user may read lets any of them mint certificates
//! the cluster trusts (front-proxy clients, kubelet identities), whatever
//! certsync renews; OpenSSH refuses a key like that outright. Walked as
//! the audit walks `/etc/kubernetes` ([`super::audit::walk`]): one
//! directory handle at a time, each entry judged by its own metadata, a
//! link never followed (certsync's visible `tls.key` links point into a
//! revision that is judged itself), every name escaped. Keys are known by
//! their name (`*.key`, as kubeadm and certsync name them): a key kept
//! under another name is not seen, so this finds mistakes, it is no
//! boundary against whoever may write there.

use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use cap_std::fs::MetadataExt as _;

use super::audit::{Met, walk};

/// Where keys live, as node paths.
const UNDER: [&str; 2] = ["/etc/kubernetes/pki", "/etc/kubernetes/certsync"];

/// Why a key file is exposed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Exposed {
    #[error("{path} (mode {mode:04o}) may be read by its group or other users: chmod 0600 it")]
    Readable { path: String, mode: u32 },
    #[error(
        "{path} belongs to uid {uid}, not root: that user may read or replace it; chown root:root it"
    )]
    NotRoots { path: String, uid: u32 },
    #[error("{path} {problem}: its keys cannot be judged")]
    Unreadable { path: String, problem: String },
}

/// Every exposed private key under [`UNDER`] of the node at `dir`, by node
/// path, sorted. What cannot be looked at is said too: an unknown
/// is not healthy.
pub fn exposed(dir: &Path) -> Vec<Exposed> {
    let mut out = Vec::new();
    for under in UNDER {
        let root = match super::moves::open_beneath(dir, under) {
            Ok(r) => r,
            Err(super::moves::Blocked::Absent) => continue,
            Err(e) => {
                out.push(Exposed::Unreadable {
                    path: under.to_owned(),
                    problem: format!("could not be opened: {e}"),
                });
                continue;
            }
        };
        walk(&root, under, &mut 0, &mut |met| match met {
            Met::Entry { path, name, meta } => {
                if meta.file_type().is_file() && name.as_bytes().ends_with(b".key") {
                    let mode = meta.mode() & 0o7777;
                    if meta.uid() != 0 {
                        out.push(Exposed::NotRoots {
                            path: path.to_owned(),
                            uid: meta.uid(),
                        });
                    } else if mode & 0o077 != 0 {
                        out.push(Exposed::Readable {
                            path: path.to_owned(),
                            mode,
                        });
                    }
                }
            }
            Met::Problem { path, problem } => out.push(Exposed::Unreadable {
                path: path.to_owned(),
                problem,
            }),
        });
    }
    out.sort_by(|a, b| a.path().cmp(b.path()));
    out
}

impl Exposed {
    /// The node path it names (escaped).
    pub fn path(&self) -> &str {
        match self {
            Self::Readable { path, .. }
            | Self::NotRoots { path, .. }
            | Self::Unreadable { path, .. } => path,
        }
    }
}
