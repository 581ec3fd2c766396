//! docs/architecture.md is true to the code: every module on the map
//! exists, every source file is on the map, no import runs back up
//! (sources, the writer, reload, validate and approve never import sync,
//! config, cli or kubeadm; the leaves import only leaves), no import
//! closes a circle, and no module takes items from its own ancestor (a
//! circle with the `mod.rs` that declares it). Imports are read in every form: `use` trees (grouped,
//! nested, `super::`, `self::`, a child module) and inline paths.

use std::path::{Path, PathBuf};

/// Rust source with its comments, string literals and character literals
/// blanked out (a path in a doc comment or an error message is no import).
fn strip_comments_and_literals(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < c.len() {
        let next = c.get(i + 1).copied();
        if c[i] == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if c[i] == '/' && next == Some('*') {
            // Block comments nest.
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c[i] == 'r'
            && (i == 0 || !ident(c[i - 1]) || (c[i - 1] == 'b' && (i < 2 || !ident(c[i - 2]))))
            && matches!(next, Some('"' | '#'))
        {
            // A raw string: r"...", r#"..."#, br##"..."##.
            let mut j = i + 1;
            while c.get(j) == Some(&'#') {
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(c[i]);
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            j += 1;
            while j < c.len() && !(c[j] == '"' && (1..=hashes).all(|k| c.get(j + k) == Some(&'#')))
            {
                j += 1;
            }
            i = j + 1 + hashes;
            out.push_str("\"\"");
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c[i] == '\'' && (next == Some('\\') || c.get(i + 2) == Some(&'\'')) {
            // A character literal ('x', '\n', '\u{2028}'); a lifetime has no
            // closing quote and stays.
            i += 2;
            while i < c.len() && c[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c[i]);
            i += 1;
        }
    }
    out
}

/// The code with every `#[cfg(test)]` item cut out: tests may import
/// anything, and their imports are not the module's.
fn strip_test_items(code: &str) -> String {
    const ATTR: &str = "#[cfg(test)]";
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find(ATTR) {
        out.push_str(&rest[..at]);
        let item = &rest[at + ATTR.len()..];
        // The item ends at its first `;` outside brackets, or where the
        // bracket it opened first closes with a `}`.
        let mut depth = 0usize;
        let mut end = item.len();
        for (k, ch) in item.char_indices() {
            match ch {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' => depth = depth.saturating_sub(1),
                '}' => {
                    depth = depth.saturating_sub(1);
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                ';' if depth == 0 => {
                    end = k + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// Identifiers and the punctuation a path or a `use` tree is made of;
/// `::` is one token, every other character stands alone.
fn tokens(code: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut i = 0;
    let b = code.as_bytes();
    while i < b.len() {
        let ch = b[i];
        if ch.is_ascii_alphanumeric() || ch == b'_' || ch >= 0x80 {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] >= 0x80) {
                i += 1;
            }
            out.push(&code[start..i]);
        } else if code[i..].starts_with("::") {
            out.push("::");
            i += 2;
        } else if ch.is_ascii_whitespace() {
            i += 1;
        } else {
            out.push(&code[i..i + 1]);
            i += 1;
        }
    }
    out
}

/// Every path a `use` tree names, its braces expanded: the tokens after
/// `use` up to its `;`. `a::{b, c::{d, self}, e as f, *}` is `a::b`,
/// `a::c::d`, `a::c`, `a::e`, `a`.
fn use_tree(toks: &[&str], prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    let mut i = 0;
    while i < toks.len() {
        match toks[i] {
            "::" => i += 1,
            "{" => {
                i += 1;
                loop {
                    match toks.get(i) {
                        None => return i,
                        Some(&"}") => {
                            i += 1;
                            break;
                        }
                        Some(&",") => i += 1,
                        Some(_) => i += use_tree(&toks[i..], &path, out),
                    }
                }
                return i;
            }
            "*" => {
                out.push(path);
                return i + 1;
            }
            "self" if !path.is_empty() => i += 1,
            "as" => i += 2,
            "," | "}" | ";" => break,
            t => {
                path.push(t.to_owned());
                i += 1;
            }
        }
    }
    out.push(path);
    i
}

/// Every path a source file's code names outside its tests: the paths of
/// its `use` trees (`pub use`, grouped, nested), and the paths written
/// inline that start at `crate`, `super` or `self` (`crate::sync::run()`).
fn imported_paths(src: &str) -> Vec<Vec<String>> {
    let code = strip_test_items(&strip_comments_and_literals(src));
    let toks = tokens(&code);
    let mut out = Vec::new();
    let mut i = 0;
    while i < toks.len() {
        let after_dollar = i > 0 && toks[i - 1] == "$";
        if toks[i] == "use" && !after_dollar {
            let end = toks[i..]
                .iter()
                .position(|t| *t == ";")
                .map_or(toks.len(), |p| i + p);
            use_tree(&toks[i + 1..end], &[], &mut out);
            i = end;
        } else if matches!(toks[i], "crate" | "super" | "self")
            && toks.get(i + 1) == Some(&"::")
            && (i == 0 || toks[i - 1] != "::")
        {
            let mut path = Vec::new();
            while let Some(t) = toks.get(i) {
                if !t.starts_with(|c: char| c.is_alphanumeric() || c == '_') {
                    break;
                }
                path.push((*t).to_owned());
                if toks.get(i + 1) != Some(&"::") {
                    i += 1;
                    break;
                }
                i += 2;
            }
            out.push(path);
        } else {
            i += 1;
        }
    }
    out
}

/// The module a path written in module `from` leads to: `crate::`,
/// `super::` (any number), `self::`, or a child module of `from` named
/// first; the longest known module it starts with (the crate root is the
/// empty path). `None` for another crate's path.
fn resolve(from: &[String], path: &[String], known: &[Vec<String>]) -> Option<Vec<String>> {
    let mut base: Vec<String> = from.to_vec();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            base.clear();
            rest = &rest[1..];
        }
        Some("super" | "self") => {
            while let Some(first) = rest.first() {
                match first.as_str() {
                    "super" => {
                        base.pop()?;
                    }
                    "self" => {}
                    _ => break,
                }
                rest = &rest[1..];
            }
        }
        Some(first) => {
            let mut child = from.to_vec();
            child.push(first.to_owned());
            if !known.contains(&child) {
                return None;
            }
        }
        None => return None,
    }
    let mut target = base.clone();
    let mut full = base;
    for seg in rest {
        full.push(seg.clone());
        if known.contains(&full) {
            target = full.clone();
        }
    }
    Some(target)
}

/// Every import between modules of the library, as (importer, module
/// imported, the source file): `main.rs` is another crate.
fn imports() -> Vec<(Vec<String>, Vec<String>, PathBuf)> {
    let modules: Vec<(Vec<String>, PathBuf)> = all_modules()
        .into_iter()
        .filter(|(m, _)| m != "main.rs")
        .map(|(m, p)| (m.split("::").map(str::to_owned).collect(), p))
        .collect();
    let known: Vec<Vec<String>> = modules.iter().map(|(m, _)| m.clone()).collect();
    let mut out = Vec::new();
    for (m, p) in &modules {
        let text = std::fs::read_to_string(p).unwrap();
        for path in imported_paths(&text) {
            if let Some(to) = resolve(m, &path, &known) {
                out.push((m.clone(), to, p.clone()));
            }
        }
    }
    out
}

/// An import as an arrow between the two modules that share a parent and
/// hold the importer and the imported (`a::b::c` importing `a::d::e` is
/// `a::b -> a::d`); `None` between a module and its own ancestor, which
/// is one unit seen from outside.
fn sibling_edge(from: &[String], to: &[String]) -> Option<(String, String)> {
    let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    if common == from.len() || common == to.len() {
        return None;
    }
    Some((from[..=common].join("::"), to[..=common].join("::")))
}

/// The arrows `from` reaches `goal` by, if it does: a path of modules.
fn path_between(
    edges: &std::collections::BTreeSet<(String, String)>,
    from: &str,
    goal: &str,
) -> Option<Vec<String>> {
    let mut seen = std::collections::BTreeSet::new();
    let mut queue = std::collections::VecDeque::from([vec![from.to_owned()]]);
    while let Some(path) = queue.pop_front() {
        let last = path.last().unwrap();
        if last == goal {
            return Some(path);
        }
        for (a, b) in edges {
            if a == last && seen.insert(b.clone()) {
                let mut next = path.clone();
                next.push(b.clone());
                queue.push_back(next);
            }
        }
    }
    None
}

/// Imports that close a circle today, allowed by name until they go: each
/// (importer, imported), one arrow that every circle through it shares.
/// Import circles tolerated while they are taken apart: none. An edge
/// listed here that no longer closes a circle fails the test.
const KNOWN_CIRCLES: &[(&str, &str)] = &[];

/// No import circle among modules: whatever a module imports never
/// imports it back, directly or through others (a circle makes two
/// modules one in all but name: neither can be read, tested or changed
/// alone). Checked between siblings, over every import form the
/// parser knows, outside tests; `KNOWN_CIRCLES` names the exceptions,
/// and one that no longer closes a circle must leave the list.
#[test]
fn no_import_circle_among_modules() {
    let mut edges = std::collections::BTreeSet::new();
    let mut example = std::collections::BTreeMap::new();
    for (from, to, file) in imports() {
        if let Some(e) = sibling_edge(&from, &to) {
            example.entry(e.clone()).or_insert(file);
            edges.insert(e);
        }
    }
    assert!(
        edges.len() > 50,
        "found only {} imports: {edges:?}",
        edges.len()
    );
    for (a, b) in KNOWN_CIRCLES {
        assert!(
            edges.contains(&((*a).to_owned(), (*b).to_owned()))
                && path_between(&edges, b, a).is_some(),
            "KNOWN_CIRCLES lists {a} -> {b}, which no longer closes a circle: remove it"
        );
    }
    for (a, b) in KNOWN_CIRCLES {
        edges.remove(&((*a).to_owned(), (*b).to_owned()));
    }
    let circles: Vec<String> = edges
        .iter()
        .filter_map(|(a, b)| {
            let back = path_between(&edges, b, a)?;
            let file = example[&(a.clone(), b.clone())].display();
            Some(format!("{a} -> {} ({file} imports {b})", back.join(" -> ")))
        })
        .collect();
    assert!(
        circles.is_empty(),
        "import circles:\n{}",
        circles.join("\n")
    );
}

/// No module imports its ancestor's items (the crate root aside, whose
/// `lib.rs` holds only the shared helpers every module may use): a
/// folder's `mod.rs` declares and uses its children, so a child that
/// takes types from it closes a circle that the sibling rule above does
/// not see. What children share lives in a sibling module of its own
/// (an `error` or `layout` module), and `mod.rs` is only the entry.
#[test]
fn no_module_imports_its_ancestors_items() {
    let mut found = std::collections::BTreeMap::<String, std::collections::BTreeSet<String>>::new();
    for (from, to, file) in imports() {
        if to.is_empty() || to.len() >= from.len() || from[..to.len()] != to[..] {
            continue;
        }
        found.entry(from.join("::")).or_default().insert(format!(
            "{} ({})",
            to.join("::"),
            file.display()
        ));
    }
    let bad: Vec<String> = found
        .iter()
        .map(|(m, to)| {
            format!(
                "{m} imports {}",
                to.iter().cloned().collect::<Vec<_>>().join(", ")
            )
        })
        .collect();
    assert!(
        bad.is_empty(),
        "modules importing an ancestor's items:\n{}",
        bad.join("\n")
    );
}

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
    let leaves = [
        "shutdown", "limits", "bundle", "files", "beneath", "pem", "x509",
    ];
    let imports = imports();
    assert!(imports.len() > 100, "found only {} imports", imports.len());
    for (from, to, p) in imports {
        let top = from[0].as_str();
        let used = to.first().map_or("the crate root", String::as_str);
        if lower.contains(&top) {
            assert!(
                !["sync", "config", "cli", "kubeadm"].contains(&used),
                "{} imports {}: arrows point down",
                p.display(),
                to.join("::")
            );
        }
        if leaves.contains(&top) {
            assert!(
                leaves.contains(&used),
                "{} (a leaf) imports {}",
                p.display(),
                to.join("::")
            );
        }
    }
}

/// The modules that open files themselves: `beneath`, the one door to
/// what certsync does not own; `writer`, the targets certsync owns (each
/// beneath its directory's handle); `kubeadm::moves`, which copies
/// certsync's own files into a backup on another filesystem.
const OWN_OPENERS: &[&str] = &["beneath", "writer", "kubeadm::moves"];

/// Every other module opens what it reads through `beneath`: no `openat`,
/// no open by path (std, nix or cap-std), no whole-file read by path.
#[test]
fn only_beneath_opens_what_certsync_does_not_own() {
    let opens = [
        "openat",
        "open_ambient_dir",
        "File::open",
        "File::options",
        "OpenOptions",
        "fcntl::open",
        "fs::read(",
        "fs::read_to_string(",
    ];
    let mut found = Vec::new();
    for (m, p) in all_modules() {
        let owns = |o: &&str| m == *o || m.starts_with(&format!("{o}::"));
        if OWN_OPENERS.iter().any(owns) {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let code = strip_test_items(&strip_comments_and_literals(&text));
        for open in opens.iter().filter(|o| code.contains(*o)) {
            found.push(format!("{} ({open})", p.display()));
        }
    }
    assert!(found.is_empty(), "opened outside beneath: {found:?}");
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

fn paths(src: &str) -> Vec<String> {
    imported_paths(src).iter().map(|p| p.join("::")).collect()
}

#[test]
fn the_parser_reads_grouped_and_nested_use_trees() {
    assert_eq!(
        paths("pub(crate) use crate::{a::{b, c as d}, e::*, self as x, f::{self, g}};"),
        [
            "crate::a::b",
            "crate::a::c",
            "crate::e",
            "crate",
            "crate::f",
            "crate::f::g"
        ]
    );
    assert_eq!(
        paths("use std::{fs, io::Read};"),
        ["std::fs", "std::io::Read"]
    );
}

#[test]
fn the_parser_reads_super_self_and_inline_paths() {
    let src = "use super::super::a::B;\nuse self::c::D;\nuse plan::Plan;\n\
               fn f() { let x = crate::sync::run(y); super::g(); self::h::i(); Self::new(); }";
    assert_eq!(
        paths(src),
        [
            "super::super::a::B",
            "self::c::D",
            "plan::Plan",
            "crate::sync::run",
            "super::g",
            "self::h::i"
        ]
    );
}

#[test]
fn the_parser_skips_comments_strings_and_tests() {
    let src = "// use crate::a;\n/* crate::b /* nested */ crate::c */\n\
               const S: &str = \"crate::d\"; const R: &str = r#\"use crate::e;\"#;\n\
               const C: char = '\"'; fn f<'a>(x: &'a str) -> &'a str { crate::f::g(x) }\n\
               #[cfg(test)]\nmod tests { use crate::h; }\n\
               #[cfg(test)]\nconst N: [&str; 1] = [\"\"];\nuse crate::i;";
    assert_eq!(paths(src), ["crate::f::g", "crate::i"]);
}

#[test]
fn paths_resolve_to_the_module_they_lead_to() {
    let v = |s: &str| -> Vec<String> {
        s.split("::")
            .filter(|x| !x.is_empty())
            .map(str::to_owned)
            .collect()
    };
    let known: Vec<Vec<String>> = ["a", "a::b", "a::b::c", "a::d", "sync"]
        .into_iter()
        .map(v)
        .collect();
    let at = |from: &str, path: &str| resolve(&v(from), &v(path), &known).map(|m| m.join("::"));
    assert_eq!(at("a::b", "super::d::X"), Some("a::d".into()));
    assert_eq!(at("a::b::c", "super::super::d"), Some("a::d".into()));
    assert_eq!(at("a::b", "self::c::f"), Some("a::b::c".into()));
    assert_eq!(at("a::b", "c::Y"), Some("a::b::c".into()));
    assert_eq!(at("a", "crate::sync::run"), Some("sync".into()));
    assert_eq!(at("a", "crate::Error"), Some(String::new()));
    assert_eq!(at("a", "std::fs"), None);
    assert_eq!(at("a", "super::super::x"), None);
}

#[test]
fn circles_are_seen_between_siblings_only() {
    let v = |s: &str| -> Vec<String> { s.split("::").map(str::to_owned).collect() };
    assert_eq!(
        sibling_edge(&v("a::b::c"), &v("a::d::e")),
        Some(("a::b".into(), "a::d".into()))
    );
    assert_eq!(sibling_edge(&v("a::b"), &v("a")), None);
    assert_eq!(sibling_edge(&v("a"), &v("a::b::c")), None);
    let edges = [("x", "y"), ("y", "z"), ("z", "x"), ("z", "w")]
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
    assert_eq!(path_between(&edges, "y", "x").unwrap(), ["y", "z", "x"]);
    assert_eq!(path_between(&edges, "w", "x"), None);
}
