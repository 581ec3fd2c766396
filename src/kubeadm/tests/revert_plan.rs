//! revert's plan: what it refuses before changing anything, and what
//! `--dry-run` says it would do, writing nothing.

use super::adopted::*;
use super::*;

#[tokio::test]
async fn revert_refuses_what_it_cannot_issue_again_or_the_backup_lacks() {
    // kubeadm's apiserver.crt ends within a day and the CA key is not
    // there (or not the CA's): refused, naming both, nothing changed.
    let dir = adopted_node();
    let d = dir.path();
    std::fs::write(
        plan::backup_path(d, BACKUP, "/etc/kubernetes/pki/apiserver.crt"),
        pair_ending(time::Duration::hours(2)).0,
    )
    .expect("crt");
    std::fs::write(
        d.join("pki/ca.key"),
        rcgen::KeyPair::generate().expect("key").serialize_pem(),
    )
    .expect("key");
    for dry_run in [true, false] {
        let why = revert_refusal(&RevertOptions {
            dry_run,
            ..revert_options(d)
        })
        .await;
        let RevertError::Reissue { at, ca, source, .. } = &why else {
            panic!("{why}");
        };
        assert!(at.ends_with("pki/apiserver.crt"), "{why}");
        assert_eq!(ca, "/etc/kubernetes/pki/ca.crt");
        assert!(
            source
                .to_string()
                .contains("not the key of the CA certificate"),
            "{why}"
        );
    }

    // A node adopted before adopt backed up kubeadm's pairs and the
    // components' kubeconfigs: their live copies are certsync's to write,
    // so never handed back nor issued again: refused, naming them.
    let dir = adopted_node();
    let d = dir.path();
    let mut state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(host(d, plan::STATE)).expect("state")).expect("json");
    state["pairs"]
        .as_object_mut()
        .expect("pairs")
        .remove("/etc/kubernetes/pki/etcd/peer");
    state["kubeconfigs"]
        .as_object_mut()
        .expect("kubeconfigs")
        .remove("/etc/kubernetes/scheduler.conf");
    std::fs::write(host(d, plan::STATE), state.to_string()).expect("state");
    match revert_refusal(&revert_options(d)).await {
        RevertError::Planted(r) => match *r {
            Refusal::Unrecorded { missing } => assert_eq!(
                missing,
                [
                    "/etc/kubernetes/scheduler.conf",
                    "/etc/kubernetes/pki/etcd/peer.crt"
                ]
            ),
            other => panic!("{other}"),
        },
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn revert_and_adopt_go_on_without_an_api_server() {
    // Neither changes anything beyond this node's files: with no API server
    // behind admin.conf (it names a port that refuses), revert hands the
    // node back.
    let dir = adopted_node();
    let d = dir.path();
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(out.ends_with("reverted\n"), "{out}");
    assert!(!out.contains("ClusterConfiguration"), "{out}");
    assert_kubeadms_manifests(d);

    // adopt adds nothing to the ClusterConfiguration (the adoption is the
    // node's own; a joining node gets kubeadm's manifests), so it plans,
    // and would go on, without the API server.
    let dir = node_dir();
    let out = adopt(&options(dir.path()))
        .await
        .expect("adopt without the API server");
    assert!(
        out.contains("ClusterConfiguration (kubeadm-config): stays kubeadm's;"),
        "{out}"
    );
}

/// The words revert's real run starts a line with: what it did. A dry run
/// starts none of its lines with one: a dry run in the past tense reads as
/// if it had changed the node.
const DONE: [&str; 8] = [
    "restored",
    "removed",
    "moved",
    "took",
    "kept",
    "purged",
    "reverted",
    "--force: handing",
];

/// Checks that `out` is a dry run's: no line says it did something, these
/// lines are there, and the last says nothing was changed.
fn assert_dry_run(out: &str, lines: &[String]) {
    for line in out.lines() {
        assert!(
            !DONE.iter().any(|w| line.trim_start().starts_with(w)),
            "in the past tense: {line:?} in\n{out}"
        );
    }
    for line in lines {
        assert!(out.contains(line.as_str()), "{line:?} not in\n{out}");
    }
    assert!(out.ends_with("dry run: nothing was changed\n"), "{out}");
}

#[tokio::test]
async fn revert_dry_run_checks_and_says_what_it_would_do_writing_nothing() {
    let dir = adopted_node();
    let d = dir.path();
    for purge in [false, true] {
        let out = dry_run(RevertOptions {
            purge,
            ..revert_options(d)
        })
        .await;
        let certsyncs = if purge {
            "would purge certsync's configuration, kubeconfigs, targets and CA bundles".to_owned()
        } else {
            format!(
                "would move certsync's configuration, kubeconfigs, targets and CA bundles (pki/ca-bundle.crt, pki/etcd/ca-bundle.crt) into {BACKUP}/"
            )
        };
        assert_dry_run(
            &out,
            &[
                format!("would restore /etc/kubernetes/admin.conf from {BACKUP}/"),
                format!(
                    "would restore /etc/kubernetes/manifests/kube-apiserver.yaml from {BACKUP}/"
                ),
                certsyncs,
            ],
        );
    }
    // A real run says what it did.
    let out = revert(&revert_options(d)).await.expect("revert");
    for line in [
        format!("restored /etc/kubernetes/admin.conf from {BACKUP}/"),
        format!("restored /etc/kubernetes/manifests/kube-apiserver.yaml from {BACKUP}/"),
        format!(
            "moved certsync's configuration, kubeconfigs, targets and CA bundles (pki/ca-bundle.crt, pki/etcd/ca-bundle.crt) into {BACKUP}/"
        ),
    ] {
        assert!(out.contains(&line), "{line}: {out}");
    }
    assert!(
        out.ends_with("reverted\n") && !out.contains("would "),
        "{out}"
    );
}

#[tokio::test]
async fn revert_says_which_kubeconfigs_get_the_renewed_ca_beside_kubeadms() {
    // pki/ca.crt renewed since adoption: kubeadm's kubeconfigs are handed
    // back trusting it too, and each line says so (an operator read
    // `restored admin.conf` as kubeadm's bytes unchanged).
    let dir = adopted_node();
    let d = dir.path();
    let ca = host(d, "/etc/kubernetes/pki/ca.crt");
    // kubeadm's admin.conf embeds the CA certificate it was made with.
    let kept = plan::backup_path(d, BACKUP, "/etc/kubernetes/admin.conf");
    let b64 = base64::engine::general_purpose::STANDARD;
    let old_ca = base64::Engine::encode(&b64, std::fs::read(&ca).expect("ca.crt"));
    let text = std::fs::read_to_string(&kept).expect("kubeadm's admin.conf");
    let server = "{server: \"https://127.0.0.1:1\"}";
    assert!(text.contains(server), "{text}");
    let with_ca =
        format!("{{server: \"https://127.0.0.1:1\", certificate-authority-data: {old_ca}}}");
    std::fs::write(&kept, text.replacen(server, &with_ca, 1)).expect("write");
    let now = std::time::SystemTime::now();
    let ends = crate::validate::unix_seconds(now) + 3650 * 86_400;
    let renewal = crate::source::ca::renew_ca(&ca, &ca.with_extension("key"), ends, now)
        .expect("renewed with its own key");
    std::fs::write(&ca, crate::pem::encode("CERTIFICATE", &renewal)).expect("ca.crt");
    let added = ", with the renewed CA certificate (pki/ca.crt) beside kubeadm's CA data";
    let out = dry_run(revert_options(d)).await;
    assert!(
        out.contains(&format!(
            "would restore /etc/kubernetes/admin.conf from {BACKUP}/{added}\n"
        )),
        "{out}"
    );
    assert!(
        !out.contains(&format!("apiserver.crt from {BACKUP}/{added}")),
        "only kubeconfigs: {out}"
    );
    revert(&revert_options(d)).await.expect("revert");
    let admin = std::fs::read_to_string(host(d, "/etc/kubernetes/admin.conf")).expect("admin");
    let config = crate::source::client::parse_kubeconfig(&admin).expect("kubeconfig");
    let data = config.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.certificate_authority_data.clone())
        .expect("CA data");
    let pem = base64::Engine::decode(&b64, data.trim()).expect("base64");
    assert!(
        super::trust::ders(&pem).contains(&renewal),
        "admin.conf trusts the renewal"
    );
}

