//! Operating certsync: the admin port's readiness and metrics, end to end.

mod support;

use std::fs;
use std::path::Path;

use support::certs::Pair;
use support::*;

fn wait_status(port: u16, path: &str, status: u16) -> String {
    wait_for(&format!("{path} to answer {status}"), || {
        http_get(port, path)
            .filter(|(s, _)| *s == status)
            .map(|(_, b)| b)
    })
}

#[test]
fn readyz_before_after_and_with_one_mapping_broken() {
    let d = tempfile::tempdir().unwrap();
    let (web, api) = (d.path().join("web"), d.path().join("api"));
    let port = free_port();
    let admin = format!("127.0.0.1:{port}");
    let web_spec = format!(
        "dir:{}={},name=web",
        web.display(),
        d.path().join("t-web").display()
    );
    let api_spec = format!(
        "dir:{}={},name=api",
        api.display(),
        d.path().join("t-api").display()
    );
    let _cs = Certsync::start(
        &[
            "run",
            "--debounce",
            "100ms",
            "--resync",
            "1s",
            "--admin-addr",
            &admin,
            "--sync",
            &web_spec,
            "--sync",
            &api_spec,
        ],
        d.path(),
    );
    // Before the first sync: both sources are missing. The admin port
    // listens first: until every mapping is declared it says `starting`,
    // never a list with some missing (a list of none read as ready).
    let both = "mapping api: no valid revision yet\nmapping web: no valid revision yet\n";
    wait_for("/readyz to name both mappings", || {
        let (status, body) = http_get(port, "/readyz")?;
        assert_eq!(status, 503, "{body}");
        assert!(body == "starting\n" || body == both, "{body}");
        (body == both).then_some(())
    });
    assert_eq!(http_get(port, "/livez").unwrap().0, 200);

    // One mapping gets a good pair, the other a mismatched one.
    let good = Pair::new("web");
    write_pair_files(&web, &good.cert, &good.key);
    let (a, b) = (Pair::new("a"), Pair::new("b"));
    write_pair_files(&api, &a.cert, &b.key);
    wait_for("web synced", || read_live(&d.path().join("t-web")));
    // Readiness is recorded when the write returns, just after the flip:
    // wait for the state rather than reading it once.
    wait_for("only the broken mapping listed as not ready", || {
        http_get(port, "/readyz")
            .filter(|(s, b)| *s == 503 && b == "mapping api: no valid revision yet\n")
    });

    // Fixed: ready.
    write_pair_files(&api, &a.cert, &a.key);
    wait_status(port, "/readyz", 200);
}

#[test]
fn metrics_after_a_rotation_a_rejection_and_a_reload() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    let first = Pair::new("first");
    write_pair_files(&src, &first.cert, &first.key);
    let port = free_port();
    let dead_hook = format!("http://127.0.0.1:{}/reload", free_port());
    let spec = format!(
        "dir:{}={},name=web",
        src.display(),
        d.path().join("t").display()
    );
    let cs = Certsync::start(
        &[
            "run",
            "--debounce",
            "100ms",
            "--reload-quiet",
            "50ms",
            "--admin-addr",
            &format!("127.0.0.1:{port}"),
            "--sync",
            &spec,
            "--reload-url",
            &dead_hook,
            "--reload-retries",
            "0",
        ],
        d.path(),
    );
    wait_for("first sync", || read_live(&d.path().join("t")));

    let second = Pair::new("second");
    write_pair_files(&src, &second.cert, &second.key);
    wait_for("rotation", || {
        read_live(&d.path().join("t")).filter(|l| l.1 == second.cert)
    });
    write_pair_files(&src, &second.cert, &Pair::new("other").key);
    cs.wait_log("reason=\"key_mismatch\"");
    wait_for("two failed reloads", || {
        let m = parse_metrics(&http_get(port, "/metrics")?.1);
        (m.get("certsync_reloads_total{method=\"http\",result=\"failed\"}") == Some(&2.0))
            .then_some(())
    });

    let (status, text) = http_get(port, "/metrics").unwrap();
    assert_eq!(status, 200);
    let m = parse_metrics(&text);
    let get = |k: &str| {
        *m.get(k)
            .unwrap_or_else(|| panic!("{k} missing in:\n{text}"))
    };
    assert_eq!(get("certsync_revision{mapping=\"web\"}"), 2.0);
    assert_eq!(
        get("certsync_syncs_total{mapping=\"web\",result=\"written\"}"),
        2.0
    );
    assert_eq!(
        get("certsync_validation_failures_total{mapping=\"web\",reason=\"key_mismatch\"}"),
        1.0
    );
    assert_eq!(
        get("certsync_reload_duration_seconds_count{method=\"http\"}"),
        2.0
    );
    assert_eq!(get("certsync_source_up{mapping=\"web\"}"), 1.0);
    assert_eq!(get("certsync_certificate_stale{mapping=\"web\"}"), 0.0);
    let ttl = get("certsync_certificate_ttl_seconds{mapping=\"web\"}");
    assert!(
        ttl > 300.0 * 86_400.0 && ttl < 366.0 * 86_400.0,
        "ttl {ttl}"
    );
    let not_after = get("certsync_certificate_not_after_seconds{mapping=\"web\"}");
    let last = get("certsync_last_success_timestamp_seconds{mapping=\"web\"}");
    assert!(
        not_after > last,
        "not_after {not_after} last success {last}"
    );
}

