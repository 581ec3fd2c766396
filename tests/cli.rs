//! The command line a user discovers: `run -h` shows the mapping grammar
//! with flags grouped by purpose; shell completions and the man page are
//! generated from the same definitions as `--help`.

mod support;

use std::process::Command;

fn certsync(args: &[&str]) -> (bool, String) {
    let out = Command::new(support::certsync_bin())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn run_help_shows_the_mapping_grammar_and_groups_flags() {
    let (ok, help) = certsync(&["run", "-h"]);
    assert!(ok);
    for needle in [
        "dir:PATH",
        "secret:NAMESPACE/NAME",
        "configmap:NAMESPACE/NAME",
        "csr:SIGNER",
        "clustertrustbundle:SIGNER",
        "verify=HOST:PORT",
        "sni=NAME",
        "key-alg=ALG",
        "Logging:",
        "Kubernetes API:",
        "Reloading the main container:",
        "Files:",
        "Health and metrics:",
    ] {
        assert!(
            help.contains(needle),
            "{needle:?} missing from run -h:\n{help}"
        );
    }
    // The logging flags are in their own group, after the sync flags.
    let logging = help.find("Logging:").unwrap();
    assert!(help.find("--log-level").unwrap() > logging, "{help}");
    assert!(help.find("--sync").unwrap() < logging, "{help}");
}

#[test]
fn completions_and_man_page_come_from_the_same_definitions() {
    let (ok, bash) = certsync(&["completion", "bash"]);
    assert!(ok);
    assert!(
        bash.contains("_certsync()") && bash.contains("--reload-process"),
        "{bash}"
    );
    let (ok, zsh) = certsync(&["completion", "zsh"]);
    assert!(ok && zsh.starts_with("#compdef certsync"), "{zsh}");
    let (ok, fish) = certsync(&["completion", "fish"]);
    assert!(ok && fish.contains("complete -c certsync"), "{fish}");
    let (ok, man) = certsync(&["man"]);
    assert!(ok);
    assert!(
        man.starts_with(".ie") || man.contains(".TH certsync"),
        "{man}"
    );
    for sub in ["run", "check", "approve", "csr", "completion"] {
        assert!(man.contains(sub), "man page lacks {sub}");
    }
    let (ok, _) = certsync(&["completion", "powershell"]);
    assert!(ok, "every shell clap_complete knows");
    let (ok, _) = certsync(&["completion", "tcsh"]);
    assert!(!ok, "an unknown shell is refused");
}

/// Every page name a man page refers to (`certsync-run(1)`), as roff
/// writes it (hyphens escaped).
fn pages_named(roff: &str) -> Vec<String> {
    let text = roff.replace("\\-", "-");
    let mut out = Vec::new();
    for (i, _) in text.match_indices("(1)") {
        let start = text[..i]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .map_or(0, |p| p + 1);
        let name = &text[start..i];
        if name.starts_with("certsync") {
            out.push(format!("{name}.1"));
        }
    }
    out
}

/// Every subcommand's page file name, from clap's definitions:
/// `certsync-csr.1` and `certsync-csr-review.1` for `csr review`.
fn expected_pages(cmd: &clap::Command, prefix: &str, out: &mut Vec<String>) {
    out.push(format!("{prefix}.1"));
    for sub in cmd.get_subcommands() {
        expected_pages(sub, &format!("{prefix}-{}", sub.get_name()), out);
    }
}

/// Packagers install one page per subcommand: `certsync man --dir DIR`
/// writes them all from the same definitions as `--help`; every page a
/// page names (SUBCOMMANDS, SEE ALSO) exists; `certsync man csr review`
/// prints one of them; an unknown subcommand is a usage error.
#[test]
fn man_pages_exist_for_every_subcommand_and_every_page_they_name() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("man1");
    let out = Command::new(support::certsync_bin())
        .args(["man", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    let mut want = Vec::new();
    expected_pages(&certsync::config::command(), "certsync", &mut want);
    want.sort();
    assert!(want.len() >= 10, "{want:?}");
    assert_eq!(files, want, "one page per subcommand, no help page");

    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let top = read("certsync.1");
    let see_also = top
        .split(".SH \"SEE ALSO\"")
        .nth(1)
        .unwrap_or_else(|| panic!("no SEE ALSO in certsync.1:\n{top}"));
    let mut named = pages_named(see_also);
    named.sort();
    let subpages: Vec<&String> = files.iter().filter(|f| *f != "certsync.1").collect();
    assert_eq!(
        named.iter().collect::<Vec<_>>(),
        subpages,
        "the top page's SEE ALSO names every other page"
    );
    for f in &files {
        let page = read(f);
        let title = format!(".TH {} 1", f.trim_end_matches(".1"));
        assert!(page.replace("\\-", "-").contains(&title), "{f}: {title}");
        for n in pages_named(&page) {
            assert!(files.contains(&n), "{f} names {n}, which does not exist");
        }
        if f != "certsync.1" {
            assert!(
                pages_named(&page).contains(&"certsync.1".to_owned()),
                "{f} names certsync(1)"
            );
        }
    }

    let (ok, run) = certsync(&["man", "run"]);
    assert!(ok);
    assert_eq!(run, read("certsync-run.1"));
    let (ok, review) = certsync(&["man", "csr", "review"]);
    assert!(ok);
    assert_eq!(review, read("certsync-csr-review.1"));
    let (ok, top_printed) = certsync(&["man"]);
    assert!(ok);
    assert_eq!(top_printed, top);

    let bad = Command::new(support::certsync_bin())
        .args(["man", "nosuch"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(64));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("nosuch") && err.contains("csr review"),
        "{err}"
    );
}

/// Every global flag can live in the config file beside `mappings:`; the
/// environment and flags override it; `--print-config` shows the result
/// without secrets; an unknown key is refused with its line; and a setting
/// from the file takes effect.
#[test]
fn the_config_file_holds_every_setting_and_flags_override_it() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    let pair = support::certs::Pair::new("file-settings");
    support::write_pair(&src, &pair);
    let target = tmp.path().join("target");
    let file = tmp.path().join("certsync.yaml");
    std::fs::write(
        &file,
        format!(
            "resync: 5m\nkey-mode: \"0640\"\nreload-quiet: 1s\nevents: true\n\
             reload-url: http://hook:pa55word@127.0.0.1:9/reload\n\
             reload-header: [\"Authorization: Bearer s3cr3t-token\"]\n\
             mappings:\n  - source: dir:{}\n    target: {}\n",
            src.display(),
            target.display()
        ),
    )
    .unwrap();
    let run = |extra: &[&str], env: &[(&str, &str)]| {
        let mut cmd = Command::new(support::certsync_bin());
        cmd.args(["run", "--config", file.to_str().unwrap()])
            .args(extra);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let out = run(
        &["--reload-quiet", "3s", "--print-config"],
        &[("CERTSYNC_RESYNC", "7m")],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let printed: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text).unwrap();
    assert_eq!(printed["key-mode"], "0640", "from the file:\n{text}");
    assert_eq!(printed["reload-quiet"], "3s", "the flag wins:\n{text}");
    assert_eq!(printed["resync"], "7m", "the environment wins:\n{text}");
    assert_eq!(printed["events"], true, "typed:\n{text}");
    assert_eq!(printed["debounce"], "2s", "defaults are shown too:\n{text}");
    assert_eq!(
        printed["mappings"][0]["source"].as_str(),
        Some(format!("dir:{}", src.display()).as_str())
    );
    assert!(
        !text.contains("s3cr3t") && !text.contains("pa55word"),
        "no secret printed:\n{text}"
    );
    assert_eq!(printed["reload-url"], "http://***@127.0.0.1:9/reload");

    // What it prints is a config file that says the same (unset flags are
    // null); the redacted header is left out, as a user would fill it in.
    let round = tmp.path().join("printed.yaml");
    std::fs::write(
        &round,
        text.lines()
            .filter(|l| !l.contains("<redacted>") && !l.starts_with("reload-header"))
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .unwrap();
    let again = Command::new(support::certsync_bin())
        .args(["run", "--config", round.to_str().unwrap(), "--print-config"])
        .output()
        .unwrap();
    let again_text = String::from_utf8_lossy(&again.stdout);
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let reprinted: serde_yaml_ng::Value = serde_yaml_ng::from_str(&again_text).unwrap();
    for key in [
        "key-mode",
        "reload-quiet",
        "resync",
        "events",
        "reload-url",
        "mappings",
    ] {
        assert_eq!(reprinted[key], printed[key], "{key}:\n{again_text}");
    }
    assert!(text.contains("Authorization: <redacted>"), "{text}");

    // A setting from the file takes effect (the key file's mode).
    std::fs::write(
        &file,
        format!(
            "key-mode: \"0640\"\nmappings:\n  - source: dir:{}\n    target: {}\n",
            src.display(),
            target.display()
        ),
    )
    .unwrap();
    let out = run(&["--once"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(target.join("tls.key"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o640);

    // An unknown key is refused with its line; so is a bad value, by the
    // flag's own parser.
    std::fs::write(&file, "resync: 5m\nmappings: []\ncolour: red\n").unwrap();
    let out = run(&["--print-config"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(
        err.contains("line 3") && err.contains("\"colour\""),
        "{err}"
    );
    std::fs::write(&file, "key-mode: \"0644\"\n").unwrap();
    let out = run(&["--print-config"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(
        err.contains("readable by every user") && err.contains("certsync.yaml"),
        "{err}"
    );
}

/// `certsync run ARGS --print-config`, which must succeed: what it printed,
/// as YAML and as text.
fn printed_config(args: &[&str]) -> (serde_yaml_ng::Value, String) {
    let out = Command::new(support::certsync_bin())
        .arg("run")
        .args(args)
        .arg("--print-config")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (serde_yaml_ng::from_str(&text).unwrap(), text)
}

/// `--print-config` shows a reload URL's query keys but never their values
/// nor its fragment (tokens travel there as much as in `user:password@`).
#[test]
fn print_config_redacts_reload_url_query_values() {
    let (printed, text) = printed_config(&[
        "--sync",
        "dir:/nonexistent/src=/nonexistent/target",
        "--reload-url",
        "https://u:pw@127.0.0.1:9/reload?token=s3cret&x=1#frag-s3cret",
    ]);
    assert_eq!(
        printed["reload-url"], "https://***@127.0.0.1:9/reload?token=REDACTED&x=REDACTED#REDACTED",
        "{text}"
    );
    assert!(!text.contains("s3cret") && !text.contains("pw@"), "{text}");
}

/// `--print-config` refuses what `run` refuses (exit 64 and the reason),
/// so a configuration it prints is one `run` starts with.
#[test]
fn print_config_refuses_what_run_refuses() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("target");
    let t = target.to_str().unwrap();
    for (args, says) in [
        (vec![format!("/etc/certs/src={t}")], "KIND"),
        (vec![format!("secret:only-a-name={t}")], "NAMESPACE/NAME"),
        (vec![], "no mappings"),
    ] {
        let mut cmd = Command::new(support::certsync_bin());
        cmd.args(["run", "--print-config"]);
        for a in &args {
            cmd.args(["--sync", a]);
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?} accepted:\n{err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?} printed a configuration");
    }
}

/// `--print-config` prints numbers and switches as YAML numbers and
/// booleans, modes and durations as they are written.
#[test]
fn print_config_is_typed_yaml() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = format!(
        "dir:{}={}",
        tmp.path().join("src").display(),
        tmp.path().join("target").display()
    );
    let (printed, text) = printed_config(&["--sync", &spec, "--events", "--owner", "1000"]);
    assert_eq!(
        printed["events"],
        serde_yaml_ng::Value::Bool(true),
        "{text}"
    );
    assert_eq!(printed["once-timeout"], "1m", "{text}");
    assert_eq!(printed["reload-insecure-skip-verify"], false, "{text}");
    assert_eq!(printed["keep-revisions"].as_u64(), Some(3), "{text}");
    assert_eq!(printed["owner"].as_u64(), Some(1000), "{text}");
    assert_eq!(printed["stale-fraction"].as_f64(), Some(0.8), "{text}");
    assert_eq!(
        printed["key-mode"], "0600",
        "modes stay octal text:\n{text}"
    );
    assert_eq!(printed["resync"], "1m", "{text}");
}

/// klog's and Python's `warning` is `warn`; an unknown level or a malformed
/// directive is a usage error naming it, never a silent process.
#[test]
fn log_levels_as_other_tools_say_them_and_refused_when_unknown() {
    let tmp = tempfile::tempdir().unwrap();
    let spec = format!(
        "dir:{}={}",
        tmp.path().join("missing").display(),
        tmp.path().join("target").display()
    );
    let once = |level: &str| {
        Command::new(support::certsync_bin())
            .args(["--log-level", level, "run", "--once", "--sync", &spec])
            .output()
            .unwrap()
    };
    for level in ["warning", "warn", "WARNING", "certsync=warning", "error"] {
        let out = once(level);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{level}: {err}");
        assert!(
            err.contains("ERROR"),
            "{level}: the failure is logged:\n{err}"
        );
        assert!(!err.contains(" INFO "), "{level}: {err}");
    }
    for (level, named) in [
        ("verbose", "verbose"),
        ("certsync=loud", "loud"),
        ("info,=debug", "=debug"),
        ("info,[span]=debug", "[span]"),
    ] {
        let out = once(level);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{level}: {err}");
        assert!(
            err.contains(named) && err.contains("--log-level"),
            "{level}: {err}"
        );
    }
    let out = Command::new(support::certsync_bin())
        .env("RUST_LOG", "verbose")
        .args(["run", "--once", "--sync", &spec])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{err}");
    assert!(err.contains("RUST_LOG") && err.contains("verbose"), "{err}");
}

/// From a newcomer's first hour: `revisions` on a directory certsync never
/// wrote says so and fails (it printed an empty table and exited 0), and a
/// mistyped source kind lists every kind, `tree:` included.
#[test]
fn a_directory_that_is_not_a_target_and_an_unknown_kind_are_named() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("tls.crt"), b"not ours").unwrap();
    let out = Command::new(support::certsync_bin())
        .arg("revisions")
        .arg(d.path())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("not a certsync target") && err.contains(&d.path().display().to_string()),
        "{err}"
    );
    let out = Command::new(support::certsync_bin())
        .args(["run", "--once", "--sync", "nfs:/a=/b"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("unknown source kind") && err.contains("tree"),
        "{err}"
    );
}

/// `check` fits an 80-column terminal (kubeadm's node paths are long):
/// certificate, residual time, key and status, a long path shortened from
/// the left; `-o wide` shows every column in full.
#[test]
fn check_fits_eighty_columns_and_wide_shows_everything() {
    let d = tempfile::tempdir().unwrap();
    let dir = d
        .path()
        .join("etc/kubernetes/pki/certsync/apiserver-kubelet-client-with-a-long-name");
    std::fs::create_dir_all(&dir).unwrap();
    let pair = support::certs::Pair::new("kube-apiserver-kubelet-client.example.internal");
    std::fs::write(dir.join("tls.crt"), &pair.cert).unwrap();
    std::fs::write(dir.join("tls.key"), &pair.key).unwrap();
    let path = dir.display().to_string();
    let (ok, table) = certsync(&["check", &path]);
    assert!(ok, "{table}");
    for line in table.lines() {
        assert!(
            line.chars().count() <= 80,
            "{} columns: {line}",
            line.chars().count()
        );
    }
    assert!(
        table.contains("tls.crt") && table.contains("matches"),
        "{table}"
    );
    let (ok, wide) = certsync(&["check", "-o", "wide", &path]);
    assert!(ok, "{wide}");
    for needle in [
        "SUBJECT",
        "ISSUER",
        "kube-apiserver-kubelet-client.example.internal",
        &format!("{path}/tls.crt"),
    ] {
        assert!(wide.contains(needle), "{needle}: {wide}");
    }
}

/// Each command is one short line in its parent's `--help` (at most 100
/// characters with clap's indentation); the detail is in the command's
/// own `--help` and man page.
#[test]
fn every_command_is_one_short_line_in_its_parents_help() {
    for parent in [&[][..], &["kubeadm"][..], &["csr"][..]] {
        let mut args = parent.to_vec();
        args.push("--help");
        let (ok, out) = certsync(&args);
        assert!(ok, "{out}");
        let commands = out
            .split("Commands:\n")
            .nth(1)
            .unwrap_or_else(|| panic!("certsync {args:?}: no Commands: section\n{out}"));
        let lines: Vec<&str> = commands.lines().take_while(|l| !l.is_empty()).collect();
        assert!(lines.len() >= 2, "{out}");
        for line in lines {
            assert!(
                line.chars().count() <= 100,
                "certsync {}: a command's line of {} characters: {line}",
                args.join(" "),
                line.chars().count()
            );
        }
    }
}
