//! The documentation keeps up with the binary: docs/reference/cli.md names
//! every flag and environment variable of every subcommand (read from the
//! clap definitions the binary parses with), docs/reference/metrics.md every
//! metric a running certsync serves (every registered family, even one
//! without series yet, is checked by `src/metrics/docs_tests.rs`),
//! docs/reference/mappings.md every source kind and mapping option of the
//! grammar, with the kinds each option applies to, and every
//! relative link in README.md, docs/ and benches/results/ leads to a file
//! that exists.

mod support;

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// The text under `heading` (a whole line) up to the next `## ` heading.
fn section<'a>(doc: &'a str, heading: &str) -> Option<&'a str> {
    let start = doc
        .match_indices(heading)
        .find(|(i, _)| {
            (*i == 0 || doc[..*i].ends_with('\n')) && doc[i + heading.len()..].starts_with('\n')
        })?
        .0
        + heading.len();
    let rest = &doc[start..];
    Some(&rest[..rest.find("\n## ").unwrap_or(rest.len())])
}

/// `word` in backticks and not the start of a longer name: "`--once`" or
/// "`--once DUR`" name `--once`, "`--once-timeout`" does not.
fn mentions(text: &str, word: &str) -> bool {
    text.match_indices(&format!("`{word}")).any(|(i, m)| {
        matches!(
            text[i + m.len()..].chars().next(),
            Some(' ' | '`' | '=' | ',' | '{')
        )
    })
}

/// What an argument is known by: `--long`, `-s`, and its env variable.
fn names(arg: &clap::Arg) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(long) = arg.get_long() {
        out.push(format!("--{long}"));
    }
    if let Some(short) = arg.get_short() {
        out.push(format!("-{short}"));
    }
    if let Some(env) = arg.get_env() {
        out.push(env.to_string_lossy().into_owned());
    }
    out
}

/// Every leaf subcommand with its path (`csr review`).
fn leaves(cmd: &clap::Command, path: &str, out: &mut Vec<(String, clap::Command)>) {
    for sub in cmd.get_subcommands() {
        let p = format!("{path} {}", sub.get_name()).trim().to_owned();
        if sub.has_subcommands() {
            leaves(sub, &p, out);
        } else {
            out.push((p, sub.clone()));
        }
    }
}

#[test]
fn the_cli_reference_documents_every_flag_and_env_var_of_every_subcommand() {
    let doc = read("docs/reference/cli.md");
    let cli = certsync::config::command();
    let mut missing = Vec::new();
    let mut checked = 0;
    let mut check = |heading: &str, args: Vec<&clap::Arg>, missing: &mut Vec<String>| {
        let Some(text) = section(&doc, heading) else {
            missing.push(format!("section {heading:?}"));
            return;
        };
        for arg in args.into_iter().filter(|a| !a.is_hide_set()) {
            for name in names(arg) {
                checked += 1;
                if !mentions(text, &name) {
                    missing.push(format!("{name} under {heading:?}"));
                }
            }
        }
    };
    // Global flags (logging) are documented once, for every subcommand.
    check(
        "## Every subcommand",
        cli.get_arguments().filter(|a| a.is_global_set()).collect(),
        &mut missing,
    );
    let mut subs = Vec::new();
    leaves(&cli, "", &mut subs);
    assert!(subs.len() >= 8, "found only {subs:?}");
    for (path, sub) in &subs {
        check(
            &format!("## certsync {path}"),
            sub.get_arguments().filter(|a| !a.is_global_set()).collect(),
            &mut missing,
        );
    }
    assert!(
        missing.is_empty(),
        "missing from docs/reference/cli.md: {missing:#?}"
    );
    assert!(checked >= 90, "checked only {checked} names");
}

/// The reference's table of which option applies to which kind
/// (docs/reference/mappings.md), made from the grammar's table.
fn reference_table() -> String {
    use certsync::config::grammar::{OPTIONS, RESOLVED};
    let mut out = String::from("| option | applies to | what it is |\n| --- | --- | --- |\n");
    for o in OPTIONS {
        let kinds = if o.kinds == RESOLVED {
            "every kind".to_owned()
        } else {
            let names: Vec<String> = o.kinds.iter().map(|k| format!("`{}:`", k.name())).collect();
            names.join(", ")
        };
        // A `|` inside a cell would end it.
        let cell = |text: String| text.replace('|', "\\|");
        out.push_str(&format!(
            "| {} | {kinds} | {} |\n",
            cell(format!("`{}`", o.synopsis())),
            cell(o.described("; repeatable"))
        ));
    }
    out
}

