//! revert on a node as adopt leaves it: what it refuses (changing nothing),
//! what it hands back, where certsync's files go.

use std::path::{Path, PathBuf};

use super::*;

/// A self-signed certificate (PEM) that ends `ends` from now (negative: ended).
fn cert_ending(ends: time::Duration) -> String {
    let now = time::OffsetDateTime::now_utc();
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    p.not_before = now - time::Duration::days(2);
    p.not_after = now + ends;
    let key = rcgen::KeyPair::generate().expect("key");
    p.self_signed(&key).expect("cert").pem()
}

/// A kubeadm kubeconfig with an embedded client certificate ending `ends`
/// from now; its server refuses connections at once.
fn kubeconfig_ending(ends: time::Duration) -> String {
    use base64::Engine as _;
    let data = base64::engine::general_purpose::STANDARD.encode(cert_ending(ends));
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster: {{server: \"https://127.0.0.1:1\"}}\n  name: kubernetes\n\
         users:\n- name: kubernetes-admin\n  user: {{client-certificate-data: {data}}}\n"
    )
}

const BACKUP: &str = "/etc/kubernetes/certsync/backup/20261124T000000Z";

/// A node as adopt leaves it: kubeadm's certificates and kubeconfigs good
/// for a year (made now, so the test never ages), admin.conf certsync's
/// 10-minute pair with kubeadm's year-long one in the backup, certsync's
/// targets, configuration and kubeconfigs, and adopt's record.
fn adopted_node() -> tempfile::TempDir {
    let dir = node_dir();
    let d = dir.path();
    let year = time::Duration::days(365);
    let write = |node_path: &str, text: &str| {
        let p = host(d, node_path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    };
    for t in plan::templates(d) {
        write(&t, &cert_ending(year));
    }
    for f in ["controller-manager.conf", "scheduler.conf"] {
        write(&format!("/etc/kubernetes/{f}"), &kubeconfig_ending(year));
        write(&format!("/etc/kubernetes/certsync/{f}"), "certsync's\n");
    }
    write(
        "/etc/kubernetes/admin.conf",
        &kubeconfig_ending(time::Duration::minutes(10)),
    );
    let admin_backup = plan::backup_path(d, BACKUP, "/etc/kubernetes/admin.conf");
    std::fs::create_dir_all(admin_backup.parent().expect("parent")).expect("mkdir");
    std::fs::write(&admin_backup, kubeconfig_ending(year)).expect("backup");
    for t in plan::targets(d) {
        write(&format!("{t}/tls.crt"), &format!("target {t}\n"));
    }
    write(plan::CONFIG, "mappings: []\n");
    write(
        plan::STATE,
        &format!(
            r#"{{"manifests": {{}}, "backups": ["{BACKUP}"], "kubeconfigs": {{"/etc/kubernetes/admin.conf": "{BACKUP}"}}}}"#
        ),
    );
    dir
}

/// Every file below `dir` with its bytes, and every directory.
fn snapshot(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
    let mut all = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                all.insert(p.clone(), b"<dir>".to_vec());
                todo.push(p);
            } else {
                all.insert(p.clone(), std::fs::read(&p).expect("read"));
            }
        }
    }
    all
}

fn revert_options(dir: &Path) -> Options {
    Options {
        dry_run: false,
        local_only: true,
        ..options(dir)
    }
}

async fn revert_refusal(opts: &Options) -> String {
    let before = snapshot(&opts.dir);
    let why = match revert(opts).await {
        Err(e) => e.to_string(),
        Ok(out) => panic!("not refused:\n{out}"),
    };
    assert!(
        before == snapshot(&opts.dir),
        "refused, yet the node changed: {why}"
    );
    why
}

#[tokio::test]
async fn revert_refuses_kubeadm_certificates_that_expire_within_a_day() {
    let dir = adopted_node();
    let d = dir.path();
    std::fs::write(
        d.join("pki/apiserver.crt"),
        cert_ending(time::Duration::hours(23)),
    )
    .expect("write");
    std::fs::write(
        d.join("scheduler.conf"),
        kubeconfig_ending(-time::Duration::hours(1)),
    )
    .expect("write");
    let why = revert_refusal(&revert_options(d)).await;
    for named in [
        "/etc/kubernetes/pki/apiserver.crt (notAfter ",
        "/etc/kubernetes/scheduler.conf (notAfter ",
        "within 24 h",
        "kubeadm certs renew all",
        "--force",
    ] {
        assert!(why.contains(named), "{named}: {why}");
    }
    for fine in ["etcd/server.crt", "controller-manager.conf", "admin.conf"] {
        assert!(!why.contains(fine), "{fine}: {why}");
    }

    // --force hands them back anyway, saying so.
    let out = revert(&Options {
        force: true,
        ..revert_options(d)
    })
    .await
    .expect("forced");
    assert!(
        out.contains("--force") && out.contains("/etc/kubernetes/pki/apiserver.crt"),
        "{out}"
    );
    assert!(!d.join("certsync/adopted.json").exists());
}

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
    assert!(out.contains("kept /etc/kubernetes/admin.conf"), "{out}");
    assert_eq!(
        std::fs::read_to_string(d.join("admin.conf")).expect("read"),
        renewed
    );

    // Normally kubeadm's year-long pair comes back from the backup.
    let dir = adopted_node();
    let d = dir.path();
    let kubeadms =
        std::fs::read(plan::backup_path(d, BACKUP, "/etc/kubernetes/admin.conf")).expect("backup");
    revert(&revert_options(d)).await.expect("revert");
    assert_eq!(std::fs::read(d.join("admin.conf")).expect("read"), kubeadms);
}

