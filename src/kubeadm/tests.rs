//! Unit tests on fixtures copied from a kubeadm v1.36.2 node
//! (`tests/fixtures/kubeadm/`: its four manifests, its certificates without
//! keys, its ClusterConfiguration), and `adopted/`: the manifests kubeadm
//! itself generated (`init phase control-plane all`, `etcd local`) from a
//! local ClusterConfiguration carrying certsync's `extraArgs` and
//! `extraVolumes` (the guide's "Pointing the components at the targets").

use std::path::{Path, PathBuf};

use super::error::{FileProblem, RevertError};
use super::manifest::{self, Manifest};
use super::paths::{digest, host};
use super::plan::{Plan, plan};
use super::status::Cause;
use super::warning::WarningKind;
use super::*;
use crate::cli::{ValueError, check_set};
use crate::config::ConfigError;

/// adopt, its output kept and returned, as the tests read it.
async fn adopt(opts: &Options) -> Result<String, KubeadmError> {
    let mut out = Out::kept();
    super::adopt(opts, &mut out)
        .await
        .map(|()| out.text().to_owned())
}

/// Every mapping's target on a node without adopt's record.
fn all_targets(dir: &Path) -> Vec<String> {
    plan::certs(dir, None)
        .into_iter()
        .map(|c| c.target)
        .collect()
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/kubeadm")
}

fn fixture(rel: &str) -> String {
    std::fs::read_to_string(fixtures().join(rel)).expect("fixture")
}

#[test]
fn a_cluster_configuration_adopt_does_not_know_is_refused() {
    let base: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&fixture("cluster-configuration.yaml")).expect("yaml");
    assert!(api::refusal(&base).is_none());
    let external = |r: &Refusal| matches!(r, Refusal::ExternalEtcd);
    let dir = |r: &Refusal| matches!(r, Refusal::CertificatesDir { dir } if dir == "/srv/pki");
    let version = |r: &Refusal| matches!(r, Refusal::ApiVersion { found } if found == "kubeadm.k8s.io/v1beta3");
    for (change, refused) in [
        (
            "etcd: {external: {endpoints: [\"https://10.0.0.1:2379\"]}}",
            &external as &dyn Fn(&Refusal) -> bool,
        ),
        ("certificatesDir: /srv/pki", &dir),
        ("apiVersion: kubeadm.k8s.io/v1beta3", &version),
    ] {
        let mut cc = base.clone();
        let patch: serde_yaml_ng::Mapping = serde_yaml_ng::from_str(change).expect("patch");
        for (k, v) in patch {
            cc[k.as_str().expect("key")] = v;
        }
        let why = api::refusal(&cc).unwrap_or_else(|| panic!("{change}: not refused"));
        assert!(refused(&why), "{change}: {why}");
    }
}

#[test]
fn set_accepts_renewal_options_only() {
    assert_eq!(
        check_set("lifetime=10m"),
        Ok(("lifetime".into(), "10m".into()))
    );
    assert!(check_set("renew=30%-40%").is_ok());
    assert!(check_set("keep-key=true").is_ok());
    for bad in [
        "cn=evil",
        "template=/x",
        "dns=a.example",
        "o=system:masters",
        "usage=server-auth",
    ] {
        let option = bad.split_once('=').expect("=").0.to_owned();
        assert_eq!(
            check_set(bad),
            Err(ValueError::NotSettable { option }),
            "{bad}"
        );
    }
    assert_eq!(
        check_set("lifetime"),
        Err(ValueError::NoValue {
            spec: "lifetime".into()
        })
    );
    assert_eq!(
        check_set("lifetime="),
        Err(ValueError::Empty {
            option: "lifetime".into()
        })
    );
}

/// A node directory made of the fixtures (no keys: the plan reads only
/// certificates), with kubeconfigs naming the node's API server.
fn node_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = |from: &Path, to: &Path| {
        std::fs::create_dir_all(to).expect("mkdir");
        for e in std::fs::read_dir(from).expect("read_dir") {
            let e = e.expect("entry");
            if e.file_type().expect("type").is_file() {
                std::fs::copy(e.path(), to.join(e.file_name())).expect("copy");
            }
        }
    };
    copy(&fixtures().join("manifests"), &dir.path().join("manifests"));
    copy(&fixtures().join("pki"), &dir.path().join("pki"));
    copy(&fixtures().join("pki/etcd"), &dir.path().join("pki/etcd"));
    // Each pair's key beside its certificate (not in the fixtures: only
    // their presence is read).
    for p in plan::pairs() {
        // 0600, as kubeadm writes keys (adopt refuses one others may read).
        let key = host(dir.path(), &format!("{p}.key"));
        std::fs::write(&key, "kubeadm's key\n").expect("key");
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .expect("chmod");
    }
    // As kubeadm writes them: the client pair embedded (certsync keeps it
    // in step, and `run`'s loader judges that it can).
    for (f, user) in [
        ("controller-manager.conf", "system:kube-controller-manager"),
        ("scheduler.conf", "system:kube-scheduler"),
    ] {
        std::fs::write(
            dir.path().join(f),
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- cluster: {{server: \"https://10.77.0.11:6443\"}}\n  \
                 name: kubernetes\ncontexts:\n- context: {{cluster: kubernetes, user: {user}}}\n  \
                 name: {user}@kubernetes\ncurrent-context: {user}@kubernetes\nusers:\n- name: {user}\n  \
                 user: {{client-certificate-data: Y2VydA==, client-key-data: a2V5}}\n"
            ),
        )
        .expect("kubeconfig");
    }
    dir
}

