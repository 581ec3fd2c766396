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
use super::error::{FileProblem, Refusal};

/// Where keys live, as node paths.
const UNDER: [&str; 2] = ["/etc/kubernetes/pki", "/etc/kubernetes/certsync"];

/// Every exposed private key under [`UNDER`] of the node at `dir`, by node
/// path, sorted ([`Refusal::KeyReadable`], [`Refusal::KeyNotRoots`]).
/// What cannot be looked at is said too ([`Refusal::KeysUnreadable`]):
/// an unknown is not healthy.
pub fn exposed(dir: &Path) -> Vec<Refusal> {
    // Each beside the node path it names (escaped), to sort by.
    let mut out = Vec::new();
    for under in UNDER {
        let root = match super::moves::open_beneath(dir, under) {
            Ok(r) => r,
            Err(FileProblem::Missing) => continue,
            Err(e) => {
                let problem = format!("could not be opened: {e}");
                let path = under.to_owned();
                out.push((path.clone(), Refusal::KeysUnreadable { path, problem }));
                continue;
            }
        };
        walk(&root, under, &mut 0, &mut |met| match met {
            Met::Entry { path, name, meta } => {
                if meta.file_type().is_file() && name.as_bytes().ends_with(b".key") {
                    let (path, mode) = (path.to_owned(), meta.mode() & 0o7777);
                    if meta.uid() != 0 {
                        let uid = meta.uid();
                        out.push((path.clone(), Refusal::KeyNotRoots { path, uid }));
                    } else if mode & 0o077 != 0 {
                        out.push((path.clone(), Refusal::KeyReadable { path, mode }));
                    }
                }
            }
            Met::Problem { path, problem } => {
                let path = path.to_owned();
                out.push((path.clone(), Refusal::KeysUnreadable { path, problem }));
            }
        });
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.into_iter().map(|(_, e)| e).collect()
}
