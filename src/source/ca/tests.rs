//! Unit tests of the local-CA source: each CA key encoding kubeadm writes,
//! the refusals (modes, mismatch, not a CA, expired), the cap at the CA's
//! expiry, and template fidelity against certificates made by kubeadm's
//! rules.

use super::*;
use std::path::PathBuf;
// The one import from above the sources, in tests only: each case's CaSpec
// is built from the mapping text a user writes (`ca:PREFIX=…,template=…`),
// so the grammar and the source are tested together; the source itself
// never imports config (tests/architecture.rs checks non-test code).
use crate::config::MappingSpec;
use crate::test_certs::{FixtureKey, fixture_key};
use rcgen::{CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose as Ku};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use time::OffsetDateTime;
use x509_parser::extensions::{GeneralName, ParsedExtension};

const EC_PKCS8: &str = include_str!("../../../tests/fixtures/ec-pkcs8.key");
const SKEW: Duration = Duration::from_secs(300);

/// A CA written as `PREFIX.crt` and `PREFIX.key` (mode 0600) in `dir`.
struct Ca {
    prefix: PathBuf,
    issuer: Issuer<'static, KeyPair>,
    not_before: OffsetDateTime,
}

/// `disk`: the key file as written; `pkcs8`: the same key for rcgen.
fn ca_with(
    dir: &Path,
    disk: &str,
    pkcs8: &str,
    alg: &'static rcgen::SignatureAlgorithm,
    edit: impl FnOnce(&mut CertificateParams),
) -> Ca {
    let key = KeyPair::from_pem_and_sign_algo(pkcs8, alg).unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "kubernetes");
    params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![Ku::DigitalSignature, Ku::KeyEncipherment, Ku::KeyCertSign];
    // kubeadm backdates its CAs by CertificateBackdate (5 min).
    let now = OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::minutes(5);
    params.not_after = now + time::Duration::days(3650);
    edit(&mut params);
    let cert = params.self_signed(&key).unwrap();
    let prefix = dir.join("ca");
    std::fs::write(prefix.with_extension("crt"), cert.pem()).unwrap();
    let key_path = prefix.with_extension("key");
    std::fs::write(&key_path, disk).unwrap();
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    Ca {
        prefix,
        not_before: params.not_before,
        issuer: Issuer::new(params, key),
    }
}

fn rsa_ca(dir: &Path) -> Ca {
    let pkcs8 = String::from_utf8(fixture_key(FixtureKey::RsaPkcs8)).unwrap();
    let pkcs1 = String::from_utf8(fixture_key(FixtureKey::RsaPkcs1)).unwrap();
    ca_with(dir, &pkcs1, &pkcs8, &rcgen::PKCS_RSA_SHA256, |_| {})
}

fn spec(prefix: &Path, opts: &str) -> CaSpec {
    let flag = format!("ca:{}=/nonexistent{opts}", prefix.display());
    MappingSpec::parse_flag(&flag)
        .unwrap()
        .ca_spec(&prefix.display().to_string(), None, None)
        .unwrap()
}

const SERVER: &str =
    ",cn=svc,dns=svc.example,ip=10.0.0.1,usage=digital-signature,usage=server-auth";

fn parsed(pem: &[u8]) -> Vec<u8> {
    crate::pem::exactly_one(pem, rustls::pki_types::pem::SectionKind::Certificate).unwrap()
}

/// Each encoding of a CA key kubeadm writes (RSA PKCS#1 by default, ECDSA
/// P-256 as SEC1 with `encryptionAlgorithm: ECDSA-P256`) and PKCS#8 of
/// both: the issued certificate passes the csr: check, chains to the CA,
/// carries its SKI as AKI, and ca.crt is the CA certificate.
/// A certificate's subject key identifier.
fn key_id(c: &x509_parser::certificate::X509Certificate<'_>) -> Option<Vec<u8>> {
    c.extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(k) => Some(k.0.to_vec()),
            _ => None,
        })
}

/// A certificate's authority key identifier (its key identifier field).
fn authority_key_id(c: &x509_parser::certificate::X509Certificate<'_>) -> Option<Vec<u8>> {
    c.extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(a) => {
                a.key_identifier.as_ref().map(|k| k.0.to_vec())
            }
            _ => None,
        })
}

