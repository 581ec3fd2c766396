//! `certsync kubeadm status`'s reports that need no node: the textfile
//! output, the exit code chosen among causes, a node never adopted.

use super::{node_dir, options};
use crate::kubeadm::error::{FileProblem, KubeadmError};
use crate::kubeadm::plan::{self, plan};
use crate::kubeadm::pod::Current;
use crate::kubeadm::status::*;

fn cert(mapping: &str, not_after: i64, renew_by: i64) -> CertStatus {
    CertStatus {
        mapping: mapping.into(),
        target: format!("/etc/kubernetes/pki/certsync/{mapping}"),
        options: "lifetime=8m".into(),
        not_before: None,
        not_after: None,
        not_after_seconds: not_after,
        renew_from: None,
        renew_by: None,
        renew_by_seconds: renew_by,
        outage_tolerance_seconds: not_after - renew_by,
        problem: None,
    }
}

#[test]
fn a_trial_lifetime_left_in_place_is_warned_about_a_year_is_not() {
    // At 8 minutes renewed by 25 %, 6 minutes after the window closes the
    // certificate ends: "healthy" hid that an outage of minutes stops the
    // node. The soonest one is named, with its options.
    let trial = [
        cert("apiserver", 1_000_480, 1_000_120),
        cert("scheduler-client", 1_000_460, 1_000_110),
    ];
    let w = short_lifetimes(&trial, &[]).expect("warned");
    assert!(
        w.contains("scheduler-client (lifetime=8m) ends 5m 50s after its renewal window closes"),
        "{w}"
    );
    // A year renewed by 90 %: 36 days after the window.
    let year = [cert("apiserver", 31_536_000, 28_382_400)];
    assert_eq!(short_lifetimes(&year, &[]), None);
    // Unknown (0) is no warning: the certificate's own problem says why.
    assert_eq!(short_lifetimes(&[cert("odd", 0, 0)], &[]), None);
    // Short only because it ends with its CA (cut at the CA's end): the
    // CA's renewal is the warning then, not a trial lifetime.
    assert_eq!(short_lifetimes(&trial, &[1_000_480, 1_000_460]), None);
    let one_cut = [
        cert("apiserver", 1_000_480, 1_000_120),
        cert("scheduler-client", 2_000_460, 2_000_110),
    ];
    let w = short_lifetimes(&one_cut, &[2_000_460]).expect("the other one");
    assert!(w.contains("apiserver (lifetime=8m)"), "{w}");
}

fn report() -> Status {
    Status {
        kubeadm_dir: "/etc/kubernetes".into(),
        adopted: true,
        adopted_since: Some("2026-11-27T12:00:00Z".into()),
        backups: vec!["/etc/kubernetes/certsync/backup/20261127T120000Z".into()],
        pod: PodStatus {
            manifest: true,
            state: "not-running",
            ..PodStatus::default()
        },
        last_renewal_error: "unknown: certsync not running".into(),
        cas: Vec::new(),
        certificates: vec![
            cert("apiserver", 1_800_000_000, 1_790_000_000),
            // A mapping name a hand-edited certsync.yaml could hold.
            cert("odd\"name\\", 0, 0),
        ],
        manifests: vec![
            ManifestStatus {
                manifest: "/etc/kubernetes/manifests/etcd.yaml".into(),
                adopted: true,
                as_adopt_wrote: true,
                problem: None,
            },
            ManifestStatus {
                manifest: "/etc/kubernetes/manifests/kube-scheduler.yaml".into(),
                adopted: false,
                as_adopt_wrote: false,
                problem: Some("regenerated without adoption".into()),
            },
        ],
        problems: vec![
            Problem {
                cause: Cause::Certificate,
                message: "odd: no live certificate".into(),
            },
            Problem {
                cause: Cause::AdoptionLost,
                message: "kube-scheduler.yaml".into(),
            },
            Problem {
                cause: Cause::CertsyncDown,
                message: "no answer".into(),
            },
        ],
        warnings: vec![crate::kubeadm::warning::Warning {
            kind: crate::kubeadm::warning::WarningKind::KubeletConf,
            message: "kubelet.conf trusts only an old CA".into(),
        }],
        checked_at_seconds: 1_764_244_800,
    }
}

