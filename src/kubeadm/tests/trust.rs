//! The CAs' end on a node: renewed with their own key when due, bundles
//! of their certificates for the components that load trust at start,
//! stable on a re-adopt, and nothing but the CA's own certificates kept
//! from a bundle someone else may have written.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::time::{Duration, SystemTime};

use rcgen::{CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose as Ku};
use rustls_pki_types::pem::PemObject as _;

use super::super::manifest::{CA_BUNDLE, ETCD_CA_BUNDLE};
use super::super::paths::host;
use super::super::trust;
use crate::kubeadm::warning::WarningKind;

/// A CA as kubeadm makes one (key identifier, keyCertSign), from `from`
/// to `to` days around now, written as `NAME.crt` and `NAME.key` (0600)
/// under the node's `pki/`.
pub(super) fn kubeadms_ca(dir: &Path, name: &str, cn: &str, from: i64, to: i64) -> Vec<u8> {
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, cn);
    p.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.key_usages = vec![Ku::DigitalSignature, Ku::KeyEncipherment, Ku::KeyCertSign];
    p.key_identifier_method = rcgen::KeyIdMethod::Sha256;
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now + time::Duration::days(from);
    p.not_after = now + time::Duration::days(to);
    let cert = p.self_signed(&key).unwrap();
    let crt = host(dir, &format!("/etc/kubernetes/pki/{name}.crt"));
    std::fs::create_dir_all(crt.parent().unwrap()).unwrap();
    std::fs::write(&crt, cert.pem()).unwrap();
    let k = crt.with_extension("key");
    std::fs::write(&k, key.serialize_pem()).unwrap();
    std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o600)).unwrap();
    cert.der().to_vec()
}

pub(super) fn ders(pem: &[u8]) -> Vec<Vec<u8>> {
    rustls_pki_types::CertificateDer::pem_slice_iter(pem)
        .map(|c| c.unwrap().to_vec())
        .collect()
}

fn apply(dir: &Path, t: &trust::Trust) {
    for f in &t.files {
        std::fs::write(host(dir, &f.path), &f.bytes).unwrap();
    }
}

/// adopt's trust plan of the node at `d` at `now` (`published`: the cluster's CAs; none:
/// the API server out of reach).
fn planned(
    d: &Path,
    now: SystemTime,
    record: &trust::Record,
    adopted: bool,
    published: Option<&std::collections::BTreeMap<String, String>>,
) -> Result<trust::Trust, crate::kubeadm::error::KubeadmError> {
    trust::plan(
        d,
        trust::Cas::read(d).all()?,
        now,
        record,
        adopted,
        published,
    )
}

/// A node whose `ca` runs from `from` to `to` days around now (the other
/// two CAs not due), adopted now: the node, kubeadm's `ca` certificate,
/// now, and adopt's trust plan (written).
fn adopted_with_ca(from: i64, to: i64) -> (tempfile::TempDir, Vec<u8>, SystemTime, trust::Trust) {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let ca = kubeadms_ca(d.path(), "ca", "kubernetes", from, to);
    kubeadms_ca(d.path(), "front-proxy-ca", "front-proxy-ca", 0, 19);
    kubeadms_ca(d.path(), "etcd/ca", "etcd-ca", 0, 19);
    let now = SystemTime::now();
    let t = planned(d.path(), now, &trust::Record::new(), false, None).unwrap();
    apply(d.path(), &t);
    (d, ca, now, t)
}

