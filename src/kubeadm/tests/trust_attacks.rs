//! Attacks on the CAs' end from certsync's container, which reads the CA
//! keys and could write `pki/` (an older pod with no read-only mount of a
//! bundle, or one whose mount a host rename detached): what it leaves in a
//! bundle must never widen what etcd, the API server, the
//! controller-manager (whose `--root-ca-file` goes into every namespace's
//! `kube-root-ca.crt`) and root's admin.conf trust, and status must not
//! call that trust healthy. Each test plants the bundle, runs adopt's plan
//! or status, and asserts what root would leave.

use std::time::SystemTime;

use rcgen::{CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose as Ku};

use super::super::manifest::CA_BUNDLE;
use super::super::paths::host;
use super::super::trust;
use super::trust::{ders, kubeadms_ca};
use crate::kubeadm::error::{FileProblem, KubeadmError};

fn node() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    kubeadms_ca(d.path(), "front-proxy-ca", "front-proxy-ca", -1, 19);
    kubeadms_ca(d.path(), "etcd/ca", "etcd-ca", -1, 19);
    d
}

fn planned_bundle(t: &trust::Trust) -> Vec<Vec<u8>> {
    ders(&t.ca_bundle)
}

/// A certificate adopt never wrote, with the CA's subject and key, self-
/// signed with the CA key (which the container reads) and ending in 2100:
/// kept, the CA key stays trusted by etcd, the API server and admin.conf
/// eighty years past the end kubeadm gave it, and through every later
/// adopt (each keeps what is "still valid"). Only certificates adopt
/// itself wrote (recorded where the container cannot write) belong in the
/// bundle.
#[test]
fn a_bundle_keeps_no_certificate_of_the_cas_key_that_adopt_did_not_write() {
    let d = node();
    let ca = kubeadms_ca(d.path(), "ca", "kubernetes", -1, 19);
    let key_pem = std::fs::read_to_string(host(d.path(), "/etc/kubernetes/pki/ca.key")).unwrap();
    let key = KeyPair::from_pem(&key_pem).unwrap();
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, "kubernetes");
    p.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.key_usages = vec![Ku::KeyCertSign];
    p.not_before = rcgen::date_time_ymd(2020, 1, 1);
    p.not_after = rcgen::date_time_ymd(2100, 1, 1);
    let forged = p.self_signed(&key).unwrap().der().to_vec();
    let planted =
        crate::pem::encode("CERTIFICATE", &ca) + &crate::pem::encode("CERTIFICATE", &forged);
    std::fs::write(host(d.path(), CA_BUNDLE), planted).unwrap();

    // An adopted node (a record of what adopt wrote, here none): the file
    // is the container's.
    let t = trust::plan(
        d.path(),
        trust::Cas::read(d.path()).all().unwrap(),
        SystemTime::now(),
        &trust::Record::new(),
        true,
        None,
    )
    .unwrap();
    assert!(
        !planned_bundle(&t).contains(&forged),
        "the container's certificate ending 2100 is kept in {CA_BUNDLE} and admin.conf's CA data"
    );
}

/// `der` with its serial number made negative: version [0] v3, then the
/// serial INTEGER (02 len first-byte), its top bit set.
fn negative_serial(der: &[u8]) -> Vec<u8> {
    let mut bad = der.to_vec();
    let at = bad
        .windows(6)
        .position(|w| w == [0xa0, 0x03, 0x02, 0x01, 0x02, 0x02])
        .unwrap();
    bad[at + 7] |= 0x80;
    bad
}

/// A copy of the CA certificate with its serial made negative (which also
/// breaks its signature: the bundle's filter checks neither): Go's
/// `x509.ParseCertificate` refuses it ("negative serial number"), so etcd
/// (`--trusted-ca-file`, read with tlsutil.NewCertPool, which fails on any
/// certificate it cannot parse), the API server (`--etcd-cafile`) and
/// kubectl on admin.conf stop at their next start. adopt writes nothing
/// Go refuses.
#[test]
fn a_bundle_keeps_no_certificate_go_refuses() {
    let d = node();
    let ca = kubeadms_ca(d.path(), "ca", "kubernetes", -1, 19);
    let bad = negative_serial(&ca);
    assert!(crate::x509::strict_certificate(&bad).is_err());
    let planted = crate::pem::encode("CERTIFICATE", &bad) + &crate::pem::encode("CERTIFICATE", &ca);
    std::fs::write(host(d.path(), CA_BUNDLE), planted).unwrap();

    let t = trust::plan(
        d.path(),
        trust::Cas::read(d.path()).all().unwrap(),
        SystemTime::now(),
        &trust::Record::new(),
        true,
        None,
    )
    .unwrap();
    for c in planned_bundle(&t) {
        assert!(
            crate::x509::strict_certificate(&c).is_ok(),
            "{CA_BUNDLE} as adopt writes it holds a certificate Go refuses"
        );
    }
}

