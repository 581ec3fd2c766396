//! What revert hands back in place of kubeadm's kubeconfigs and pairs:
//! kubeadm's copy from adopt's backup (or its certificate issued again),
//! whatever a compromised certsync container left in their place; and
//! revert against a node such a container changed.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::Path;

use super::adopted::{
    BACKUP, CA, adopted_node, forged_ending, forged_kubeconfig, handed_back, kubeconfig_ending,
    revert_options, revert_refusal, snapshot,
};
use super::*;
use crate::writer::WriterError;

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

/// An admin.conf whose user runs a command (an exec credential plugin).
fn exec_kubeconfig() -> String {
    "apiVersion: v1\nkind: Config\nclusters:\n- cluster: {server: \"https://127.0.0.1:1\"}\n  name: kubernetes\n\
     contexts:\n- context: {cluster: kubernetes, user: kubernetes-admin}\n  name: admin\ncurrent-context: admin\n\
     users:\n- name: kubernetes-admin\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      \
     command: /bin/sh\n      args: [\"-c\", \"id > /tmp/pwned\"]\n"
        .to_owned()
}

/// Puts `bytes` at `path` as certsync's container can: a new file renamed
/// over it, with `mode`.
fn swap_in(path: &Path, bytes: &[u8], mode: u32) {
    let tmp = path.with_extension("swap");
    std::fs::write(&tmp, bytes).expect("write");
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(mode)).expect("chmod");
    std::fs::rename(&tmp, path).expect("rename");
}

#[tokio::test]
async fn attack_a_file_certsyncs_container_wrote_is_never_what_revert_leaves() {
    // What the container may write in place of kubeadm's files, each once
    // kept by some rule of revert's (the longer copy, if sound): a pair
    // the CA issued for other names (it reads the CA key), a self-signed
    // one, a key it made 0666, a symlink to a host file, an exec-plugin
    // admin.conf, a self-signed kubeconfig that lasts longer. revert
    // leaves kubeadm's copies from the backup, byte for byte, with
    // kubeadm's modes, never a link, and no file a link led to changes.
    let year = time::Duration::days(400);
    for dry_run in [true, false] {
        let dir = adopted_node();
        let d = dir.path();
        let decoy = tempfile::tempdir().expect("decoy");
        let host_file = decoy.path().join("shadow");
        std::fs::write(&host_file, "host's\n").expect("decoy");
        let (crt, key) = other_names_pair();
        swap_in(&d.join("pki/apiserver.crt"), crt.as_bytes(), 0o644);
        swap_in(&d.join("pki/apiserver.key"), key.as_bytes(), 0o600);
        let (crt, key) = forged_ending(year);
        swap_in(&d.join("pki/etcd/peer.crt"), crt.as_bytes(), 0o644);
        swap_in(&d.join("pki/etcd/peer.key"), key.as_bytes(), 0o666);
        std::fs::remove_file(d.join("pki/front-proxy-client.key")).expect("rm");
        std::os::unix::fs::symlink(&host_file, d.join("pki/front-proxy-client.key"))
            .expect("symlink");
        swap_in(&d.join("admin.conf"), exec_kubeconfig().as_bytes(), 0o600);
        swap_in(
            &d.join("controller-manager.conf"),
            forged_kubeconfig(year).as_bytes(),
            0o644,
        );
        let before = snapshot(d);
        let handed_back = handed_back(d);
        let out = revert(&RevertOptions {
            dry_run,
            ..revert_options(d)
        })
        .await
        .expect("revert");
        assert_eq!(std::fs::read(&host_file).expect("decoy"), b"host's\n");
        if dry_run {
            assert!(before == snapshot(d), "the dry run wrote: {out}");
            continue;
        }
        for f in handed_back {
            let at = host(d, &f);
            let meta = std::fs::symlink_metadata(&at).expect("stat");
            assert!(meta.file_type().is_file(), "{f}: not a regular file");
            assert_eq!(
                std::fs::read(&at).expect("read"),
                std::fs::read(plan::backup_path(d, BACKUP, &f)).expect("backup"),
                "{f}: not kubeadm's copy"
            );
            let mode = if f.ends_with(".crt") { 0o644 } else { 0o600 };
            assert_eq!(meta.mode() & 0o7777, mode, "{f}");
            assert_eq!(meta.uid(), nix::unistd::geteuid().as_raw(), "{f}");
        }
        // Handed back before any component restarts on it.
        let pair = out
            .find("restored /etc/kubernetes/pki/apiserver.crt")
            .expect(&out);
        let manifest = out
            .find("restored /etc/kubernetes/manifests/kube-apiserver.yaml")
            .expect(&out);
        assert!(pair < manifest, "{out}");
    }
}

