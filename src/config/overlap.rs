//! Paths compared as the kernel resolves them, so that no two mappings
//! share a target, no target lies in, on or around a source, and no copy
//! of a live pair is written over a target, a CA or another copy.

use super::error::ConfigError;
use super::mapping::{Mapping, Source};

use std::path::{Path, PathBuf};

/// `path` as the kernel will resolve it: absolute, with the longest
/// existing prefix canonicalized (symlinks and `..` resolved) and the rest,
/// which does not exist yet and so holds no symlink, normalized as text.
pub(super) fn resolve_path(path: &Path) -> PathBuf {
    use std::path::Component;
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let parts: Vec<Component> = abs.components().collect();
    for split in (1..=parts.len()).rev() {
        let head: PathBuf = parts[..split].iter().collect();
        let Ok(mut out) = std::fs::canonicalize(&head) else {
            continue;
        };
        for c in &parts[split..] {
            match c {
                Component::ParentDir => {
                    out.pop();
                }
                Component::Normal(n) => out.push(n),
                _ => {}
            }
        }
        return out;
    }
    abs
}

/// One task owns each target: no two mappings may share a target, nest one
/// target in another, or write into (or around) a source directory; names
/// are unique.
pub(crate) fn check_overlaps(mappings: &[Mapping]) -> Result<(), ConfigError> {
    let mut names = std::collections::HashMap::with_capacity(mappings.len());
    for (j, b) in mappings.iter().enumerate() {
        if let Some(&i) = names.get(b.name.as_str()) {
            let a: &Mapping = &mappings[i];
            return Err(ConfigError::of_mapping(
                &a.name,
                ConfigError::NameTwice {
                    first: resolve_path(&a.target),
                    second: resolve_path(&b.target),
                },
            ));
        }
        names.insert(b.name.as_str(), j);
    }
    // Sorted component by component, a directory's subtree follows it, so
    // one pass with a stack of enclosing directories finds every nesting.
    let mut dirs: Vec<(PathBuf, bool, usize)> = Vec::with_capacity(mappings.len() * 2);
    for (i, m) in mappings.iter().enumerate() {
        dirs.push((resolve_path(&m.target), true, i));
        if let Source::Dir(dir) = &m.source {
            dirs.push((resolve_path(dir), false, i));
        }
    }
    dirs.sort();
    let mut enclosing: Vec<&(PathBuf, bool, usize)> = Vec::new();
    for cur in &dirs {
        while enclosing.last().is_some_and(|up| !cur.0.starts_with(&up.0)) {
            enclosing.pop();
        }
        if let Some(e) = enclosing.iter().find_map(|up| overlap(mappings, up, cur)) {
            return Err(e);
        }
        enclosing.push(cur);
    }
    check_ca_files(mappings)
}

/// A `ca:` mapping's CA certificate and key lie in no target: the CA key
/// must never be where certsync publishes (history, rollback and drift
/// repair move and replace what is there).
fn check_ca_files(mappings: &[Mapping]) -> Result<(), ConfigError> {
    let forbidden = Forbidden::of(mappings);
    for ca in &forbidden.cas {
        for file in &ca.reals {
            if let Some((o, t)) = forbidden.targets.iter().find(|(_, t)| file.starts_with(t)) {
                return Err(ConfigError::of_mapping(
                    &ca.m.name,
                    ConfigError::CaFileInTarget {
                        file: file.clone(),
                        target: t.clone(),
                        other: o.name.clone(),
                    },
                ));
            }
        }
    }
    Ok(())
}

/// The error for directory `inner` lying in (or being) `outer`, if that
/// is a conflict: a target in or around another target, or around or in
/// any source directory. Sources may nest: both are only read.
fn overlap(
    mappings: &[Mapping],
    outer: &(PathBuf, bool, usize),
    inner: &(PathBuf, bool, usize),
) -> Option<ConfigError> {
    match (outer, inner) {
        ((_, false, _), (_, false, _)) => None,
        ((ta, true, i), (tb, true, j)) => {
            // Reported on the mapping listed first, as it was written.
            let ((ta, i), (tb, j)) = if i < j {
                ((ta, *i), (tb, *j))
            } else {
                ((tb, *j), (ta, *i))
            };
            Some(ConfigError::of_mapping(
                &mappings[i].name,
                ConfigError::Targets {
                    target: ta.clone(),
                    theirs: tb.clone(),
                    other: mappings[j].name.clone(),
                    same: ta == tb,
                },
            ))
        }
        ((ta, true, i), (sb, false, j)) | ((sb, false, j), (ta, true, i)) => {
            Some(ConfigError::of_mapping(
                &mappings[*i].name,
                ConfigError::SourceAndTarget {
                    target: ta.clone(),
                    dir: sb.clone(),
                    other: (i != j).then(|| mappings[*j].name.clone()),
                },
            ))
        }
    }
}

