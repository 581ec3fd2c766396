//! docs/architecture.md is true to the code: every module on the map
//! exists, every source file is on the map, and no import runs back up
//! (sources, the writer, reload, validate and approve never import sync,
//! config or cli; the leaves import only leaves).

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `src`, relative to it.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `src/a/b.rs` → `a::b`, `src/a/mod.rs` → `a`; `None` for test files and
/// the crate root.
fn module_of(path: &Path) -> Option<String> {
    let rel = path.strip_prefix(root().join("src")).unwrap();
    let s = rel.to_str().unwrap().trim_end_matches(".rs");
    let name = rel.file_stem().unwrap().to_str().unwrap();
    // Test modules, and the files a test module splits into (`x/tests/y.rs`).
    let in_tests = rel.parent().is_some_and(|d| d.ends_with("tests"));
    if name == "tests" || name.ends_with("_tests") || in_tests || s == "lib" {
        return None;
    }
    if s == "main" {
        return Some("main.rs".into());
    }
    Some(s.trim_end_matches("/mod").replace('/', "::"))
}

/// The modules the map's table names (its first column).
fn mapped() -> Vec<String> {
    let doc = std::fs::read_to_string(root().join("docs/architecture.md")).unwrap();
    doc.lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| l.split('`').nth(1).map(str::to_owned))
        .collect()
}

fn all_modules() -> Vec<(String, PathBuf)> {
    let mut files = Vec::new();
    sources(&root().join("src"), &mut files);
    files
        .into_iter()
        .filter_map(|p| module_of(&p).map(|m| (m, p)))
        .collect()
}

#[test]
fn every_module_is_on_the_map_and_every_mapped_module_exists() {
    let mapped = mapped();
    assert!(mapped.len() > 20, "parsed only {mapped:?}");
    let modules = all_modules();
    for (m, p) in &modules {
        assert!(
            mapped.contains(m),
            "{} (module {m}) is not in docs/architecture.md",
            p.display()
        );
    }
    for m in &mapped {
        assert!(
            modules.iter().any(|(have, _)| have == m),
            "docs/architecture.md names {m}, which does not exist"
        );
    }
}

#[test]
fn imports_point_down() {
    let lower = ["source", "writer", "reload", "validate", "approve"];
    let leaves = ["shutdown", "limits", "bundle", "files", "pem", "x509"];
    for (m, p) in all_modules() {
        let text = std::fs::read_to_string(&p).unwrap();
        let top = m.split("::").next().unwrap_or_default();
        let used: Vec<&str> = text
            .match_indices("crate::")
            .map(|(i, _)| {
                let rest = &text[i + 7..];
                let end = rest
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(rest.len());
                &rest[..end]
            })
            .collect();
        if lower.contains(&top) {
            for up in ["sync", "config", "cli", "kubeadm"] {
                assert!(
                    !used.contains(&up),
                    "{} imports crate::{up}: arrows point down",
                    p.display()
                );
            }
        }
        if leaves.contains(&top) {
            for u in &used {
                assert!(
                    leaves.contains(u) || *u == "test_certs" || *u == "forge",
                    "{} (a leaf) imports crate::{u}",
                    p.display()
                );
            }
        }
    }
}

/// Each module opens with one line saying what it owns.
#[test]
fn every_module_says_what_it_owns() {
    for (m, p) in all_modules() {
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.trim_start().starts_with("//!"),
            "{} (module {m}) does not open with a //! line",
            p.display()
        );
    }
}