#[tokio::test]
async fn attack_a_forged_file_is_never_issued_again() {
    // kubeadm's apiserver.crt in the backup ends within a day, and the
    // container put a CA-issued pair for its own names in the live place:
    // what revert issues again is kubeadm's certificate (its names), never
    // the container's (revert would be its signing oracle).
    let dir = adopted_node();
    let d = dir.path();
    let backup = plan::backup_path(d, BACKUP, "/etc/kubernetes/pki/apiserver.crt");
    let kubeadms = super::adopted::pair_ending(time::Duration::hours(3));
    std::fs::write(&backup, &kubeadms.0).expect("crt");
    std::fs::write(backup.with_extension("key"), &kubeadms.1).expect("key");
    let (crt, key) = other_names_pair();
    std::fs::write(d.join("pki/apiserver.crt"), &crt).expect("crt");
    std::fs::write(d.join("pki/apiserver.key"), &key).expect("key");
    let admin = kubeconfig_ending(-time::Duration::hours(2));
    std::fs::write(
        plan::backup_path(d, BACKUP, "/etc/kubernetes/admin.conf"),
        &admin,
    )
    .expect("admin");
    std::fs::write(
        d.join("admin.conf"),
        forged_kubeconfig(time::Duration::hours(1)),
    )
    .expect("admin");
    revert(&revert_options(d)).await.expect("revert");
    let der = |pem: &[u8]| {
        crate::pem::exactly_one(pem, rustls_pki_types::pem::SectionKind::Certificate).expect("one")
    };
    let now = std::fs::read(d.join("pki/apiserver.crt")).expect("crt");
    super::adopted::assert_issued_again(&der(kubeadms.0.as_bytes()), &der(&now), "apiserver.crt");
    assert!(!String::from_utf8_lossy(&now).contains("evil"));
    assert_eq!(
        std::fs::read_to_string(d.join("pki/apiserver.key")).expect("key"),
        kubeadms.1
    );
    let now = std::fs::read_to_string(d.join("admin.conf")).expect("admin");
    let (old, new) = (
        super::adopted::embedded(&admin),
        super::adopted::embedded(&now),
    );
    super::adopted::assert_issued_again(&old.0, &new.0, "admin.conf");
    assert_eq!(now.replace(&new.1, &old.1), admin);
}

#[tokio::test]
async fn attack_a_symlink_in_place_of_certsyncs_targets_is_never_followed() {
    // A compromised certsync container put a
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
        let opts = RevertOptions {
            purge,
            ..revert_options(d)
        };
        let why = revert_refusal(&opts).await;
        assert!(
            matches!(&why, RevertError::Planted(r) if matches!(&**r, Refusal::Link { link, .. }
                if link == "/etc/kubernetes/pki/certsync")),
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
    // Adopt with short lifetimes, adopt again with the defaults (its backup
    // holds the first certsync.yaml and pod), then revert: the current one
    // is kept beside the earlier copy, which stays as it was, rather than
    // stopping partway on "both exist and differ".
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
    // A compromised certsync container rewrote
    // admin.conf (its embedded pair is kept renewed, so the container may
    // replace the file) with an exec credential plugin; adopt reads the
    // ClusterConfiguration through it, and must never run the command as
    // root.
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
    let Err(e) = super::admin::cluster_configuration(d).await else {
        panic!("read through an exec plugin");
    };
    assert!(e.to_string().contains("credential plugin"), "{e}");
    assert!(!marker.exists(), "the command ran");
    // revert never reads it: it changes only the node's files and hands
    // kubeadm's admin.conf back over it.
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(out.ends_with("reverted\n"), "{out}");
    assert!(!marker.exists(), "the command ran");
}

/// A kubeconfig revert hands back after a CA renewal trusts both: kubeadm's
/// CA data with pki/ca.crt's renewal appended, every other byte kubeadm's;
/// one that holds it already is left alone, and two clusters (not
/// kubeadm's shape) are refused, not guessed between.
#[test]
fn a_handed_back_kubeconfig_trusts_the_renewed_ca_beside_kubeadms() {
    use super::super::handback::ca_data_with;
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD;
    let old = crate::pem::encode("CERTIFICATE", b"\x30\x03\x02\x01\x01");
    let renewed_der = b"\x30\x03\x02\x01\x02";
    let renewed_pem = crate::pem::encode("CERTIFICATE", renewed_der);
    let renewed = (renewed_pem.as_bytes(), &renewed_der[..]);
    let text = format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: https://10.0.0.1:6443\n  name: kubernetes\ncontexts:\n- context:\n    cluster: kubernetes\n    user: kubernetes-admin\n  name: kubernetes-admin@kubernetes\ncurrent-context: kubernetes-admin@kubernetes\nkind: Config\nusers:\n- name: kubernetes-admin\n  user:\n    client-certificate-data: Zm9v\n",
        b64.encode(&old)
    );
    let at = Path::new("backup/admin.conf");
    let both = ca_data_with(at, &text, renewed)
        .expect("read")
        .expect("the renewal added");
    let want = b64.encode(format!("{old}{renewed_pem}"));
    assert_eq!(both, text.replace(&b64.encode(&old), &want));
    assert!(ca_data_with(at, &both, renewed).expect("read").is_none());
    let two = text.replace(
        "contexts:",
        &format!(
            "- cluster:\n    certificate-authority-data: {}\n    server: https://10.0.0.2:6443\n  name: other\ncontexts:",
            b64.encode(&old)
        ),
    );
    let found = |r: Result<_, KubeadmError>| match r {
        Err(KubeadmError::File { problem, .. }) => *problem,
        Err(e) => panic!("refused, not for the file: {e}"),
        Ok(_) => panic!("accepted"),
    };
    let f = found(ca_data_with(at, &two, renewed));
    let edit = |f| match f {
        FileProblem::Writer(e) => e,
        other => panic!("{other}"),
    };
    let e = edit(f);
    assert!(matches!(e, WriterError::Clusters(2)), "{e}");
    let data = b64.encode(&old);
    let f = found(ca_data_with(
        at,
        &text.replace(&data, "not*base64"),
        renewed,
    ));
    let e = edit(f);
    assert!(matches!(e, WriterError::NotBase64(_)), "{e}");
    let unended = b64.encode("-----BEGIN CERTIFICATE-----\nMAMCAQE=\n");
    let f = found(ca_data_with(at, &text.replace(&data, &unended), renewed));
    assert!(
        matches!(
            &f,
            FileProblem::Named { what, source }
                if what == "certificate-authority-data" && matches!(**source, FileProblem::Pem(_))
        ),
        "{f}"
    );
    // The same value a second time (a YAML comment, another field): which
    // one to replace is a guess, and a wrong one changes another field.
    let twice = format!("{text}# {data}\n");
    let f = found(ca_data_with(at, &twice, renewed));
    let e = edit(f);
    assert!(
        matches!(e, WriterError::NotOnce("certificate-authority-data")),
        "{e}"
    );
}