/// Every sample line of Prometheus text: (series, value).
fn samples(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("series value");
            (series.to_owned(), value.to_owned())
        })
        .collect()
}

#[test]
fn the_textfile_output_has_every_series_with_its_value() {
    let text = report().prometheus();
    let got = samples(&text);
    let value = |series: &str| {
        got.iter()
            .find(|(s, _)| s == series)
            .map(|(_, v)| v.as_str())
            .unwrap_or_else(|| panic!("no {series} in:\n{text}"))
    };
    assert_eq!(value("certsync_kubeadm_adopted"), "1");
    assert_eq!(value("certsync_kubeadm_certsync_ready"), "0");
    assert_eq!(
        value(
            "certsync_kubeadm_manifest_adopted{manifest=\"/etc/kubernetes/manifests/etcd.yaml\"}"
        ),
        "1"
    );
    assert_eq!(
        value(
            "certsync_kubeadm_manifest_adopted{manifest=\"/etc/kubernetes/manifests/kube-scheduler.yaml\"}"
        ),
        "0"
    );
    assert_eq!(
        value(
            "certsync_kubeadm_certificate_not_after_seconds{mapping=\"apiserver\",target=\"/etc/kubernetes/pki/certsync/apiserver\"}"
        ),
        "1800000000"
    );
    assert_eq!(
        value(
            "certsync_kubeadm_certificate_renew_by_seconds{mapping=\"apiserver\",target=\"/etc/kubernetes/pki/certsync/apiserver\"}"
        ),
        "1790000000"
    );
    // Label values escaped as the exposition format says: \" and \\.
    assert_eq!(
        value(
            "certsync_kubeadm_certificate_not_after_seconds{mapping=\"odd\\\"name\\\\\",target=\"/etc/kubernetes/pki/certsync/odd\\\"name\\\\\"}"
        ),
        "0"
    );
    // One series per cause, present whether it applies or not.
    for (cause, v) in [
        ("not-adopted", "0"),
        ("certsync-down", "1"),
        ("certsync-not-ready", "0"),
        ("adoption-lost", "1"),
        ("certificate", "1"),
    ] {
        assert_eq!(
            value(&format!(
                "certsync_kubeadm_status_problem{{cause=\"{cause}\"}}"
            )),
            v,
            "{cause}"
        );
    }
    // One series per kind of warning, present whether it applies or not.
    for (kind, v) in [
        ("short-lifetime", "0"),
        ("ca-renewal-due", "0"),
        ("earlier-ca-ended", "0"),
        ("kubelet-conf", "1"),
        ("cluster-info", "0"),
    ] {
        assert_eq!(
            value(&format!(
                "certsync_kubeadm_status_warning{{kind=\"{kind}\"}}"
            )),
            v,
            "{kind}"
        );
    }
    assert_eq!(
        value("certsync_kubeadm_status_timestamp_seconds"),
        "1764244800"
    );
    // Every family typed, as the textfile collector requires.
    for (series, _) in &got {
        let family = series.split('{').next().unwrap_or_default();
        assert!(
            text.contains(&format!("# TYPE {family} gauge\n")),
            "{family} untyped"
        );
    }
}

#[test]
fn the_metrics_reference_names_every_series_of_the_textfile_output() {
    let doc = include_str!("../../../docs/reference/metrics.md");
    let text = report().prometheus();
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert_eq!(families.len(), 11, "{text}");
    let missing: Vec<&&str> = families
        .iter()
        .filter(|f| !doc.contains(&format!("`{f}`")))
        .collect();
    assert!(missing.is_empty(), "not in metrics.md: {missing:?}");
}

#[test]
fn the_exit_code_is_the_first_cause_found() {
    let mut s = report();
    assert_eq!(s.exit_code(), Cause::CertsyncDown as u8);
    s.problems.retain(|p| p.cause == Cause::Certificate);
    assert_eq!(s.exit_code(), 6);
    s.problems.clear();
    assert_eq!(s.exit_code(), 0);
    let codes: Vec<u8> = Cause::ALL.iter().map(|c| *c as u8).collect();
    assert_eq!(codes, [2, 3, 4, 5, 6]);
}