/// A fresh `certsync run` whose mapping cannot sync yet (its source
/// directory is empty): every series of the mapping is there from the first
/// scrape, at values an alert understands: no `+Inf` time to live (an
/// expiry alert must fire for a certificate that never arrived), revision
/// 0, counters at 0 for every result; and the process is described
/// (`certsync_build_info`, Prometheus' standard `process_*` metrics).
#[test]
fn a_mapping_that_never_synced_has_every_series_and_no_infinite_ttl() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    fs::create_dir(&src).unwrap();
    let port = free_port();
    let dead_hook = format!("http://127.0.0.1:{}/reload", free_port());
    let spec = format!(
        "dir:{}={},name=web",
        src.display(),
        d.path().join("t").display()
    );
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let _cs = Certsync::start(
        &[
            "run",
            "--admin-addr",
            &format!("127.0.0.1:{port}"),
            "--sync",
            &spec,
            "--reload-url",
            &dead_hook,
        ],
        d.path(),
    );
    // The first scrape that shows the mapping at all must show all of it.
    let text = wait_for("the mapping's first series", || {
        http_get(port, "/metrics")
            .map(|(_, body)| body)
            .filter(|b| b.contains("{mapping=\"web\""))
    });
    let m = parse_metrics(&text);
    let get = |k: &str| {
        *m.get(k)
            .unwrap_or_else(|| panic!("{k} missing in:\n{text}"))
    };
    assert!(!text.contains("+Inf\n"), "no infinite value:\n{text}");
    for (series, want) in [
        ("certsync_certificate_ttl_seconds{mapping=\"web\"}", 0.0),
        (
            "certsync_certificate_not_after_seconds{mapping=\"web\"}",
            0.0,
        ),
        ("certsync_certificate_stale{mapping=\"web\"}", 0.0),
        ("certsync_revision{mapping=\"web\"}", 0.0),
        (
            "certsync_last_success_timestamp_seconds{mapping=\"web\"}",
            0.0,
        ),
        ("certsync_watch_restarts_total{mapping=\"web\"}", 0.0),
        (
            "certsync_syncs_total{mapping=\"web\",result=\"written\"}",
            0.0,
        ),
        (
            "certsync_syncs_total{mapping=\"web\",result=\"unchanged\"}",
            0.0,
        ),
        (
            "certsync_syncs_total{mapping=\"web\",result=\"pinned\"}",
            0.0,
        ),
        (
            "certsync_syncs_total{mapping=\"web\",result=\"error\"}",
            0.0,
        ),
        ("certsync_reloads_total{method=\"http\",result=\"ok\"}", 0.0),
        (
            "certsync_reloads_total{method=\"http\",result=\"failed\"}",
            0.0,
        ),
        (
            "certsync_reload_duration_seconds_count{method=\"http\"}",
            0.0,
        ),
        ("certsync_file_watch_polling", 0.0),
        (
            &format!(
                "certsync_build_info{{version=\"{}\"}}",
                env!("CARGO_PKG_VERSION")
            ),
            1.0,
        ),
    ] {
        assert_eq!(get(series), want, "{series} in:\n{text}");
    }
    // Whether the empty directory was read yet is a race: present, 0 or 1.
    for series in [
        "certsync_source_up{mapping=\"web\"}",
        "certsync_syncs_total{mapping=\"web\",result=\"rejected\"}",
        "certsync_syncs_total{mapping=\"web\",result=\"source_error\"}",
    ] {
        assert!(matches!(get(series), 0.0 | 1.0), "{series}");
    }

    // Prometheus' process collector, read from /proc/self.
    let start = get("process_start_time_seconds");
    assert!(
        start > started - 60.0 && start < started + 60.0,
        "start {start}, test began {started}"
    );
    let rss = get("process_resident_memory_bytes");
    assert!(rss > 1e6 && rss < 1e9, "rss {rss}");
    assert!(get("process_virtual_memory_bytes") >= rss);
    let (fds, max) = (get("process_open_fds"), get("process_max_fds"));
    assert!(fds >= 3.0 && fds < max, "fds {fds} of {max}");
    let cpu = get("process_cpu_seconds_total");
    assert!((0.0..60.0).contains(&cpu), "cpu {cpu}");
    for family in [
        "# TYPE process_cpu_seconds counter",
        "# TYPE process_resident_memory_bytes gauge",
        "# TYPE certsync_build_info gauge",
    ] {
        assert!(text.contains(family), "{family} in:\n{text}");
    }
}