/// The day the fixtures' CAs were made (2026-11-25): adopt's view of a
/// node kubeadm made that day, whatever the test's date (their keys are
/// not in the fixtures, so no renewal may come due).
fn fixtures_made() -> std::time::SystemTime {
    std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_795_564_800)
}

fn options(dir: &Path) -> Options {
    Options {
        dir: dir.to_owned(),
        dry_run: true,
        // The guide's first rollout.
        set: vec![
            ("lifetime".into(), "8m".into()),
            ("renew".into(), "20%-25%".into()),
        ],
        image: Some("certsync".into()),
        admin_addr: Some(([127, 0, 0, 1], 9814).into()),
        json: false,
        ready_timeout: std::time::Duration::from_secs(1),
        // No API server on a test's node directory.
        api_server_timeout: std::time::Duration::ZERO,
        keep_backups: 3,
        now: fixtures_made(),
    }
}

/// adopt's plan refused the node: why.
async fn refusal(dir: &Path) -> Refusal {
    match plan(&options(dir)).await {
        Err(KubeadmError::Refused { reason, .. }) => *reason,
        Err(e) => panic!("not a refusal: {e}"),
        Ok(p) => panic!("not refused:\n{}", p.text()),
    }
}

#[tokio::test]
async fn the_plan_on_kubeadms_files_names_every_change() {
    let dir = node_dir();
    let p = plan(&options(dir.path())).await.expect("plan");
    assert!(
        p.cluster_configuration_from.starts_with("not read"),
        "no admin.conf here: {}",
        p.cluster_configuration_from
    );
    assert_eq!(p.manifests.len(), 4);
    // certsync's two kubeconfigs, config and pod; the two trust bundles;
    // each CA renewed when due.
    let renewed = p.cas.iter().filter(|c| c.renewed_to.is_some()).count();
    assert_eq!(p.files.len(), 6 + renewed, "{:?}", p.files);
    for bundle in [manifest::CA_BUNDLE, manifest::ETCD_CA_BUNDLE] {
        assert!(p.files.iter().any(|f| f.path == bundle), "{bundle}");
    }
    let text = p.text();
    // Nothing added to the ClusterConfiguration: the adoption is this node's.
    assert!(
        text.contains("ClusterConfiguration (kubeadm-config): stays kubeadm's;"),
        "{text}"
    );
    assert!(text.contains("about 40 s"), "{text}");
    assert!(
        text.contains("certsync image: certsync (generation "),
        "{text}"
    );
    assert!(
        text.contains("keeps issuing from one after it expires")
            && text.contains("any that ends within 24 h issued again from its CA"),
        "{text}"
    );
    assert!(
        text.contains(
            "  apiserver -> /etc/kubernetes/pki/certsync/apiserver (lifetime=8m, renew=20%-25%)\n"
        ),
        "{text}"
    );
    let config = &p
        .files
        .iter()
        .find(|f| f.path == plan::CONFIG)
        .expect("config")
        .bytes;
    let config = String::from_utf8_lossy(config);
    assert_eq!(config.matches("lifetime: 8m").count(), 9, "{config}");
    assert!(
        config.contains("template: /etc/kubernetes/pki/etcd/server.crt"),
        "{config}"
    );
    // No admin.conf here: only the components' kubeconfigs kept in step,
    // and every template's pair.
    assert_eq!(config.matches("update-kubeconfig:").count(), 2, "{config}");
    for k in ["controller-manager.conf", "scheduler.conf"] {
        assert!(
            config.contains(&format!("update-kubeconfig: /etc/kubernetes/{k}")),
            "{config}"
        );
    }
    assert_eq!(config.matches("update-pair:").count(), 7, "{config}");
    assert!(
        config.contains("update-pair: /etc/kubernetes/pki/etcd/server\n"),
        "{config}"
    );
    assert!(
        text.contains(
            "renew in place /etc/kubernetes/pki/apiserver.crt and /etc/kubernetes/pki/apiserver.key"
        ),
        "{text}"
    );
    // certsync's pod writes pki/ (the pairs), never a CA or SA file.
    let pod = String::from_utf8_lossy(
        &p.files
            .iter()
            .find(|f| f.path == plan::POD)
            .expect("pod")
            .bytes,
    )
    .into_owned();
    assert!(
        pod.contains("    - mountPath: /etc/kubernetes/pki\n      name: pki\n    - "),
        "pki read-write: {pod}"
    );
    // Attack: a directory holding a read-only file or
    // certsync's targets is a mount point of its own, which the container
    // cannot rename away (EBUSY) to put its own CA in its place.
    for (path, name) in [
        ("/etc/kubernetes/pki/etcd", "pki-etcd"),
        ("/etc/kubernetes/pki/certsync", "certsync-targets"),
        ("/etc/kubernetes/pki/etcd/certsync", "certsync-etcd-targets"),
    ] {
        assert!(
            pod.contains(&format!(
                "    - mountPath: {path}\n      name: {name}\n    - "
            )),
            "{path} its own read-write mount: {pod}"
        );
    }
    for f in plan::CA_FILES {
        if host(dir.path(), f).is_file() {
            assert!(
                pod.contains(&format!("    - mountPath: {f}\n      name: kubeadm-")),
                "{f}: {pod}"
            );
            let at = pod.find(&format!("mountPath: {f}\n")).expect("mount");
            assert!(
                pod[at..].lines().nth(2) == Some("      readOnly: true"),
                "{f} read-only: {pod}"
            );
        }
    }

    // With admin.conf (and no super-admin.conf, as on a joined node): its
    // embedded pair is kept renewed, and certsync's pod may replace it.
    std::fs::write(
        dir.path().join("admin.conf"),
        adopted::kubeconfig_ending(time::Duration::days(365)),
    )
    .expect("admin.conf");
    let p = plan(&options(dir.path())).await.expect("plan");
    let file = |path: &str| {
        String::from_utf8_lossy(&p.files.iter().find(|f| f.path == path).expect(path).bytes)
            .into_owned()
    };
    let config = file(plan::CONFIG);
    assert_eq!(config.matches("update-kubeconfig:").count(), 3, "{config}");
    assert!(
        config.contains("update-kubeconfig: /etc/kubernetes/admin.conf"),
        "{config}"
    );
    assert!(config.contains("- kubeadm:cluster-admins"), "{config}");
    let pod = file(plan::POD);
    assert!(
        pod.contains("mountPath: /etc/kubernetes\n      name: etc-kubernetes\n    - ")
            && pod.contains(
                "mountPath: /etc/kubernetes/manifests\n      name: manifests\n      readOnly: true"
            ),
        "{pod}"
    );
    // adopt's backups (under /etc/kubernetes/certsync) are read-only to
    // certsync's container: revert hands back and issues again only them.
    assert!(
        pod.contains(
            "mountPath: /etc/kubernetes/certsync\n      name: certsync-files\n      readOnly: true"
        ),
        "{pod}"
    );
    assert_eq!(
        p.kubeconfigs_renewed,
        [
            "/etc/kubernetes/controller-manager.conf",
            "/etc/kubernetes/scheduler.conf",
            "/etc/kubernetes/admin.conf"
        ]
    );
}

