//! A publish under the write lock: a new revision written complete, then
//! `..data` flipped and what it replaced retired.

use std::collections::BTreeMap;

use cap_fs_ext::DirExt;
use cap_std::fs::{Dir, DirBuilder, DirBuilderExt};

use super::error::{Ctx, WriterError};
use super::layout::{DATA, MAX_COUNTED, REV_PREFIX};
use super::revision::{
    Found, create_file, fsync, judged, list, own_live, parse_rev, remove_any, replace_symlink,
    rev_name,
};
use super::target::Writer;
use crate::bundle::Bundle;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The live revision already holds this content; `repaired_links`
    /// counts visible symlinks restored.
    Unchanged {
        revision: u64,
        repaired_links: usize,
    },
    /// A rollback pin holds: the pinned content is live, not the source's.
    Pinned { revision: u64 },
    Written {
        revision: u64,
        /// The drift that forced a rewrite (`None`: the content changed).
        drift: Option<String>,
    },
}

impl Outcome {
    pub fn revision(&self) -> u64 {
        match self {
            Self::Unchanged { revision, .. }
            | Self::Pinned { revision }
            | Self::Written { revision, .. } => *revision,
        }
    }
}

impl Writer {
    pub(super) fn publish_locked(
        &self,
        root: &Dir,
        bundle: &Bundle,
        flipped: impl FnOnce(),
    ) -> Result<Outcome, WriterError> {
        let live = self.live_in(root)?;
        let drift = match &live {
            Some(l) if l.problem.is_none() && l.hash == bundle.hash() => {
                let repaired_links =
                    self.link_names(root, bundle)? + self.unlink_stale(root, bundle)?;
                if repaired_links > 0 {
                    fsync(root, &self.target)?;
                }
                return Ok(Outcome::Unchanged {
                    revision: l.revision,
                    repaired_links,
                });
            }
            Some(l) => l.problem.clone(),
            None => {
                self.keep_found_files(root, bundle)?;
                None
            }
        };
        let history = self.own_history(root)?;
        let revision = self.next_revision(root, &history.1.1)?;
        let dir_name = format!("{REV_PREFIX}{}", rev_name(revision, &bundle.hash()));
        let made = self
            .write_revision(root, &dir_name, bundle)
            .and_then(|()| self.link_names(root, bundle));
        if let Err(e) = made {
            // No partial revision stays; the live one was never touched.
            let _ = remove_any(root, &dir_name, &self.path(&dir_name));
            return Err(e);
        }
        self.flip(root, &dir_name)?;
        self.unlink_stale(root, bundle)?;
        fsync(root, &self.target)?;
        flipped();
        self.tidy(root, history)?;
        Ok(Outcome::Written { revision, drift })
    }

    /// One past the highest number certsync wrote: the one its own `..data`
    /// names ([`own_live`]; the directory may be gone), its history's
    /// (`history`, the publish's one listing of it), and its own revisions'
    /// at the root. A root entry numbered past [`MAX_COUNTED`]
    /// is none certsync wrote (its own, renamed while the target was
    /// writable): counted, it overflowed the count or made it come back to
    /// one number; tidy removes it as newer than live.
    fn next_revision(
        &self,
        root: &Dir,
        history: &BTreeMap<u64, String>,
    ) -> Result<u64, WriterError> {
        let live = own_live(root, &self.path(DATA))?.map(|l| l.0);
        let known = live.into_iter().chain(history.keys().copied()).max();
        let mut max = known.unwrap_or(0);
        for n in list(root, &self.target)? {
            if let Some((number, _)) = n.strip_prefix(REV_PREFIX).and_then(parse_rev)
                && number > max
                && number <= MAX_COUNTED
                && let Found::Own(_) = judged(root, &n, &self.path(&n))?
            {
                max = number;
            }
        }
        Ok(max.saturating_add(1))
    }

    pub(super) fn write_revision(
        &self,
        root: &Dir,
        dir_name: &str,
        bundle: &Bundle,
    ) -> Result<(), WriterError> {
        let path = self.path(dir_name);
        remove_any(root, dir_name, &path)?; // an unfinished write with the same number
        let mut builder = DirBuilder::new();
        builder.mode(0o755);
        root.create_dir_with(dir_name, &builder)
            .ctx("create revision", &path)?;
        let dir = root
            .open_dir_nofollow(dir_name)
            .ctx("open revision", &path)?;
        // Every file is written before any is fsynced: on ext4 an fsync
        // also writes the directory, once per file otherwise.
        let mut written = Vec::with_capacity(3);
        for (name, bytes) in bundle.files() {
            let (file, owner) = (path.join(name), (self.opts.owner, self.opts.group));
            let f = create_file(&dir, name, self.mode_for(name, bytes), owner, bytes, &file)?;
            written.push((f, file));
        }
        for (f, file) in &written {
            f.sync_all().ctx("fsync", file)?;
        }
        fsync(&dir, &path)
    }

    pub(super) fn flip(&self, root: &Dir, dir_name: &str) -> Result<(), WriterError> {
        // Anything but a symlink on `..data` cannot be renamed over; it
        // sits under a reserved name, so it goes.
        if root
            .symlink_metadata(DATA)
            .is_ok_and(|m| !m.file_type().is_symlink())
        {
            remove_any(root, DATA, &self.path(DATA))?;
        }
        replace_symlink(root, DATA, dir_name, &self.target)
    }
}