/// A certificate 90% through its life with nothing newer: one warning per
/// revision (not one per resync) and the stale metric set.
#[test]
fn stale_certificate_is_warned_once_and_exposed() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    let old = Pair::with_validity("late", -9 * 86_400, 86_400);
    write_pair_files(&src, &old.cert, &old.key);
    let (cs, port) = run_dir(d.path(), "late", &["--resync", "300ms"]);
    cs.wait_log("past its renewal point");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let warnings = cs.log().matches("past its renewal point").count();
    assert_eq!(warnings, 1, "once per revision, not per resync");
    let m = parse_metrics(&http_get(port, "/metrics").unwrap().1);
    assert_eq!(m["certsync_certificate_stale{mapping=\"late\"}"], 1.0);
}

fn certsync(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(certsync_bin())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_reports_expiry_and_key_match_with_exit_codes() {
    let d = tempfile::tempdir().unwrap();
    let pki = d.path().join("pki");
    fs::create_dir(&pki).unwrap();
    let put = |name: &str, cert: &[u8], key: Option<&[u8]>| {
        fs::write(pki.join(format!("{name}.crt")), cert).unwrap();
        if let Some(k) = key {
            fs::write(pki.join(format!("{name}.key")), k).unwrap();
        }
    };
    let good = Pair::new("good.example");
    let soon = Pair::with_validity("soon.example", -86_400, 10 * 86_400);
    let old = Pair::with_validity("old.example", -10 * 86_400, -86_400);
    put("good", &good.cert, Some(&good.key));
    put("soon", &soon.cert, Some(&soon.key));
    put("old", &old.cert, Some(&old.key));
    put("bad", &good.cert, Some(&Pair::new("other").key));
    put("ca", &good.ca_cert, None);
    // A trust bundle holding a CA's old certificate, ended, and its
    // renewal with the same key (kubeadm's ca-bundle.crt past the old
    // end): the CA counts by its renewal.
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let ca_cert = |from: i64, to: i64| {
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "kubernetes");
        let now = time::OffsetDateTime::now_utc();
        p.not_before = now + time::Duration::days(from);
        p.not_after = now + time::Duration::days(to);
        p.self_signed(&ca_key).unwrap().pem()
    };
    let (ended, renewed) = (ca_cert(-10, -1), ca_cert(-2, 3650));
    put("bundle", [ended, renewed].concat().as_bytes(), None);

    let (code, table, _) = certsync(&["check", pki.to_str().unwrap()]);
    assert_eq!(code, 1, "{table}");
    let line = |name: &str| {
        table
            .lines()
            .find(|l| l.contains(&format!("/{name}.crt")))
            .unwrap()
            .to_owned()
    };
    assert!(table.starts_with("CERTIFICATE"), "{table}");
    assert!(line("good").contains("matches"), "{table}");
    let (_, wide, _) = certsync(&["check", "-o", "wide", pki.to_str().unwrap()]);
    assert!(
        wide.contains("good.example"),
        "the subject, in full: {wide}"
    );
    assert!(
        line("soon").contains("9d") || line("soon").contains("10d"),
        "{table}"
    );
    assert!(line("old").contains("expired 1d ago"), "{table}");
    assert!(line("bad").contains("MISMATCH"), "{table}");
    assert!(line("ca").contains("n/a (CA)"), "{table}");
    assert!(!line("bundle").contains("expired"), "{table}");

    let (code, json, _) = certsync(&["check", "-o", "json", pki.to_str().unwrap()]);
    assert_eq!(code, 1);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    let row = |name: &str| {
        rows.iter()
            .find(|r| {
                r["certificate"]
                    .as_str()
                    .unwrap()
                    .ends_with(&format!("/{name}.crt"))
            })
            .unwrap()
            .clone()
    };
    assert_eq!(row("good")["problem"], serde_json::Value::Null);
    assert_eq!(row("good")["sans"][0], "good.example");
    assert_eq!(row("bad")["key"], "mismatch");
    assert_eq!(row("old")["problem"], "expired");
    assert_eq!(row("bundle")["problem"], serde_json::Value::Null);
    assert!(
        row("soon")["problem"]
            .as_str()
            .unwrap()
            .starts_with("expires within 30d")
    );

    // Only good material: exit 0; --warn-within decides what is "soon".
    assert_eq!(
        certsync(&["check", pki.join("good.crt").to_str().unwrap()]).0,
        0
    );
    assert_eq!(
        certsync(&[
            "check",
            "--warn-within",
            "5d",
            pki.join("soon.crt").to_str().unwrap()
        ])
        .0,
        0
    );
    let (code, yaml, _) = certsync(&[
        "check",
        "-o",
        "yaml",
        pki.join("good.crt").to_str().unwrap(),
    ]);
    assert_eq!(code, 0);
    assert!(yaml.contains("key: matches"), "{yaml}");
    let (code, _, err) = certsync(&["check", "/nonexistent/pki"]);
    assert_eq!(code, 1);
    assert!(err.contains("/nonexistent/pki"), "{err}");
}