#[test]
fn a_ca_is_renewed_once_due_and_its_bundle_holds_both_certificates_stably() {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // ca: 5% of its span left (due); the others all of theirs (not due).
    let ca = kubeadms_ca(d.path(), "ca", "kubernetes", -19, 1);
    kubeadms_ca(d.path(), "front-proxy-ca", "front-proxy-ca", 0, 19);
    let etcd = kubeadms_ca(d.path(), "etcd/ca", "etcd-ca", 0, 19);
    let now = SystemTime::now();
    let t = planned(d.path(), now, &trust::Record::new(), false, None).unwrap();
    let due: Vec<_> = t
        .cas
        .iter()
        .filter(|c| c.renewed_to.is_some())
        .map(|c| c.name)
        .collect();
    assert_eq!(due, ["ca"]);
    // Not due: the plan says when it will be (90% of the span left,
    // kubeadm's 5-minute backdate aside).
    let fp = &t.cas[1];
    let span = 19 * 86_400 - 300;
    assert!((fp.ends - span * 9 / 10 - fp.due_from).abs() <= 1, "{fp:?}");
    let renewed = t
        .files
        .iter()
        .find(|f| f.path == "/etc/kubernetes/pki/ca.crt")
        .unwrap();
    let renewed = ders(&renewed.bytes);
    assert_eq!(renewed.len(), 1);
    // Old and renewed side by side for ca, the one in place for etcd.
    let bundle = |path: &str| ders(&t.files.iter().find(|f| f.path == path).unwrap().bytes);
    assert_eq!(bundle(CA_BUNDLE), [ca.clone(), renewed[0].clone()]);
    assert!(bundle(ETCD_CA_BUNDLE) == [etcd], "etcd: the one in place");
    assert_eq!(ders(&t.ca_bundle), [ca.clone(), renewed[0].clone()]);
    assert_eq!(t.files.len(), 3, "one renewal and two bundles");
    // The renewal lasts the CA's span again from now.
    let (_, r) = x509_parser::parse_x509_certificate(&renewed[0]).unwrap();
    // kubeadm's 5-minute backdate is not part of the span renewed.
    let ends = crate::validate::unix_seconds(now) + 20 * 86_400 - 300;
    assert!((ends - 5..=ends + 5).contains(&r.validity().not_after.timestamp()));

    // Written: a re-adopt finds nothing to do, and the digest stays.
    apply(d.path(), &t);
    // Status names the old certificate's end as the date by which what is
    // off the node must trust the renewal; none for a CA not renewed.
    let (cas, _) = trust::status(
        &trust::Cas::read(d.path()),
        crate::validate::unix_seconds(now),
        &t.record,
    );
    let (_, old) = x509_parser::parse_x509_certificate(&ca).unwrap();
    assert_eq!(
        cas[0].previous_not_after_seconds,
        old.validity().not_after.timestamp()
    );
    assert!(cas[0].previous_not_after.is_some());
    assert_eq!(cas[2].previous_not_after_seconds, 0, "{:?}", cas[2]);
    let again = planned(d.path(), now, &t.record, true, None).unwrap();
    assert!(
        again.files.is_empty(),
        "{:?}",
        again.files.iter().map(|f| &f.path).collect::<Vec<_>>()
    );
    assert_eq!(again.digest, t.digest);

    // A bundle someone else wrote with another key's CA beside them: the
    // other is dropped, never trusted.
    let other = tempfile::tempdir().unwrap();
    let foreign = kubeadms_ca(other.path(), "ca", "kubernetes", -1, 19);
    let mut planted = std::fs::read(host(d.path(), CA_BUNDLE)).unwrap();
    planted.extend(crate::pem::encode("CERTIFICATE", &foreign).into_bytes());
    std::fs::write(host(d.path(), CA_BUNDLE), &planted).unwrap();
    let cleaned = planned(d.path(), now, &t.record, true, None).unwrap();
    let f = cleaned.files.iter().find(|f| f.path == CA_BUNDLE).unwrap();
    assert!(
        ders(&f.bytes) == [ca, renewed[0].clone()],
        "the foreign CA kept"
    );

    // Past the old certificate's end it leaves the bundle, and status
    // reports the renewed one in place, in the bundle.
    let later = now + Duration::from_secs(25 * 3600);
    apply(d.path(), &cleaned);
    let after = planned(d.path(), later, &cleaned.record, true, None).unwrap();
    let f = after.files.iter().find(|f| f.path == CA_BUNDLE).unwrap();
    assert!(ders(&f.bytes) == [renewed[0].clone()], "only the renewal");
    assert_eq!(after.files.len(), 1, "nothing renewed again");
    apply(d.path(), &after);
    let (cas, warnings) = trust::status(
        &trust::Cas::read(d.path()),
        crate::validate::unix_seconds(later),
        &after.record,
    );
    assert!(cas.iter().all(|c| c.problem.is_none()), "{cas:?}");
    assert_eq!(cas[0].in_bundle, Some(true));
    assert_eq!(cas[0].previous_not_after_seconds, 0, "the old one left");
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn status_says_when_a_renewal_is_due_and_when_a_bundle_lacks_the_ca() {
    let d = tempfile::tempdir().unwrap();
    kubeadms_ca(d.path(), "ca", "kubernetes", -19, 1);
    kubeadms_ca(d.path(), "front-proxy-ca", "front-proxy-ca", -1, 19);
    kubeadms_ca(d.path(), "etcd/ca", "etcd-ca", -1, 19);
    let (cas, warnings) = trust::status(
        &trust::Cas::read(d.path()),
        crate::validate::unix_seconds(SystemTime::now()),
        &trust::Record::new(),
    );
    // No bundles yet: the components' trust does not hold the CAs.
    assert_eq!(cas[0].in_bundle, Some(false));
    assert!(cas[0].problem.is_some());
    assert_eq!(cas[1].in_bundle, None);
    assert!(cas[1].problem.is_none());
    assert!(cas[0].renewal_due && !cas[2].renewal_due);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].kind == WarningKind::CaRenewalDue
            && warnings[0].message.contains("/etc/kubernetes/pki/ca.crt"),
        "{warnings:?}"
    );
}

