//! revert on a node as adopt leaves it: what it refuses (changing nothing),
//! what it hands back, where certsync's files go.

use std::path::{Path, PathBuf};

use super::*;

/// The node's CA in these tests (written as each of kubeadm's three CAs,
/// pki/ca.crt, pki/etcd/ca.crt and pki/front-proxy-ca.crt, by
/// [`adopted_node`]): its certificate (PEM), issuer, and key (PEM).
pub(super) static CA: std::sync::LazyLock<(
    String,
    rcgen::Issuer<'static, rcgen::KeyPair>,
    String,
)> = std::sync::LazyLock::new(|| {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    p.distinguished_name
        .push(rcgen::DnType::CommonName, "kubernetes");
    p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
        rcgen::KeyUsagePurpose::KeyCertSign,
    ];
    let cert = p.self_signed(&key).expect("ca").pem();
    let pem = key.serialize_pem();
    (cert, rcgen::Issuer::new(p, key), pem)
});

/// The CA files adopt's record names issuers of (certificate, key).
pub(super) const CAS: [&str; 3] = [
    "/etc/kubernetes/pki/ca",
    "/etc/kubernetes/pki/etcd/ca",
    "/etc/kubernetes/pki/front-proxy-ca",
];

/// A certificate the node's CA issued and its key (PEM), ending `ends`
/// from now.
pub(super) fn pair_ending(ends: time::Duration) -> (String, String) {
    pair_by(ends, Some(&CA.1))
}

/// A self-signed certificate and its key, ending `ends` from now: what
/// someone who may write the node's files could put in place of a pair.
pub(super) fn forged_ending(ends: time::Duration) -> (String, String) {
    pair_by(ends, None)
}

/// A pair ending `ends` from now, signed by `issuer` or by its own key.
fn pair_by(
    ends: time::Duration,
    issuer: Option<&rcgen::Issuer<'static, rcgen::KeyPair>>,
) -> (String, String) {
    pair_from(kubeadm_params(ends), issuer)
}

/// A leaf as kubeadm makes one (KeyUsage digitalSignature and
/// keyEncipherment, ExtKeyUsage serverAuth, CA:FALSE, started 5 minutes
/// ago), ending `ends` from now; a test changes what it attacks.
pub(super) fn kubeadm_params(ends: time::Duration) -> rcgen::CertificateParams {
    let now = time::OffsetDateTime::now_utc();
    let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    p.not_before = now - time::Duration::minutes(5);
    p.not_after = now + ends;
    p.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyEncipherment,
    ];
    p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    p.is_ca = rcgen::IsCa::ExplicitNoCa;
    p
}

/// The certificate `p` describes with a new key, signed by `issuer` or
/// self-signed, and the key (PEM).
pub(super) fn pair_from(
    p: rcgen::CertificateParams,
    issuer: Option<&rcgen::Issuer<'static, rcgen::KeyPair>>,
) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("key");
    let cert = match issuer {
        Some(issuer) => p.signed_by(&key, issuer),
        None => p.self_signed(&key),
    };
    (cert.expect("cert").pem(), key.serialize_pem())
}

/// A kubeadm kubeconfig with an embedded client certificate ending `ends`
/// from now; its server refuses connections at once.
pub(super) fn kubeconfig_ending(ends: time::Duration) -> String {
    kubeconfig_with(pair_ending(ends))
}

/// [`kubeconfig_ending`] with a self-signed pair.
pub(super) fn forged_kubeconfig(ends: time::Duration) -> String {
    kubeconfig_with(forged_ending(ends))
}