#[tokio::test]
async fn a_node_never_adopted_is_not_healthy() {
    let d = tempfile::tempdir().expect("tempdir");
    let s = status(d.path()).await.expect("status");
    assert!(!s.adopted);
    assert_eq!(s.exit_code(), 2);
    assert!(s.text().contains("problem (not-adopted)"), "{}", s.text());
    // A record that cannot be read is an error, not "not adopted".
    std::fs::create_dir_all(d.path().join("certsync")).expect("mkdir");
    std::fs::write(d.path().join("certsync/adopted.json"), b"{not json").expect("write");
    assert!(matches!(
        status(d.path()).await,
        Err(KubeadmError::File { .. })
    ));
}

#[test]
fn the_time_of_adoption_is_read_from_the_first_backup() {
    assert_eq!(
        since("/etc/kubernetes/certsync/backup/20261124T221933Z").as_deref(),
        Some("2026-11-24T22:19:33Z")
    );
    assert_eq!(
        since("/etc/kubernetes/certsync/backup/2026112XT221933Z"),
        None
    );
    assert_eq!(since("short"), None);
    // Not a time: a month 13, and names of 16 bytes that are not ASCII,
    // a character across a field's edge.
    assert_eq!(since("20261324T221933Z"), None);
    for name in ["20261\u{e9}4T221933Z", "20261124T221\u{e9}3Z"] {
        assert_eq!(name.len(), 16);
        assert_eq!(since(name), None);
    }
    // The name adopt gives a backup now reads back as the time it was made.
    let before = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    let made = since(&crate::kubeadm::plan::time_stamp()).expect("a backup's name");
    let after = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    assert!(
        before <= made && made <= after,
        "{before} <= {made} <= {after}"
    );
}

/// The alert rules shown beside the textfile metrics parse, and name only
/// series the textfile output has.
#[test]
fn the_textfile_alert_rules_name_only_textfile_metrics() {
    let doc = include_str!("../../../docs/reference/metrics.md");
    let section = &doc[doc
        .find("## certsync kubeadm status (textfile)")
        .expect("the section")..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    let start = section.find("```yaml\n").expect("a yaml block") + "```yaml\n".len();
    let block = &section[start..start + section[start..].find("```").expect("its end")];
    let rules: serde_yaml_ng::Value = serde_yaml_ng::from_str(block).expect("yaml");
    let text = report().prometheus();
    let mut count = 0;
    for rule in rules["groups"][0]["rules"].as_sequence().expect("rules:") {
        count += 1;
        let expr = rule["expr"].as_str().expect("expr");
        assert!(rule["labels"]["severity"].as_str().is_some(), "{expr}");
        assert!(rule["annotations"]["summary"].as_str().is_some(), "{expr}");
        let named: Vec<&str> = expr
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with("certsync_"))
            .collect();
        assert!(!named.is_empty(), "{expr}");
        for m in named {
            assert!(text.contains(&format!("# TYPE {m} gauge")), "{m} in {expr}");
        }
    }
    assert_eq!(count, 10);
}