/// adopt stops the previous certsync pod before replacing a file that pod
/// mounts read-only (a host rename leaves the container's mount on the old
/// file and lets it write the new one): the list it decides by is exactly
/// the pod's read-only file mounts, so a mount added to the pod is never
/// left out of that decision.
#[tokio::test]
async fn the_files_adopt_stops_the_pod_for_are_exactly_its_read_only_file_mounts() {
    let dir = super::node_dir();
    let p = super::plan(&super::options(dir.path()))
        .await
        .expect("plan");
    let pod = p
        .files
        .iter()
        .find(|f| f.path == super::plan::POD)
        .expect("the pod");
    let pod: serde_yaml_ng::Value = serde_yaml_ng::from_slice(&pod.bytes).expect("yaml");
    let volumes = pod["spec"]["volumes"].as_sequence().expect("volumes");
    let mounts = pod["spec"]["containers"][0]["volumeMounts"]
        .as_sequence()
        .expect("mounts");
    let mut read_only_files = Vec::new();
    for m in mounts {
        let v = volumes
            .iter()
            .find(|v| v["name"] == m["name"])
            .expect("a volume for each mount");
        let path = v["hostPath"]["path"].as_str().expect("path");
        let file = v["hostPath"]["type"] == "File";
        let ro = m["readOnly"].as_bool().unwrap_or(false);
        assert_eq!(
            super::plan::read_only_in_pod(path),
            file && ro,
            "{path}: a read-only file mount exactly when adopt stops the pod for it"
        );
        if file && ro {
            read_only_files.push(path.to_owned());
        }
    }
    for must in [
        "/etc/kubernetes/pki/ca.crt",
        "/etc/kubernetes/pki/ca-bundle.crt",
        "/etc/kubernetes/pki/etcd/ca-bundle.crt",
        "/etc/kubernetes/certsync.yaml",
    ] {
        assert!(read_only_files.iter().any(|f| f == must), "{must}");
    }
}