pub(super) fn kubeconfig_with((cert, key): (String, String)) -> String {
    use base64::Engine as _;
    let b64 = |pem: String| base64::engine::general_purpose::STANDARD.encode(pem);
    let (data, key) = (b64(cert), b64(key));
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster: {{server: \"https://127.0.0.1:1\"}}\n  name: kubernetes\n\
         contexts:\n- context: {{cluster: kubernetes, user: kubernetes-admin}}\n  name: admin\ncurrent-context: admin\n\
         users:\n- name: kubernetes-admin\n  user: {{client-certificate-data: {data}, client-key-data: {key}}}\n"
    )
}

pub(super) const BACKUP: &str = "/etc/kubernetes/certsync/backup/20261124T000000Z";

/// A node as adopt leaves it: kubeadm's CAs (keys and all), each pair
/// and kubeconfig adopt keeps in step certsync's 10-minute copy with
/// kubeadm's year-long one in the backup (made now, so the test never
/// ages) and named in adopt's record, certsync's targets, configuration and
/// kubeconfigs.
pub(super) fn adopted_node() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = node_dir();
    let d = dir.path();
    let year = time::Duration::days(365);
    let minutes = time::Duration::minutes(10);
    let write = |node_path: &str, text: &str| {
        let p = host(d, node_path);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, text).expect("write");
    };
    let backed_up = |node_path: &str| {
        plan::backup_path(d, BACKUP, node_path)
            .strip_prefix(d)
            .map(|rel| format!("/etc/kubernetes/{}", rel.display()))
            .expect("in the node")
    };
    for ca in CAS {
        write(&format!("{ca}.crt"), &CA.0);
        write(&format!("{ca}.key"), &CA.2);
        let key = host(d, &format!("{ca}.key"));
        std::fs::set_permissions(key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let mut pairs = serde_json::Map::new();
    for p in plan::pairs(d) {
        let (crt, key) = (format!("{p}.crt"), format!("{p}.key"));
        let (kubeadms, certsyncs) = (pair_ending(year), pair_ending(minutes));
        write(&backed_up(&crt), &kubeadms.0);
        write(&backed_up(&key), &kubeadms.1);
        write(&crt, &certsyncs.0);
        write(&key, &certsyncs.1);
        pairs.insert(p, BACKUP.into());
    }
    let mut kubeconfigs = serde_json::Map::new();
    for f in ["admin.conf", "controller-manager.conf", "scheduler.conf"] {
        let k = format!("/etc/kubernetes/{f}");
        write(&backed_up(&k), &kubeconfig_ending(year));
        write(&k, &kubeconfig_ending(minutes));
        kubeconfigs.insert(k, BACKUP.into());
    }
    for f in ["controller-manager.conf", "scheduler.conf"] {
        write(&format!("/etc/kubernetes/certsync/{f}"), "certsync's\n");
    }
    for t in plan::targets(d) {
        write(&format!("{t}/tls.crt"), &format!("target {t}\n"));
    }
    write(plan::CONFIG, "mappings: []\n");
    // The manifests kubeadm regenerates from adopt's ClusterConfiguration,
    // kubeadm's own in the backup.
    let mut manifests = serde_json::Map::new();
    for c in manifest::components() {
        let path = format!("/etc/kubernetes/manifests/{}.yaml", c.name);
        let ours = super::fixture(&format!("adopted/{}.yaml", c.name));
        let kept = plan::backup_path(d, BACKUP, &path);
        std::fs::create_dir_all(kept.parent().expect("parent")).expect("mkdir");
        std::fs::copy(host(d, &path), kept).expect("backup");
        write(&path, &ours);
        manifests.insert(path, serde_json::json!([BACKUP, digest(ours.as_bytes())]));
    }
    let state = serde_json::json!({
        "manifests": manifests,
        "backups": [BACKUP],
        "kubeconfigs": kubeconfigs,
        "pairs": pairs,
    });
    write(plan::STATE, &state.to_string());
    dir
}

/// The pairs' and kubeconfigs' files adopt's record names (node paths).
pub(super) fn handed_back(d: &Path) -> Vec<String> {
    let state: serde_json::Value =
        serde_json::from_slice(&std::fs::read(host(d, plan::STATE)).expect("state")).expect("json");
    let kubeconfigs = state["kubeconfigs"]
        .as_object()
        .expect("kubeconfigs")
        .keys();
    let pairs = state["pairs"].as_object().expect("pairs").keys();
    kubeconfigs
        .cloned()
        .chain(pairs.flat_map(|p| [format!("{p}.crt"), format!("{p}.key")]))
        .collect()
}

/// Every file below `dir` with its bytes, and every directory.
pub(super) fn snapshot(dir: &Path) -> std::collections::BTreeMap<PathBuf, Vec<u8>> {
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

pub(super) fn revert_options(dir: &Path) -> RevertOptions {
    RevertOptions {
        dir: dir.to_owned(),
        dry_run: false,
        purge: false,
        local_only: true,
    }
}

pub(super) async fn revert_refusal(opts: &RevertOptions) -> String {
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

/// The DER of the one certificate in PEM `pem`.
fn der_of(pem: &[u8]) -> Vec<u8> {
    crate::pem::exactly_one(pem, rustls_pki_types::pem::SectionKind::Certificate).expect("one")
}

/// The TBSCertificate of `der` (DER), serial and validity made fixed.
fn tbs_but_serial_and_validity(der: &[u8]) -> Vec<u8> {
    use x509_cert::der::{Decode, Encode};
    let mut tbs = x509_cert::Certificate::from_der(der)
        .expect("certificate")
        .tbs_certificate;
    tbs.serial_number = x509_cert::serial_number::SerialNumber::new(&[1]).expect("serial");
    tbs.validity =
        x509_cert::time::Validity::from_now(std::time::Duration::from_secs(1)).expect("validity");
    tbs.to_der().expect("der")
}

/// Checks that `new` (DER) is kubeadm's `old` (DER) issued again by the
/// test CA: the same TBSCertificate but serial and validity, lasting a
/// year from now, signed by the CA, read as Go reads it.
pub(super) fn assert_issued_again(old: &[u8], new: &[u8], what: &str) {
    assert_ne!(old, new, "{what}: not issued again");
    assert_eq!(
        tbs_but_serial_and_validity(old),
        tbs_but_serial_and_validity(new),
        "{what}: more than serial and validity changed"
    );
    let (_, cert) = x509_parser::parse_x509_certificate(new).expect("parse");
    let year_on = time::OffsetDateTime::now_utc().unix_timestamp() + 364 * 86_400;
    assert!(
        cert.validity().not_after.timestamp() > year_on,
        "{what}: ends {}",
        cert.validity().not_after
    );
    let ca = der_of(CA.0.as_bytes());
    let (_, ca) = x509_parser::parse_x509_certificate(&ca).expect("ca");
    cert.verify_signature(Some(ca.public_key()))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    crate::x509::strict_certificate(new).unwrap_or_else(|e| panic!("{what}: {e}"));
}

/// The embedded client certificate (DER) of a kubeconfig and its
/// base64 as it stands in the text.
pub(super) fn embedded(text: &str) -> (Vec<u8>, String) {
    let (cert, _) = crate::writer::embedded_pair(text).expect("embedded pair");
    use base64::Engine as _;
    (
        der_of(&cert),
        base64::engine::general_purpose::STANDARD.encode(&cert),
    )
}

#[tokio::test]
async fn revert_issues_again_from_kubeadms_copy_what_ends_within_a_day() {
    // kubeadm's copies in the backup end a year after `kubeadm
    // init`, when certsync has long been serving its own; revert refused
    // ("both ... end that soon", untrue) and --force handed back expired
    // files. Now each that ends within a day is issued again from kubeadm's
    // copy: its TBSCertificate but serial and validity, its key kept, in a
    // kubeconfig only the certificate's base64 replaced.
    let dir = adopted_node();
    let d = dir.path();
    let apiserver = "/etc/kubernetes/pki/apiserver";
    let crt_backup = plan::backup_path(d, BACKUP, &format!("{apiserver}.crt"));
    let key_backup = plan::backup_path(d, BACKUP, &format!("{apiserver}.key"));
    let (crt, key) = pair_ending(time::Duration::hours(23));
    std::fs::write(&crt_backup, &crt).expect("crt");
    std::fs::write(&key_backup, &key).expect("key");
    let conf_backup = plan::backup_path(d, BACKUP, "/etc/kubernetes/scheduler.conf");
    let conf = kubeconfig_ending(-time::Duration::hours(1));
    std::fs::write(&conf_backup, &conf).expect("conf");
    let handed_back = handed_back(d);

    let out = dry_run(revert_options(d)).await;
    for said in [
        format!("would issue {apiserver}.crt again from kubeadm's copy in {BACKUP}/ (that ends "),
        format!(
            "would issue /etc/kubernetes/scheduler.conf again from kubeadm's copy in {BACKUP}/ (that ends "
        ),
        format!("would restore {apiserver}.key from {BACKUP}/"),
        format!("would restore /etc/kubernetes/pki/etcd/peer.crt from {BACKUP}/"),
    ] {
        assert!(out.contains(&said), "{said:?} not in\n{out}");
    }

    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(out.ends_with("reverted\n"), "{out}");
    let now = std::fs::read(d.join("pki/apiserver.crt")).expect("crt");
    assert_issued_again(&der_of(crt.as_bytes()), &der_of(&now), "apiserver.crt");
    assert_eq!(
        std::fs::read_to_string(d.join("pki/apiserver.key")).expect("key"),
        key
    );
    let now = std::fs::read_to_string(d.join("scheduler.conf")).expect("conf");
    let ((old_der, old_b64), (new_der, new_b64)) = (embedded(&conf), embedded(&now));
    assert_issued_again(&old_der, &new_der, "scheduler.conf");
    assert_eq!(
        now.replace(&new_b64, &old_b64),
        conf,
        "only the base64 changed"
    );
    // Every other file is kubeadm's copy, byte for byte.
    for f in handed_back {
        if f == format!("{apiserver}.crt") || f.ends_with("scheduler.conf") {
            continue;
        }
        assert_eq!(
            std::fs::read(host(d, &f)).expect("handed back"),
            std::fs::read(plan::backup_path(d, BACKUP, &f)).expect("backup"),
            "{f}"
        );
    }
}

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
        for said in [
            "pki/apiserver.crt ends ",
            "issuing it again from /etc/kubernetes/pki/ca.crt failed",
            "not the key of the CA certificate",
            "nothing was changed",
        ] {
            assert!(why.contains(said), "{said:?} not in {why}");
        }
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
    let why = revert_refusal(&revert_options(d)).await;
    for said in [
        "/etc/kubernetes/scheduler.conf, /etc/kubernetes/pki/etcd/peer.crt is not in adopt's backup",
        "kubeadm init phase kubeconfig NAME",
        "nothing was changed",
    ] {
        assert!(why.contains(said), "{said:?} not in {why}");
    }
}

#[tokio::test]
async fn without_the_cluster_configuration_revert_changes_nothing_and_adopt_goes_on() {
    let dir = adopted_node();
    let d = dir.path();
    let why = revert_refusal(&RevertOptions {
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

    // adopt needs no ClusterConfiguration: it adds nothing there (the
    // adoption is the node's own; a joining node gets kubeadm's manifests),
    // so it plans, and would go on, without the API server.
    let dir = node_dir();
    let out = adopt(&options(dir.path()))
        .await
        .expect("adopt without the API server");
    assert!(
        out.contains("ClusterConfiguration (kubeadm-config): stays kubeadm's;")
            && !out.contains("--local-only"),
        "{out}"
    );
}

/// The words revert's real run starts a line with: what it did. A dry run
/// starts none of its lines with one (the operator's review: a dry run in
/// the past tense reads as if it had changed the node).
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

/// revert `--dry-run` with `opts`: its output, after checking that it
/// changed nothing on the node.
async fn dry_run(opts: RevertOptions) -> String {
    let before = snapshot(&opts.dir);
    let out = revert(&RevertOptions {
        dry_run: true,
        ..opts.clone()
    })
    .await
    .expect("dry run");
    assert!(before == snapshot(&opts.dir), "dry run wrote: {out}");
    out
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
            "would purge certsync's configuration, kubeconfigs and targets".to_owned()
        } else {
            format!("would move certsync's configuration, kubeconfigs and targets into {BACKUP}/")
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
        format!("moved certsync's configuration, kubeconfigs and targets into {BACKUP}/"),
    ] {
        assert!(out.contains(&line), "{line}: {out}");
    }
    assert!(
        out.ends_with("reverted\n") && !out.contains("would "),
        "{out}"
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
async fn revert_moves_certsyncs_files_into_the_backup_or_purges_them() {
    for purge in [false, true] {
        let dir = adopted_node();
        let d = dir.path();
        let own = own_files(d);
        assert_eq!(own.len(), 10 + 3);
        revert(&RevertOptions {
            purge,
            ..revert_options(d)
        })
        .await
        .expect("revert");
        for (f, b) in &own {
            assert!(!host(d, f).exists(), "purge={purge}: {f} left in place");
            let kept = std::fs::read(plan::backup_path(d, BACKUP, f)).ok();
            assert_eq!(kept.as_ref(), (!purge).then_some(b), "purge={purge}: {f}");
        }
    }
}

/// A test that needs root (mounting a filesystem): `false` after saying
/// why it cannot run here; under `CI=true` it fails instead (CI runs as
/// root), as `tests/support/tools.rs` does for integration tests.
fn as_root(why: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{why} needs root; a skipped test fails under CI=true"
    );
    eprintln!("skipped: {why} needs root");
    false
}

/// A tmpfs mounted at a path, unmounted on drop (a failing test too).
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: &Path) -> Tmpfs {
        std::fs::create_dir_all(at).expect("mkdir");
        nix::mount::mount(
            Some("tmpfs"),
            at,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("mode=0700,size=16m"),
        )
        .expect("mount tmpfs");
        Tmpfs(at.to_owned())
    }
}

impl Tmpfs {
    /// A tmpfs mounted over the directory `at`, holding a copy of what
    /// was in it.
    fn mount_over(at: &Path) -> Tmpfs {
        let before = snapshot(at);
        let mounted = Tmpfs::mount(at);
        for (p, bytes) in &before {
            if bytes.as_slice() == b"<dir>" {
                std::fs::create_dir_all(p).expect("mkdir");
            } else {
                std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
                std::fs::write(p, bytes).expect("write");
            }
        }
        mounted
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

/// An adopted node whose backups are on a filesystem of their own (a
/// tmpfs at `/etc/kubernetes/certsync/backup`): a rename from `pki/` into
/// it fails with EXDEV.
fn adopted_node_with_backup_on_tmpfs() -> (tempfile::TempDir, Tmpfs) {
    let dir = adopted_node();
    let mounted = Tmpfs::mount_over(&host(dir.path(), plan::BACKUPS));
    (dir, mounted)
}

/// certsync's own files on the node (node paths) and their bytes.
fn own_files(d: &Path) -> Vec<(String, Vec<u8>)> {
    plan::targets(d)
        .into_iter()
        .map(|t| format!("{t}/tls.crt"))
        .chain([
            plan::CONFIG.to_owned(),
            "/etc/kubernetes/certsync/controller-manager.conf".to_owned(),
            "/etc/kubernetes/certsync/scheduler.conf".to_owned(),
        ])
        .map(|f| {
            let b = std::fs::read(host(d, &f)).expect("own file");
            (f, b)
        })
        .collect()
}

#[tokio::test]
async fn revert_moves_certsyncs_files_into_a_backup_on_another_filesystem() {
    if !as_root("mounting a tmpfs as the backup") {
        return;
    }
    let (dir, _tmpfs) = adopted_node_with_backup_on_tmpfs();
    let d = dir.path();
    let own = own_files(d);
    // A target as certsync leaves it: a revision directory, `..data` and
    // the file names as symlinks through it.
    let api = host(d, "/etc/kubernetes/pki/certsync/apiserver");
    std::fs::create_dir(api.join("..2026_11_25")).expect("mkdir");
    std::fs::write(api.join("..2026_11_25/tls.key"), "key\n").expect("write");
    std::fs::set_permissions(
        api.join("..2026_11_25/tls.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("chmod");
    std::os::unix::fs::symlink("..2026_11_25", api.join("..data")).expect("symlink");
    std::os::unix::fs::symlink("..data/tls.key", api.join("tls.key")).expect("symlink");

    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(out.ends_with("reverted\n"), "{out}");
    for (f, b) in &own {
        assert!(!host(d, f).exists(), "{f} left in place");
        let kept = std::fs::read(plan::backup_path(d, BACKUP, f)).ok();
        assert_eq!(kept.as_ref(), Some(b), "{f} in the backup");
    }
    let kept = plan::backup_path(d, BACKUP, "/etc/kubernetes/pki/certsync/apiserver");
    assert_eq!(
        std::fs::read_link(kept.join("..data")).expect("..data"),
        Path::new("..2026_11_25")
    );
    assert_eq!(
        std::fs::read(kept.join("tls.key")).expect("through the links"),
        b"key\n"
    );
    let mode = std::fs::metadata(kept.join("..2026_11_25/tls.key"))
        .expect("key")
        .permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    assert!(
        !host(d, plan::STATE).exists(),
        "adopt's record left in place"
    );
    let leftovers: Vec<_> = snapshot(&host(d, plan::BACKUPS))
        .into_keys()
        .filter(|p| p.to_string_lossy().contains(".partial"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    let again = revert(&revert_options(d)).await.expect("again");
    assert!(again.contains("nothing to do"), "{again}");
}

#[tokio::test]
async fn a_move_that_stopped_after_the_copy_is_finished_by_the_next_revert() {
    // The copy into the backup is complete, the original half removed (a
    // crash in remove_dir_all): the next revert finishes, never refuses
    // over its own copy; an original that differs from the copy is refused.
    let dir = adopted_node();
    let d = dir.path();
    let api = "/etc/kubernetes/pki/certsync/apiserver";
    std::fs::write(host(d, &format!("{api}/tls.key")), "key\n").expect("write");
    let kept = plan::backup_path(d, BACKUP, api);
    std::fs::create_dir_all(&kept).expect("mkdir");
    for f in ["tls.crt", "tls.key"] {
        std::fs::copy(host(d, api).join(f), kept.join(f)).expect("copy");
    }
    std::fs::remove_file(host(d, api).join("tls.key")).expect("half removed");
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(out.ends_with("reverted\n"), "{out}");
    assert!(!host(d, api).exists());
    assert_eq!(std::fs::read(kept.join("tls.key")).expect("kept"), b"key\n");

    // The backup holds something else under the name (an earlier copy):
    // it stays as it is, and the original is kept beside it.
    let dir = adopted_node();
    let d = dir.path();
    let kept = plan::backup_path(d, BACKUP, api);
    std::fs::create_dir_all(&kept).expect("mkdir");
    std::fs::write(kept.join("tls.crt"), "another\n").expect("write");
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(out.ends_with("reverted\n"), "{out}");
    assert_eq!(
        std::fs::read(kept.join("tls.crt")).expect("earlier"),
        b"another\n"
    );
    assert_eq!(
        std::fs::read(kept.with_file_name("apiserver.reverted-1").join("tls.crt"))
            .expect("beside it"),
        format!("target {api}\n").as_bytes()
    );
    assert!(!host(d, api).exists());
}

/// An API server holding the kubeadm-config ConfigMap with adopt's
/// ClusterConfiguration, over plain HTTP: GET answers it, PUT stores the
/// object (or, while `refuse` is set, answers 500 as kube-apiserver does
/// when etcd times out).
pub(super) struct ConfigMapApi {
    pub(super) url: String,
    pub(super) refuse: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// The ClusterConfiguration of each PUT that was accepted.
    pub(super) puts: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    _task: Aborting,
}

/// A server's task, ended with the test.
pub(super) struct Aborting(pub(super) tokio::task::JoinHandle<()>);

impl Drop for Aborting {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A listener on a free loopback port and its `http://` URL.
pub(super) async fn bind() -> (tokio::net::TcpListener, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    (listener, url)
}

impl ConfigMapApi {
    async fn start() -> ConfigMapApi {
        Self::start_with(super::fixture("adopted/cluster-configuration.yaml")).await
    }

    /// An API server holding `cluster_configuration`.
    pub(super) async fn start_with(cluster_configuration: String) -> ConfigMapApi {
        use std::sync::atomic::Ordering::SeqCst;
        let (listener, url) = bind().await;
        let refuse = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let puts = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let stored = std::sync::Arc::new(std::sync::Mutex::new(serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kubeadm-config", "namespace": "kube-system", "resourceVersion": "7"},
            "data": {"ClusterConfiguration": cluster_configuration},
        })));
        let (r, p) = (refuse.clone(), puts.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let (r, p, stored) = (r.clone(), p.clone(), stored.clone());
                let service =
                    hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let (r, p, stored) = (r.clone(), p.clone(), stored.clone());
                        async move {
                            use http_body_util::BodyExt as _;
                            let path = req.uri().path().to_owned();
                            let method = req.method().clone();
                            let body = req.into_body().collect().await?.to_bytes();
                            let (code, answer) = if path
                                != "/api/v1/namespaces/kube-system/configmaps/kubeadm-config"
                            {
                                (404, serde_json::json!({"kind": "Status", "code": 404}))
                            } else if method == http::Method::GET {
                                (200, stored.lock().expect("lock").clone())
                            } else if method == http::Method::PUT && r.load(SeqCst) {
                                (
                                    500,
                                    serde_json::json!({
                                        "kind": "Status", "apiVersion": "v1", "status": "Failure",
                                        "message": "etcdserver: request timed out",
                                        "reason": "InternalError", "code": 500,
                                    }),
                                )
                            } else if method == http::Method::PUT {
                                let object: serde_json::Value =
                                    serde_json::from_slice(&body).expect("json");
                                p.lock().expect("lock").push(
                                    object["data"]["ClusterConfiguration"]
                                        .as_str()
                                        .unwrap_or_default()
                                        .to_owned(),
                                );
                                *stored.lock().expect("lock") = object.clone();
                                (200, object)
                            } else {
                                (405, serde_json::json!({"kind": "Status", "code": 405}))
                            };
                            http::Response::builder()
                                .status(code)
                                .header("content-type", "application/json")
                                .body(http_body_util::Full::new(bytes::Bytes::from(
                                    answer.to_string(),
                                )))
                                .map(Ok::<_, hyper::Error>)
                                .expect("response")
                        }
                    });
                tokio::spawn(async move {
                    let _ = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .await;
                });
            }
        });
        ConfigMapApi {
            url,
            refuse,
            puts,
            _task: Aborting(task),
        }
    }
}

/// An adopted node whose admin.conf (current and kubeadm's in the backup)
/// names `api`.
fn adopted_node_on(api: &ConfigMapApi) -> tempfile::TempDir {
    let dir = adopted_node();
    let d = dir.path();
    for p in [
        d.join("admin.conf"),
        plan::backup_path(d, BACKUP, "/etc/kubernetes/admin.conf"),
    ] {
        let text = std::fs::read_to_string(&p).expect("admin.conf");
        std::fs::write(&p, text.replace("https://127.0.0.1:1", &api.url)).expect("write");
    }
    dir
}

/// An API server, a node adopted on it, and revert's options for it
/// (reading and writing the ClusterConfiguration).
pub(super) async fn adopted_node_with_api() -> (ConfigMapApi, tempfile::TempDir, RevertOptions) {
    let api = ConfigMapApi::start().await;
    let dir = adopted_node_on(&api);
    let opts = RevertOptions {
        local_only: false,
        ..revert_options(dir.path())
    };
    (api, dir, opts)
}

#[tokio::test]
async fn a_cluster_configuration_write_that_fails_leaves_the_node_unchanged() {
    use std::sync::atomic::Ordering::SeqCst;
    let (api, dir, opts) = adopted_node_with_api().await;
    let d = dir.path();
    // The API server answers the read, then refuses the write: nothing on
    // the node has changed, and the message says a re-run completes.
    api.refuse.store(true, SeqCst);
    let why = revert_refusal(&opts).await;
    for said in [
        "etcdserver: request timed out",
        "nothing was changed",
        "run `certsync kubeadm revert` again",
    ] {
        assert!(why.contains(said), "{said}: {why}");
    }
    assert!(api.puts.lock().expect("lock").is_empty());

    // Re-run once it accepts: the whole revert, ClusterConfiguration first.
    api.refuse.store(false, SeqCst);
    let out = revert(&opts).await.expect("revert");
    assert!(out.ends_with("reverted\n"), "{out}");
    assert_eq!(
        *api.puts.lock().expect("lock"),
        vec![super::fixture("cluster-configuration.yaml")],
        "adopt's fields taken out, nothing else"
    );
    assert_kubeadms_manifests(d);
}

/// Checks that the node's four manifests are kubeadm's, byte for byte.
pub(super) fn assert_kubeadms_manifests(d: &Path) {
    for c in manifest::components() {
        let path = format!("/etc/kubernetes/manifests/{}.yaml", c.name);
        assert_eq!(
            std::fs::read(host(d, &path)).expect("manifest"),
            std::fs::read(super::fixtures().join(format!("manifests/{}.yaml", c.name)))
                .expect("kubeadm's"),
            "{path} is kubeadm's"
        );
    }
}

#[tokio::test]
async fn a_revert_stopped_after_the_cluster_configuration_completes_without_the_api_server() {
    use std::sync::atomic::Ordering::SeqCst;
    let (api, dir, opts) = adopted_node_with_api().await;
    let d = dir.path();
    // A local step fails after the ClusterConfiguration was written (a
    // file where the backup's pki/certsync/ directory goes, which
    // certsync's targets move into).
    let kept = plan::backup_path(d, BACKUP, "/etc/kubernetes/pki/certsync");
    std::fs::write(&kept, "in the way\n").expect("write");
    let why = match revert(&opts).await {
        Err(e) => e.to_string(),
        Ok(out) => panic!("not refused:\n{out}"),
    };
    assert!(
        why.contains("stopped partway")
            && why.contains("ClusterConfiguration")
            && why.contains("run `certsync kubeadm revert` again"),
        "{why}"
    );
    assert_eq!(api.puts.lock().expect("lock").len(), 1);
    // This node's API server restarts on kubeadm's manifest and the
    // ClusterConfiguration is done: the re-run needs no API server.
    std::fs::remove_file(&kept).expect("remove");
    api.refuse.store(true, SeqCst);
    drop(api);
    let out = revert(&opts).await.expect("re-run");
    assert!(out.ends_with("reverted\n"), "{out}");
    assert!(!host(d, plan::CONFIG).exists());
}

/// An adopted node whose apiserver target a daemon (this process) holds
/// claimed: (the node, the target, the claim).
fn adopted_with_a_daemon() -> (tempfile::TempDir, PathBuf, crate::writer::Claim) {
    let dir = adopted_node();
    let api = host(dir.path(), "/etc/kubernetes/pki/certsync/apiserver");
    let claim = crate::writer::Writer::existing(&api)
        .expect("target")
        .claim()
        .expect("claim");
    (dir, api, claim)
}

#[tokio::test]
async fn revert_waits_for_certsyncs_daemon_to_let_go_of_its_targets() {
    // The daemon whose static pod revert removes is still stopping (the
    // kubelet gives it its grace period) and publishes once more before it
    // exits: revert moves the target only once the daemon's claim is gone,
    // so the last publish is in the backup, not a target recreated in place.
    let (dir, api, claim) = adopted_with_a_daemon();
    let d = dir.path().to_owned();
    let daemon = {
        let api = api.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(2));
            std::fs::create_dir_all(&api).expect("mkdir");
            std::fs::write(api.join("late"), "last publish\n").expect("publish");
            drop(claim);
        })
    };
    let out = revert(&revert_options(&d)).await.expect("revert");
    daemon.join().expect("daemon");
    assert!(out.ends_with("reverted\n"), "{out}");
    assert!(!api.exists(), "a target recreated in place after revert");
    let kept = plan::backup_path(&d, BACKUP, "/etc/kubernetes/pki/certsync/apiserver");
    assert_eq!(
        std::fs::read(kept.join("late")).expect("the last publish, kept"),
        b"last publish\n"
    );
}

