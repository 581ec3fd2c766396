//! History: earlier revisions moved to `..history` after each flip, listed,
//! pruned to `keep`; files found in a fresh target kept; leftovers tidied.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use cap_std::fs::{Dir, DirBuilder, DirBuilderExt};

use super::error::{Ctx, WriterError};
use super::layout::{
    DATA, FOUND_REVISION, HISTORY, NotOwn, REV_PREFIX, RevisionProblem, TMP_PREFIX,
};
use super::revision::{
    Found, Revision, fsync, judged, list, own_live, parse_rev, read_file, read_link,
    read_revision_at, remove_any, rev_name,
};
use super::target::{Writer, WriterOptions, is_key};
use crate::bundle::Bundle;

#[derive(Debug)]
pub struct RevisionInfo {
    pub revision: u64,
    /// The content hash's first 8 hex digits, from the name.
    pub hash: String,
    pub dir: PathBuf,
    pub current: bool,
    pub content: Result<Bundle, RevisionProblem>,
}

/// `name` in `dir` (`path`), a 0700 directory opened without following:
/// `..history`, kept if it is certsync's own ([`judged`]), or a history
/// entry, made `fresh`. Made where missing; what else is under that name is
/// removed first, never followed.
fn history_dir(dir: &Dir, name: &str, path: &Path, fresh: bool) -> Result<Dir, WriterError> {
    if !fresh {
        #[cfg(test)]
        super::planted_tests::history_swap("open");
        if let Found::Own(h) = judged(dir, name, path)? {
            return Ok(h);
        }
    }
    remove_any(dir, name, path)?;
    dir.create_dir_with(name, DirBuilder::new().mode(0o700))
        .ctx("create history", path)?;
    #[cfg(test)]
    super::planted_tests::history_swap("made");
    // What was made is judged as opened too: one swapped in before the open gets nothing.
    match judged(dir, name, path)? {
        Found::Own(made) => Ok(made),
        Found::Planted(Some(NotOwn { uid, mode })) => Err(WriterError::Unowned {
            dir: path.to_owned(),
            problem: crate::beneath::PathError::FileChangeable { uid, mode },
        }),
        _ => Err(WriterError::Foreign {
            path: path.to_owned(),
            what: "not the directory certsync just made there",
        }),
    }
}

/// `..history` (`None`: missing or not certsync's own) and its entries by
/// revision number → directory name.
pub(super) type Listing = (Option<Dir>, BTreeMap<u64, String>);

/// `..history` if it is certsync's own ([`judged`]; one that is not is
/// never read), and its entries by revision number → directory name.
pub(super) fn history(root: &Dir) -> Result<Listing, WriterError> {
    let Found::Own(h) = judged(root, HISTORY, Path::new(HISTORY))? else {
        return Ok((None, BTreeMap::new()));
    };
    let names = list(&h, Path::new(HISTORY))?
        .into_iter()
        .filter_map(|n| Some((parse_rev(&n)?.0, n)))
        .collect();
    Ok((Some(h), names))
}

/// The modes and owner of a revision's files, restored by a rollback.
pub(super) fn options_of(rev: &Revision, keep: usize) -> WriterOptions {
    let defaults = WriterOptions::default();
    let is_key = |n: &str| is_key(n, rev.bundle.get(n).unwrap_or_default());
    let key = rev.meta.iter().find(|(n, _)| is_key(n)).map(|(_, m)| m);
    let cert = rev.meta.iter().find(|(n, _)| !is_key(n)).map(|(_, m)| m);
    let any = key.or(cert);
    WriterOptions {
        keep,
        cert_mode: cert.map_or(defaults.cert_mode, |m| m.0),
        key_mode: key.map_or(defaults.key_mode, |m| m.0),
        owner: any.map(|m| m.1),
        group: any.map(|m| m.2),
        ..defaults
    }
}

impl Writer {
    /// Every revision on disk, newest first.
    pub fn revisions(&self) -> Result<Vec<RevisionInfo>, WriterError> {
        self.revisions_in(&self.root(false)?)
    }

