//! `ca:` mappings end to end through the real binary, with no kubeconfig
//! and no API server: issuance and renewal with lifetimes of seconds, a
//! restart in the middle, the cap at the CA's expiry and its metrics, the
//! refusals (loose CA key modes, a key that is not the CA's, a certificate
//! that is not a CA), a broken CA key that never costs the good files, and
//! a consumer watching `tls.crt` with inotify (as kube-apiserver does) that
//! sees every renewal.

mod support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use support::certs::{Pair, ca_files};
use support::*;

use support::certs::ca_spec as spec;

/// `certsync run` of `spec` with short windows, without any kubeconfig.
fn start(spec: &str, extra: &[&str], dir: &Path) -> Certsync {
    let mut cmd = Command::new(certsync_bin());
    cmd.args(["run", "--debounce", "100ms"]);
    if !extra.contains(&"--csr-renew-floor") {
        cmd.args(["--csr-renew-floor", "1s"]);
    }
    cmd.args(["--sync", spec])
        .args(extra)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST");
    Certsync::start_with(&mut cmd, dir)
}

/// [`start`] with the admin port on a free port, returned.
fn start_with_admin(spec: &str, dir: &Path) -> (Certsync, u16) {
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    (start(spec, &["--admin-addr", &addr], dir), port)
}

fn once(spec: &str) -> std::process::Output {
    Command::new(certsync_bin())
        .args(["run", "--once", "--sync", spec])
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap()
}

/// The live certificate, once it differs from every one in `seen`.
fn next_cert(target: &Path, seen: &[Vec<u8>]) -> (Vec<u8>, Vec<u8>) {
    wait_for("a new live certificate", || {
        let (_, cert, key) = read_live(target)?;
        (!seen.contains(&cert)).then_some((cert, key))
    })
}

