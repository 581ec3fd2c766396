//! The operator's rollout on a node kubeadm v1.36 made: `certsync
//! kubeadm adopt --set lifetime=8m --set renew=20%-25%`, then adopt again
//! with the defaults, the guide's path to production lifetimes. The
//! 8-minute pairs were kept (they satisfied everything but the lifetime)
//! and renewed at 70-90 % of 8 minutes, with less left than client-go's
//! 5-minute poll of client certificate files: the scheduler and
//! controller-manager logged expired-certificate errors for about a minute.
//! Now the restarted certsync issues every pair again at once with a year,
//! while each old pair has more than those 5 minutes left, says why once
//! per mapping, and then issues nothing more. Needs root and the realkube
//! tools, as tests/kubeadm.rs does (skips without them, fails under
//! `CI=true`).

mod support;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use support::kubeadm_node::{ADOPT_SHORT, Node, kubeadm_cmd, realkube, settled, wait_long};
use support::{certsync_bin, revision_names};

/// A year and certsync's 5-minute backdate.
const YEAR_SPAN: i64 = 365 * 86_400 + 300;

/// client-go re-reads a kubeconfig's client certificate files this often
/// (`CertCallbackRefreshDuration`).
const CLIENT_GO_POLL: i64 = 300;

/// Every target of the configuration adopt wrote, on the host.
fn targets(etc: &Path) -> Vec<PathBuf> {
    let config = std::fs::read_to_string(etc.join("certsync.yaml")).expect("certsync.yaml");
    config
        .lines()
        .filter_map(|l| l.trim().strip_prefix("target: "))
        .map(|t| {
            etc.join(
                t.strip_prefix("/etc/kubernetes/")
                    .expect("under /etc/kubernetes"),
            )
        })
        .collect()
}

/// The live certificate's (notBefore, notAfter).
fn validity(target: &Path) -> Option<(i64, i64)> {
    let pem = std::fs::read(target.join("tls.crt")).ok()?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).ok()?;
    let cert = pem.parse_x509().ok()?;
    Some((
        cert.validity().not_before.timestamp(),
        cert.validity().not_after.timestamp(),
    ))
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64
}

#[test]
fn adopting_again_with_the_defaults_issues_every_pair_with_a_year_at_once() {
    let Some(realkube) = realkube() else { return };
    let image = format!("certsync={}", certsync_bin());
    let node = Node::up(&realkube, "readopt", &["--", "--image", &image]);
    let etc = node.etc();
    let (ok, text) = kubeadm_cmd(&node, &ADOPT_SHORT);
    assert!(ok, "{text}");
    let targets = targets(&etc);
    assert_eq!(targets.len(), 11, "{targets:?}");
    wait_long(
        "certsync's pod and the four components",
        Duration::from_secs(180),
        || {
            settled(&node, 5)?
                .iter()
                .any(|(n, _, _)| n.starts_with("certsync-"))
                .then_some(())
        },
    );
    for t in &targets {
        let (nb, na) = validity(t).expect("a live pair");
        assert_eq!(na - nb, 480 + 48, "{}: 8 minutes and a tenth", t.display());
    }

    let old: Vec<i64> = targets
        .iter()
        .map(|t| validity(t).expect("live").1)
        .collect();
    let (ok, text) = kubeadm_cmd(&node, &["adopt", "--image", "certsync"]);
    assert!(ok, "{text}");
    // adopt issues nothing itself: it waited for the new configuration's
    // pod, which found every 8-minute pair live.
    assert!(
        text.contains("certsync's pod is ready (generation ")
            && text.contains("every target holds a live pair"),
        "{text}"
    );
    wait_long(
        "every pair issued for a year",
        Duration::from_secs(120),
        || {
            targets
                .iter()
                .all(|t| validity(t).is_some_and(|(nb, na)| na - nb == YEAR_SPAN))
                .then_some(())
        },
    );
    let replaced = unix_now();
    for (t, end) in targets.iter().zip(&old) {
        assert!(
            end - replaced > CLIENT_GO_POLL,
            "{}: the 8-minute pair had {} s left when replaced, less than client-go's poll",
            t.display(),
            end - replaced
        );
    }
    let log_of = || {
        let logs = node.dir.join("logs");
        std::fs::read_dir(&logs)
            .expect("logs")
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with("certsync-"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .collect::<String>()
    };
    let log = log_of();
    assert_eq!(
        log.matches("reason=lifetime changed: live 8m, wanted 8760h")
            .count(),
        targets.len(),
        "one reason per mapping:\n{log}"
    );

    // A resync later (1 minute), nothing was issued again.
    let revisions: Vec<_> = targets.iter().map(|t| revision_names(t)).collect();
    std::thread::sleep(Duration::from_secs(70));
    let now: Vec<_> = targets.iter().map(|t| revision_names(t)).collect();
    assert_eq!(now, revisions, "issued again after the re-adoption");
    assert_eq!(
        log_of().matches("lifetime changed").count(),
        targets.len(),
        "{}",
        log_of()
    );
}