/// `run --once` three times with three pairs: revisions 1..3.
fn target_with_three_revisions(d: &Path) -> (std::path::PathBuf, std::path::PathBuf, Vec<Pair>) {
    let (src, target) = (d.join("src"), d.join("target"));
    let spec = format!("dir:{}={}", src.display(), target.display());
    let pairs: Vec<Pair> = ["one", "two", "three"]
        .iter()
        .map(|n| Pair::new(n))
        .collect();
    for p in &pairs {
        write_pair_files(&src, &p.cert, &p.key);
        assert_eq!(certsync(&["run", "--once", "--sync", &spec]).0, 0);
    }
    (src, target, pairs)
}

#[test]
fn revisions_lists_newest_first_and_rollback_restores_and_refuses() {
    let d = tempfile::tempdir().unwrap();
    let (_src, target, pairs) = target_with_three_revisions(d.path());
    let t = target.to_str().unwrap();
    let (code, table, _) = certsync(&["revisions", t]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("REVISION"), "{table}");
    assert!(
        lines[1].starts_with("3 *") && lines[1].contains("CN=three"),
        "{table}"
    );
    assert!(
        lines[2].starts_with("2 ") && lines[3].starts_with("1 "),
        "{table}"
    );
    let (_, json, _) = certsync(&["revisions", "-o", "json", t]);
    let rows: Vec<serde_json::Value> = serde_json::from_str(&json).unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| r["revision"].as_u64().unwrap())
            .collect::<Vec<_>>(),
        [3, 2, 1]
    );
    assert_eq!(rows[0]["current"], true);

    let (code, _, err) = certsync(&["rollback", t, "--to", "7"]);
    assert_eq!(code, 1);
    assert!(err.contains("revision 7 is not in history"), "{err}");

    let (code, out, err) = certsync(&["rollback", t]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("restored revision 2 as revision 4"), "{out}");
    assert_eq!(read_live(&target).unwrap().1, pairs[1].cert);
    // The CLI does not know the daemon's --keep-revisions: it prunes
    // nothing, so revision 1 is still there to roll back to.
    let (code, out, err) = certsync(&["rollback", t, "--to", "1"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("restored revision 1 as revision 5"), "{out}");
    assert_eq!(read_live(&target).unwrap().1, pairs[0].cert);
    let (code, out, _) = certsync(&["rollback", t, "--to", "3"]);
    assert_eq!(code, 0);
    assert!(out.contains("restored revision 3 as revision 6"), "{out}");
    assert_eq!(read_live(&target).unwrap().2, pairs[2].key);
}