/// adopt --admin-addr reaches the pod's arguments and probes, and status
/// asks where the probes ask: an unspecified address on loopback.
#[tokio::test]
async fn adopts_admin_address_is_where_status_asks() {
    let dir = node_dir();
    for (addr, args, host, asked) in [
        (
            "127.0.0.1:9814",
            "- --admin-addr=127.0.0.1:9814\n",
            "host: 127.0.0.1\n",
            "127.0.0.1:9814",
        ),
        (
            "0.0.0.0:9900",
            "- --admin-addr=0.0.0.0:9900\n",
            "host: 127.0.0.1\n",
            "127.0.0.1:9900",
        ),
        (
            "127.0.0.2:9814",
            "- --admin-addr=127.0.0.2:9814\n",
            "host: 127.0.0.2\n",
            "127.0.0.2:9814",
        ),
        (
            "[::]:9814",
            "- --admin-addr=[::]:9814\n",
            "host: ::1\n",
            "[::1]:9814",
        ),
    ] {
        let mut opts = options(dir.path());
        opts.admin_addr = Some(addr.parse().expect("addr"));
        let p = plan(&opts).await.expect("plan");
        let pod = p
            .files
            .iter()
            .find(|f| f.path == "/etc/kubernetes/manifests/certsync.yaml")
            .expect("the pod");
        let text = String::from_utf8(pod.bytes.clone()).expect("utf-8");
        assert!(text.contains(args), "{addr}: {text}");
        assert_eq!(
            text.matches(host).count(),
            3,
            "{addr}: three probes\n{text}"
        );
        let config = p
            .files
            .iter()
            .find(|f| f.path == "/etc/kubernetes/certsync.yaml")
            .expect("the config");
        assert!(
            !String::from_utf8_lossy(&config.bytes).contains("admin-addr"),
            "one place for the address"
        );
        let probe = Current::parse(text.as_bytes()).probe.expect("probe");
        assert_eq!(probe.image.as_deref(), Some("certsync"));
        assert_eq!(probe.admin.as_deref(), Some(addr), "{addr}");
        assert_eq!(probe.addr.to_string(), asked, "{addr}");
    }
}

/// An admin address the node cannot listen on is refused before anything
/// is written (certsync's pod would exit at start while adopt waited its
/// whole --ready-timeout): one the node lacks, a port another process
/// holds; and an image reference the runtime cannot parse.
#[tokio::test]
async fn adopt_refuses_an_address_the_node_cannot_listen_on_and_a_bad_image() {
    use crate::kubeadm::{KubeadmError, Refusal};
    let dir = node_dir();
    let refusal = |r: Result<_, KubeadmError>| match r {
        Err(KubeadmError::Refused { reason, .. }) => *reason,
        other => panic!("not refused: {other:?}"),
    };
    let mut opts = options(dir.path());
    // TEST-NET-3: no interface of this machine has it.
    opts.admin_addr = Some("203.0.113.77:9814".parse().expect("addr"));
    assert!(matches!(
        refusal(plan(&opts).await.map(drop)),
        Refusal::NoSuchAddress { .. }
    ));
    let held = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    opts.admin_addr = Some(held.local_addr().expect("addr"));
    assert!(matches!(
        refusal(plan(&opts).await.map(drop)),
        Refusal::PortTaken { .. }
    ));
    drop(held);
    assert!(plan(&opts).await.is_ok(), "the port free again");
    opts.image = Some("registry.example.com/Platform/certsync:0.1.0".into());
    assert!(matches!(
        refusal(plan(&opts).await.map(drop)),
        Refusal::Image {
            why: crate::kubeadm::preflight::UPPERCASE,
            ..
        }
    ));
}

/// A node directory, the certsync.yaml adopt would write for it, and where
/// that file goes.
async fn adopts_config() -> (tempfile::TempDir, String, std::path::PathBuf) {
    let dir = node_dir();
    let p = plan(&options(dir.path())).await.expect("plan");
    let config = p
        .files
        .iter()
        .find(|f| f.path == plan::CONFIG)
        .expect("the config");
    let text = String::from_utf8(config.bytes.clone()).expect("utf-8");
    let at = crate::kubeadm::paths::host(dir.path(), plan::CONFIG);
    (dir, text, at)
}