#[tokio::test]
async fn adopt_dry_run_says_what_it_would_do_and_that_nothing_was_changed() {
    // adopt's dry run prints the plan (its own wording: create, replace,
    // renew in place) and ends as revert's does.
    let dir = node_dir();
    let before = snapshot(dir.path());
    let out = adopt(&options(dir.path())).await.expect("dry run");
    assert!(before == snapshot(dir.path()), "dry run wrote: {out}");
    assert_dry_run(&out, &["create /etc/kubernetes/certsync.yaml".to_owned()]);
}

#[tokio::test]
async fn a_manifest_revert_cannot_read_is_refused_before_the_first_change() {
    // A manifest that is no longer adopt's (a `kubeadm upgrade` rewrote
    // it) and is not a Pod: revert takes adopt's flags out of such a one,
    // so it cannot go on. Found by the plan, before certsync's pod or any
    // of kubeadm's files is touched: refused, nothing changed.
    let dir = adopted_node();
    let d = dir.path();
    let scheduler = "/etc/kubernetes/manifests/kube-scheduler.yaml";
    std::fs::write(host(d, scheduler), "kind: Deployment\n").expect("write");
    for dry_run in [true, false] {
        let before = snapshot(d);
        let e = revert(&RevertOptions {
            dry_run,
            ..revert_options(d)
        })
        .await
        .expect_err("refused");
        assert!(
            matches!(&e, KubeadmError::File { path, .. } if *path == host(d, scheduler)),
            "dry_run={dry_run}: {e:?}"
        );
        assert!(before == snapshot(d), "dry_run={dry_run}: the node changed");
    }
}

#[tokio::test]
async fn the_real_run_says_in_the_past_tense_what_the_dry_run_said_it_would_do() {
    let dir = adopted_node();
    let d = dir.path();
    let would = dry_run(revert_options(d)).await;
    let did = revert(&revert_options(d)).await.expect("revert");
    let past = [
        ("would take", "took"),
        ("would remove", "removed"),
        ("would issue", "issued"),
        ("would restore", "restored"),
        ("would move", "moved"),
        ("would leave", "left"),
        ("empty once certsync's files are out", "now empty"),
    ];
    let mut expected: String = would
        .lines()
        .filter(|l| !l.starts_with("dry run:"))
        .map(|l| {
            past.iter()
                .fold(l.to_owned(), |l, (w, p)| l.replacen(w, p, 1))
                + "\n"
        })
        .collect();
    expected.push_str("reverted\n");
    assert!(would.contains("would restore "), "{would}");
    assert_eq!(did, expected);
}