/// The CA keys every issuance is tried with: (the key as on disk, the same
/// key as PKCS#8 for rcgen, its algorithm): RSA as PKCS#1 (kubeadm's
/// default) and ECDSA P-256 as SEC1.
fn key_cases() -> [(String, String, &'static rcgen::SignatureAlgorithm); 2] {
    let text = |k| String::from_utf8(fixture_key(k)).unwrap();
    [
        (
            text(FixtureKey::RsaPkcs1),
            text(FixtureKey::RsaPkcs8),
            &rcgen::PKCS_RSA_SHA256,
        ),
        (
            text(FixtureKey::EcSec1),
            EC_PKCS8.to_owned(),
            &rcgen::PKCS_ECDSA_P256_SHA256,
        ),
    ]
}

#[test]
fn issues_from_every_ca_key_encoding() {
    let rsa8 = String::from_utf8(fixture_key(FixtureKey::RsaPkcs8)).unwrap();
    let rsa1 = String::from_utf8(fixture_key(FixtureKey::RsaPkcs1)).unwrap();
    let sec1 = String::from_utf8(fixture_key(FixtureKey::EcSec1)).unwrap();
    let cases: [(&str, &str, &'static rcgen::SignatureAlgorithm); 4] = [
        (&rsa1, &rsa8, &rcgen::PKCS_RSA_SHA256),
        (&rsa8, &rsa8, &rcgen::PKCS_RSA_SHA256),
        (&sec1, EC_PKCS8, &rcgen::PKCS_ECDSA_P256_SHA256),
        (EC_PKCS8, EC_PKCS8, &rcgen::PKCS_ECDSA_P256_SHA256),
    ];
    for (i, (disk, pkcs8, alg)) in cases.into_iter().enumerate() {
        let d = tempfile::tempdir().unwrap();
        let ca = ca_with(d.path(), disk, pkcs8, alg, |_| {});
        let issued = issue(&spec(&ca.prefix, SERVER), None, SKEW)
            .unwrap_or_else(|e| panic!("case {i}: {e}"));
        let ca_pem = std::fs::read(ca.prefix.with_extension("crt")).unwrap();
        assert_eq!(
            parsed(issued.bundle.get(CA_FILE).unwrap()),
            parsed(&ca_pem),
            "case {i}"
        );
        let der = parsed(issued.bundle.get(CERT_FILE).unwrap());
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        let ca_der = parsed(&ca_pem);
        let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
        cert.verify_signature(Some(ca_cert.public_key()))
            .unwrap_or_else(|e| panic!("case {i}: {e}"));
        let ski = key_id(&ca_cert).unwrap();
        assert_eq!(
            authority_key_id(&cert),
            Some(ski),
            "case {i}: AKI is the CA's SKI"
        );
        assert!(
            cert.extensions().iter().any(|e| matches!(
                e.parsed_extension(),
                ParsedExtension::SubjectKeyIdentifier(_)
            )),
            "case {i}: SKI set"
        );
        // Serial: positive, at least 64 bits; notBefore a little in the past.
        let serial = cert.raw_serial();
        assert!(serial.len() >= 8 && serial[0] & 0x80 == 0, "{serial:?}");
        let now = validate::unix_seconds(SystemTime::now());
        let nb = cert.validity().not_before.timestamp();
        assert!(
            nb <= now - 299 && nb >= now - 302,
            "notBefore {nb}, now {now}"
        );
        assert!(!issued.capped);
        // `now` is read after issuing: a second may have passed since.
        let year = issued.window.not_after - now;
        assert!(
            (365 * 86_400 - 2..=365 * 86_400).contains(&year),
            "kubeadm's year by default: {year} s"
        );
    }
}

#[test]
fn a_ca_key_group_or_others_may_read_is_refused_unless_allowed() {
    let d = tempfile::tempdir().unwrap();
    let ca = rsa_ca(d.path());
    let key = ca.prefix.with_extension("key");
    for mode in [0o640, 0o604, 0o660] {
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
        let e = issue(&spec(&ca.prefix, SERVER), None, SKEW)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains(&key.display().to_string()) && e.contains(&format!("mode {mode:04o}")),
            "{e}"
        );
        let allowed = spec(&ca.prefix, &format!("{SERVER},allow-loose-ca-key"));
        issue(&allowed, None, SKEW).unwrap();
    }
}

#[test]
fn a_key_that_is_not_the_cas_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let ca = rsa_ca(d.path());
    let other = crate::test_certs::Pair::new("other");
    // Another RSA key would do as well; an EC key fails the same check.
    let key = ca.prefix.with_extension("key");
    let rsa = rsa::RsaPrivateKey::new(&mut rand_core::OsRng, 2048).unwrap();
    use rsa::pkcs1::EncodeRsaPrivateKey;
    let der = rsa.to_pkcs1_der().unwrap();
    std::fs::write(&key, crate::pem::encode("RSA PRIVATE KEY", der.as_bytes())).unwrap();
    let e = issue(&spec(&ca.prefix, SERVER), None, SKEW).err().unwrap();
    assert!(
        matches!(
            &e,
            CaError::File { what: "CA key", problem, .. } if matches!(problem.as_ref(), CaError::NotTheCasKey { .. })
        ),
        "{e}"
    );
    assert_eq!(e.reason(), "ca_key");
    std::fs::write(&key, &other.key).unwrap();
    let e = issue(&spec(&ca.prefix, SERVER), None, SKEW).err().unwrap();
    assert!(
        matches!(
            &e,
            CaError::File { what: "CA key", problem, .. } if matches!(problem.as_ref(), CaError::KeyEncoding { .. } | CaError::Unusable { .. })
        ),
        "{e}"
    );
}