/// status reads certsync.yaml with `run`'s reader: a mapping key `run`
/// refuses is a problem status names, not a default renewal window it
/// reports while `run` refuses to start.
#[tokio::test]
async fn status_reads_certsync_yaml_as_run_does() {
    let (dir, text, at) = adopts_config().await;
    std::fs::write(&at, &text).expect("write");
    let read = mappings(dir.path()).expect("adopt's configuration");
    assert!(read.len() > 5, "{}", read.len());
    for (m, renew) in &read {
        assert_eq!(renew.as_ref().ok(), Some(&(0.2, 0.25)), "{}", m.mapping);
        assert!(
            m.options.starts_with("lifetime=8m, renew=20%-25%"),
            "{}: {}",
            m.mapping,
            m.options
        );
    }
    // One mapping's key misspelt: `run` refuses the file, and so does status.
    let typo = text.replacen("renew: 20%-25%", "renw: 20%-25%", 1);
    assert_ne!(typo, text, "the fixture has the key");
    std::fs::write(&at, &typo).expect("write");
    assert!(crate::kubeadm::judge::load(dir.path(), &text).is_ok());
    assert!(
        crate::kubeadm::judge::load(dir.path(), &typo).is_err(),
        "run refuses it"
    );
    assert!(
        matches!(mappings(dir.path()), Err(FileProblem::Config(e))
            if matches!(*e, crate::config::ConfigError::File { .. })),
        "status refuses it"
    );
    // A setting beside the mappings that is no flag of `run`.
    std::fs::write(&at, format!("resyncc: 5m\n{text}")).expect("write");
    assert!(matches!(mappings(dir.path()), Err(FileProblem::Config(_))));
}

/// status judges certsync.yaml by `run`'s whole loader (values, overlaps,
/// guards), not its parser alone: a file `run` refuses at its next start
/// (a bad setting value, a bad option value, two mappings on one target)
/// must not be read into healthy certificates while the running pod still
/// holds the old configuration.
#[tokio::test]
async fn attack_status_reads_a_file_run_would_refuse() {
    let (dir, text, at) = adopts_config().await;
    let first_target = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("target: "))
        .expect("a target")
        .to_owned();
    let second_target = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("target: "))
        .nth(1)
        .expect("a second target")
        .to_owned();
    let bad = [
        ("a setting value", format!("resync: banana\n{text}")),
        (
            "an option value",
            text.replacen("lifetime: 8m", "lifetime: banana", 1),
        ),
        (
            "two mappings on one target",
            text.replacen(
                &format!("target: {second_target}"),
                &format!("target: {first_target}"),
                1,
            ),
        ),
    ];
    let mut read = Vec::new();
    for (what, bad) in bad {
        assert_ne!(bad, text, "{what}: the fixture changed");
        assert!(
            crate::kubeadm::judge::load(dir.path(), &bad).is_err(),
            "{what}: run refuses it"
        );
        std::fs::write(&at, &bad).expect("write");
        if mappings(dir.path()).is_ok() {
            read.push(what);
        }
    }
    // Where the file lives: one another user may change steers no root
    // process (`run` reads it with read_steering), but status reads it.
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(&at, &text).expect("write");
    std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    assert!(
        crate::config::read_config_text(&at).is_err(),
        "run's read refuses a world-writable certsync.yaml"
    );
    if mappings(dir.path()).is_ok() {
        read.push("a file another user may change");
    }
    assert!(
        read.is_empty(),
        "status read renewal windows from files run refuses: {read:?}"
    );
}

/// A private key a group or every local user may read, or that is not
/// root's, is a problem status names (a CA key 0644 let any local user mint
/// front-proxy clients while status said healthy); certsync's own keys
/// (adopt's backups) are judged too, and a symlink is judged as a link,
/// never followed.
#[test]
fn attack_a_private_key_others_may_read_is_named() {
    use crate::kubeadm::Refusal;
    use crate::kubeadm::audit::exposed;
    use std::os::unix::fs::{PermissionsExt, symlink};
    let dir = node_dir();
    let at = |rel: &str| dir.path().join(rel);
    let set = |rel: &str, mode: u32| {
        std::fs::set_permissions(at(rel), std::fs::Permissions::from_mode(mode)).expect("chmod");
    };
    // kubeadm's CA keys beside the pairs' keys node_dir writes, and a
    // backup as adopt keeps it.
    std::fs::create_dir_all(at("certsync/backup/20261127T120000Z/pki")).expect("mkdir");
    for k in [
        "pki/ca.key",
        "pki/front-proxy-ca.key",
        "pki/etcd/ca.key",
        "pki/sa.key",
        "certsync/backup/20261127T120000Z/pki/apiserver.key",
    ] {
        std::fs::write(at(k), "a key\n").expect("key");
    }
    let mut keys = 0;
    for d in ["pki", "pki/etcd", "certsync/backup/20261127T120000Z/pki"] {
        for e in std::fs::read_dir(at(d)).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.extension().is_some_and(|x| x == "key") {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))
                    .expect("chmod");
                keys += 1;
            }
        }
    }
    assert!(keys >= 10, "{keys}");
    symlink("/etc/shadow", at("pki/linked.key")).expect("symlink");
    assert!(exposed(dir.path()).is_empty(), "every key 0600 and root's");

    set("pki/front-proxy-ca.key", 0o644);
    set("certsync/backup/20261127T120000Z/pki/apiserver.key", 0o640);
    nix::unistd::chown(
        &at("pki/etcd/ca.key"),
        Some(nix::unistd::Uid::from_raw(1000)),
        None,
    )
    .expect("chown");
    let found = exposed(dir.path());
    assert!(
        matches!(found.as_slice(), [
            Refusal::KeyExposed { path: a, mode: 0o640, uid: 0 },
            Refusal::KeyExposed { path: b, mode: 0o600, uid: 1000 },
            Refusal::KeyExposed { path: c, mode: 0o644, uid: 0 },
        ] if a == "/etc/kubernetes/certsync/backup/20261127T120000Z/pki/apiserver.key"
            && b == "/etc/kubernetes/pki/etcd/ca.key"
            && c == "/etc/kubernetes/pki/front-proxy-ca.key"),
        "{found:?}"
    );
}

