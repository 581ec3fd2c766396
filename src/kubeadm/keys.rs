//! Private keys on the node that others may read: every `*.key` under `pki/` and certsync's
//! own directory (adopt's backups hold kubeadm's keys). A CA key a group or every local
//! user may read lets any of them mint certificates the cluster trusts. Walked as
//! [`super::audit::walk`] walks, a link never followed (certsync's `tls.key` links point
//! into a revision judged itself). Keys are known by their name only: this finds mistakes,
//! it is no boundary against whoever may write there.

use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use cap_std::fs::MetadataExt as _;

use super::audit::walk;
use super::error::{FileProblem, Refusal};

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
            if uid != 0 {
                out.push((path.clone(), Refusal::KeyNotRoots { path, uid }));
            } else if mode & 0o077 != 0 {
                out.push((path.clone(), Refusal::KeyReadable { path, mode }));
            }
        });
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out.into_iter().map(|(_, e)| e).collect()
}