#[tokio::test]
async fn a_daemon_that_never_lets_go_of_its_targets_stops_revert_naming_it() {
    // The daemon outlives the wait (a kubelet that never stops it, a
    // certsync started by hand): revert gives up naming the process and
    // the target, and leaves the target where it is for the next run.
    let (dir, api, claim) = adopted_with_a_daemon();
    let d = dir.path().to_owned();
    let Err(err) =
        crate::kubeadm::revert::claim_targets(&d, std::time::Duration::from_millis(600)).await
    else {
        panic!("revert waited past its limit and claimed the target");
    };
    let text = err.to_string();
    for said in [
        format!("(pid {})", std::process::id()),
        "still holds /etc/kubernetes/pki/certsync/apiserver".into(),
        "stop it, then run revert again".into(),
    ] {
        assert!(text.contains(&said), "{said:?} not in {text}");
    }
    assert!(api.is_dir(), "the target stays for the next revert");
    drop(claim);
    let out = revert(&revert_options(&d))
        .await
        .expect("revert once it let go");
    assert!(out.ends_with("reverted\n"), "{out}");
    assert!(!api.exists());
}

#[tokio::test]
async fn revert_removes_the_directories_adopt_made_once_empty() {
    // The operator's review: revert left pki/certsync/ and
    // pki/etcd/certsync/ behind it, empty. Now each directory adopt made is
    // removed once empty (dry run: said, not done); the one holding the
    // backups stays, saying so; a second revert has nothing to do.
    let made = [
        "/etc/kubernetes/pki/certsync",
        "/etc/kubernetes/pki/etcd/certsync",
    ];
    for purge in [false, true] {
        let dir = adopted_node();
        let d = dir.path();
        let out = dry_run(RevertOptions {
            purge,
            ..revert_options(d)
        })
        .await;
        for m in made {
            let said =
                format!("would remove {m}/ (adopt made it; empty once certsync's files are out)\n");
            assert!(out.contains(&said), "purge={purge}: {said:?} not in\n{out}");
        }
        let out = revert(&RevertOptions {
            purge,
            ..revert_options(d)
        })
        .await
        .expect("revert");
        for m in made {
            assert!(
                !host(d, m).exists(),
                "purge={purge}: {m} left behind:\n{out}"
            );
            let said = format!("removed {m}/ (adopt made it; now empty)\n");
            assert!(out.contains(&said), "purge={purge}: {said:?} not in\n{out}");
        }
        assert!(
            out.contains("left /etc/kubernetes/certsync/ in place: it holds backup\n"),
            "{out}"
        );
        assert!(host(d, plan::BACKUPS).is_dir());
        assert!(out.ends_with("reverted\n"), "{out}");
        let again = revert(&revert_options(d)).await.expect("again");
        assert!(again.contains("nothing to do"), "{again}");
    }

    // Something else in one of them: left in place, naming what it holds.
    let dir = adopted_node();
    let d = dir.path();
    std::fs::write(host(d, "/etc/kubernetes/pki/certsync/stray"), "someone's\n").expect("write");
    let said = "/etc/kubernetes/pki/certsync/ in place: it holds stray\n";
    let out = dry_run(revert_options(d)).await;
    assert!(out.contains(&format!("would leave {said}")), "{out}");
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(out.contains(&format!("left {said}")), "{out}");
    assert_eq!(
        std::fs::read(host(d, "/etc/kubernetes/pki/certsync/stray")).expect("kept"),
        b"someone's\n"
    );
    assert!(!host(d, made[1]).exists(), "{out}");

    // Not root's: left in place.
    if !as_root("chown") {
        return;
    }
    let dir = adopted_node();
    let d = dir.path();
    std::os::unix::fs::chown(host(d, made[1]), Some(1000), Some(1000)).expect("chown");
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(
        out.contains(&format!(
            "left {}/ in place: owned by uid 1000, not root\n",
            made[1]
        )),
        "{out}"
    );
    assert!(host(d, made[1]).is_dir());
}

