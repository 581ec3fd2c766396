//! The README documents every flag the binary accepts, with its environment
//! variable: checked against `--help`, so the two cannot drift apart.

mod support;

use std::process::Command;

#[test]
fn readme_documents_every_flag_and_env_var() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let mut help = String::new();
    for sub in [
        &["run"][..],
        &["check"],
        &["revisions"],
        &["rollback"],
        &["approve"],
        &["csr", "review"],
    ] {
        let out = Command::new(support::certsync_bin())
            .args(sub)
            .arg("--help")
            .output()
            .unwrap();
        assert!(out.status.success());
        help.push_str(&String::from_utf8(out.stdout).unwrap());
    }
    let mut flags = 0;
    for word in help.split(|c: char| c.is_whitespace() || c == '[' || c == ']' || c == ',') {
        let name = word.trim_end_matches('=');
        let documented = if name.starts_with("--") && name.len() > 2 && name != "--help" {
            flags += 1;
            readme.contains(&format!("`{name}"))
        } else if name.starts_with("CERTSYNC_") {
            readme.contains(&format!("`{name}`"))
        } else {
            continue;
        };
        assert!(documented, "{name} is in --help but not in README.md");
    }
    assert!(
        flags >= 10,
        "parsed only {flags} flags from --help:\n{help}"
    );
}