#[test]
fn a_certificate_that_is_not_a_usable_ca_is_refused() {
    let rsa8 = String::from_utf8(fixture_key(FixtureKey::RsaPkcs8)).unwrap();
    type Edit = fn(&mut CertificateParams);
    type Want = fn(&CaError) -> bool;
    let cases: [(Edit, Want); 4] = [
        (
            |p| p.is_ca = IsCa::NoCa,
            |m| matches!(m, CaError::NotCa(w) if w.contains("CA:TRUE")),
        ),
        (
            |p| p.is_ca = IsCa::ExplicitNoCa,
            |m| matches!(m, CaError::NotCa(w) if w.contains("CA:TRUE")),
        ),
        (
            |p| p.key_usages = vec![Ku::DigitalSignature],
            |m| matches!(m, CaError::NotCa(w) if w.contains("lacks keyCertSign")),
        ),
        (
            |p| {
                p.not_before = OffsetDateTime::now_utc() - time::Duration::days(2);
                p.not_after = OffsetDateTime::now_utc() - time::Duration::days(1);
            },
            |m| matches!(m, CaError::Expired { .. }),
        ),
    ];
    for (edit, want) in cases {
        let d = tempfile::tempdir().unwrap();
        let ca = ca_with(d.path(), &rsa8, &rsa8, &rcgen::PKCS_RSA_SHA256, edit);
        let e = issue(&spec(&ca.prefix, SERVER), None, SKEW).err().unwrap();
        assert!(
            matches!(&e, CaError::File { what: "CA certificate", problem, .. } if want(problem)),
            "{e}"
        );
        assert_eq!(e.reason(), "ca");
    }
}

/// The issued lifetime never passes the CA's own expiry.
#[test]
fn the_lifetime_is_capped_at_the_cas_expiry() {
    let rsa8 = String::from_utf8(fixture_key(FixtureKey::RsaPkcs8)).unwrap();
    let d = tempfile::tempdir().unwrap();
    let ends = OffsetDateTime::now_utc() + time::Duration::hours(1);
    let ca = ca_with(d.path(), &rsa8, &rsa8, &rcgen::PKCS_RSA_SHA256, |p| {
        p.not_after = ends;
    });
    let issued = issue(&spec(&ca.prefix, SERVER), None, SKEW).unwrap();
    assert!(issued.capped);
    assert_eq!(issued.window.not_after, ends.unix_timestamp());
    assert_eq!(issued.ca_not_after, ends.unix_timestamp());
}