#[tokio::test]
async fn a_plan_with_nothing_to_change_in_a_section_says_so() {
    // Manifests kubeadm generated for certsync's flags and volumes (the
    // guide's way by hand, from a local config): nothing to change in them.
    let dir = node_dir();
    for c in manifest::components() {
        std::fs::write(
            dir.path().join(format!("manifests/{}.yaml", c.name)),
            fixture(&format!("adopted/{}.yaml", c.name)),
        )
        .expect("write");
    }
    // Only the trust annotation to add (kubeadm knows nothing of it):
    // once there, nothing to change.
    let p = plan(&options(dir.path())).await.expect("plan");
    for m in &p.manifests {
        assert!(
            m.flags.is_empty() && m.volumes_added.is_empty(),
            "{}",
            m.path
        );
        assert_eq!(m.annotations.len(), 1, "{}", m.path);
        std::fs::write(host(dir.path(), &m.path), &m.after).expect("write");
    }
    assert_eq!(p.manifests.len(), 3);
    let p = plan(&options(dir.path())).await.expect("plan");
    assert!(p.manifests.is_empty());
    let text = p.text();
    assert!(
        text.contains("manifests:\n  none to change: each already names certsync's files\n"),
        "{text}"
    );
}

#[tokio::test]
async fn a_node_adopt_does_not_recognise_is_refused_naming_why() {
    // External etcd: no etcd manifest.
    let dir = node_dir();
    std::fs::remove_file(dir.path().join("manifests/etcd.yaml")).expect("rm");
    let why = refusal(dir.path()).await;
    assert!(
        matches!(&why, Refusal::NoEtcd { path } if path == "/etc/kubernetes/manifests/etcd.yaml"),
        "{why}"
    );

    // An unknown certsync static pod, or configuration, already there.
    for file in ["manifests/certsync.yaml", "certsync.yaml"] {
        let dir = node_dir();
        std::fs::write(dir.path().join(file), "someone else's\n").expect("write");
        let why = refusal(dir.path()).await;
        assert!(
            matches!(&why, Refusal::Unowned { path } if *path == format!("/etc/kubernetes/{file}")),
            "{file}: {why}"
        );
    }

    // A template not issued by the CA its mapping names: the etcd CA's
    // client certificate put in place of the API server's.
    let dir = node_dir();
    std::fs::copy(
        fixtures().join("pki/apiserver-etcd-client.crt"),
        dir.path().join("pki/apiserver.crt"),
    )
    .expect("copy");
    let why = refusal(dir.path()).await;
    assert!(
        matches!(&why, Refusal::Cert(FileProblem::OtherIssuer { template, issuer, ca, .. })
            if template == "/etc/kubernetes/pki/apiserver.crt"
                && issuer.contains("etcd-ca")
                && ca == "/etc/kubernetes/pki/ca.crt"),
        "{why}"
    );

    // A certificate naming the CA as issuer that the CA did not sign
    // (signed by the front-proxy CA's key under the name "kubernetes").
    let dir = node_dir();
    let forged = forge_issuer("kubernetes");
    std::fs::write(dir.path().join("pki/apiserver-kubelet-client.crt"), forged).expect("write");
    let why = refusal(dir.path()).await;
    assert!(
        matches!(&why, Refusal::Cert(FileProblem::NotSigned { template, ca })
            if template == "/etc/kubernetes/pki/apiserver-kubelet-client.crt"
                && ca == "/etc/kubernetes/pki/ca.crt"),
        "{why}"
    );

    // A pair's certificate missing is refused as the template unread (read once, judged and
    // backed up as read); its key missing, as a pair incomplete.
    let dir = node_dir();
    std::fs::remove_file(dir.path().join("pki/apiserver.crt")).expect("rm");
    let why = refusal(dir.path()).await;
    assert!(
        matches!(&why, Refusal::Cert(FileProblem::Unreadable(e))
            if matches!(&**e, KubeadmError::File { problem, .. }
                if matches!(**problem, FileProblem::Missing))),
        "{why}"
    );
    let dir = node_dir();
    std::fs::remove_file(dir.path().join("pki/apiserver.key")).expect("rm");
    let why = refusal(dir.path()).await;
    assert!(
        matches!(&why, Refusal::NoPair { file } if file == "/etc/kubernetes/pki/apiserver.key"),
        "{why}"
    );

    // A custom path in a manifest.
    let dir = node_dir();
    let p = dir.path().join("manifests/etcd.yaml");
    let text = std::fs::read_to_string(&p).expect("read").replace(
        "--peer-cert-file=/etc/kubernetes/pki/etcd/peer.crt",
        "--peer-cert-file=/etc/etcd/peer.crt",
    );
    std::fs::write(&p, text).expect("write");
    let why = refusal(dir.path()).await;
    assert!(
        matches!(&why, Refusal::Cert(FileProblem::Named { what, source })
            if what == "/etc/kubernetes/manifests/etcd.yaml"
                && matches!(&**source, FileProblem::FlagValue { flag: "peer-cert-file", found, .. }
                    if found == "/etc/etcd/peer.crt")),
        "{why}"
    );
}

