//! A changed `lifetime=` reaches the live pair through the real binary: the
//! operator's cautious rollout (`kubeadm adopt --set lifetime=8m`, then
//! adopt again with the defaults) kept the 8-minute pairs and renewed them
//! at 70-90 % of 8 minutes, with less left than client-go's 5-minute poll
//! of client certificate files. Here with `run --once`, as adopt issues:
//! the second configuration issues a pair of its own lifetime at once,
//! saying why; the same configuration again publishes nothing; a pinned
//! rollback to the old lifetime's pair is never issued over, by `--once`
//! or the daemon, until the pin is removed.

mod support;

use std::path::Path;
use std::process::{Command, Output};

use support::certs::{ca_files, ca_spec as spec};
use support::*;

/// certsync with `args`, without any kubeconfig; it must succeed.
fn certsync_ok(args: &[&str]) -> Output {
    let out = Command::new(certsync_bin())
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "certsync {args:?}: {log}");
    out
}

fn once(spec: &str) -> Output {
    certsync_ok(&["run", "--once", "--sync", spec])
}

/// notAfter - notBefore of the live certificate, in seconds.
fn live_span(target: &Path) -> i64 {
    let (_, cert, _) = read_live(target).expect("a live pair");
    let (_, pem) = x509_parser::pem::parse_x509_pem(&cert).unwrap();
    let cert = pem.parse_x509().unwrap();
    cert.validity().not_after.timestamp() - cert.validity().not_before.timestamp()
}

#[test]
fn a_changed_lifetime_is_issued_at_once_and_only_once() {
    let d = tempfile::tempdir().unwrap();
    let prefix = ca_files(d.path(), 86_400);
    let target = d.path().join("target");
    let ten = spec(&prefix, &target, ",lifetime=10m");
    let thirty = spec(&prefix, &target, ",lifetime=30m");

    once(&ten);
    // 10 minutes and the backdate (a tenth of it).
    assert_eq!(live_span(&target), 600 + 60);
    let (first_rev, first, _) = read_live(&target).unwrap();

    let out = once(&thirty);
    let log = String::from_utf8_lossy(&out.stderr);
    let (rev, cert, _) = read_live(&target).unwrap();
    assert_ne!(cert, first, "the 10-minute pair was kept: {log}");
    assert_ne!(rev, first_rev);
    assert_eq!(live_span(&target), 1800 + 180, "{log}");
    assert_eq!(
        log.matches("lifetime changed: live 10m, wanted 30m")
            .count(),
        1,
        "{log}"
    );

    // The same configuration again: the pair satisfies it.
    let out = once(&thirty);
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(read_live(&target).unwrap().1, cert, "{log}");
    assert_eq!(revision_names(&target).len(), 2, "{log}");
    assert!(!log.contains("lifetime changed"), "{log}");

    // Rolled back to the 10-minute pair (pinned): neither --once nor the
    // daemon issues over the pin, though the lifetime differs.
    let t = target.to_str().unwrap();
    certsync_ok(&["rollback", t]);
    assert_eq!(read_live(&target).unwrap().1, first);
    let out = once(&thirty);
    assert_eq!(
        read_live(&target).unwrap().1,
        first,
        "--once issued over the pin: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut cmd = Command::new(certsync_bin());
    cmd.args(["run", "--resync", "1s", "--sync", &thirty])
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST");
    let cs = Certsync::start_with(&mut cmd, d.path());
    cs.wait_log("pinned by a rollback");
    std::thread::sleep(std::time::Duration::from_secs(2));
    assert_eq!(read_live(&target).unwrap().1, first, "{}", cs.log());
    assert!(!cs.log().contains("certificate issued"), "{}", cs.log());

    // The pin removed: the daemon issues the 30-minute pair, once.
    std::fs::remove_file(target.join("..pin")).unwrap();
    let (_, renewed, _) = wait_for("a 30-minute pair after the pin", || {
        read_live(&target).filter(|(_, c, _)| *c != first)
    });
    assert_ne!(renewed, cert);
    assert_eq!(live_span(&target), 1800 + 180, "{}", cs.log());
    cs.wait_log("certificate is current; renewal scheduled");
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(
        cs.log().matches("certificate issued").count(),
        1,
        "{}",
        cs.log()
    );
}