#[tokio::test]
async fn a_directory_revert_cannot_remove_never_stops_it() {
    // pki/etcd/certsync is a mount point on the host (EBUSY on rmdir):
    // removing it is tidying, not reverting, so revert finishes, leaving
    // it in place and saying why; a re-run would otherwise stop there
    // every time.
    if !as_root("mounting a tmpfs") {
        return;
    }
    let dir = adopted_node();
    let d = dir.path();
    let _mounted = Tmpfs::mount_over(&host(d, "/etc/kubernetes/pki/etcd/certsync"));
    let out = revert(&revert_options(d)).await.expect("revert");
    assert!(out.ends_with("reverted\n"), "{out}");
    assert!(
        out.contains("left /etc/kubernetes/pki/etcd/certsync/ in place: ") && out.contains("busy"),
        "{out}"
    );
    assert!(!host(d, "/etc/kubernetes/pki/certsync").exists(), "{out}");
}

#[test]
fn attack_an_empty_directory_is_never_removed_through_a_symlink() {
    // A compromised certsync container swaps pki/etcd for a symlink to a
    // host directory holding an empty `certsync` (or makes pki/certsync a
    // symlink to one): the directory is reached one name at a time
    // beneath a handle, never through a link, so the host's stays.
    let node = tempfile::tempdir().expect("node");
    let decoy = tempfile::tempdir().expect("decoy");
    let d = node.path();
    std::fs::create_dir_all(decoy.path().join("certsync")).expect("mkdir");
    std::fs::create_dir_all(d.join("pki")).expect("mkdir");
    std::os::unix::fs::symlink(decoy.path(), d.join("pki/etcd")).expect("symlink");
    std::os::unix::fs::symlink(decoy.path().join("certsync"), d.join("pki/certsync"))
        .expect("symlink");
    for m in [
        "/etc/kubernetes/pki/etcd/certsync",
        "/etc/kubernetes/pki/certsync",
    ] {
        let left = super::super::moves::remove_empty_dir(d, m, &[], false).expect(m);
        assert!(
            matches!(&left, super::super::moves::Left::Kept(why) if why.contains("symlink")),
            "{m}: {left:?}"
        );
    }
    assert!(
        decoy.path().join("certsync").is_dir(),
        "the host's directory was removed"
    );
}