/// This node's kubelet.conf trusting only the old CA certificate: warned
/// about (with what to do) before that certificate ends, a problem once it
/// has (the kubelet cannot verify the API server; status said healthy).
#[test]
fn a_kubelet_conf_without_the_renewal_is_warned_about_then_a_problem() {
    use base64::Engine as _;
    let (d, old, now, t) = adopted_with_ca(-19, 1);
    let kubelet = format!(
        "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: https://10.0.0.1:6443\n  name: default-cluster\ncontexts:\n- context:\n    cluster: default-cluster\n    user: default-auth\n  name: default-context\ncurrent-context: default-context\nkind: Config\nusers:\n- name: default-auth\n  user:\n    client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem\n",
        base64::engine::general_purpose::STANDARD.encode(crate::pem::encode("CERTIFICATE", &old))
    );
    std::fs::write(host(d.path(), "/etc/kubernetes/kubelet.conf"), kubelet).unwrap();
    let (cas, warnings) = trust::status(
        &trust::Cas::read(d.path()),
        crate::validate::unix_seconds(now),
        &t.record,
    );
    assert!(cas[0].problem.is_none(), "{cas:?}");
    assert!(
        warnings.iter().any(|w| w.kind == WarningKind::KubeletConf),
        "{warnings:?}"
    );
    // revert says so too: once the node is kubeadm's, nothing else does.
    let at = crate::validate::unix_seconds(now);
    let after_revert = |at| {
        let ca = trust::Cas::read(d.path()).ca().cloned().expect("ca.crt");
        trust::kubelet_trust(d.path(), &ca.der, at, "revert's fix").map(|(_, why)| why)
    };
    assert!(after_revert(at).is_some());
    let past = now + Duration::from_secs(2 * 86_400);
    let (cas, _) = trust::status(
        &trust::Cas::read(d.path()),
        crate::validate::unix_seconds(past),
        &t.record,
    );
    assert!(
        cas[0]
            .problem
            .as_deref()
            .is_some_and(|p| p.contains("cannot verify the API server")),
        "{cas:?}"
    );
    // With the renewal in its CA data, revert has nothing to say.
    let renewed = std::fs::read(host(d.path(), "/etc/kubernetes/pki/ca.crt")).unwrap();
    let kubelet = std::fs::read_to_string(host(d.path(), "/etc/kubernetes/kubelet.conf")).unwrap();
    let with = kubelet.replace(
        &base64::engine::general_purpose::STANDARD.encode(crate::pem::encode("CERTIFICATE", &old)),
        &base64::engine::general_purpose::STANDARD.encode(&renewed),
    );
    std::fs::write(host(d.path(), "/etc/kubernetes/kubelet.conf"), with).unwrap();
    assert_eq!(after_revert(at), None);
}

#[test]
fn after_two_renewals_status_names_the_end_of_the_oldest_certificate_kept() {
    // kubeadm's CA, 15% into its span: due. Kubelets off the node trust it.
    let (d, orig, now, first) = adopted_with_ca(-3, 17);
    // A re-adopt three days later: the first renewal is due again.
    let later = now + Duration::from_secs(3 * 86_400);
    let second = planned(d.path(), later, &first.record, true, None).unwrap();
    assert!(second.cas[0].renewed_to.is_some(), "renewed again");
    apply(d.path(), &second);
    let bundle = ders(&std::fs::read(host(d.path(), CA_BUNDLE)).unwrap());
    assert_eq!(bundle.len(), 3, "kubeadm's, the first renewal, the second");
    assert_eq!(bundle[0], orig);
    let (cas, _) = trust::status(
        &trust::Cas::read(d.path()),
        crate::validate::unix_seconds(later),
        &second.record,
    );
    let (_, o) = x509_parser::parse_x509_certificate(&orig).unwrap();
    eprintln!(
        "kubeadm's CA ends {}, status says trust the renewal off the node by {} ({:?})",
        o.validity().not_after.timestamp(),
        cas[0].previous_not_after_seconds,
        cas[0].previous_not_after
    );
    assert_eq!(
        cas[0].previous_not_after_seconds,
        o.validity().not_after.timestamp(),
        "what kubelets off the node trust (kubeadm's CA) ends first"
    );
    // Leaves issued under the first renewal may be cut at its end: status
    // knows it as a CA's end (the short-lifetime warning leaves them out).
    let (_, r1) = x509_parser::parse_x509_certificate(&bundle[1]).unwrap();
    assert!(
        cas[0]
            .earlier_ends
            .contains(&r1.validity().not_after.timestamp()),
        "{:?}",
        cas[0].earlier_ends
    );
}