/// Every copy of a live pair outside the targets (`update-kubeconfig=`,
/// `update-pair=`) is one the writer may keep updated, named by one mapping
/// only, inside no target (its writer owns every name there).
pub(super) fn copies_guarded(mappings: &[Mapping]) -> Result<(), ConfigError> {
    let copies = copies(mappings);
    if copies.is_empty() {
        return Ok(());
    }
    let forbidden = Forbidden::of(mappings);
    for (n, c) in copies.iter().enumerate() {
        let mut others = copies.iter().enumerate().filter(|(k, _)| *k != n);
        let twice = others
            .find(|(_, o)| o.reals.iter().any(|r| c.reals.contains(r)))
            .map(|(_, o)| ConfigError::CopyTwice {
                other: o.m.name.clone(),
                theirs: o.option,
            });
        if let Some(problem) = forbidden.refuses(c).or(twice) {
            return Err(ConfigError::of_mapping(
                &c.m.name,
                ConfigError::PathOf {
                    option: c.option,
                    path: c.path.to_owned(),
                    problem: Box::new(problem),
                },
            ));
        }
        let checked = match c.option {
            "update-kubeconfig" => crate::writer::check_kubeconfig(c.path),
            _ => crate::writer::check_pair(c.path),
        };
        // The writer's error names the option and path itself.
        checked.map_err(|source| ConfigError::Copy {
            mapping: c.m.name.clone(),
            source,
        })?;
    }
    Ok(())
}

/// A copy of a mapping's live pair: the files written and where each leads
/// (a link on the way must not hide a target or a CA file).
struct Copy<'a> {
    m: &'a Mapping,
    option: &'static str,
    path: &'a Path,
    files: Vec<PathBuf>,
    reals: Vec<PathBuf>,
}

/// Every copy the mappings name, once.
fn copies(mappings: &[Mapping]) -> Vec<Copy<'_>> {
    let mut copies = Vec::new();
    for m in mappings {
        if let Some(p) = &m.update_kubeconfig {
            copies.push((m, "update-kubeconfig", p, vec![p.clone()]));
        }
        if let Some(p) = &m.update_pair {
            let stem = p.file_name().unwrap_or_default().to_string_lossy();
            let files = ["crt", "key"].map(|ext| p.with_file_name(format!("{stem}.{ext}")));
            copies.push((m, "update-pair", p, files.into()));
        }
    }
    copies
        .into_iter()
        .map(|(m, option, path, files)| Copy {
            m,
            option,
            path,
            reals: files.iter().map(|f| resolve_path(f)).collect(),
            files,
        })
        .collect()
}

/// What no copy may write: each target and each CA file of a `ca:` mapping
/// (overwritten with a leaf pair, the CA is lost), by path, where it leads
/// and by device and inode.
struct Forbidden<'a> {
    targets: Vec<(&'a Mapping, PathBuf)>,
    target_ids: Vec<(&'a Mapping, Id)>,
    cas: Vec<CaFiles<'a>>,
}

struct CaFiles<'a> {
    m: &'a Mapping,
    reals: [PathBuf; 2],
    ids: [Option<Id>; 2],
}

/// A file's device and inode.
type Id = (u64, u64);

impl<'a> Forbidden<'a> {
    fn of(mappings: &'a [Mapping]) -> Self {
        use crate::beneath::identity;
        Self {
            targets: mappings
                .iter()
                .map(|o| (o, resolve_path(&o.target)))
                .collect(),
            target_ids: mappings
                .iter()
                .filter_map(|o| Some((o, identity(&o.target)?)))
                .collect(),
            cas: mappings
                .iter()
                .filter_map(|o| match &o.source {
                    Source::Ca(spec) => {
                        let files = [&spec.ca_cert, &spec.ca_key];
                        Some(CaFiles {
                            m: o,
                            reals: files.map(|c| resolve_path(c)),
                            ids: files.map(|c| identity(c)),
                        })
                    }
                    _ => None,
                })
                .collect(),
        }
    }

    /// Why copy `c` (without `..`, refused as written) may not be written,
    /// if it may not: over a CA file, then in a target, by path and where it
    /// leads; then the same by device and inode: a bind mount (or, for a
    /// file, a hard link) leads to a target or a CA file with no symlink for
    /// the path checks to see, and a copy written there would overwrite the
    /// target or the CA.
    fn refuses(&self, c: &Copy<'_>) -> Option<ConfigError> {
        use crate::beneath::identity;
        let both = || c.files.iter().zip(&c.reals);
        let over_ca = |by_inode: bool| {
            self.cas.iter().find_map(|ca| {
                let (f, _) = both().find(|(f, r)| match by_inode {
                    false => ca.reals.contains(r),
                    true => identity(f).is_some_and(|id| ca.ids.contains(&Some(id))),
                })?;
                let (file, other) = (f.clone(), ca.m.name.clone());
                Some(ConfigError::OverCa {
                    file,
                    other,
                    by_inode,
                })
            })
        };
        let in_target = |o: &Mapping, f: &PathBuf, by_inode| {
            let (file, target, other) = (f.clone(), o.target.clone(), o.name.clone());
            ConfigError::InTarget {
                file,
                target,
                other,
                by_inode,
            }
        };
        over_ca(false)
            .or_else(|| {
                self.targets.iter().find_map(|(o, target)| {
                    let (f, _) =
                        both().find(|(f, r)| f.starts_with(&o.target) || r.starts_with(target))?;
                    Some(in_target(o, f, false))
                })
            })
            .or_else(|| over_ca(true))
            .or_else(|| {
                let dir = c.path.parent().unwrap_or(c.path);
                let above = crate::beneath::directory_and_ancestors(dir);
                let (o, _) = self.target_ids.iter().find(|(_, id)| above.contains(id))?;
                Some(in_target(o, &c.files[0], true))
            })
    }
}