/// The mapping reference's table of options is the grammar's own (one
/// table in `config::grammar`, from which `--sync`, the checks and `run -h`
/// are derived too), and its table of kinds names every kind.
#[test]
fn the_mapping_reference_is_the_grammar() {
    use certsync::config::grammar::SourceKind;
    let doc = read("docs/reference/mappings.md");
    let table = reference_table();
    let shown = section(&doc, "## Which options apply to which kinds").unwrap_or_default();
    assert!(
        shown.contains(&table),
        "docs/reference/mappings.md, \"## Which options apply to which kinds\", should hold \
         the grammar's table:\n{table}"
    );
    let kinds = section(&doc, "## Kinds").unwrap_or_default();
    for kind in SourceKind::ALL {
        let named = format!("| `{}:", kind.name());
        assert!(
            kinds.contains(&named),
            "## Kinds does not name {}:",
            kind.name()
        );
    }
}

#[test]
fn the_metrics_reference_names_every_metric_a_running_certsync_serves() {
    let dir = tempfile::tempdir().unwrap();
    let port = support::free_port();
    let target = dir.path().join("target");
    let sync = format!(
        "dir:{}/examples/certs={}",
        env!("CARGO_MANIFEST_DIR"),
        target.display()
    );
    let addr = format!("127.0.0.1:{port}");
    let d = support::Certsync::start(&["run", "--sync", &sync, "--admin-addr", &addr], dir.path());
    let text = support::wait_for("/metrics after the first sync", || {
        support::http_get(port, "/metrics")
            .filter(|(code, body)| *code == 200 && body.contains("certsync_revision{"))
            .map(|(_, body)| body)
    });
    d.terminate();
    let doc = read("docs/reference/metrics.md");
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert!(families.len() >= 5, "{text}");
    let missing: Vec<&&str> = families
        .iter()
        .filter(|f| {
            ["", "_total", "_info"]
                .iter()
                .all(|suffix| !mentions(&doc, &format!("{f}{suffix}")))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "served but not in docs/reference/metrics.md: {missing:?}"
    );
}

/// Every `.md` file of the README and docs/.
fn markdown(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            markdown(&p, out);
        } else if p.extension().is_some_and(|x| x == "md") {
            out.push(p);
        }
    }
}

/// The targets of inline links `[text](target)` outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].to_owned());
            rest = &after[end..];
        }
    }
    out
}

#[test]
fn every_relative_link_in_the_docs_leads_to_a_file() {
    let mut files = vec![root().join("README.md")];
    markdown(&root().join("docs"), &mut files);
    // The lab notes beside the benchmark runs, which docs/performance.md cites.
    markdown(&root().join("benches/results"), &mut files);
    assert!(files.len() >= 15, "found only {files:?}");
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") || link.starts_with('#') {
                continue;
            }
            let path = link.split('#').next().unwrap_or_default();
            checked += 1;
            if !file.parent().unwrap().join(path).exists() {
                broken.push(format!(
                    "{}: {link}",
                    file.strip_prefix(root()).unwrap().display()
                ));
            }
        }
    }
    assert!(checked >= 40, "checked only {checked} links");
    assert!(broken.is_empty(), "links to nothing: {broken:#?}");
}

/// The test binaries that need real Kubernetes binaries (they call
/// `kubeadm_node::realkube()` or `ControlPlane::up`), as the code has them.
fn binaries_needing_real_kubernetes() -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(root().join("tests"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "rs"))
        // This file names the calls only to look for them.
        .filter(|p| !p.ends_with("docs.rs"))
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            text.contains("realkube()") || text.contains("ControlPlane::up(")
        })
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

/// Without real Kubernetes binaries those tests skip and pass: nextest
/// must show their output (`skipped: ... REALKUBE_BIN ...`) even then,
/// and docs/development.md must name each, so neither a run nor the docs
/// pass over one silently.
#[test]
fn every_test_needing_real_kubernetes_is_shown_and_documented() {
    let needing = binaries_needing_real_kubernetes();
    assert!(needing.len() >= 3, "{needing:?}");
    let config = read(".config/nextest.toml");
    let shown = config
        .split("[[profile.default.overrides]]")
        .find(|o| o.contains("success-output = \"final\""))
        .expect("an override showing the output of passing tests");
    let mut named: Vec<String> = shown
        .match_indices("binary(=")
        .map(|(i, m)| {
            let rest = &shown[i + m.len()..];
            rest[..rest.find(')').unwrap()].to_owned()
        })
        .collect();
    named.sort();
    assert_eq!(
        named, needing,
        ".config/nextest.toml's success-output override"
    );
    let dev = read("docs/development.md");
    let section =
        section(&dev, "## What runs where").expect("docs/development.md: ## What runs where");
    for b in &needing {
        assert!(
            section.contains(&format!("`tests/{b}.rs`")),
            "docs/development.md's What runs where does not name tests/{b}.rs"
        );
    }
}