/// Attack: a link planted where a kubeadm CA or service-account file belongs (certsync's
/// container may write pki/) is refused as every node read refuses one, never looked
/// through by name into a read-only mount of the file it names (a hostPath follows it).
#[tokio::test]
async fn attack_a_link_at_a_ca_file_is_refused_never_mounted() {
    let dir = node_dir();
    let d = dir.path();
    std::fs::write(d.join("host-file"), "root's\n").expect("write");
    std::os::unix::fs::symlink(d.join("host-file"), d.join("pki/sa.pub")).expect("symlink");
    let e = match plan(&options(d)).await {
        Err(e) => e.to_string(),
        Ok(p) => panic!("not refused:\n{}", p.text()),
    };
    assert!(e.contains("pki/sa.pub") && e.contains("symlink"), "{e}");
    // Not a regular file: refused too, never left unmounted for the container to replace.
    std::fs::remove_file(d.join("pki/sa.pub")).expect("remove");
    std::fs::create_dir(d.join("pki/sa.pub")).expect("mkdir");
    let e = match plan(&options(d)).await {
        Err(e) => e.to_string(),
        Ok(p) => panic!("not refused:\n{}", p.text()),
    };
    assert!(
        e.contains("pki/sa.pub") && e.contains("not a regular file"),
        "{e}"
    );
}

