//! The live revision as it is on disk, checked against what was written
//! (contents, modes, owner), and the visible links repaired.

use std::io;
use std::path::Path;

use cap_std::fs::{Dir, MetadataExt};

use super::error::{Ctx, WriterError};
use super::layout::{DATA, REV_PREFIX, own};
use super::revision::{Revision, list, parse_rev, read_link, read_revision_at, replace_symlink};
use super::target::Writer;
use crate::bundle::{Bundle, ContentHash};

/// The revision `..data` points at, as found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    pub revision: u64,
    /// The hash of what is on disk (not of what the name claims).
    pub hash: ContentHash,
    pub bundle: Bundle,
    /// Why this revision cannot be trusted as is, if it cannot.
    pub problem: Option<String>,
}

impl Writer {
    /// Reads the live revision without following anything out of the
    /// target. `None` when there is no `..data` (or it is not ours to read).
    pub fn live(&self) -> Result<Option<Live>, WriterError> {
        match self.root(false) {
            Ok(root) => self.live_in(&root),
            Err(WriterError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    pub(super) fn live_in(&self, root: &Dir) -> Result<Option<Live>, WriterError> {
        // Not a symlink, or one that names anything but one of our
        // revisions (maybe out of the target): never followed.
        let Some(dir_name) = read_link(root, DATA) else {
            return Ok(None);
        };
        let Some((revision, name_hash)) = dir_name.strip_prefix(REV_PREFIX).and_then(parse_rev)
        else {
            return Ok(None);
        };
        let (bundle, mut problem) = match read_revision_at(root, &dir_name, &self.path(&dir_name)) {
            Ok(r) => {
                let problem = self.check_modes(&self.path(&dir_name), &r);
                (r.bundle, problem)
            }
            Err(problem) => (Bundle::default(), Some(problem.to_string())),
        };
        let hash = bundle.hash();
        if problem.is_none()
            && let Err(p) = root
                .symlink_metadata(DATA)
                .map_err(|e| e.to_string())
                .and_then(|m| own(m.uid(), 0).map_err(|e| e.to_string()))
        {
            problem = Some(format!("{DATA}: {p}"));
        }
        if problem.is_none() && hash.short() != name_hash {
            problem = Some(format!(
                "{dir_name}: contents were changed after it was written"
            ));
        }
        Ok(Some(Live {
            revision,
            hash,
            bundle,
            problem,
        }))
    }

    pub(super) fn check_modes(&self, dir: &Path, rev: &Revision) -> Option<String> {
        for (name, &(mode, uid, gid)) in &rev.meta {
            let want = self.mode_for(name, rev.bundle.get(name).unwrap_or_default());
            if mode != want {
                return Some(format!(
                    "{} has mode {mode:04o}, expected {want:04o}",
                    dir.join(name).display(),
                ));
            }
            if self.opts.owner.is_some_and(|u| u != uid)
                || self.opts.group.is_some_and(|g| g != gid)
            {
                return Some(format!(
                    "{} has the wrong owner or group",
                    dir.join(name).display()
                ));
            }
        }
        None
    }

    /// Makes `<target>/<name> -> ..data/<name>` for every file of `bundle`
    /// that lacks it. Safe before `..data` flips to a revision holding
    /// them: until then a new link resolves to nothing, as a missing name
    /// does, so a publish makes its names first and no moment (a SIGKILL
    /// between two steps included) shows the new `..data` without them.
    pub(super) fn link_names(&self, root: &Dir, bundle: &Bundle) -> Result<usize, WriterError> {
        let mut changed = 0;
        for name in bundle.names() {
            let want = format!("{DATA}/{name}");
            if read_link(root, name).as_deref() == Some(want.as_str()) {
                continue;
            }
            if root.symlink_metadata(name).is_ok_and(|m| m.is_dir()) {
                return Err(WriterError::Foreign {
                    path: self.path(name),
                    what: "a directory where a certificate link belongs",
                });
            }
            replace_symlink(root, name, &want, &self.target)?;
            changed += 1;
        }
        Ok(changed)
    }

    /// Removes our links to names `bundle` no longer has: after the flip,
    /// when they already resolve to nothing.
    pub(super) fn unlink_stale(&self, root: &Dir, bundle: &Bundle) -> Result<usize, WriterError> {
        let mut changed = 0;
        for name in list(root, &self.target)? {
            if name.starts_with("..") || bundle.get(&name).is_some() {
                continue;
            }
            if read_link(root, &name).is_some_and(|l| l.starts_with(&format!("{DATA}/"))) {
                root.remove_file(&name)
                    .ctx("remove stale link", &self.path(&name))?;
                changed += 1;
            }
        }
        Ok(changed)
    }
}