#[test]
fn rollback_refuses_an_expired_revision() {
    let d = tempfile::tempdir().unwrap();
    let (src, target) = (d.path().join("src"), d.path().join("target"));
    let spec = format!("dir:{}={}", src.display(), target.display());
    let brief = Pair::with_validity("brief", -60, 2);
    write_pair_files(&src, &brief.cert, &brief.key);
    assert_eq!(certsync(&["run", "--once", "--sync", &spec]).0, 0);
    let fresh = Pair::new("fresh");
    write_pair_files(&src, &fresh.cert, &fresh.key);
    assert_eq!(certsync(&["run", "--once", "--sync", &spec]).0, 0);
    std::thread::sleep(std::time::Duration::from_secs(3)); // revision 1 expires
    let (code, _, err) = certsync(&["rollback", target.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("refusing revision 1") && err.contains("expired"),
        "{err}"
    );
    assert_eq!(read_live(&target).unwrap().1, fresh.cert, "nothing changed");
}

/// A running certsync keeps the operator's rollback (the source still
/// offers the content rolled back from) and releases it for new content.
#[test]
fn running_certsync_keeps_a_rollback_until_the_source_changes() {
    let d = tempfile::tempdir().unwrap();
    let (src, target, pairs) = target_with_three_revisions(d.path());
    let spec = format!("dir:{}={}", src.display(), target.display());
    // Nothing listens at the hook: a failed attempt shows a reload was made.
    let hook = format!("http://127.0.0.1:{}/reload", free_port());
    let cs = Certsync::start(
        &[
            "run",
            "--debounce",
            "100ms",
            "--resync",
            "300ms",
            "--sync",
            &spec,
            "--reload-url",
            &hook,
            "--reload-retries",
            "0",
            "--reload-quiet",
            "50ms",
        ],
        d.path(),
    );
    cs.wait_log("found current revision on disk");
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert!(
        !cs.log().contains("reload failed"),
        "no reload without a flip"
    );

    let (code, _, err) = certsync(&["rollback", target.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    cs.wait_log("rollback in place");
    cs.wait_log("reload failed"); // the main container is told about the restored pair
    std::thread::sleep(std::time::Duration::from_millis(1200)); // several resyncs
    assert_eq!(
        read_live(&target).unwrap().1,
        pairs[1].cert,
        "the rollback was undone"
    );

    let four = Pair::new("four");
    write_pair_files(&src, &four.cert, &four.key);
    wait_for("new source content published", || {
        read_live(&target).filter(|l| l.1 == four.cert)
    });
    assert!(!target.join("..pin").exists());
}

/// `--log-level` takes a level or `LEVEL,target=LEVEL` directives; a bad
/// level is a usage error naming the flag.
#[test]
fn log_level_takes_per_target_directives() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    write_pair(&src, &Pair::new("log"));
    let sync = format!("dir:{}={}", src.display(), d.path().join("t").display());
    let run = |level: &str| certsync(&["run", "--once", "--log-level", level, "--sync", &sync]);

    let (code, _, err) = run("warn");
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("INFO"), "{err}");
    fs::remove_dir_all(d.path().join("t")).unwrap();
    let (code, _, err) = run("warn,certsync=info");
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains("INFO certsync::sync: published new revision"),
        "{err}"
    );
    let (code, _, err) = run("certsync=loud");
    assert_eq!(code, 64, "{err}");
    assert!(err.contains("--log-level"), "{err}");
}