/// A certificate whose issuer is `CN=<cn>` but signed by a key of its own.
fn forge_issuer(cn: &str) -> String {
    let issuer_key = rcgen::KeyPair::generate().expect("key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    // PrintableString, as Go encodes kubeadm's CA name: the issuer bytes
    // match the CA's subject exactly, only the signature is wrong.
    ca.distinguished_name.push(
        rcgen::DnType::CommonName,
        rcgen::DnValue::PrintableString(cn.try_into().expect("printable")),
    );
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let issuer = rcgen::Issuer::new(ca, issuer_key);
    let key = rcgen::KeyPair::generate().expect("key");
    let mut leaf = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    leaf.distinguished_name
        .push(rcgen::DnType::CommonName, "kube-apiserver-kubelet-client");
    leaf.signed_by(&key, &issuer).expect("leaf").pem()
}

/// The ClusterConfiguration's `encryptionAlgorithm` names a key algorithm
/// only as kubeadm spells one it makes; certsync's own spellings and keys
/// kubeadm does not make are none.
#[test]
fn only_kubeadms_encryption_algorithms_name_a_key_algorithm() {
    use crate::x509::KeyAlg;
    for (name, alg) in [
        ("RSA-2048", KeyAlg::Rsa(2048)),
        ("RSA-3072", KeyAlg::Rsa(3072)),
        ("RSA-4096", KeyAlg::Rsa(4096)),
        ("ECDSA-P256", KeyAlg::EcdsaP256),
        ("ECDSA-P384", KeyAlg::EcdsaP384),
    ] {
        assert_eq!(node::encryption_algorithm(name), Some(alg), "{name}");
    }
    for name in [
        "rsa-2048", "RSA", "ECDSA", "P256", "ED25519", "RSA-1024", "",
    ] {
        assert_eq!(node::encryption_algorithm(name), None, "{name}");
    }
}

/// Without the ClusterConfiguration, the key algorithm certsync issues
/// with is read from kubeadm's API server certificate: each key kubeadm
/// makes names its `key-alg=`, any other none.
#[test]
fn kubeadms_key_algorithm_is_read_from_its_api_server_certificate() {
    let dir = node_dir();
    let crt = "/etc/kubernetes/pki/apiserver.crt";
    assert_eq!(
        node::key_alg(dir.path(), crt).expect("read"),
        Some(crate::x509::KeyAlg::Rsa(2048))
    );
    for (alg, want) in [
        (
            &rcgen::PKCS_ECDSA_P256_SHA256,
            Some(crate::x509::KeyAlg::EcdsaP256),
        ),
        (
            &rcgen::PKCS_ECDSA_P384_SHA384,
            Some(crate::x509::KeyAlg::EcdsaP384),
        ),
        (&rcgen::PKCS_ED25519, None),
    ] {
        let key = rcgen::KeyPair::generate_for(alg).expect("key");
        let params = rcgen::CertificateParams::new(vec!["kubernetes".into()]).expect("params");
        let pem = params.self_signed(&key).expect("cert").pem();
        std::fs::write(host(dir.path(), crt), pem).expect("write");
        assert_eq!(node::key_alg(dir.path(), crt).expect("read"), want);
    }
}

mod admin;
mod adopted;
mod bootstrap;
mod handback;
mod manifests;
mod published;
mod readopt;
mod revert_apply;
mod revert_plan;
mod status;
mod trust;
mod trust_attacks;

/// certsync's pod carries a generation of its configuration, trust and
/// the pod itself: adopt waits for that pod's `/readyz`, not an earlier
/// one's on the same port. Another image, admin address, configuration or
/// trust is another generation.
#[tokio::test]
async fn the_pod_names_its_generation_of_configuration_and_image() {
    let d = node_dir();
    let plan = plan(&options(d.path())).await.expect("plan");
    let pod = plan
        .files
        .iter()
        .find(|f| f.path == plan::POD)
        .expect("the pod");
    assert_eq!(
        super::pod::Current::parse(&pod.bytes).generation.as_deref(),
        Some(plan.generation.as_str())
    );
    let config = &plan
        .files
        .iter()
        .find(|f| f.path == plan::CONFIG)
        .expect("config")
        .bytes;
    let again = plan::plan(&options(d.path())).await.expect("plan");
    assert_eq!(
        again.generation, plan.generation,
        "the same pod, the same generation"
    );
    let other = plan::plan(&Options {
        image: Some("certsync:2".into()),
        ..options(d.path())
    })
    .await
    .expect("plan");
    assert_ne!(other.generation, plan.generation, "another image");
    // Another admin address alone: another pod, whose readiness the gate
    // must see (the old pod answered ready with the old generation).
    let moved = plan::plan(&Options {
        admin_addr: Some(([127, 0, 0, 1], 9815).into()),
        ..options(d.path())
    })
    .await
    .expect("plan");
    assert_ne!(moved.generation, plan.generation, "another admin address");
    assert_ne!(
        super::pod::generation(b"mappings: []\n", &plan.trust, "certsync"),
        plan.generation,
        "another configuration"
    );
    assert_ne!(
        super::pod::generation(config, "another trust", "certsync"),
        plan.generation,
        "another CA trust"
    );
    assert_eq!(
        super::pod::Current::parse(b"args:\n- run\n").generation,
        None
    );
}

/// adopt's gate reads each target's pair as root, in directories
/// certsync's container writes: a link it left there is not followed out
/// of the target (what it names is never read), and a missing target is
/// said as such.
#[test]
fn the_gate_reads_targets_beneath_their_directory_only() {
    let d = tempfile::tempdir().expect("tempdir");
    let outside = d.path().join("outside.crt");
    std::fs::write(&outside, "not a certificate").expect("write");
    let targets = all_targets(d.path());
    let first = host(d.path(), &targets[0]);
    std::fs::create_dir_all(&first).expect("target");
    std::os::unix::fs::symlink(&outside, first.join("tls.crt")).expect("link");
    std::os::unix::fs::symlink(&outside, first.join("tls.key")).expect("link");
    let dead = super::wait::dead_targets(d.path(), &[]);
    assert_eq!(dead.len(), targets.len(), "{dead:?}");
    let (t, why) = &dead[0];
    assert_eq!(t, &targets[0]);
    assert!(
        !why.contains("PEM") && why.contains("tls.crt"),
        "the link was followed: {why}"
    );
    assert!(dead[1].1.ends_with("missing"), "{:?}", dead[1]);
}

#[tokio::test]
async fn a_re_adopt_shows_the_image_it_replaces() {
    // Correcting a mistyped image (or upgrading certsync) showed only
    // `replace /etc/kubernetes/manifests/certsync.yaml`: the operator could
    // not see what changed.
    let dir = node_dir();
    let d = dir.path();
    let typo = Options {
        image: Some("registry.example.com/certsynk:0.2".into()),
        ..options(d)
    };
    let first = plan(&typo).await.expect("plan");
    let pod = first
        .files
        .iter()
        .find(|f| f.path == plan::POD)
        .expect("pod");
    std::fs::create_dir_all(d.join("certsync")).expect("mkdir");
    readopt::recorded(d);
    std::fs::write(host(d, plan::POD), &pod.bytes).expect("pod");
    let again = plan(&Options {
        image: Some("registry.example.com/certsync:0.2".into()),
        ..options(d)
    })
    .await
    .expect("plan");
    assert!(
        again.text().contains(
            "certsync image: registry.example.com/certsynk:0.2 -> registry.example.com/certsync:0.2 ("
        ),
        "{}",
        again.text()
    );
    // The same image: shown once.
    let same = plan(&typo).await.expect("plan");
    assert!(
        same.text()
            .contains("certsync image: registry.example.com/certsynk:0.2 (generation"),
        "{}",
        same.text()
    );
}

#[tokio::test]
async fn the_image_is_a_value_in_certsyncs_pod_never_part_of_its_shape() {
    // `--image` went into the pod's YAML as text: a newline in it added
    // fields of its choosing to the container (here a privileged one).
    // adopt refuses such an image outright now; the pod is a typed Pod
    // whatever it is given, the image one string value.
    let dir = node_dir();
    let image = "registry.example.com/certsync:1\n    securityContext: {privileged: true}";
    let opts = Options {
        image: Some(image.into()),
        ..options(dir.path())
    };
    assert!(matches!(
        plan::plan(&opts).await,
        Err(KubeadmError::Refused { reason, .. }) if matches!(*reason, Refusal::Image { why: super::preflight::TAG, .. })
    ));
    let text = super::pod::manifest(&super::pod::Spec {
        image,
        admin: "127.0.0.1:9814".parse().expect("addr"),
        generation: "g",
        config_hash: "h",
        mounts: Vec::new(),
    })
    .expect("manifest");
    let pod: k8s_openapi::api::core::v1::Pod = serde_yaml_ng::from_str(
        text.split_once('\n')
            .map_or(text.as_str(), |(_, body)| body),
    )
    .expect("a Pod");
    let spec = pod.spec.expect("spec");
    let [c] = spec.containers.as_slice() else {
        panic!("one container: {:?}", spec.containers);
    };
    assert_eq!(c.image.as_deref(), Some(image));
    assert_eq!(
        c.security_context.as_ref().and_then(|s| s.privileged),
        None,
        "{c:?}"
    );
}

/// A successful adopt removes the backups older than the newest
/// --keep-backups that revert needs none of (they hold private keys),
/// and the record forgets them; the first and every one holding
/// kubeadm's copy of a file stay.
#[test]
fn adopt_prunes_old_backups_but_never_one_revert_needs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = |i: u32| format!("/etc/kubernetes/certsync/backup/2026112{i}T000000Z");
    for i in 0..5 {
        let at = host(dir.path(), &b(i));
        std::fs::create_dir_all(&at).expect("mkdir");
        std::fs::write(at.join("apiserver.key"), "a key").expect("key");
    }
    let mut state = record::State {
        backups: (0..5).map(b).collect(),
        ..record::State::default()
    };
    state.manifests.insert(
        "/etc/kubernetes/manifests/etcd.yaml".into(),
        (b(1), "d".into()),
    );
    state.write(dir.path()).expect("record");
    let opts = Options {
        keep_backups: 1,
        ..options(dir.path())
    };
    let mut out = Out::kept();
    apply::prune_backups(&opts, state, &mut out).expect("pruned");
    let kept: Vec<bool> = (0..5).map(|i| host(dir.path(), &b(i)).exists()).collect();
    assert_eq!(kept, [true, true, false, false, true], "{}", out.text());
    let (_, read) = record::State::read(dir.path())
        .expect("read")
        .expect("record");
    assert_eq!(read.backups, vec![b(0), b(1), b(4)]);
    assert!(
        out.text()
            .contains(&format!("removed the backup {}/", b(2))),
        "{}",
        out.text()
    );
}