#[test]
fn past_the_old_end_status_keeps_naming_it_until_adopt_leaves_it_out() {
    let (d, orig, _, t) = adopted_with_ca(-19, 1);
    let (_, o) = x509_parser::parse_x509_certificate(&orig).unwrap();
    let end = o.validity().not_after.timestamp();
    // No adopt since: the record and the bundle still hold kubeadm's CA.
    let (before, _) = trust::status(&trust::Cas::read(d.path()), end - 60, &t.record);
    let (after, w) = trust::status(&trust::Cas::read(d.path()), end + 60, &t.record);
    eprintln!(
        "a minute before: {} {:?}; a minute after: {} {:?} problem {:?} warnings {w:?}",
        before[0].previous_not_after_seconds,
        before[0].previous_not_after,
        after[0].previous_not_after_seconds,
        after[0].previous_not_after,
        after[0].problem
    );
    assert_eq!(before[0].previous_not_after_seconds, end);
    assert_eq!(
        after[0].previous_not_after_seconds, end,
        "the alert resolved at the outage"
    );
    assert!(
        w.iter().any(|w| w.kind == WarningKind::EarlierCaEnded),
        "{w:?}"
    );
    // The next adopt leaves it out, and status is quiet about it.
    let later = SystemTime::UNIX_EPOCH + Duration::from_secs((end + 60) as u64);
    let again = planned(d.path(), later, &t.record, true, None).unwrap();
    apply(d.path(), &again);
    let (gone, w) = trust::status(&trust::Cas::read(d.path()), end + 60, &again.record);
    assert_eq!(gone[0].previous_not_after_seconds, 0);
    assert!(w.is_empty(), "{w:?}");
}

