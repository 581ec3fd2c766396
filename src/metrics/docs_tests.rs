//! docs/reference/metrics.md names every metric the registry holds, so the
//! reference cannot fall behind the code.
//!
//! prometheus-client leaves a family out of the exposition until it has a
//! series, and many appear only after an event (a rejection, a reload, a
//! CSR decision), so the names are read from the registry itself: its
//! `Debug` lists every registered descriptor, empty or not. The test checks
//! that reading against the exposition of the families that do have series,
//! so a change in that format fails here instead of passing on nothing.

use super::Metrics;

/// Every registered metric's exposed name (prefix, name, unit), from the
/// registry's `Debug`: `prefix: Some(Prefix("P"))` then `Descriptor {
/// name: "N", help: "...", unit: Some(Seconds) }` for each metric.
fn registered(m: &Metrics) -> Vec<String> {
    let debug = format!("{:?}", m.registry);
    let mut prefix = String::new();
    let mut names = Vec::new();
    let mut rest = debug.as_str();
    loop {
        let p = rest.find("prefix: Some(Prefix(\"");
        let d = rest.find("Descriptor { name: \"");
        match (p, d) {
            (Some(p), d) if d.is_none_or(|d| p < d) => {
                let s = &rest[p + "prefix: Some(Prefix(\"".len()..];
                let end = s.find('"').unwrap_or(0);
                prefix = format!("{}_", &s[..end]);
                rest = &s[end..];
            }
            (_, Some(d)) => {
                let s = &rest[d + "Descriptor { name: \"".len()..];
                let end = s.find('"').unwrap_or(0);
                let mut name = format!("{prefix}{}", &s[..end]);
                let after_help = s.find("unit: ").map_or("", |u| &s[u + "unit: ".len()..]);
                if let Some(unit) = after_help.strip_prefix("Some(") {
                    let unit = unit.split(')').next().unwrap_or_default();
                    let unit = match unit.strip_prefix("Other(\"") {
                        Some(other) => other.trim_end_matches('"').to_owned(),
                        None => unit.to_lowercase(),
                    };
                    name = format!("{name}_{unit}");
                }
                names.push(name);
                rest = &s[end..];
            }
            _ => break,
        }
    }
    // The process collector's families are not descriptors in the registry.
    names.extend(super::process::sample().map(|(n, ..)| n.to_owned()));
    names
}

/// Whether the doc names `metric` in backticks as Prometheus shows it: the
/// family name, or a counter's `_total` / an info metric's `_info` sample,
/// optionally with labels.
fn documented(doc: &str, metric: &str) -> bool {
    doc.match_indices(&format!("`{metric}")).any(|(i, m)| {
        let after = &doc[i + m.len()..];
        let after = after
            .strip_prefix("_total")
            .or_else(|| after.strip_prefix("_info"))
            .unwrap_or(after);
        after.starts_with('`') || after.starts_with('{')
    })
}

#[test]
fn the_metrics_reference_names_every_registered_metric() {
    let m = Metrics::new(0.8);
    let names = registered(&m);
    assert!(names.len() >= 16, "read only {names:?} from the registry");

    // The reading agrees with the exposition wherever a family has series.
    m.add_mapping("web");
    m.current("web", 1, None);
    m.sync("web", "written");
    let text = m.encode();
    let exposed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert!(exposed.len() >= 3, "{text}");
    for name in &exposed {
        assert!(
            names.iter().any(|n| n == name),
            "{name} is exposed but was not read from the registry ({names:?})"
        );
    }

    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reference/metrics.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let missing: Vec<&String> = names.iter().filter(|n| !documented(&doc, n)).collect();
    assert!(
        missing.is_empty(),
        "registered but not in docs/reference/metrics.md: {missing:?}"
    );
}

/// The example alert rules in docs/reference/metrics.md are valid rule
/// groups that name only metrics that exist: every rule has a name, an
/// expression, a severity and a summary, and every `certsync_*` or
/// `process_*` word of an expression is a registered family (or one of
/// its samples: `_total`, `_count`, `_bucket`, `_sum`).
#[test]
fn the_example_alert_rules_parse_and_name_real_metrics() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/reference/metrics.md");
    let doc = std::fs::read_to_string(path).unwrap();
    let section = &doc[doc.find("## Example alert rules").expect("the section")..];
    let start = section.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
    let block = &section[start..start + section[start..].find("```").unwrap()];
    let rules: serde_yaml_ng::Value = serde_yaml_ng::from_str(block).unwrap();
    let groups = rules["groups"].as_sequence().expect("groups:");
    let names = registered(&Metrics::new(0.8));
    let mut count = 0;
    for group in groups {
        assert!(group["name"].as_str().is_some());
        for rule in group["rules"].as_sequence().expect("rules:") {
            count += 1;
            let alert = rule["alert"].as_str().expect("alert:");
            let expr = rule["expr"]
                .as_str()
                .unwrap_or_else(|| panic!("{alert}: expr"));
            assert!(rule["labels"]["severity"].as_str().is_some(), "{alert}");
            assert!(rule["annotations"]["summary"].as_str().is_some(), "{alert}");
            let words = expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'));
            let metrics: Vec<&str> = words
                .filter(|w| w.starts_with("certsync_") || w.starts_with("process_"))
                .collect();
            assert!(!metrics.is_empty(), "{alert}: {expr}");
            for m in metrics {
                let family = ["_total", "_count", "_bucket", "_sum"]
                    .iter()
                    .find_map(|s| m.strip_suffix(s))
                    .unwrap_or(m);
                assert!(
                    names.iter().any(|n| n == family || n == m),
                    "{alert}: {m} is not a metric ({names:?})"
                );
            }
        }
    }
    assert!(count >= 8, "read only {count} rules");
}
