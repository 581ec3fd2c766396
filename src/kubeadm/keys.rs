//! Private keys on the node that others may read: every `*.key` under
//! `pki/` and certsync's own directory (adopt's backups hold kubeadm's
//! keys). A CA key a group or every local user may read lets any of them
//! mint certificates the cluster trusts. Walked as [`super::audit::walk`]
//! walks, a link never followed (certsync's `tls.key` links point into a
//! revision judged itself). Keys are known by their name only: this finds
//! mistakes, it is no boundary against whoever may write there.

use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use cap_std::fs::MetadataExt as _;

use super::audit::{Met, walk};
use super::error::{FileProblem, Refusal};

/// Where keys live, as node paths.
const UNDER: [&str; 2] = ["/etc/kubernetes/pki", "/etc/kubernetes/certsync"];

/// Every exposed private key under [`UNDER`] of the node at `dir`, sorted
/// by node path, and what cannot be looked at: an unknown is not healthy.
pub fn exposed(dir: &Path) -> Vec<Refusal> {
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
        walk(&root, under, 0, &mut 0, &mut |met| match met {
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