/// The client certificate revert issues again is replaced in kubeadm's
/// text where it stands, once: a kubeconfig with two users' certificates,
/// or one whose value stands twice, is refused for what it is.
#[test]
fn a_kubeconfig_whose_client_certificate_is_not_kubeadms_one_value_is_refused() {
    use super::super::handback::client_certificate_data;
    let at = Path::new("backup/admin.conf");
    let text = kubeconfig_ending(time::Duration::days(365));
    let data = client_certificate_data(at, &text).expect("kubeadm's shape");
    assert!(text.contains(data) && !data.is_empty());
    let found = |t: &str| match client_certificate_data(at, t) {
        Err(KubeadmError::File { path, problem }) => {
            assert_eq!(path, at);
            *problem
        }
        Err(e) => panic!("refused, not for the file: {e}"),
        Ok(_) => panic!("accepted"),
    };
    let second_user = text.replace(
        "users:\n",
        &format!("users:\n- name: other\n  user: {{client-certificate-data: {data}}}\n"),
    );
    let f = found(&second_user);
    assert!(matches!(f, FileProblem::ClientCerts(2)), "{f}");
    let f = found(&format!("{text}# {data}\n"));
    assert!(
        matches!(
            f,
            FileProblem::Writer(WriterError::NotOnce("client-certificate-data"))
        ),
        "{f}"
    );
}

/// Attack: the one client certificate written double-quoted with an escape
/// (`\x4C` for its first `L`), its plain text once in a comment. The text
/// found once is the comment's: replacing it alone would leave kubeadm's
/// expiring certificate in place while revert says it issued it again. The
/// edit is parsed again and refused.
#[test]
fn attack_a_reissue_that_would_replace_a_comment_not_the_value_is_refused() {
    use super::super::handback::{client_certificate_data, with_client_certificate};
    let at = Path::new("backup/admin.conf");
    let text = kubeconfig_ending(time::Duration::days(365));
    let data = client_certificate_data(at, &text).expect("kubeadm's shape");
    assert!(data.starts_with('L'), "PEM in base64: {data}");
    let escaped = text.replace(data, &format!("\"\\x4C{}\"", &data[1..]));
    let planted = format!("{escaped}# {data}\n");
    let found = client_certificate_data(at, &planted).expect("the comment's text");
    let e = with_client_certificate(at, &planted, found, "bmV3").expect_err("refused");
    assert!(
        matches!(&e, KubeadmError::File { problem, .. }
            if matches!(**problem, FileProblem::Writer(WriterError::NotOnce("client-certificate-data")))),
        "{e}"
    );
    // kubeadm's own shape: the value itself, every other byte kept.
    let edited = with_client_certificate(at, &text, data, "bmV3").expect("replaced");
    assert_eq!(edited, text.replacen(data, "bmV3", 1));
}