/// kubeadm's kubelet.conf: the client pair by file, the CA embedded.
fn kubelet_conf(ca_pem: &[u8]) -> String {
    use base64::Engine as _;
    format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: \
         https://10.77.0.11:6443\n  name: default-cluster\ncontexts:\n- context:\n    cluster: \
         default-cluster\n    namespace: default\n    user: default-auth\n  name: \
         default-context\ncurrent-context: default-context\nkind: Config\npreferences: {{}}\n\
         users:\n- name: default-auth\n  user:\n    client-certificate: \
         /var/lib/kubelet/pki/kubelet-client-current.pem\n    client-key: \
         /var/lib/kubelet/pki/kubelet-client-current.pem\n",
        base64::engine::general_purpose::STANDARD.encode(ca_pem)
    )
}

/// The kubelet keeps trusting the API server past a CA's end: a
/// kubelet.conf whose CA data lacks a certificate of the bundle (here it
/// holds only an older certificate) gets the bundle as its CA data, the
/// rest kept, backed up first (a replace); one that holds them all is left
/// alone; status stops warning once it holds the CA in place.
#[tokio::test]
async fn adopt_keeps_the_kubelets_ca_data_in_step_with_the_bundle() {
    let dir = node_dir();
    let d = dir.path();
    let older = rcgen::generate_simple_self_signed(vec!["kubernetes".into()])
        .expect("cert")
        .cert
        .pem();
    std::fs::write(d.join("kubelet.conf"), kubelet_conf(older.as_bytes())).expect("write");
    let p = plan(&options(d)).await.expect("plan");
    let f = p
        .files
        .iter()
        .find(|f| f.path == "/etc/kubernetes/kubelet.conf")
        .unwrap_or_else(|| panic!("kubelet.conf not planned:\n{}", p.text()));
    assert_eq!((f.action(), f.mode), ("replace", 0o600));
    assert!(
        p.text().contains("the kubelet reads it at its next start"),
        "{}",
        p.text()
    );
    let text = String::from_utf8(f.bytes.clone()).expect("utf-8");
    let at = d.join("kubelet.conf");
    assert_eq!(
        crate::writer::ca_data(&text, crate::writer::CaCluster::Current).expect("kubeconfig"),
        Some(p.ca_bundle.clone())
    );
    assert!(
        text.contains("client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem"),
        "{text}"
    );
    let warned = |d: &Path| {
        let now = crate::validate::unix_seconds(fixtures_made());
        super::trust::status(&super::trust::Cas::read(d), now, &Default::default())
            .1
            .iter()
            .any(|w| w.kind == WarningKind::KubeletConf)
    };
    assert!(warned(d), "the old CA data is warned about");
    std::fs::write(&at, &f.bytes).expect("write");
    assert!(!warned(d), "the CA data adopt writes is not");
    let again = plan(&options(d)).await.expect("plan");
    assert!(
        !again.files.iter().any(|f| f.path.ends_with("kubelet.conf")),
        "{}",
        again.text()
    );
    // kubeadm's own kubelet.conf (the CA in place) needs nothing.
    std::fs::write(&at, kubelet_conf(&p.ca_bundle)).expect("write");
    let first = plan(&options(d)).await.expect("plan");
    assert!(!first.files.iter().any(|f| f.path.ends_with("kubelet.conf")));
}

