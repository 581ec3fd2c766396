//! The live revision as it is on disk, checked against what was written,
//! and the visible links repaired.

use std::io;
use std::path::Path;

use cap_std::fs::Dir;

use super::error::{Ctx, WriterError};
use super::layout::{DATA, REV_PREFIX};
use super::revision::{
    Revision, link_at, list, parse_rev, read_link, read_revision_at, replace_symlink,
};
use super::target::Writer;
use crate::bundle::{Bundle, ContentHash};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Live {
    pub revision: u64,
    /// Of what is on disk, not what the name claims.
    pub hash: ContentHash,
    pub bundle: Bundle,
    pub problem: Option<String>,
}

impl Writer {
    /// The live revision; `None` when there is no `..data` of ours.
    pub fn live(&self) -> Result<Option<Live>, WriterError> {
        match self.root(false) {
            Ok(root) => self.live_in(&root),
            Err(WriterError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// [`Writer::live`] beneath `root`, without following anything out of
    /// the target.
    pub(super) fn live_in(&self, root: &Dir) -> Result<Option<Live>, WriterError> {
        // Anything but a symlink to one of our revisions: never followed.
        // Judged and read on one handle ([`link_at`]), never by its name twice.
        let Some((dir_name, data_own)) = link_at(root, DATA, &self.path(DATA))? else {
            return Ok(None);
        };
        let Some((revision, name_hash)) = dir_name.strip_prefix(REV_PREFIX).and_then(parse_rev)
        else {
            return Ok(None);
        };
        let shown = self.path(&dir_name);
        let (bundle, problem) = match read_revision_at(root, &dir_name, &shown)? {
            Ok(r) => {
                let problem = self.check_modes(&shown, &r);
                (r.bundle, problem)
            }
            Err(problem) => (Bundle::default(), Some(problem.to_string())),
        };
        let hash = bundle.hash();
        let changed = || format!("{dir_name}: contents were changed after it was written");
        let problem = problem
            .or_else(|| data_own.err().map(|p| format!("{DATA}: {p}")))
            .or_else(|| (hash.short() != name_hash).then(changed));
        Ok(Some(Live {
            revision,
            hash,
            bundle,
            problem,
        }))
    }

    fn check_modes(&self, dir: &Path, rev: &Revision) -> Option<String> {
        rev.meta.iter().find_map(|(name, &(mode, uid, gid, _))| {
            let want = self.mode_for(name, rev.bundle.get(name).unwrap_or_default());
            let path = dir.join(name);
            if mode != want {
                return Some(format!(
                    "{} has mode {mode:04o}, expected {want:04o}",
                    path.display()
                ));
            }
            let wrong = self.opts.owner.is_some_and(|u| u != uid)
                || self.opts.group.is_some_and(|g| g != gid);
            wrong.then(|| format!("{} has the wrong owner or group", path.display()))
        })
    }

    /// Makes `<target>/<name> -> ..data/<name>` for every file of `bundle`
    /// that lacks it. Made before the flip (until then it resolves to
    /// nothing, as a missing name does): no moment shows the new `..data`
    /// without them.
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

    /// Removes our links to names `bundle` no longer has (after the flip).
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