/// A bundle that holds the CA beside another key's CA: etcd, the API
/// server and the controller-manager trust the other key, and status says
/// nothing (it checks only that the CA is in the bundle).
#[test]
fn status_reports_a_bundle_that_trusts_another_key() {
    let d = node();
    let ca = kubeadms_ca(d.path(), "ca", "kubernetes", -1, 19);
    let other = tempfile::tempdir().unwrap();
    let foreign = kubeadms_ca(other.path(), "ca", "kubernetes", -1, 19);
    let planted =
        crate::pem::encode("CERTIFICATE", &ca) + &crate::pem::encode("CERTIFICATE", &foreign);
    std::fs::write(host(d.path(), CA_BUNDLE), planted).unwrap();
    // etcd's bundle as adopt writes it, so only ca's is in question.
    let t = trust::plan(
        d.path(),
        trust::Cas::read(d.path()).all().unwrap(),
        SystemTime::now(),
        &trust::Record::new(),
        true,
        None,
    )
    .unwrap();
    for f in t.files.iter().filter(|f| f.path != CA_BUNDLE) {
        std::fs::write(host(d.path(), &f.path), &f.bytes).unwrap();
    }

    let (cas, _) = trust::status(
        &trust::Cas::read(d.path()),
        crate::validate::unix_seconds(SystemTime::now()),
        &t.record,
    );
    assert!(
        cas[0].problem.is_some(),
        "status calls {CA_BUNDLE} healthy while it trusts another key: {:?}",
        cas[0]
    );
}

/// The file and what kubeadm's module found in it, of a refused plan.
fn found(r: Result<trust::Trust, KubeadmError>) -> (std::path::PathBuf, FileProblem) {
    match r {
        Err(KubeadmError::File { path, problem }) => (path, *problem),
        Err(e) => panic!("refused, but not for a file: {e}"),
        Ok(_) => panic!("planned"),
    }
}

/// A bundle there on a node adopt has not adopted (an operator's `cat
/// ca.crt ca.key >`, another tool's file, the container's): adopt does not
/// read it (a bundle is made from adopt's record and the CA in place), so
/// it must not replace what it cannot tell is its own. Refused, naming
/// the file; on an adopted node the bundle is adopt's and is written anew
/// from the CA, whatever was planted in it.
#[test]
fn a_bundle_adopt_did_not_write_is_refused_not_replaced() {
    let d = node();
    let ca = kubeadms_ca(d.path(), "ca", "kubernetes", -1, 19);
    let key = std::fs::read_to_string(host(d.path(), "/etc/kubernetes/pki/ca.key")).unwrap();
    let planted = crate::pem::encode("CERTIFICATE", &ca) + &key;
    std::fs::write(host(d.path(), CA_BUNDLE), planted).unwrap();

    let (path, what) = found(trust::plan(
        d.path(),
        trust::Cas::read(d.path()).all().unwrap(),
        SystemTime::now(),
        &trust::Record::new(),
        false,
        None,
    ));
    assert!(matches!(what, FileProblem::NotAdopts), "{what}");
    assert_eq!(path, host(d.path(), CA_BUNDLE));

    let t = trust::plan(
        d.path(),
        trust::Cas::read(d.path()).all().unwrap(),
        SystemTime::now(),
        &trust::Record::new(),
        true,
        None,
    )
    .unwrap();
    assert_eq!(planned_bundle(&t), vec![ca]);
}

/// The CA file adopt renews and bundles is read as kubeadm writes it: one
/// certificate, nothing else, one Go reads. Each other shape is refused,
/// naming the file, never read in part.
#[test]
fn a_ca_file_not_as_kubeadm_writes_it_is_refused_for_what_it_holds() {
    let ca_crt = "/etc/kubernetes/pki/ca.crt";
    let other = tempfile::tempdir().unwrap();
    let foreign = kubeadms_ca(other.path(), "ca", "kubernetes", -1, 19);
    type Case = (
        &'static str,
        fn(&FileProblem) -> bool,
        Box<dyn Fn(&[u8], &str) -> String>,
    );
    let cases: Vec<Case> = vec![
        (
            "two certificates",
            |f| matches!(f, FileProblem::NotOneCertificate(2)),
            Box::new(move |ca, _| {
                crate::pem::encode("CERTIFICATE", ca) + &crate::pem::encode("CERTIFICATE", &foreign)
            }),
        ),
        (
            "a certificate and its key",
            |f| matches!(f, FileProblem::NotOnlyCertificates),
            Box::new(|ca, key| crate::pem::encode("CERTIFICATE", ca) + key),
        ),
        (
            "a certificate Go refuses",
            |f| matches!(f, FileProblem::NotAsGoReads(_)),
            Box::new(|ca, _| crate::pem::encode("CERTIFICATE", &negative_serial(ca))),
        ),
        (
            "a CERTIFICATE block that is none",
            |f| matches!(f, FileProblem::NotCertificate(_)),
            Box::new(|_, _| crate::pem::encode("CERTIFICATE", b"\x30\x03\x02\x01\x01")),
        ),
        (
            "no certificate",
            |f| matches!(f, FileProblem::NotOneCertificate(0)),
            Box::new(|_, _| String::new()),
        ),
    ];
    for (name, expected, text) in cases {
        let d = node();
        let ca = kubeadms_ca(d.path(), "ca", "kubernetes", -1, 19);
        let key = std::fs::read_to_string(host(d.path(), "/etc/kubernetes/pki/ca.key")).unwrap();
        std::fs::write(host(d.path(), ca_crt), text(&ca, &key)).unwrap();
        let (path, what) = found(trust::Cas::read(d.path()).all().and_then(|cas| {
            trust::plan(
                d.path(),
                cas,
                SystemTime::now(),
                &trust::Record::new(),
                true,
                None,
            )
        }));
        assert!(expected(&what), "{name}: {what}");
        assert_eq!(path, host(d.path(), ca_crt), "{name}");
    }
}