/// What a wait says of certsync's pod: its state, how it last ended and
/// the cause it logged (escaped: the container's words may be anything).
#[test]
fn a_waits_pod_line_names_the_cause_the_pod_logged() {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "certsync-cp1", "namespace": "kube-system"},
        "status": {"containerStatuses": [{
            "name": "certsync", "image": "certsync:0.2", "imageID": "", "ready": false,
            "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"reason": "Error", "exitCode": 1,
                "message": format!("{}adopted\u{200b}", " ".repeat(500))}}
        }]}
    }))
    .expect("pod");
    let log = "INFO starting\nERROR admin: cannot listen on 10.77.0.14:9814: Cannot assign \
               requested address (os error 99)\x1b[31m\n\n";
    let said = super::wait::described("certsync-cp1", &pod, Some(log)).expect("a status");
    assert!(said.contains("waiting: CrashLoopBackOff"), "{said}");
    assert!(
        said.contains("last terminated: Error (exit code 1)"),
        "{said}"
    );
    assert!(
        said.contains("its last log line: ERROR admin: cannot listen on 10.77.0.14:9814: Cannot assign requested address"),
        "{said}"
    );
    assert!(
        !said.contains('\x1b') && !said.contains('\u{200b}'),
        "escaped: {said}"
    );
    assert!(!said.contains("  "), "white space folded: {said}");
    let long = "x".repeat(100_000);
    let cut = super::wait::described("certsync-cp1", &pod, Some(&long)).expect("a status");
    assert!(cut.len() < 1_000, "cut: {} bytes", cut.len());
    let bare = super::wait::described("certsync-cp1", &pod, None).expect("a status");
    assert!(!bare.contains("log line"), "{bare}");
}