/// Attack (certsync's container may make entries in pki/): a directory
/// whose name is not UTF-8 beside a link named as its lossy reading, and
/// a name carrying terminal escapes. The walk opens what it listed, by its
/// own name (the key in the non-UTF-8 directory is found, the link never
/// followed), and every name it prints is escaped.
#[test]
fn attack_names_a_container_chooses_neither_hide_a_key_nor_reach_the_terminal() {
    use crate::kubeadm::Refusal;
    use crate::kubeadm::audit::exposed;
    use std::os::unix::ffi::OsStrExt as _;
    use std::os::unix::fs::{PermissionsExt, symlink};
    let dir = node_dir();
    for e in std::fs::read_dir(dir.path().join("pki")).expect("read_dir") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "key") {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        }
    }
    for e in std::fs::read_dir(dir.path().join("pki/etcd")).expect("read_dir") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "key") {
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        }
    }
    let raw = dir
        .path()
        .join("pki")
        .join(std::ffi::OsStr::from_bytes(b"\xff"));
    std::fs::create_dir(&raw).expect("mkdir");
    std::fs::write(raw.join("exposed.key"), "k").expect("key");
    std::fs::set_permissions(
        raw.join("exposed.key"),
        std::fs::Permissions::from_mode(0o644),
    )
    .expect("chmod");
    let elsewhere = tempfile::tempdir().expect("tempdir");
    symlink(elsewhere.path(), dir.path().join("pki/\u{FFFD}")).expect("symlink");
    let escapes = dir
        .path()
        .join("pki/\u{1b}]0;owned\u{7}\u{1b}[2K\rproblem: none");
    std::fs::create_dir(&escapes).expect("mkdir");
    std::fs::write(escapes.join("x.key"), "k").expect("key");
    std::fs::set_permissions(
        escapes.join("x.key"),
        std::fs::Permissions::from_mode(0o604),
    )
    .expect("chmod");
    let found = exposed(dir.path());
    assert_eq!(found.len(), 2, "{found:#?}");
    for e in &found {
        let shown = e.to_string();
        assert!(
            !shown.contains(['\u{1b}', '\u{7}', '\r']),
            "an unescaped control character: {shown:?}"
        );
    }
    assert!(
        found.iter().any(
            |e| matches!(e, Refusal::KeyExposed { path, .. } if path.ends_with("/exposed.key"))
        ),
        "{found:#?}"
    );
}

/// What adopt reads of a certsync pod of `image` listening on `admin`.
fn probe_of(image: &str, admin: &str) -> crate::kubeadm::pod::Probe {
    let pod = crate::kubeadm::pod::manifest(&crate::kubeadm::pod::Spec {
        image,
        admin: admin.parse().expect("addr"),
        generation: "g",
        config_hash: "h",
        mounts: Vec::new(),
    })
    .expect("pod");
    Current::parse(pod.as_bytes()).probe.expect("probe")
}