/// A second control-plane node: a copy of `a`'s three CAs (certificates
/// and keys), as `kubeadm join --control-plane` copies them.
fn second_node(a: &Path) -> tempfile::TempDir {
    let b = tempfile::tempdir().unwrap();
    std::fs::set_permissions(b.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    for n in ["ca", "front-proxy-ca", "etcd/ca"] {
        for ext in ["crt", "key"] {
            let f = format!("/etc/kubernetes/pki/{n}.{ext}");
            std::fs::create_dir_all(host(b.path(), &f).parent().unwrap()).unwrap();
            std::fs::copy(host(a, &f), host(b.path(), &f)).unwrap();
        }
    }
    b
}

/// Two nodes of one cluster whose `ca` is due (the others not).
fn two_nodes_ca_due() -> (tempfile::TempDir, tempfile::TempDir) {
    let a = tempfile::tempdir().unwrap();
    std::fs::set_permissions(a.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    kubeadms_ca(a.path(), "ca", "kubernetes", -19, 1);
    kubeadms_ca(a.path(), "front-proxy-ca", "front-proxy-ca", 0, 19);
    kubeadms_ca(a.path(), "etcd/ca", "etcd-ca", 0, 19);
    let b = second_node(a.path());
    (a, b)
}

fn ca_crt(d: &Path) -> Vec<u8> {
    std::fs::read(host(d, "/etc/kubernetes/pki/ca.crt")).unwrap()
}

/// One renewal per CA for the whole cluster: the first node renews and
/// publishes; the second takes that renewal instead of making its own,
/// and both nodes' bundles (so kubeconfigs, kubelet.conf, cluster-info)
/// hold the same certificates. A node that renewed alone while the API
/// server was out of reach converges at its next adopt.
#[test]
fn a_ca_is_renewed_once_for_the_whole_cluster() {
    let (a, b) = two_nodes_ca_due();
    let now = SystemTime::now();
    let nothing = std::collections::BTreeMap::new();
    let ta = planned(a.path(), now, &trust::Record::new(), false, Some(&nothing)).unwrap();
    assert!(ta.cas[0].renewed_to.is_some(), "the first node renews");
    apply(a.path(), &ta);
    let published = ta.published.clone().expect("written for the others");
    assert_eq!(
        ders(published["ca.crt"].as_bytes()).last(),
        Some(&ders(&ca_crt(a.path()))[0])
    );

    // The second node, while the API server was out of reach: its own.
    let alone = planned(b.path(), now, &trust::Record::new(), false, None).unwrap();
    assert!(alone.published.is_none());
    apply(b.path(), &alone);
    assert_ne!(ca_crt(a.path()), ca_crt(b.path()));

    // Its next adopt reaches it: A's renewal taken, the same bundles.
    let later = now + Duration::from_secs(60);
    let tb = planned(b.path(), later, &alone.record, true, Some(&published)).unwrap();
    assert!(
        tb.files
            .iter()
            .any(|f| f.path == "/etc/kubernetes/pki/ca.crt"
                && f.what.starts_with("the cluster's CA certificate")),
        "{:?}",
        tb.files.iter().map(|f| &f.what).collect::<Vec<_>>()
    );
    apply(b.path(), &tb);
    assert_eq!(ca_crt(a.path()), ca_crt(b.path()));
    assert_eq!(
        tb.ca_bundle, ta.ca_bundle,
        "the same certificates side by side"
    );
    assert_eq!(tb.published.as_ref(), Some(&published), "nothing to write");
    let (cas, _) = trust::status(
        &trust::Cas::read(b.path()),
        crate::validate::unix_seconds(later),
        &tb.record,
    );
    assert!(cas.iter().all(|c| c.problem.is_none()), "{cas:?}");

    // A third node with kubeadm's certificate takes it at its first adopt.
    let c = second_node(a.path());
    let kubeadms = ders(&ta.ca_bundle)[0].clone();
    std::fs::write(
        host(c.path(), "/etc/kubernetes/pki/ca.crt"),
        crate::pem::encode("CERTIFICATE", &kubeadms),
    )
    .unwrap();
    let tc = planned(
        c.path(),
        later,
        &trust::Record::new(),
        false,
        Some(&published),
    )
    .unwrap();
    assert_eq!(tc.ca_bundle, ta.ca_bundle);

    // Once the cluster's renewal is due itself, the next node renews again
    // and writes the new one for the others.
    let due = now + Duration::from_secs(3 * 86_400);
    let again = planned(a.path(), due, &ta.record, true, Some(&published)).unwrap();
    assert!(again.cas[0].renewed_to.is_some());
    let newer = again.published.clone().unwrap();
    assert_ne!(newer["ca.crt"], published["ca.crt"]);
}

/// Attack: anyone who may write ConfigMaps in kube-system could publish a
/// certificate for the cluster's CA. Each one that is not the CA's own is
/// refused, naming the ConfigMap's key, and nothing is taken: one with the
/// CA's subject and key but signed by another key, one of another key, and
/// of those made with the CA key (which certsync's container reads) one
/// that lasts until 2100, one valid only from 2096, one that is no CA.
#[test]
fn attack_a_published_certificate_that_is_not_the_cas_own_is_refused() {
    use crate::kubeadm::KubeadmError;
    use crate::kubeadm::error::FileProblem;
    let (a, _) = two_nodes_ca_due();
    let key_pem = std::fs::read_to_string(host(a.path(), "/etc/kubernetes/pki/ca.key")).unwrap();
    let ca_key = KeyPair::from_pem(&key_pem).unwrap();
    let params = |years: i64| {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(DnType::CommonName, "kubernetes");
        p.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.key_usages = vec![Ku::DigitalSignature, Ku::KeyEncipherment, Ku::KeyCertSign];
        p.key_identifier_method = rcgen::KeyIdMethod::Sha256;
        let now = time::OffsetDateTime::now_utc();
        p.not_before = now - time::Duration::days(1);
        p.not_after = now + time::Duration::days(365 * years);
        p
    };
    let attacker = KeyPair::generate().unwrap();
    let issuer = rcgen::Issuer::new(params(1), attacker);
    let not_signed = params(1).signed_by(&ca_key, &issuer).unwrap().pem();
    let other_key = params(1)
        .self_signed(&KeyPair::generate().unwrap())
        .unwrap()
        .pem();
    let till_2100 = params(74).self_signed(&ca_key).unwrap().pem();
    // Valid for a span no longer than the CA's, but from 2096: taken, it
    // would end every component's trust now and be kept beside until then.
    let mut later = params(1);
    later.not_before = time::OffsetDateTime::now_utc() + time::Duration::days(365 * 70);
    later.not_after = later.not_before + time::Duration::days(10);
    let from_2096 = later.self_signed(&ca_key).unwrap().pem();
    // The CA's subject and key, signed by it, but no CA: a server's.
    let mut leaf = params(1);
    leaf.not_after = time::OffsetDateTime::now_utc() + time::Duration::days(10);
    leaf.is_ca = IsCa::ExplicitNoCa;
    leaf.key_usages = vec![Ku::DigitalSignature];
    leaf.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let not_a_ca = leaf.self_signed(&ca_key).unwrap().pem();
    let now = SystemTime::now();
    for (pem, why) in [
        (not_signed, "not signed by the CA's key"),
        (other_key, "another key"),
        (till_2100, "it ends later than a renewal made now would"),
        (from_2096, "it is not valid yet"),
        (
            not_a_ca,
            "its extensions are not the certificate in place's",
        ),
    ] {
        let published = std::collections::BTreeMap::from([("ca.crt".to_owned(), pem)]);
        match planned(
            a.path(),
            now,
            &trust::Record::new(),
            false,
            Some(&published),
        ) {
            Err(KubeadmError::File { path, problem }) => {
                assert!(
                    matches!(*problem, FileProblem::NotTheCas(w) if w == why),
                    "{why}: {problem}"
                );
                assert!(
                    path.to_string_lossy()
                        .contains("certsync-kubeadm-cas, key ca.crt")
                );
            }
            Err(e) => panic!("{why}: another error: {e}"),
            Ok(_) => panic!("{why}: taken"),
        }
    }
}

/// `der` with its outer signatureAlgorithm's parameters toggled (absent
/// <-> NULL), the signed part untouched: no key needed.
fn outer_algorithm_changed(der: &[u8]) -> Vec<u8> {
    use x509_cert::der::{Decode as _, Encode as _};
    let mut c = x509_cert::Certificate::from_der(der).unwrap();
    c.signature_algorithm.parameters = match c.signature_algorithm.parameters {
        None => Some(x509_cert::der::Any::null()),
        Some(_) => None,
    };
    c.to_der().unwrap()
}

/// `der` (ECDSA P-256) with its signature's s replaced by n - s: the same
/// signed part, a signature that still verifies, other bytes. No key
/// needed.
fn signature_s_flipped(der: &[u8]) -> Vec<u8> {
    use x509_cert::der::asn1::BitString;
    use x509_cert::der::{Decode as _, Encode as _};
    use x509_parser::num_bigint::BigUint;
    let n = BigUint::parse_bytes(
        b"FFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551",
        16,
    )
    .unwrap();
    let mut c = x509_cert::Certificate::from_der(der).unwrap();
    // SEQUENCE { INTEGER r, INTEGER s }, each shorter than 128 bytes.
    let sig = c.signature.raw_bytes().to_vec();
    let r_len = usize::from(sig[3]);
    let (r, s) = (&sig[2..4 + r_len], &sig[6 + r_len..]);
    let mut s = (&n - BigUint::from_bytes_be(s)).to_bytes_be();
    if s[0] & 0x80 != 0 {
        s.insert(0, 0);
    }
    let mut body = r.to_vec();
    body.extend([0x02, s.len() as u8]);
    body.extend(s);
    let mut new = vec![0x30, body.len() as u8];
    new.extend(body);
    c.signature = BitString::from_bytes(&new).unwrap();
    c.to_der().unwrap()
}

/// Attack, without the CA key: the node's own CA certificate published
/// with its outer signature algorithm changed (Go refuses it: "inner and
/// outer signature algorithm identifiers don't match", and every component
/// loading it would stop), or with its ECDSA signature's s flipped (no
/// renewal, yet taken it would rewrite the CA and restart what loads it at
/// every adopt). Both still verify with the CA's key; both are refused,
/// naming the key, and nothing is written.
#[test]
fn attack_the_cas_own_certificate_rewritten_without_its_key_is_refused() {
    use crate::kubeadm::KubeadmError;
    use crate::kubeadm::error::FileProblem;
    let a = tempfile::tempdir().unwrap();
    std::fs::set_permissions(a.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    kubeadms_ca(a.path(), "ca", "kubernetes", 0, 19);
    let fp = kubeadms_ca(a.path(), "front-proxy-ca", "front-proxy-ca", 0, 19);
    kubeadms_ca(a.path(), "etcd/ca", "etcd-ca", 0, 19);
    let publish = |der: &[u8]| {
        let x = x509_parser::parse_x509_certificate(der).unwrap().1;
        assert!(x.verify_signature(None).is_ok(), "still verifies");
        assert_ne!(der, fp.as_slice());
        let published = std::collections::BTreeMap::from([(
            "front-proxy-ca.crt".to_owned(),
            crate::pem::encode("CERTIFICATE", der),
        )]);
        let plan = planned(
            a.path(),
            SystemTime::now(),
            &trust::Record::new(),
            false,
            Some(&published),
        );
        match plan {
            Err(KubeadmError::File { path, problem }) => {
                assert!(
                    path.to_string_lossy()
                        .contains("certsync-kubeadm-cas, key front-proxy-ca.crt"),
                    "{}",
                    path.display()
                );
                *problem
            }
            Err(e) => panic!("another error: {e}"),
            Ok(t) => panic!(
                "taken: {:?}",
                t.files.iter().map(|f| &f.path).collect::<Vec<_>>()
            ),
        }
    };
    let outer = publish(&outer_algorithm_changed(&fp));
    assert!(
        matches!(&outer, FileProblem::NotAsGoReads(e)
            if matches!(**e, crate::x509::X509Error::SignatureAlgorithms)),
        "{outer}"
    );
    let flipped = publish(&signature_s_flipped(&fp));
    assert!(
        matches!(
            flipped,
            FileProblem::NotTheCas("the certificate in place under another signature")
        ),
        "{flipped}"
    );
}

/// Attack (replay): a legitimate renewal that ends before the
/// certificate in place, published again by someone who may write
/// ConfigMaps, is not taken (taking it would swap the two back and forth,
/// restarting the components at every adopt); the node writes its own,
/// which every other node then takes.
#[test]
fn attack_an_older_renewal_published_again_is_not_taken() {
    let (a, b) = two_nodes_ca_due();
    let now = SystemTime::now();
    let nothing = std::collections::BTreeMap::new();
    let ta = planned(a.path(), now, &trust::Record::new(), false, Some(&nothing)).unwrap();
    apply(a.path(), &ta);
    let older = ta.published.clone().unwrap();
    // B renewed alone a minute later: its renewal ends a minute later.
    let later = now + Duration::from_secs(60);
    let alone = planned(b.path(), later, &trust::Record::new(), false, None).unwrap();
    apply(b.path(), &alone);
    let mine = ca_crt(b.path());
    let tb = planned(b.path(), later, &alone.record, true, Some(&older)).unwrap();
    assert!(
        !tb.files
            .iter()
            .any(|f| f.path == "/etc/kubernetes/pki/ca.crt"),
        "not taken"
    );
    apply(b.path(), &tb);
    assert_eq!(ca_crt(b.path()), mine);
    let written = tb.published.clone().unwrap();
    assert_eq!(
        ders(written["ca.crt"].as_bytes()).last(),
        Some(&ders(&mine)[0])
    );
    // A takes B's, which ends later: the cluster converges.
    let ta2 = planned(a.path(), later, &ta.record, true, Some(&written)).unwrap();
    apply(a.path(), &ta2);
    assert_eq!(ca_crt(a.path()), mine);
}

/// Fail closed: a kubelet.conf status cannot parse is a problem naming
/// it, never a node reported healthy with the kubelet's trust unjudged.
#[test]
fn a_kubelet_conf_that_cannot_be_read_is_a_problem() {
    let (d, _, now, t) = adopted_with_ca(0, 19);
    let at = host(d.path(), "/etc/kubernetes/kubelet.conf");
    std::fs::write(&at, "clusters: [").unwrap();
    let (cas, _) = trust::status(
        &trust::Cas::read(d.path()),
        crate::validate::unix_seconds(now),
        &t.record,
    );
    assert!(
        cas[0]
            .problem
            .as_deref()
            .is_some_and(|p| p.contains("kubelet.conf") && p.contains("cannot be judged")),
        "{cas:?}"
    );
    std::fs::remove_file(&at).unwrap();
    let (cas, _) = trust::status(
        &trust::Cas::read(d.path()),
        crate::validate::unix_seconds(now),
        &t.record,
    );
    assert!(cas[0].problem.is_none(), "{cas:?}");
}