#[tokio::test]
async fn without_the_cluster_configuration_adopt_and_revert_change_nothing() {
    let dir = adopted_node();
    let d = dir.path();
    let why = revert_refusal(&Options {
        local_only: false,
        ..revert_options(d)
    })
    .await;
    assert!(
        why.contains("ConfigMap kube-system/kubeadm-config")
            && why.contains("nothing was changed")
            && why.contains("--local-only"),
        "{why}"
    );
    // --local-only goes on and lists every entry to take out by hand.
    let out = revert(&revert_options(d)).await.expect("revert");
    for entry in [
        "apiServer.extraArgs: tls-cert-file=/etc/kubernetes/pki/certsync/apiserver/tls.crt",
        "etcd.local.extraArgs: peer-cert-file=/etc/kubernetes/pki/etcd/certsync/peer/tls.crt",
        "controllerManager.extraVolumes: ",
    ] {
        assert!(out.contains(entry), "{entry}: {out}");
    }

    // adopt: refused before the first write.
    let dir = node_dir();
    let before = snapshot(dir.path());
    let opts = Options {
        dry_run: false,
        ..options(dir.path())
    };
    let why = match adopt(&opts).await {
        Err(e) => e.to_string(),
        Ok(out) => panic!("not refused:\n{out}"),
    };
    assert!(
        why.contains("nothing was changed") && why.contains("--local-only"),
        "{why}"
    );
    assert!(before == snapshot(dir.path()), "{why}");
}

#[tokio::test]
async fn revert_dry_run_checks_and_says_what_it_would_do_writing_nothing() {
    let dir = adopted_node();
    let d = dir.path();
    let before = snapshot(d);
    let out = revert(&Options {
        dry_run: true,
        ..revert_options(d)
    })
    .await
    .expect("dry run");
    assert!(before == snapshot(d), "dry run wrote: {out}");
    for line in [
        "dry run: nothing written",
        &format!("restored /etc/kubernetes/admin.conf from {BACKUP}/"),
        "moved certsync's configuration, kubeconfigs and targets",
    ] {
        assert!(out.contains(line), "{line}: {out}");
    }
    // It refuses as revert would.
    std::fs::write(
        d.join("pki/etcd/peer.crt"),
        cert_ending(time::Duration::hours(1)),
    )
    .expect("write");
    let why = revert_refusal(&Options {
        dry_run: true,
        ..revert_options(d)
    })
    .await;
    assert!(
        why.contains("/etc/kubernetes/pki/etcd/peer.crt (notAfter "),
        "{why}"
    );
}

#[tokio::test]
async fn revert_moves_certsyncs_files_into_the_backup_or_purges_them() {
    for purge in [false, true] {
        let dir = adopted_node();
        let d = dir.path();
        let own: Vec<String> = plan::targets(d)
            .into_iter()
            .map(|t| format!("{t}/tls.crt"))
            .chain([
                plan::CONFIG.to_owned(),
                "/etc/kubernetes/certsync/controller-manager.conf".to_owned(),
                "/etc/kubernetes/certsync/scheduler.conf".to_owned(),
            ])
            .collect();
        assert_eq!(own.len(), 10 + 3, "{own:?}");
        let bytes: Vec<Vec<u8>> = own
            .iter()
            .map(|f| std::fs::read(host(d, f)).expect("own file"))
            .collect();
        revert(&Options {
            purge,
            ..revert_options(d)
        })
        .await
        .expect("revert");
        for (f, b) in own.iter().zip(&bytes) {
            assert!(!host(d, f).exists(), "purge={purge}: {f} left in place");
            let kept = std::fs::read(plan::backup_path(d, BACKUP, f)).ok();
            assert_eq!(kept.as_ref(), (!purge).then_some(b), "purge={purge}: {f}");
        }
    }
}
