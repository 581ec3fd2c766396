//! Every alert rule the docs ship, run by Prometheus's own `promtool test
//! rules` against the cases in `tests/fixtures/promtool/` (Debian's
//! `prometheus` package has promtool; without it the test skips, saying
//! so, and fails under CI): each rule fires where it should, with the
//! labels and summary it promises, and stays quiet where it should. Every
//! rule of every block has a case.

mod support;

use std::path::PathBuf;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The first ```yaml block holding `groups:` after `heading` in `doc`.
fn rules_block(doc: &str, heading: &str) -> String {
    let text = std::fs::read_to_string(root().join(doc)).unwrap();
    let at = text
        .find(heading)
        .unwrap_or_else(|| panic!("{doc}: no {heading}"));
    let rest = &text[at..];
    let start = rest
        .match_indices("```yaml\n")
        .map(|(i, m)| i + m.len())
        .find(|&i| rest[i..].starts_with("groups:"))
        .unwrap_or_else(|| panic!("{doc}: no rules block after {heading}"));
    let end = start + rest[start..].find("```").expect("the block's end");
    rest[start..end].to_owned()
}

/// The alert names of a rules block.
fn alerts(rules: &str) -> Vec<String> {
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(rules).expect("rules yaml");
    v["groups"]
        .as_sequence()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_sequence().expect("rules").iter())
        .map(|r| r["alert"].as_str().expect("alert").to_owned())
        .collect()
}

/// Runs the cases of `fixture` on the block after `heading` in `doc`.
fn check(doc: &str, heading: &str, fixture: &str) {
    if !support::tools::have(&["promtool"]) {
        return;
    }
    let rules = rules_block(doc, heading);
    let cases =
        std::fs::read_to_string(root().join("tests/fixtures/promtool").join(fixture)).unwrap();
    for alert in alerts(&rules) {
        assert!(
            cases.contains(&format!("alertname: {alert}\n")),
            "{doc} {heading}: {alert} has no case in tests/fixtures/promtool/{fixture}"
        );
    }
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("rules.yaml"), &rules).unwrap();
    let test = d.path().join(fixture);
    std::fs::write(&test, &cases).unwrap();
    let out = std::process::Command::new("promtool")
        .args(["test", "rules"])
        .arg(&test)
        .current_dir(d.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "promtool test rules {fixture} on {doc} {heading}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_kubeadm_status_rules_fire_per_node() {
    check(
        "docs/reference/metrics.md",
        "## certsync kubeadm status (textfile)",
        "kubeadm-status.yaml",
    );
}

#[test]
fn the_daemon_rules_fire_as_documented() {
    check(
        "docs/reference/metrics.md",
        "## Example alert rules",
        "certsync.yaml",
    );
}

#[test]
fn the_scrape_rules_fire_as_documented() {
    check(
        "docs/reference/kubeadm.md",
        "### Scraping certsync",
        "kubeadm-up.yaml",
    );
}