/// Two host-network static pods on one node must not collide on a default
/// admin port: `run` opens none unless `--admin-addr` asks for one, and a
/// port already taken is refused naming the flag.
#[test]
fn no_admin_port_by_default_and_a_busy_one_names_the_flag() {
    let d = tempfile::tempdir().unwrap();
    // Not through `Certsync::start`, which gives every process a free
    // admin port.
    struct Killed(std::process::Child);
    impl Drop for Killed {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let start = |n: &str| {
        let src = d.path().join(format!("src-{n}"));
        write_pair(&src, &Pair::new(n));
        let sync = format!("dir:{}={}", src.display(), d.path().join(n).display());
        let log = fs::File::create(d.path().join(format!("{n}.log"))).unwrap();
        Killed(
            std::process::Command::new(certsync_bin())
                .args(["run", "--sync", &sync])
                .env_remove("CERTSYNC_ADMIN_ADDR")
                .stderr(log)
                .spawn()
                .unwrap(),
        )
    };
    let mut a = start("a");
    let mut b = start("b");
    for n in ["a", "b"] {
        wait_for("first sync", || read_live(&d.path().join(n)));
    }
    let log = |n: &str| fs::read_to_string(d.path().join(format!("{n}.log"))).unwrap();
    for (cs, n) in [(&mut a, "a"), (&mut b, "b")] {
        assert!(
            cs.0.try_wait().unwrap().is_none(),
            "{n} exited:\n{}",
            log(n)
        );
        assert!(!log(n).contains("admin port listening"), "{}", log(n));
    }

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let src = d.path().join("src-a");
    let sync = format!("dir:{}={}", src.display(), d.path().join("c").display());
    let (code, _, err) = certsync(&["run", "--admin-addr", &addr, "--sync", &sync]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(&addr) && err.contains("in use") && err.contains("--admin-addr"),
        "{err}"
    );
}

/// `run` says at start what it will do: its version, each mapping's source
/// and target directory, the reload method, the API server (no
/// credentials) and the admin address; in JSON the target directory is
/// `target_dir`, never `target` (tracing's module path) nor `dir`.
#[test]
fn run_logs_its_version_and_plan() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    write_pair(&src, &Pair::new("plan"));
    let target = d.path().join("t");
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let server = dead.local_addr().unwrap();
    drop(dead);
    let kubeconfig = support::apiserver::write_kubeconfig(d.path(), &format!("http://{server}"));
    let admin = format!("127.0.0.1:{}", free_port());
    let cs = Certsync::start(
        &[
            "--log-format",
            "json",
            "run",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "--admin-addr",
            &admin,
            "--reload-process",
            "nginx",
            "--sync",
            &format!("dir:{}={},name=web", src.display(), target.display()),
            "--sync",
            &format!("secret:ns1/api={},name=api", d.path().join("api").display()),
        ],
        d.path(),
    );
    wait_for("first sync", || read_live(&target));
    cs.wait_log("published new revision");
    let lines: Vec<serde_json::Value> = cs
        .log()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let find = |message: &str| {
        lines
            .iter()
            .filter(|l| l["message"] == message)
            .cloned()
            .collect::<Vec<_>>()
    };
    let started = find("certsync started");
    assert_eq!(started.len(), 1, "{}", cs.log());
    let s = &started[0];
    assert_eq!(s["version"], env!("CARGO_PKG_VERSION"), "{s}");
    assert_eq!(s["mappings"], 2, "{s}");
    assert_eq!(s["admin_addr"], admin.as_str(), "{s}");
    assert_eq!(s["api_server"], format!("http://{server}"), "{s}");
    assert!(s["reload"].as_str().unwrap().contains("nginx"), "{s}");
    let plan = find("mapping");
    let web = plan.iter().find(|l| l["mapping"] == "web").unwrap();
    assert_eq!(web["source"], format!("dir {}", src.display()), "{web}");
    assert_eq!(web["target_dir"], target.display().to_string(), "{web}");
    let api = plan.iter().find(|l| l["mapping"] == "api").unwrap();
    assert_eq!(api["source"], "secret ns1/api", "{api}");
    let published = &find("published new revision")[0];
    assert_eq!(
        published["target_dir"],
        target.display().to_string(),
        "{published}"
    );
    assert!(published.get("dir").is_none(), "{published}");
    assert!(!cs.log().contains("test-token"), "no credentials logged");
}

/// `certsync run` of one mapping `name` from `D/src` to `D/t`, with
/// `extra` flags, its admin port on a free loopback port: (the daemon, the
/// port).
fn run_dir(d: &Path, name: &str, extra: &[&str]) -> (Certsync, u16) {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let spec = format!(
        "dir:{}={},name={name}",
        d.join("src").display(),
        d.join("t").display()
    );
    let mut args = vec!["run", "--admin-addr", &addr, "--sync", &spec];
    args.extend_from_slice(extra);
    (Certsync::start(&args, d), port)
}

#[path = "operate/source_up.rs"]
mod source_up;
