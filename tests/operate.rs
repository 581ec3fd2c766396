//! Operating certsync: the admin port's readiness and metrics, end to end.

mod support;

use std::fs;
use std::path::Path;

use support::certs::Pair;
use support::*;

fn write_pair(dir: &Path, cert: &[u8], key: &[u8]) {
    fs::create_dir_all(dir).unwrap();
    write_atomic(&dir.join("tls.crt"), cert);
    write_atomic(&dir.join("tls.key"), key);
}

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
    // Before the first sync: both sources are missing.
    let body = wait_status(port, "/readyz", 503);
    assert_eq!(
        body,
        "mapping api: no valid revision yet\nmapping web: no valid revision yet\n"
    );
    assert_eq!(http_get(port, "/livez").unwrap().0, 200);

    // One mapping gets a good pair, the other a mismatched one.
    let good = Pair::new("web");
    write_pair(&web, &good.cert, &good.key);
    let (a, b) = (Pair::new("a"), Pair::new("b"));
    write_pair(&api, &a.cert, &b.key);
    wait_for("web synced", || read_live(&d.path().join("t-web")));
    let body = wait_status(port, "/readyz", 503);
    assert_eq!(
        body, "mapping api: no valid revision yet\n",
        "only the broken mapping is listed"
    );

    // Fixed: ready.
    write_pair(&api, &a.cert, &a.key);
    wait_status(port, "/readyz", 200);
}

#[test]
fn metrics_after_a_rotation_a_rejection_and_a_reload() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    let first = Pair::new("first");
    write_pair(&src, &first.cert, &first.key);
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
    write_pair(&src, &second.cert, &second.key);
    wait_for("rotation", || {
        read_live(&d.path().join("t")).filter(|l| l.1 == second.cert)
    });
    write_pair(&src, &second.cert, &Pair::new("other").key);
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

/// A certificate 90% through its life with nothing newer: one warning per
/// revision (not one per resync) and the stale metric set.
#[test]
fn stale_certificate_is_warned_once_and_exposed() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    let old = Pair::with_validity("late", -9 * 86_400, 86_400);
    write_pair(&src, &old.cert, &old.key);
    let port = free_port();
    let spec = format!(
        "dir:{}={},name=late",
        src.display(),
        d.path().join("t").display()
    );
    let cs = Certsync::start(
        &[
            "run",
            "--resync",
            "300ms",
            "--admin-addr",
            &format!("127.0.0.1:{port}"),
            "--sync",
            &spec,
        ],
        d.path(),
    );
    cs.wait_log("past its renewal point");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let warnings = cs.log().matches("past its renewal point").count();
    assert_eq!(warnings, 1, "once per revision, not per resync");
    let m = parse_metrics(&http_get(port, "/metrics").unwrap().1);
    assert_eq!(m["certsync_certificate_stale{mapping=\"late\"}"], 1.0);
}