/// openssl, independently of certsync, verifies the live chain (skipped,
/// saying so, without openssl; a failure under CI).
fn openssl_verifies(target: &Path) {
    if !tools::have(&["openssl"]) {
        return;
    }
    let out = Command::new("openssl")
        .args(["verify", "-CAfile"])
        .arg(target.join("ca.crt"))
        .arg(target.join("tls.crt"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn issues_and_renews_with_a_short_lifetime_and_no_kubeconfig() {
    let d = tempfile::tempdir().unwrap();
    let prefix = ca_files(d.path(), 3600);
    let target = d.path().join("target");
    let cs = start(&spec(&prefix, &target, ",lifetime=5s"), &[], d.path());
    let (c1, k1) = next_cert(&target, &[]);
    openssl_verifies(&target);
    let ca_der = |pem: &[u8]| {
        rustls_pki_types::CertificateDer::pem_slice_iter(pem)
            .map(|c| c.unwrap().to_vec())
            .collect::<Vec<_>>()
    };
    use rustls_pki_types::pem::PemObject;
    assert_eq!(
        ca_der(&fs::read(target.join("ca.crt")).unwrap()),
        ca_der(&fs::read(prefix.with_extension("crt")).unwrap())
    );
    let (c2, k2) = next_cert(&target, std::slice::from_ref(&c1));
    assert_ne!(k1, k2, "a new key on every renewal by default");
    openssl_verifies(&target);
    let (_, k3) = next_cert(&target, &[c1, c2]);
    assert_ne!(k2, k3);
    let log = cs.log();
    assert!(log.matches("certificate issued").count() >= 3, "{log}");
    assert!(
        !log.contains("kubeconfig"),
        "a ca:-only run needs no API: {log}"
    );
    // The CA key's bytes never reach a revision (read once certsync has
    // stopped: its 5 s renewals prune history under a running snapshot).
    drop(cs);
    let ca_key = fs::read(prefix.with_extension("key")).unwrap();
    let body = ca_key.split(|c| *c == b'\n').nth(1).unwrap().to_vec();
    for (path, _, bytes) in snapshot(&target) {
        assert!(
            !bytes.windows(body.len()).any(|w| w == body.as_slice()),
            "{} holds the CA key",
            path.display()
        );
    }
}

/// The live revision is the state: a restart with a good pair issues
/// nothing, and renews when it is due.
#[test]
fn a_restart_issues_nothing_while_the_pair_is_good_and_renews_when_due() {
    let d = tempfile::tempdir().unwrap();
    let prefix = ca_files(d.path(), 3600);
    let target = d.path().join("target");
    let sync = spec(&prefix, &target, ",lifetime=12s");
    let first = start(&sync, &[], d.path());
    let (c1, _) = next_cert(&target, &[]);
    drop(first); // SIGKILL, as a node reboot or OOM kill would
    let second = start(&sync, &[], d.path());
    second.wait_log("certificate is current; renewal scheduled");
    assert!(
        !second.log().contains("certificate issued"),
        "{}",
        second.log()
    );
    assert_eq!(read_live(&target).unwrap().1, c1);
    assert_eq!(revision_names(&target).len(), 1);
    next_cert(&target, std::slice::from_ref(&c1));
    assert_eq!(second.log().matches("certificate issued").count(), 1);
}

/// A restart on a live pair that needs nothing issued: the source (the CA
/// files, read and judged) is up from the first check, so an alert on
/// `certsync_source_up` does not fire after every upgrade; a CA file
/// that can no longer be read makes it 0 at the next check.
#[test]
fn a_restart_on_a_live_pair_reports_the_source_up_and_a_lost_ca_down() {
    let d = tempfile::tempdir().unwrap();
    let prefix = ca_files(d.path(), 3600);
    let target = d.path().join("target");
    let sync = spec(&prefix, &target, ",lifetime=1h,name=live");
    let first = start(&sync, &[], d.path());
    let (c1, _) = next_cert(&target, &[]);
    drop(first);
    let port = free_port();
    let addr = format!("127.0.0.1:{port}");
    let second = start(&sync, &["--admin-addr", &addr, "--resync", "1s"], d.path());
    second.wait_log("certificate is current; renewal scheduled");
    let up = |want: f64| {
        wait_for("certsync_source_up", || {
            let (_, body) = http_get(port, "/metrics")?;
            let m = parse_metrics(&body);
            (m.get("certsync_source_up{mapping=\"live\"}") == Some(&want)).then_some(())
        })
    };
    up(1.0);
    assert!(
        !second.log().contains("certificate issued"),
        "{}",
        second.log()
    );
    assert_eq!(read_live(&target).unwrap().1, c1);
    // The CA certificate gone: the next recheck cannot read the source.
    fs::rename(prefix.with_extension("crt"), d.path().join("moved-ca.crt")).unwrap();
    up(0.0);
    assert_eq!(read_live(&target).unwrap().1, c1, "the live pair stays");
}

/// `certsync rollback --to 0` back to the pair found in the target before
/// certsync (kubeadm's, with no ca.crt beside it) holds: neither `--once`
/// nor a restarted daemon issues over the pin, `revisions` says so, and
/// removing the pin lets the mapping issue again.
#[test]
fn a_rollback_to_the_found_pair_holds_across_restarts() {
    let d = tempfile::tempdir().unwrap();
    let prefix = ca_files(d.path(), 3600);
    // kubeadm's pair: issued by the same CA, plain files in the target.
    let made = d.path().join("made");
    assert!(once(&spec(&prefix, &made, "")).status.success());
    let target = d.path().join("target");
    fs::create_dir(&target).unwrap();
    let (_, found_cert, _) = read_live(&made).unwrap();
    fs::write(target.join("tls.crt"), &found_cert).unwrap();
    fs::copy(made.join("tls.key"), target.join("tls.key")).unwrap();
    let sync = spec(&prefix, &target, "");
    let out = once(&sync);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(read_live(&target).unwrap().1, found_cert);

    let certsync = |args: &[&str]| {
        let out = Command::new(certsync_bin()).args(args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let t = target.to_str().unwrap();
    let (ok, text) = certsync(&["rollback", "--to", "0", t]);
    assert!(ok, "{text}");
    assert_eq!(read_live(&target).unwrap().1, found_cert);

    let out = once(&sync);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        read_live(&target).unwrap().1,
        found_cert,
        "--once issued over the pin: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cs = start(&sync, &["--resync", "1s"], d.path());
    cs.wait_log("pinned by a rollback");
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_eq!(read_live(&target).unwrap().1, found_cert, "{}", cs.log());
    assert!(!cs.log().contains("certificate issued"), "{}", cs.log());
    let (ok, text) = certsync(&["revisions", t]);
    assert!(ok && text.contains("pinned"), "{text}");
    drop(cs);

    fs::remove_file(target.join("..pin")).unwrap();
    let _cs = start(&sync, &[], d.path());
    next_cert(&target, std::slice::from_ref(&found_cert));
}

/// A 3-minute lifetime under the default 5-minute renewal floor is renewed
/// at its own renewal point, before it expires (the floor held it back past
/// expiry).
#[test]
fn a_short_lifetime_is_renewed_before_the_floor_and_before_expiry() {
    let d = tempfile::tempdir().unwrap();
    let prefix = ca_files(d.path(), 3600);
    let target = d.path().join("target");
    let cs = start(
        &spec(&prefix, &target, ",lifetime=3m,renew=10%-20%"),
        &["--csr-renew-floor", "5m"],
        d.path(),
    );
    let (c1, _) = next_cert(&target, &[]);
    // Renewal point: 18 to 36 s after issuance; the floor would be 300 s.
    let start = std::time::Instant::now();
    loop {
        let (_, cert, _) = read_live(&target).unwrap_or_default();
        if !cert.is_empty() && cert != c1 {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(90),
            "not renewed 90 s after issuance (renewal point 18-36 s): {}",
            cs.log()
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(!cs.log().contains("renewal held back"), "{}", cs.log());
}

/// Honest health: a pair past its renewal point whose renewal fails (the
/// CA key turned 0644) makes /readyz 503 naming the mapping and why, and
/// the same error is logged once at error level, then at debug. /readyz
/// stayed 200 with the certificate expired, and every retry logged it.
#[test]
fn failing_renewal_past_the_renewal_point_is_not_ready_and_logged_once() {
    let d = tempfile::tempdir().unwrap();
    let prefix = ca_files(d.path(), 3600);
    let target = d.path().join("target");
    let (cs, port) = start_with_admin(&spec(&prefix, &target, ",lifetime=4s,name=short"), d.path());
    next_cert(&target, &[]);
    wait_for("ready", || {
        (http_get(port, "/readyz")?.0 == 200).then_some(())
    });
    let key = prefix.with_extension("key");
    fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
    let body = wait_for("not ready", || {
        let (code, body) = http_get(port, "/readyz")?;
        (code == 503).then_some(body)
    });
    assert!(
        body.contains("mapping short") && body.contains("0644"),
        "{body}"
    );
    // Retries at 2, 4, 8 s: the same error, logged once at error level.
    wait_for("three attempts", || {
        (cs.log().matches("mode 0644").count() >= 3).then_some(())
    });
    let log = cs.log();
    let at_error = log
        .lines()
        .filter(|l| l.contains(" ERROR ") && l.contains("mode 0644"))
        .count();
    assert_eq!(at_error, 1, "{log}");
}

/// A CA with an hour left: the certificate ends with it, a warning says
/// so, and the metrics show the CA's TTL and the cap.
#[test]
fn the_lifetime_is_capped_at_the_cas_expiry_with_metrics() {
    let d = tempfile::tempdir().unwrap();
    let prefix = ca_files(d.path(), 3600);
    let target = d.path().join("target");
    let (cs, port) = start_with_admin(&spec(&prefix, &target, ",name=capped"), d.path());
    next_cert(&target, &[]);
    cs.wait_log("the CA expires before this certificate's renewal point");
    let m = wait_for("metrics", || {
        let (_, body) = http_get(port, "/metrics")?;
        let m = parse_metrics(&body);
        // The cap is recorded at issuance, the certificate's TTL once it
        // is published: wait for both.
        (m.contains_key("certsync_ca_lifetime_capped{mapping=\"capped\"}")
            && m.get("certsync_certificate_ttl_seconds{mapping=\"capped\"}")
                .is_some_and(|ttl| *ttl > 0.0))
        .then_some(m)
    });
    assert_eq!(m["certsync_ca_lifetime_capped{mapping=\"capped\"}"], 1.0);
    let ca_ttl = m["certsync_ca_certificate_ttl_seconds{mapping=\"capped\"}"];
    assert!((3500.0..=3600.0).contains(&ca_ttl), "{ca_ttl}");
    let ttl = m["certsync_certificate_ttl_seconds{mapping=\"capped\"}"];
    assert!((ca_ttl - ttl).abs() < 5.0, "leaf {ttl}, CA {ca_ttl}");
}

/// The CA key and certificate are checked before anything is signed.
#[test]
fn loose_modes_a_foreign_key_and_a_non_ca_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let prefix = ca_files(d.path(), 3600);
    let key = prefix.with_extension("key");
    let t = |n: &str| d.path().join(n);

    fs::set_permissions(&key, fs::Permissions::from_mode(0o640)).unwrap();
    let out = once(&spec(&prefix, &t("loose"), ""));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains(&key.display().to_string()) && err.contains("mode 0640"),
        "{err}"
    );
    assert!(read_live(&t("loose")).is_none());
    let out = once(&spec(&prefix, &t("allowed"), ",allow-loose-ca-key"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(read_live(&t("allowed")).is_some());
    fs::set_permissions(&key, fs::Permissions::from_mode(0o600)).unwrap();

    let other = Pair::new("other");
    let foreign = d.path().join("foreign.key");
    fs::write(&foreign, &other.key).unwrap();
    fs::set_permissions(&foreign, fs::Permissions::from_mode(0o600)).unwrap();
    let sync = format!(
        "{},key={}",
        spec(&prefix, &t("foreign"), ""),
        foreign.display()
    );
    let err = String::from_utf8_lossy(&once(&sync).stderr).into_owned();
    assert!(err.contains("not the key of the CA certificate"), "{err}");

    // A leaf (CA:FALSE) as the CA, with its own key.
    let leaf = d.path().join("leaf");
    fs::write(leaf.with_extension("crt"), &other.cert).unwrap();
    fs::write(leaf.with_extension("key"), &other.key).unwrap();
    fs::set_permissions(
        leaf.with_extension("key"),
        fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let err = String::from_utf8_lossy(&once(&spec(&leaf, &t("leaf"), "")).stderr).into_owned();
    assert!(err.contains("not usable as a CA"), "{err}");
    for n in ["foreign", "leaf"] {
        assert!(read_live(&t(n)).is_none(), "{n}");
    }
}

/// A CA key broken after a good issuance: a clear error, the last good
/// files stay; mended, renewal resumes.
#[test]
fn a_broken_ca_key_never_costs_the_good_files() {
    let d = tempfile::tempdir().unwrap();
    let prefix = ca_files(d.path(), 3600);
    let target = d.path().join("target");
    let key = prefix.with_extension("key");
    let good_key = fs::read(&key).unwrap();
    let cs = start(&spec(&prefix, &target, ",lifetime=4s"), &[], d.path());
    let (c1, k1) = next_cert(&target, &[]);
    fs::write(
        &key,
        b"-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n",
    )
    .unwrap();
    cs.wait_log("issuing a certificate failed; the live files stay");
    let log = cs.log();
    let line = log
        .lines()
        .find(|l| l.contains("issuing a certificate failed"))
        .unwrap();
    assert!(line.contains(&key.display().to_string()), "{line}");
    let (_, cert, k) = read_live(&target).unwrap();
    assert_eq!(
        (cert.as_slice(), k.as_slice()),
        (c1.as_slice(), k1.as_slice())
    );
    fs::write(&key, good_key).unwrap();
    next_cert(&target, &[c1]);
}

/// What kube-apiserver's dynamic certificate loader does: an inotify watch
/// on `tls.crt`, re-added after each event, the file re-read then. Every
/// renewal reaches it, with a new key and with keep-key.
#[test]
fn a_consumer_watching_tls_crt_sees_every_renewal() {
    use nix::sys::inotify::{AddWatchFlags as F, InitFlags, Inotify};
    for keep in ["", ",keep-key"] {
        let d = tempfile::tempdir().unwrap();
        let prefix = ca_files(d.path(), 3600);
        let target = d.path().join("target");
        let sync = spec(&prefix, &target, &format!(",lifetime=3s{keep}"));
        assert!(once(&sync).status.success());
        let cert_path: PathBuf = target.join("tls.crt");
        let ino = Inotify::init(InitFlags::IN_NONBLOCK).unwrap();
        let mut wd = ino.add_watch(&cert_path, F::IN_ALL_EVENTS).unwrap();
        let mut seen = vec![fs::read(&cert_path).unwrap()];
        let cs = start(&sync, &[], d.path());
        let mut live = vec![read_live(&target).unwrap().1];
        while live.len() < 4 {
            let (c, _) = next_cert(&target, &live);
            live.push(c);
            // The watcher must hear of it, and read the new file then.
            let got = wait_for("the watcher to see the flip", || {
                let events = ino.read_events().unwrap_or_default();
                let woke = events
                    .iter()
                    .any(|e| e.wd == wd && e.mask.intersects(F::IN_MOVE_SELF | F::IN_DELETE_SELF));
                if !woke {
                    return None;
                }
                let _ = ino.rm_watch(wd);
                wd = ino.add_watch(&cert_path, F::IN_ALL_EVENTS).unwrap();
                Some(fs::read(&cert_path).unwrap())
            });
            seen.push(got);
        }
        assert_eq!(seen, live, "keep={keep:?}: the watcher read every renewal");
        // Stopped first: a renewal every few seconds prunes the oldest
        // revision, which could go between listing `..history` and reading it.
        assert!(cs.terminate().success());
        let key = read_live(&target).unwrap().2;
        let keys: Vec<Vec<u8>> = fs::read_dir(target.join("..history"))
            .unwrap()
            .map(|e| fs::read(e.unwrap().path().join("tls.key")).unwrap())
            .collect();
        assert!(!keys.is_empty(), "keep={keep:?}: revisions kept");
        assert_eq!(
            keys.iter().all(|k| *k == key),
            !keep.is_empty(),
            "keep={keep:?}: every earlier revision has the live key only with keep-key"
        );
    }
}

/// Attack (on the renewal floor): a live pair that stops satisfying the
/// mapping at a recheck (here its CA is replaced; a template someone flips
/// does the same) was reissued at every recheck, each a new revision and a
/// reload. At once, but never sooner than the floor after the last
/// issuance. (A lifetime shorter than the recheck no longer shows it: such
/// a pair is renewed at its own renewal point, before it is unfit.)
#[test]
fn a_pair_unfit_at_every_recheck_is_not_reissued_within_the_floor() {
    let d = tempfile::tempdir().unwrap();
    let prefix = ca_files(d.path(), 3600);
    let target = d.path().join("target");
    let cs = start(
        &spec(&prefix, &target, ",lifetime=1h"),
        &["--resync", "500ms", "--csr-renew-floor", "1h"],
        d.path(),
    );
    next_cert(&target, &[]);
    assert_eq!(ca_files(d.path(), 3600), prefix, "a new CA in its place");
    std::thread::sleep(std::time::Duration::from_secs(5));
    let log = cs.log();
    assert_eq!(log.matches("certificate issued").count(), 1, "{log}");
    assert!(
        log.contains("issued less than the renewal floor ago"),
        "{log}"
    );
}

/// (notBefore, notAfter) of a PEM certificate, in Unix seconds.
fn validity(pem: &[u8]) -> (i64, i64) {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem).unwrap();
    let cert = pem.parse_x509().unwrap();
    (
        cert.validity().not_before.timestamp(),
        cert.validity().not_after.timestamp(),
    )
}

/// With the lifetime lowered under a running pair, the first pair issued
/// at the renewal point ended before the live one and was refused, and the
/// renewal floor (counted from that issuance) held the next one back past
/// the live pair's end: kube-apiserver served an expired certificate for
/// 35 s. Since a pair issued with another lifetime no longer satisfies the
/// mapping (the rollout adopted again with the defaults), the
/// restart issues one of the new lifetime at once, while the live pair is
/// valid, and publishes it though it ends first: the configuration asks
/// for it, and the floor has no say at start.
#[test]
fn a_lowered_lifetime_never_lets_the_live_pair_expire_under_the_floor() {
    let d = tempfile::tempdir().unwrap();
    let prefix = ca_files(d.path(), 3600);
    let target = d.path().join("target");
    let first = start(
        &spec(&prefix, &target, ",lifetime=40s,renew=95%-95%"),
        &[],
        d.path(),
    );
    let (c1, _) = next_cert(&target, &[]);
    drop(first);
    let (_, c1_end) = validity(&c1);
    let second = start(
        &spec(&prefix, &target, ",lifetime=20s,renew=50%-50%"),
        &["--csr-renew-floor", "5m"],
        d.path(),
    );
    let (c2, _) = next_cert(&target, std::slice::from_ref(&c1));
    let (c2_start, c2_end) = validity(&c2);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    assert!(
        now < c1_end && c2_start <= now && c2_end - c2_start == 22,
        "c2 {c2_start}..{c2_end} (20 s and 2 s backdate) issued at once while c1 (until {c1_end}) was valid: {}",
        second.log()
    );
    assert!(
        second
            .log()
            .contains("lifetime changed: live 40s, wanted 20s"),
        "{}",
        second.log()
    );
}
