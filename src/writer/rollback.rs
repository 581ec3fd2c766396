//! Rollback to an earlier revision, and the `..pin` that keeps it live
//! until the source changes.

use std::path::Path;

use cap_std::fs::Dir;

use super::error::WriterError;
use super::history::{history, options_of};
use super::layout::{HISTORY, PIN, RevisionProblem, own};
use super::publish::Outcome;
use super::revision::{Revision, parse_rev, read_file, read_revision_at, replace_beneath, said};
use super::target::Writer;
use crate::beneath::PathError;
use crate::bundle::Bundle;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RolledBack {
    pub from_history: u64,
    pub revision: u64,
}

/// The rollback pin, if `..pin` holds one; `Err` when it is not certsync's
/// own (not a regular file, [`own`], a hard link): never obeyed.
pub(super) fn read_pin(root: &Dir) -> Result<Option<(String, String)>, WriterError> {
    let read = read_file(root, PIN, Path::new(PIN));
    if read.as_ref().is_err_and(PathError::is_not_found) {
        return Ok(None);
    }
    // A read that failed for a reason of the process or the volume (EMFILE,
    // EIO) is no proof of no pin ([`said`]): taken for none, or the pin for
    // not certsync's, the next publish undid the operator's rollback.
    let (bytes, (mode, uid, _, links)) =
        said(read)?.map_err(|e| WriterError::Pin(e.to_string()))?;
    let pin = |p: String| WriterError::Pin(format!("{PIN}: {p}"));
    own(uid, mode).map_err(|p| pin(p.to_string()))?;
    if links != 1 {
        return Err(pin(format!("a hard link (links {links})")));
    }
    let Ok(text) = String::from_utf8(bytes) else {
        return Ok(None);
    };
    let mut pinned = None;
    let mut replaced = None;
    for line in text.lines() {
        match line.split_once(' ') {
            Some(("pinned", h)) => pinned = Some(h.trim().to_owned()),
            Some(("replaced", h)) => replaced = Some(h.trim().to_owned()),
            _ => {}
        }
    }
    Ok(pinned.zip(replaced))
}

impl Writer {
    /// The rollback pin: (pinned content hash, replaced content hash).
    pub fn pin(&self) -> Option<(String, String)> {
        read_pin(&self.root(false).ok()?).ok().flatten()
    }

    /// Keeps the pinned content live, rewritten if drift damaged it.
    pub(super) fn keep_pinned(&self, root: &Dir, pinned: &str) -> Result<Outcome, WriterError> {
        for info in self.revisions_in(root)? {
            let Ok(bundle) = info.content else { continue };
            if bundle.hash().to_string() != pinned {
                continue;
            }
            let revision = self.publish_locked(root, &bundle, || {})?.revision();
            return Ok(Outcome::Pinned { revision });
        }
        let gone = WriterError::PinnedContentGone;
        Err(WriterError::of("target", &self.target, gone))
    }

    /// Restores the content of history revision `to` (default: the newest)
    /// as a new live revision, with its files' modes and owner, after
    /// `check` accepts it; then pins it. Nothing is pruned: the daemon
    /// prunes to its own `--keep-revisions`.
    pub fn rollback(
        &self,
        to: Option<u64>,
        check: impl Fn(&Bundle) -> Result<(), crate::validate::ValidationError>,
    ) -> Result<RolledBack, WriterError> {
        let root = self.root(false)?;
        let _lock = self.lock(&root)?;
        let err = |problem| WriterError::of("target", &self.target, problem);
        let live = self
            .live_in(&root)?
            .ok_or_else(|| err(WriterError::NoLiveRevision))?;
        let (h, names) = history(&root)?;
        let (&number, name) = match to {
            Some(n) => names
                .get_key_value(&n)
                .ok_or_else(|| err(WriterError::NotInHistory(n)))?,
            None => names
                .iter()
                .next_back()
                .ok_or_else(|| err(WriterError::NoHistory))?,
        };
        let shown = self.path(HISTORY).join(name);
        let revision = h.ok_or_else(|| err(WriterError::NoHistory)).and_then(|h| {
            read_revision_at(&h, name, &shown)?
                .and_then(|r| restorable(&r, name, &shown).map(|()| r))
                .map_err(|problem| err(WriterError::RevisionUntrusted { number, problem }))
        })?;
        check(&revision.bundle).map_err(|problem| err(WriterError::Refused { number, problem }))?;
        let restorer = Self {
            opts: options_of(&revision, usize::MAX),
            anchor: None,
            ..self.clone()
        };
        let new = restorer
            .publish_locked(&root, &revision.bundle, || {})?
            .revision();
        let text = format!(
            "pinned {}\nreplaced {}\n",
            revision.bundle.hash(),
            live.hash
        );
        replace_beneath(&root, PIN, 0o644, None, text.as_bytes(), &self.target)?;
        Ok(RolledBack {
            from_history: number,
            revision: new,
        })
    }
}

/// Whether the history entry `name` may be restored as it is:
/// - its files are as certsync wrote them: one link each (a second name
///   may be anywhere: root's key linked into a history entry), and one
///   owner and group for all;
/// - its content is still what its name's hash says;
/// - its files are certsync's own user's. With `owner=` they are the
///   consumer's, who may rewrite them through a handle kept open, and the
///   name's 32-bit hash is matched in minutes (bytes after the key's END
///   line): rolling back would publish and pin the consumer's pair.
fn restorable(rev: &Revision, name: &str, shown: &Path) -> Result<(), RevisionProblem> {
    if let Some((name, m)) = rev.meta.iter().find(|(_, m)| m.3 > 1) {
        return Err(RevisionProblem::HardLink {
            path: shown.join(name),
            links: m.3,
        });
    }
    let owners: std::collections::BTreeSet<(u32, u32)> =
        rev.meta.values().map(|m| (m.1, m.2)).collect();
    if owners.len() > 1 {
        let owners = rev.meta.iter().map(|(n, m)| (shown.join(n), m.1, m.2));
        return Err(RevisionProblem::Owners(owners.collect()));
    }
    let named = parse_rev(name).map(|(_, h)| h);
    let hash = rev.bundle.hash();
    if named != Some(hash.short().as_str()) {
        return Err(RevisionProblem::Changed {
            path: shown.to_owned(),
            hash: hash.short(),
            named: named.map(str::to_owned),
        });
    }
    let me = nix::unistd::geteuid().as_raw();
    match rev.meta.iter().find(|(_, m)| m.1 != me) {
        Some((name, m)) => Err(RevisionProblem::NotCertsyncs {
            path: shown.join(name),
            uid: m.1,
        }),
        None => Ok(()),
    }
}