    pub(super) fn revisions_in(&self, root: &Dir) -> Result<Vec<RevisionInfo>, WriterError> {
        let live = read_link(root, DATA);
        // Only a `..rev-` name at the root is ever live (not a history
        // entry a planted `..data` names).
        let info = |dir: &Dir, name: &str, shown: PathBuf, rest: &str, current: bool| {
            let (revision, hash) = parse_rev(rest)?;
            Some(
                read_revision_at(dir, name, &shown).map(|content| RevisionInfo {
                    revision,
                    hash: hash.to_owned(),
                    current,
                    content: content.map(|r| r.bundle),
                    dir: shown,
                }),
            )
        };
        let mut out = list(root, &self.target)?
            .iter()
            .filter_map(|n| {
                let live = live.as_deref() == Some(n.as_str());
                info(root, n, self.path(n), n.strip_prefix(REV_PREFIX)?, live)
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let (Some(h), names) = history(root)? {
            let base = self.path(HISTORY);
            for n in names.values() {
                out.extend(info(&h, n, base.join(n), n, false).transpose()?);
            }
        }
        out.sort_by_key(|r| std::cmp::Reverse(r.revision));
        Ok(out)
    }

    /// Moves the files of `..rev-X` (revision `number`, `rest` its name
    /// after the prefix) into `..history/X` (or removes them when
    /// `keep == 1`), then the emptied directory; `history` ([`Self::tidy`]'s
    /// listing) says where it went.
    fn retire(
        &self,
        root: &Dir,
        (dir_name, rest, number): (&str, &str, u64),
        history: &mut Listing,
    ) -> Result<(), WriterError> {
        let src_path = self.path(dir_name);
        let src = match judged(root, dir_name, &src_path)? {
            Found::Own(src) => src,
            Found::Missing => return Ok(()),
            // Not certsync's: not to keep, nor to restore later.
            Found::Planted(_) => return remove_any(root, dir_name, &src_path),
        };
        let names = list(&src, &src_path)?;
        if self.opts.keep > 1 && self.fills_history(history, rest, number, &names)? {
            let (h, _) = self.move_to_history(root, rest, &src, &src_path, &names, false)?;
            history.0 = Some(h);
            history.1.insert(number, rest.to_owned());
        } else {
            for name in names {
                remove_any(&src, &name, &src_path.join(&name))?;
            }
        }
        root.remove_dir(dir_name)
            .ctx("remove retired revision", &src_path)
    }

    /// Whether the files `names` of revision `number` (`rest`) go into
    /// history: its number is new there, or history holds it under this very
    /// name and one of the two is empty (an error or a crash between the entry's `mkdir`
    /// and the moves, or between the moves and the `rmdir`: nothing moved
    /// before is lost). Another name, or both holding files, is a rename of
    /// another revision to this number: removed, never kept beside the entry
    /// (the two would hide each other from pruning) nor merged into it.
    fn fills_history(
        &self,
        (h, held): &Listing,
        rest: &str,
        number: u64,
        names: &[String],
    ) -> Result<bool, WriterError> {
        match (held.get(&number), h) {
            (None, _) => Ok(true),
            (Some(name), Some(h)) if name == rest => {
                let path = self.path(HISTORY).join(rest);
                Ok(match judged(h, rest, &path)? {
                    Found::Own(entry) => names.is_empty() || list(&entry, &path)?.is_empty(),
                    _ => true,
                })
            }
            _ => Ok(false),
        }
    }

    /// Restores the layout's invariants: removes temporary entries, retires
    /// revisions no longer live, drops those newer than the live one (a
    /// crash before the flip), and prunes history to `keep - 1`. `history`:
    /// `..history` listed once per publish, what is not certsync's removed
    /// first ([`Writer::own_history`]), kept up to date by each retirement.
    pub(super) fn tidy(
        &self,
        root: &Dir,
        (mut changed, mut history): (bool, Listing),
    ) -> Result<(), WriterError> {
        // Only certsync's own `..data` ([`own_live`]): one of another user's
        // naming an older number made certsync's live revision newer than
        // "live", removed.
        let live = own_live(root, &self.path(DATA))?;
        for name in list(root, &self.target)? {
            if name.starts_with(TMP_PREFIX) {
                remove_any(root, &name, &self.path(&name))?;
                changed = true;
                continue;
            }
            let Some(rest) = name.strip_prefix(REV_PREFIX) else {
                continue;
            };
            let Some((revision, _)) = parse_rev(rest) else {
                // Under certsync's reserved prefix and no revision: planted.
                remove_any(root, &name, &self.path(&name))?;
                changed = true;
                continue;
            };
            match &live {
                Some((_, live_name)) if *live_name == name => continue,
                Some((live_rev, _)) if revision > *live_rev => {
                    remove_any(root, &name, &self.path(&name))?
                }
                _ => self.retire(root, (&name, rest, revision), &mut history)?,
            }
            changed = true;
        }
        // The pair found before certsync's first publish (kubeadm's) is the
        // way back to what was there: never pruned, not counted.
        let (h, mut names) = history;
        names.remove(&FOUND_REVISION);
        let excess = names.len().saturating_sub(self.opts.keep.saturating_sub(1));
        if excess > 0
            && let Some(h) = h
        {
            for name in names.values().take(excess) {
                remove_any(&h, name, &self.path(HISTORY).join(name))?;
            }
            fsync(&h, &self.path(HISTORY))?;
            changed = true;
        }
        if changed {
            fsync(root, &self.target)?;
        }
        Ok(())
    }

    /// Removes a `..history` that is not certsync's own, and entries in it
    /// that are not ([`judged`]): whoever made them chose what `rollback` would
    /// restore. Whether anything went, and what stays ([`history`]).
    pub(super) fn own_history(&self, root: &Dir) -> Result<(bool, Listing), WriterError> {
        let path = self.path(HISTORY);
        let h = match judged(root, HISTORY, &path)? {
            Found::Own(h) => h,
            Found::Missing => return Ok((false, (None, BTreeMap::new()))),
            Found::Planted(_) => {
                tracing::warn!(path = %path.display(), "removed a ..history certsync did not make; not read");
                remove_any(root, HISTORY, &path)?;
                return Ok((true, (None, BTreeMap::new())));
            }
        };
        let (mut removed, mut names) = (false, BTreeMap::new());
        for name in list(&h, &path)? {
            let entry = path.join(&name);
            match judged(&h, &name, &entry)? {
                Found::Planted(_) => {
                    tracing::warn!(path = %entry.display(), "removed a history entry certsync did not make; not restored");
                    remove_any(&h, &name, &entry)?;
                    removed = true;
                }
                Found::Own(_) => {
                    let number = parse_rev(&name).map(|r| r.0);
                    names.extend(number.map(|n| (n, name)));
                }
                Found::Missing => {}
            }
        }
        Ok((removed, (Some(h), names)))
    }

    /// Files a target certsync never published to holds under the names
    /// it links (a migration) are moved into history as revision 0, where
    /// `certsync rollback` can restore them.
    pub(super) fn keep_found_files(&self, root: &Dir, bundle: &Bundle) -> Result<(), WriterError> {
        let found: Vec<&str> = bundle
            .names()
            .filter(|n| root.symlink_metadata(n).is_ok_and(|m| m.is_file()))
            .collect();
        if found.is_empty() {
            return Ok(());
        }
        if self.opts.keep < 2 {
            return Err(WriterError::Foreign {
                path: self.path(found[0]),
                what: "a file certsync did not write, and --keep-revisions 1 keeps no history \
                       to move it to",
            });
        }
        let mut kept = Bundle::default();
        for name in &found {
            if let Ok((bytes, ..)) = read_file(root, name, &self.path(name)) {
                let _ = kept.insert(name, bytes, "found");
            }
        }
        let entry = rev_name(FOUND_REVISION, &kept.hash());
        let (_, dest_path) =
            self.move_to_history(root, &entry, root, &self.target, &found, true)?;
        tracing::warn!(target_dir = %self.target.display(), files = ?found, kept_in = %dest_path.display(), "the target held files certsync did not write; moved them to history before publishing");
        Ok(())
    }

    /// Moves `names` of `src` into the history entry `entry`, made `fresh` or
    /// kept if certsync's own ([`history_dir`]), one `rename` each (a watch on
    /// a file gets `IN_MOVE_SELF`), then fsyncs both. Whatever sits in the
    /// way is removed, never followed. `..history` as opened, and the entry.
    fn move_to_history(
        &self,
        root: &Dir,
        entry: &str,
        src: &Dir,
        src_path: &Path,
        names: &[impl AsRef<str>],
        fresh: bool,
    ) -> Result<(Dir, PathBuf), WriterError> {
        let history = history_dir(root, HISTORY, &self.path(HISTORY), false)?;
        let dst_path = self.path(HISTORY).join(entry);
        let dst = history_dir(&history, entry, &dst_path, fresh)?;
        for name in names.iter().map(AsRef::as_ref) {
            src.rename(name, &dst, name)
                .ctx("move to history", &src_path.join(name))?;
        }
        fsync(&dst, &dst_path)?;
        fsync(&history, &self.path(HISTORY))?;
        Ok((history, dst_path))
    }
}