/// The CA key never reaches a bundle or a Debug string.
#[test]
fn the_ca_key_is_never_published() {
    let d = tempfile::tempdir().unwrap();
    let ca = rsa_ca(d.path());
    let ca_key = std::fs::read(ca.prefix.with_extension("key")).unwrap();
    let issued = issue(&spec(&ca.prefix, SERVER), None, SKEW).unwrap();
    let body = |b: &[u8]| b.split(|c| *c == b'\n').nth(1).unwrap().to_vec();
    let ca_line = body(&ca_key);
    for name in issued.bundle.names() {
        let bytes = issued.bundle.get(name).unwrap();
        assert!(
            !bytes
                .windows(ca_line.len())
                .any(|w| w == ca_line.as_slice()),
            "{name} holds the CA key"
        );
    }
    let spec = spec(&ca.prefix, SERVER);
    let w = material::wanted(&spec, SystemTime::now(), SKEW).unwrap();
    let key = read_key(&spec.ca_key, &spec.ca_cert, spec.allow_loose_ca_key, &w.ca).unwrap();
    assert_eq!(format!("{key:?}"), "CaKey(redacted)");
}

#[path = "template_tests.rs"]
mod template_tests;

/// Attack: with `keep-key`, a pair planted in the target's live revision
/// by anyone who can write the target (a self-signed certificate for the
/// attacker's key) had its key certified by the CA. A key is kept only
/// when the live certificate is one the CA signed, for that key.
#[test]
fn keep_key_keeps_only_a_key_the_ca_certified() {
    let d = tempfile::tempdir().unwrap();
    let ca = rsa_ca(d.path());
    let keep = spec(&ca.prefix, &format!("{SERVER},keep-key"));
    let first = issue(&keep, None, SKEW).unwrap().bundle;
    let again = issue(&keep, Some(&first), SKEW).unwrap().bundle;
    assert_eq!(
        again.get(KEY_FILE),
        first.get(KEY_FILE),
        "its own key is kept"
    );

    let evil = crate::test_certs::Pair::new("svc");
    let mut planted = Bundle::default();
    for (file, bytes) in [
        (CERT_FILE, evil.cert.clone()),
        (KEY_FILE, evil.key.clone()),
        (CA_FILE, first.get(CA_FILE).unwrap().to_vec()),
    ] {
        planted.insert(file, bytes, "planted").unwrap();
    }
    let issued = issue(&keep, Some(&planted), SKEW).unwrap().bundle;
    assert_ne!(
        issued.get(KEY_FILE),
        Some(evil.key.as_slice()),
        "the planted key was certified"
    );

    // The CA's certificate for another key, beside the planted key.
    let mut mixed = Bundle::default();
    for (file, bytes) in [
        (CERT_FILE, first.get(CERT_FILE).unwrap().to_vec()),
        (KEY_FILE, evil.key.clone()),
        (CA_FILE, first.get(CA_FILE).unwrap().to_vec()),
    ] {
        mixed.insert(file, bytes, "planted").unwrap();
    }
    let issued = issue(&keep, Some(&mixed), SKEW).unwrap().bundle;
    assert_ne!(
        issued.get(KEY_FILE),
        Some(evil.key.as_slice()),
        "a key beside another key's certificate was kept"
    );

    // A pair the CA really issued, for another identity (any kubelet's
    // client pair in a kubeadm cluster): its key is not kept either.
    let other = spec(
        &ca.prefix,
        ",cn=system:node:worker-7,o=system:nodes,usage=digital-signature,usage=client-auth",
    );
    let theirs = issue(&other, None, SKEW).unwrap().bundle;
    let issued = issue(&keep, Some(&theirs), SKEW).unwrap().bundle;
    assert_ne!(
        issued.get(KEY_FILE),
        theirs.get(KEY_FILE),
        "another identity's key was kept"
    );
}

#[path = "untrusted_inputs_tests.rs"]
mod untrusted_inputs_tests;

#[path = "lifetime_tests.rs"]
mod lifetime_tests;

#[path = "reissue_tests.rs"]
mod reissue_tests;