/// Adopting again keeps what the node has (certsync's admin address, the
/// `--set` options in certsync.yaml) unless an option given now changes
/// it, and says each as before -> after: a re-adopt to upgrade certsync
/// moved `--admin-addr 0.0.0.0:9814` back to 127.0.0.1 without a word.
#[tokio::test]
async fn adopting_again_keeps_the_nodes_choices_unless_told() {
    use crate::kubeadm::choices::kept;
    let (dir, text, at) = adopts_config().await;
    std::fs::write(&at, &text).expect("write");
    let pod = probe_of("certsync:0.1.0", "0.0.0.0:9900");
    let mut opts = options(dir.path());
    opts.admin_addr = None;
    opts.set = Vec::new();
    let (resolved, choices) = kept(&opts, Some(&pod), (None, None));
    assert_eq!(
        resolved.admin_addr,
        Some("0.0.0.0:9900".parse().expect("addr"))
    );
    assert_eq!(
        resolved.set,
        vec![
            ("lifetime".to_owned(), "8m".to_owned()),
            ("renew".to_owned(), "20%-25%".to_owned())
        ]
    );
    assert!(choices.iter().all(|c| !c.changed()), "{choices:?}");
    // One option given: only it changes, shown before -> after.
    opts.set = vec![("lifetime".into(), "1y".into())];
    opts.admin_addr = Some("127.0.0.1:9814".parse().expect("addr"));
    let (resolved, choices) = kept(&opts, Some(&pod), (None, None));
    let changed: Vec<String> = choices
        .iter()
        .filter(|c| c.changed())
        .map(|c| {
            format!(
                "{}: {} -> {}",
                c.what,
                c.before.as_deref().unwrap_or("-"),
                c.after
            )
        })
        .collect();
    assert_eq!(
        changed,
        [
            "--admin-addr: 0.0.0.0:9900 -> 127.0.0.1:9814",
            "lifetime: 8m -> 1y"
        ]
    );
    assert!(
        resolved
            .set
            .contains(&("renew".to_owned(), "20%-25%".to_owned()))
    );
    // The first adoption (no certsync.yaml, pod or record) has nothing to
    // keep and shows no choices.
    std::fs::remove_file(&at).expect("rm");
    let (_, first) = kept(&opts, None, (None, None));
    assert!(first.is_empty(), "{first:?}");
}

/// The image is kept too: a re-adopt (certsync's pod taken out by an outage included)
/// needs no `--image` looked up; the pod's image first, else the one adopt recorded, and
/// one given now wins. With none of these, adopt refuses before reading the node further.
#[tokio::test]
async fn adopting_again_keeps_the_nodes_image_unless_told() {
    use crate::kubeadm::choices::kept;
    let dir = tempfile::tempdir().expect("tempdir");
    let pod = probe_of("registry.example.com/certsync:0.1.0", "127.0.0.1:9814");
    let mut opts = options(dir.path());
    opts.image = None;
    let recorded = Some("registry.example.com/certsync:0.0.9");
    let image =
        |pod, recorded, opts: &crate::kubeadm::Options| kept(opts, pod, (None, recorded)).0.image;
    let running = Some("registry.example.com/certsync:0.1.0".to_owned());
    assert_eq!(image(Some(&pod), recorded, &opts), running);
    assert_eq!(image(None, recorded, &opts).as_deref(), recorded);
    assert_eq!(image(None, None, &opts), None);
    opts.image = Some("registry.example.com/certsync:0.2.0".into());
    assert_eq!(image(Some(&pod), recorded, &opts), opts.image);
    // None at all: refused, naming what to give, before anything else is read.
    let none = crate::kubeadm::Options {
        image: None,
        admin_addr: None,
        ..options(dir.path())
    };
    let Err(refused) = crate::kubeadm::plan::plan(&none).await else {
        panic!("planned with no image");
    };
    assert!(
        matches!(&refused, KubeadmError::Refused { reason, .. } if matches!(**reason, crate::kubeadm::Refusal::NoImage)),
        "{refused}"
    );
}
