//! Paths compared as the kernel resolves them, so that no two mappings
//! share a target and no target lies in, on or around a source.

use super::*;

use std::path::{Path, PathBuf};

/// `path` as the kernel will resolve it: absolute, with the longest
/// existing prefix canonicalized (symlinks and `..` resolved) and the rest,
/// which does not exist yet and so holds no symlink, normalized as text.
pub fn resolve_path(path: &Path) -> PathBuf {
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
/// are unique. Paths are compared as the kernel resolves them, so `tgt`,
/// `./tgt`, `/abs/tgt` and a symlink to it are one directory.
pub(crate) fn check_overlaps(mappings: &[Mapping]) -> Result<(), ConfigError> {
    let mut names = std::collections::HashMap::with_capacity(mappings.len());
    for (j, b) in mappings.iter().enumerate() {
        if let Some(&i) = names.get(b.name.as_str()) {
            let a: &Mapping = &mappings[i];
            return Err(ConfigError::Mapping {
                mapping: a.name.clone(),
                problem: format!(
                    "the name is used twice (targets {} and {})",
                    resolve_path(&a.target).display(),
                    resolve_path(&b.target).display()
                ),
            });
        }
        names.insert(b.name.as_str(), j);
    }
    // Every target and host source directory, sorted component by
    // component: a directory's subtree then follows it directly, so one
    // pass with a stack of the enclosing directories finds every nesting
    // (comparing all pairs took 0.15 s of start-up at 1,000 mappings).
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
    let targets: Vec<(PathBuf, &str)> = mappings
        .iter()
        .map(|m| (resolve_path(&m.target), m.name.as_str()))
        .collect();
    for m in mappings {
        let Source::Ca(spec) = &m.source else {
            continue;
        };
        for file in [&spec.ca_cert, &spec.ca_key] {
            let file = resolve_path(file);
            if let Some((t, name)) = targets.iter().find(|(t, _)| file.starts_with(t)) {
                return Err(ConfigError::Mapping {
                    mapping: m.name.clone(),
                    problem: format!(
                        "its CA file {} lies in the target {} of mapping {name:?}; keep the CA \
                         outside every target",
                        file.display(),
                        t.display()
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The error for directory `inner` lying in (or being) `outer`, if that
/// is a conflict: a target in or around another target, or around or in
/// any source directory. Sources may nest: both are only read.
pub(crate) fn overlap(
    mappings: &[Mapping],
    outer: &(PathBuf, bool, usize),
    inner: &(PathBuf, bool, usize),
) -> Option<ConfigError> {
    let fail = |m: &Mapping, problem: String| {
        Some(ConfigError::Mapping {
            mapping: m.name.clone(),
            problem,
        })
    };
    match (outer, inner) {
        ((_, false, _), (_, false, _)) => None,
        ((ta, true, i), (tb, true, j)) => {
            // Reported on the mapping listed first, as it was written.
            let ((ta, i), (tb, j)) = if i < j {
                ((ta, *i), (tb, *j))
            } else {
                ((tb, *j), (ta, *i))
            };
            let how = if ta == tb {
                "is the same directory as"
            } else {
                "overlaps"
            };
            fail(
                &mappings[i],
                format!(
                    "its target {} {how} the target {} of mapping {:?}; \
                     two mappings would overwrite each other forever",
                    ta.display(),
                    tb.display(),
                    mappings[j].name
                ),
            )
        }
        ((ta, true, i), (sb, false, j)) | ((sb, false, j), (ta, true, i)) => {
            let whose = if i == j {
                "its own source directory".to_owned()
            } else {
                format!("the source directory of mapping {:?}", mappings[*j].name)
            };
            fail(
                &mappings[*i],
                format!(
                    "the source and target directories overlap: target {} and {whose} {} \
                     (certsync would write into what it reads)",
                    ta.display(),
                    sb.display()
                ),
            )
        }
    }
}
