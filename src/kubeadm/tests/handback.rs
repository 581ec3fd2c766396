//! What revert hands back in place of kubeadm's kubeconfigs and pairs
//! (the copy that lasts longer, only when it is sound), and revert against
//! a node a compromised certsync container changed.

use std::path::Path;

use super::revert::{
    BACKUP, CA, adopted_node, cert_ending, forged_ending, forged_kubeconfig, kubeconfig_ending,
    pair_ending, revert_options, revert_refusal, snapshot,
};
use super::*;

#[tokio::test]
async fn revert_hands_back_the_admin_conf_that_lasts_longer_and_judges_it() {
    // kubeadm's admin.conf in the backup has expired; certsync's current
    // one lasts 10 minutes: either way an admin.conf that dies today.
    let dir = adopted_node();
    let d = dir.path();
    let backup = plan::backup_path(d, BACKUP, "/etc/kubernetes/admin.conf");
    std::fs::write(&backup, kubeconfig_ending(-time::Duration::hours(1))).expect("write");
    let why = revert_refusal(&revert_options(d)).await;
    assert!(
        why.contains("/etc/kubernetes/admin.conf (notAfter "),
        "{why}"
    );

    // `kubeadm certs renew all` renewed the current one in place: kept,
    // not replaced by the expired backup.
    let renewed = kubeconfig_ending(time::Duration::days(365));
    std::fs::write(d.join("admin.conf"), &renewed).expect("write");
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(
        out.contains("/etc/kubernetes/admin.conf: keeping certsync's (until "),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("admin.conf")).expect("read"),
        renewed
    );

    // Attack (seventh review, F3): a current one that lasts longer but is
    // self-signed is not kept.
    let dir = adopted_node();
    let d = dir.path();
    let kubeadms =
        std::fs::read(plan::backup_path(d, BACKUP, "/etc/kubernetes/admin.conf")).expect("backup");
    std::fs::write(
        d.join("admin.conf"),
        forged_kubeconfig(time::Duration::days(400)),
    )
    .expect("write");
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(out.contains("restored /etc/kubernetes/admin.conf"), "{out}");
    assert_eq!(std::fs::read(d.join("admin.conf")).expect("read"), kubeadms);

    // The eighth review, N6: a CA-issued pair that lasts longer in a
    // kubeconfig that names another server is not kept.
    let dir = adopted_node();
    let d = dir.path();
    let kubeadms =
        std::fs::read(plan::backup_path(d, BACKUP, "/etc/kubernetes/admin.conf")).expect("backup");
    let elsewhere = kubeconfig_ending(time::Duration::days(400))
        .replace("https://127.0.0.1:1", "https://203.0.113.66:6443");
    std::fs::write(d.join("admin.conf"), elsewhere).expect("write");
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(out.contains("restored /etc/kubernetes/admin.conf"), "{out}");
    assert_eq!(std::fs::read(d.join("admin.conf")).expect("read"), kubeadms);

    // Normally kubeadm's year-long pair comes back from the backup.
    let dir = adopted_node();
    let d = dir.path();
    let kubeadms =
        std::fs::read(plan::backup_path(d, BACKUP, "/etc/kubernetes/admin.conf")).expect("backup");
    revert(&revert_options(d)).await.expect("revert");
    assert_eq!(std::fs::read(d.join("admin.conf")).expect("read"), kubeadms);
}