/// The mirror pod a wait asks for is named after etcd's `--name` (in the manifest the plan
/// read) as kubeadm writes it (quoted or not), never a `--name=` elsewhere in
/// the manifest (a comment, another container's argument).
#[tokio::test]
async fn a_waits_pod_is_named_after_etcds_name_flag() {
    let dir = node_dir();
    let etcd = dir.path().join("manifests/etcd.yaml");
    let admin = super::admin::Access::read(dir.path(), None).await;
    let said = super::wait::pod_state(
        (plan(&options(dir.path())).await.expect("plan").mirror).as_deref(),
        &admin,
        std::time::Duration::from_secs(2),
    )
    .await;
    assert!(said.contains("kube-system/certsync-cp1"), "{said}");
    let text = std::fs::read_to_string(&etcd).expect("etcd.yaml");
    let planted = text.replace("- --name=cp1", "- \"--name=cp2\"\n    # - --name=forged");
    assert_ne!(planted, text, "the fixture names cp1");
    std::fs::write(&etcd, planted).expect("write");
    let said = super::wait::pod_state(
        (plan(&options(dir.path())).await.expect("plan").mirror).as_deref(),
        &admin,
        std::time::Duration::from_secs(2),
    )
    .await;
    assert!(said.contains("kube-system/certsync-cp2"), "{said}");
}

/// A node whose certsync pod manifest is gone (removed by hand, an
/// outage): adopt again keeps the admin address from its record and the
/// `--set` options from certsync.yaml, never the defaults that would move
/// a Prometheus target or a lifetime without a word.
#[tokio::test]
async fn adopt_keeps_the_nodes_choices_without_its_pod_manifest() {
    let dir = node_dir();
    let d = dir.path();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let chosen: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    let first = plan(&Options {
        admin_addr: Some(chosen),
        set: vec![("lifetime".into(), "1h".into())],
        ..options(d)
    })
    .await
    .expect("plan");
    let config = first
        .files
        .iter()
        .find(|f| f.path == plan::CONFIG)
        .expect("config");
    std::fs::create_dir_all(d.join("certsync")).expect("mkdir");
    std::fs::write(host(d, plan::CONFIG), &config.bytes).expect("config");
    readopt::recorded(d);
    let (_, mut state) = super::record::State::read(d)
        .expect("read")
        .expect("a record");
    state.admin_addr = Some(first.admin_addr);
    state.write(d).expect("record");
    assert!(!host(d, plan::POD).exists());
    let again = plan(&Options {
        admin_addr: None,
        set: Vec::new(),
        ..options(d)
    })
    .await
    .expect("plan");
    assert_eq!(again.admin_addr, chosen, "{}", again.text());
    assert!(
        again
            .text()
            .contains(&format!("--admin-addr: {chosen} (kept)")),
        "{}",
        again.text()
    );
    assert!(
        again.text().contains("lifetime: 1h (kept)"),
        "{}",
        again.text()
    );
}