/// A node adopted with kubeadm's apiserver pair kept in step: kubeadm's
/// year-long pair in the backup, certsync's 10-minute one in place.
fn adopted_node_with_pair() -> (tempfile::TempDir, (String, String), (String, String)) {
    let dir = adopted_node();
    let d = dir.path();
    let p = "/etc/kubernetes/pki/apiserver";
    let kubeadms = pair_ending(time::Duration::days(365));
    let certsyncs = pair_ending(time::Duration::minutes(10));
    for (root, (crt, key)) in [
        (plan::backup_path(d, BACKUP, "/etc/kubernetes/"), &kubeadms),
        (d.to_owned(), &certsyncs),
    ] {
        std::fs::create_dir_all(root.join("pki")).expect("mkdir");
        std::fs::write(root.join("pki/apiserver.crt"), crt).expect("crt");
        std::fs::write(root.join("pki/apiserver.key"), key).expect("key");
    }
    let mut state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(host(d, plan::STATE)).expect("state")).expect("json");
    state["pairs"] = serde_json::json!({ p: BACKUP });
    std::fs::write(host(d, plan::STATE), state.to_string()).expect("state");
    (dir, kubeadms, certsyncs)
}

#[tokio::test]
async fn revert_hands_back_the_pair_that_lasts_longer_with_its_key() {
    // kubeadm's pair outlasts certsync's 10-minute one: both files back
    // from the backup, the key 0600, before any component restarts.
    let (dir, kubeadms, _) = adopted_node_with_pair();
    let d = dir.path();
    let out = revert(&revert_options(d)).await.expect("revert");
    assert_eq!(
        (
            read_in(d, "pki/apiserver.crt"),
            read_in(d, "pki/apiserver.key")
        ),
        kubeadms
    );
    let mode = |f: &str| {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::metadata(d.join(f))
            .expect("stat")
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(
        (mode("pki/apiserver.crt"), mode("pki/apiserver.key")),
        (0o644, 0o600)
    );
    let pair = out
        .find("restored /etc/kubernetes/pki/apiserver.crt")
        .expect(&out);
    let manifest = out
        .find("restored /etc/kubernetes/manifests/kube-apiserver.yaml")
        .expect(&out);
    assert!(
        pair < manifest,
        "the pair goes back before the manifest: {out}"
    );

    // Both end within a day: refused, naming the pair, nothing changed.
    let (dir, _, _) = adopted_node_with_pair();
    let d = dir.path();
    let backup = plan::backup_path(d, BACKUP, "/etc/kubernetes/pki/apiserver.crt");
    std::fs::write(&backup, cert_ending(time::Duration::hours(2))).expect("crt");
    let why = revert_refusal(&revert_options(d)).await;
    assert!(
        why.contains("/etc/kubernetes/pki/apiserver.crt (notAfter "),
        "{why}"
    );
}

/// A certificate's notAfter (PEM) as revert shows it.
fn until(pem: &str) -> String {
    crate::kubeadm::handback::until(node::not_after(pem.as_bytes()).expect("cert"))
}

#[test]
fn revert_shows_a_not_after_to_the_minute_in_utc() {
    let t = x509_parser::time::ASN1Time::from_timestamp(1_795_000_000).expect("time");
    assert_eq!(crate::kubeadm::handback::until(t), "2026-11-18 11:06Z");
}

/// The embedded client certificate of a kubeconfig as [`until`] shows it.
fn until_in_kubeconfig(text: &str) -> String {
    use base64::Engine as _;
    let data = text
        .split("client-certificate-data: ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .expect("client-certificate-data");
    let pem = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .expect("base64");
    until(&String::from_utf8(pem).expect("pem"))
}

/// A pair the node's CA issued, key and all, for other names than
/// kubeadm's (an attacker's, holding the CA key it reads), ending in 500
/// days.
fn other_names_pair() -> (String, String) {
    let now = time::OffsetDateTime::now_utc();
    let mut p =
        rcgen::CertificateParams::new(vec!["evil.attacker.example".to_owned()]).expect("params");
    p.not_before = now - time::Duration::days(2);
    p.not_after = now + time::Duration::days(500);
    let key = rcgen::KeyPair::generate().expect("key");
    (
        p.signed_by(&key, &CA.1).expect("cert").pem(),
        key.serialize_pem(),
    )
}

#[tokio::test]
async fn revert_keeps_the_sound_copy_that_lasts_longer_and_says_why() {
    // Each current apiserver pair against kubeadm's year-long one in the
    // backup: which stays, and the line that says so with both notAfter
    // (the operator's review: nothing said why the backup won, and `kept`
    // never named the key), the same in a dry run, which changes nothing.
    // Attacks (seventh review F3, eighth N6): a pair that lasts longer but
    // is self-signed, has another key, or names other names is never kept.
    let year = time::Duration::days(400);
    let another_key = (pair_ending(year).0, pair_ending(year).1);
    let cases = [
        ("certsync's 10 minutes", None, Some("it lasts longer")),
        (
            "certsync's renewed for longer",
            Some(pair_ending(year)),
            None,
        ),
        (
            "self-signed",
            Some(forged_ending(year)),
            Some("not issued by the node's CA"),
        ),
        (
            "another key",
            Some(another_key),
            Some("its key is not the certificate's"),
        ),
        (
            "other names",
            Some(other_names_pair()),
            Some("other subject or names than kubeadm's"),
        ),
    ];
    let pair = "/etc/kubernetes/pki/apiserver.crt and .key";
    for (what, current, refused) in cases {
        for dry_run in [true, false] {
            let (dir, kubeadms, certsyncs) = adopted_node_with_pair();
            let d = dir.path();
            let current = current.clone().unwrap_or(certsyncs);
            std::fs::write(d.join("pki/apiserver.crt"), &current.0).expect("crt");
            std::fs::write(d.join("pki/apiserver.key"), &current.1).expect("key");
            let before = snapshot(d);
            let out = revert(&Options {
                dry_run,
                ..revert_options(d)
            })
            .await
            .expect("revert");
            let (theirs, ours) = (until(&kubeadms.0), until(&current.0));
            let said = match refused {
                None => format!(
                    "{pair}: keeping certsync's (until {ours}) over kubeadm's backup (until {theirs}): it lasts longer\n"
                ),
                Some("it lasts longer") => format!(
                    "{pair}: keeping kubeadm's backup (until {theirs}) over certsync's (until {ours}): it lasts longer\n"
                ),
                Some(why) => format!(
                    "{pair}: keeping kubeadm's backup (until {theirs}), not certsync's (until {ours}): {why}"
                ),
            };
            assert!(
                out.contains(&said),
                "{what}, dry_run={dry_run}: {said:?} not in\n{out}"
            );
            let left = (
                read_in(d, "pki/apiserver.crt"),
                read_in(d, "pki/apiserver.key"),
            );
            if dry_run {
                assert!(before == snapshot(d), "{what}: the dry run wrote: {out}");
            } else if refused.is_none() {
                assert_eq!(left, current, "{what}");
            } else {
                assert_eq!(left, kubeadms, "{what}");
            }
        }
    }

    // A kubeconfig: the same judgement, and why one that says something
    // else than kubeadm's (another server) is refused.
    for dry_run in [true, false] {
        let dir = adopted_node();
        let d = dir.path();
        let kubeadms =
            std::fs::read_to_string(plan::backup_path(d, BACKUP, "/etc/kubernetes/admin.conf"))
                .expect("backup");
        let elsewhere =
            kubeconfig_ending(year).replace("https://127.0.0.1:1", "https://203.0.113.66:6443");
        std::fs::write(d.join("admin.conf"), &elsewhere).expect("write");
        let out = revert(&Options {
            dry_run,
            ..revert_options(d)
        })
        .await
        .expect("revert");
        let said = format!(
            "/etc/kubernetes/admin.conf: keeping kubeadm's backup (until {}), not certsync's (until {}): \
             it differs from kubeadm's in more than its client pair",
            until_in_kubeconfig(&kubeadms),
            until_in_kubeconfig(&elsewhere)
        );
        assert!(
            out.contains(&said),
            "dry_run={dry_run}: {said:?} not in\n{out}"
        );
    }
}

fn read_in(d: &Path, f: &str) -> String {
    std::fs::read_to_string(d.join(f)).expect("read")
}

#[tokio::test]
async fn attack_a_symlink_in_place_of_certsyncs_targets_is_never_followed() {
    // The seventh review, F1: a compromised certsync container put a
    // symlink in place of pki/certsync; revert (as root, on the host) moved
    // and deleted the directories it led to. Now it refuses, changing
    // nothing, and the directories stay.
    let dir = adopted_node();
    let d = dir.path();
    let decoy = tempfile::tempdir().expect("decoy");
    std::fs::create_dir(decoy.path().join("apiserver")).expect("mkdir");
    std::fs::write(decoy.path().join("apiserver/canary"), "host's\n").expect("canary");
    let p = host(d, "/etc/kubernetes/pki/certsync");
    std::fs::rename(&p, host(d, "/etc/kubernetes/pki/.certsync-real")).expect("rename");
    std::os::unix::fs::symlink(decoy.path(), &p).expect("symlink");
    for purge in [false, true] {
        let opts = Options {
            purge,
            ..revert_options(d)
        };
        let why = revert_refusal(&opts).await;
        assert!(
            why.contains("/etc/kubernetes/pki/certsync is a symlink"),
            "{why}"
        );
        assert_eq!(
            std::fs::read_to_string(decoy.path().join("apiserver/canary")).expect("canary"),
            "host's\n"
        );
    }
}

#[tokio::test]
async fn revert_after_a_second_adopt_keeps_both_configurations() {
    // The operator's review: adopt with short lifetimes, adopt again with
    // the defaults (its backup holds the first certsync.yaml and pod), then
    // revert: it stopped partway on "both exist and differ". Now the
    // current one is kept beside the earlier copy, which stays as it was.
    let dir = adopted_node();
    let d = dir.path();
    let earlier = plan::backup_path(d, BACKUP, plan::CONFIG);
    std::fs::create_dir_all(earlier.parent().expect("parent")).expect("mkdir");
    std::fs::write(&earlier, "mappings: [] # the first adoption's\n").expect("write");
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(out.ends_with("reverted\n"), "{out}");
    assert_eq!(
        std::fs::read_to_string(&earlier).expect("earlier"),
        "mappings: [] # the first adoption's\n"
    );
    let kept = earlier.with_file_name("certsync.yaml.reverted-1");
    assert_eq!(
        std::fs::read_to_string(kept).expect("kept"),
        "mappings: []\n"
    );
    assert!(!host(d, plan::CONFIG).exists());
}

#[tokio::test]
async fn attack_admin_conf_never_runs_a_command_as_root() {
    // The eighth review, N1: a compromised certsync container rewrote
    // admin.conf (its embedded pair is kept renewed, so the container may
    // replace the file) with an exec credential plugin; revert and adopt read
    // the ClusterConfiguration through it and ran the command as root.
    let dir = adopted_node();
    let d = dir.path();
    let marker = d.join("ran");
    let conf = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster: {{server: \"https://127.0.0.1:1\"}}\n  name: kubernetes\n\
         contexts:\n- context: {{cluster: kubernetes, user: kubernetes-admin}}\n  name: admin\ncurrent-context: admin\n\
         users:\n- name: kubernetes-admin\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      \
         command: /bin/sh\n      args: [\"-c\", \"touch {}\"]\n      interactiveMode: Never\n",
        marker.display()
    );
    std::fs::write(d.join("admin.conf"), conf).expect("write");
    let Err(e) = super::super::cluster::read(&d.join("admin.conf")).await else {
        panic!("read through an exec plugin");
    };
    assert!(e.to_string().contains("credential plugin"), "{e}");
    assert!(!marker.exists(), "the command ran");
    let why = revert_refusal(&Options {
        local_only: false,
        ..revert_options(d)
    })
    .await;
    assert!(why.contains("credential plugin"), "{why}");
    assert!(!marker.exists(), "the command ran");
}
