//! A kubeadm certificate issued again ([`reissue`]): its TBSCertificate
//! byte for byte but for serial and validity, signed by the CA, read as
//! Go reads it; from an RSA (PKCS#1, kubeadm's default) and an ECDSA
//! P-256 (SEC1) CA key.

use super::*;

/// A leaf as kubeadm encodes one: the CN a PrintableString, O, DNS and IP
/// SANs, key usage, client and server auth; from 5 minutes ago to `ends`
/// from now, signed by `ca`.
fn kubeadms_leaf(ca: &Ca, ends: time::Duration) -> Vec<u8> {
    let now = OffsetDateTime::now_utc();
    let mut p = CertificateParams::new(vec!["kubernetes.default".to_owned()]).unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(
        DnType::OrganizationName,
        rcgen::DnValue::PrintableString("kubeadm:cluster-admins".try_into().unwrap()),
    );
    p.distinguished_name.push(
        DnType::CommonName,
        rcgen::DnValue::PrintableString("kube-apiserver".try_into().unwrap()),
    );
    p.subject_alt_names
        .push(rcgen::SanType::IpAddress("10.96.0.1".parse().unwrap()));
    p.key_usages = vec![Ku::DigitalSignature, Ku::KeyEncipherment];
    p.extended_key_usages = vec![
        rcgen::ExtendedKeyUsagePurpose::ServerAuth,
        rcgen::ExtendedKeyUsagePurpose::ClientAuth,
    ];
    p.is_ca = IsCa::ExplicitNoCa;
    p.not_before = now - time::Duration::minutes(5);
    p.not_after = now + ends;
    let key = KeyPair::generate().unwrap();
    p.signed_by(&key, &ca.issuer).unwrap().der().to_vec()
}

fn again(ca: &Ca, der: &[u8]) -> Result<Vec<u8>, CaError> {
    reissue(
        Path::new("backup/apiserver.crt"),
        der,
        &ca.prefix.with_extension("crt"),
        &ca.prefix.with_extension("key"),
        SystemTime::now(),
    )
}

/// The TBSCertificate of `der` with `serial` and `validity` put in.
fn tbs_with(
    der: &[u8],
    serial: &x509_cert::serial_number::SerialNumber,
    validity: x509_cert::time::Validity,
) -> Vec<u8> {
    use x509_cert::der::{Decode, Encode};
    let mut tbs = x509_cert::Certificate::from_der(der)
        .unwrap()
        .tbs_certificate;
    tbs.serial_number = serial.clone();
    tbs.validity = validity;
    tbs.to_der().unwrap()
}

fn timestamps(der: &[u8]) -> (i64, i64) {
    let (_, c) = x509_parser::parse_x509_certificate(der).unwrap();
    (
        c.validity().not_before.timestamp(),
        c.validity().not_after.timestamp(),
    )
}

#[test]
fn reissue_keeps_kubeadms_tbs_but_serial_and_validity_from_rsa_and_ecdsa_cas() {
    use x509_cert::der::Decode;
    let rsa8 = String::from_utf8(fixture_key(FixtureKey::RsaPkcs8)).unwrap();
    let rsa1 = String::from_utf8(fixture_key(FixtureKey::RsaPkcs1)).unwrap();
    let sec1 = String::from_utf8(fixture_key(FixtureKey::EcSec1)).unwrap();
    let cases: [(&str, &str, &'static rcgen::SignatureAlgorithm); 2] = [
        (&rsa1, &rsa8, &rcgen::PKCS_RSA_SHA256),
        (&sec1, EC_PKCS8, &rcgen::PKCS_ECDSA_P256_SHA256),
    ];
    for (i, (disk, pkcs8, alg)) in cases.into_iter().enumerate() {
        let d = tempfile::tempdir().unwrap();
        let ca = ca_with(d.path(), disk, pkcs8, alg, |_| {});
        // kubeadm's, ended an hour ago.
        let old = kubeadms_leaf(&ca, -time::Duration::hours(1));
        let new = again(&ca, &old).unwrap_or_else(|e| panic!("case {i}: {e}"));
        let cert = x509_cert::Certificate::from_der(&new).unwrap();
        let tbs = &cert.tbs_certificate;
        // Everything kubeadm encoded, byte for byte, but serial and validity.
        assert_eq!(
            tbs_with(&old, &tbs.serial_number, tbs.validity),
            tbs_with(&new, &tbs.serial_number, tbs.validity),
            "case {i}"
        );
        let old_cert = x509_cert::Certificate::from_der(&old).unwrap();
        assert_ne!(tbs.serial_number, old_cert.tbs_certificate.serial_number);
        assert_eq!(cert.signature_algorithm, old_cert.signature_algorithm);
        // kubeadm's serial: positive, below 2^63.
        let serial = tbs.serial_number.as_bytes();
        assert!(serial.len() <= 8 && serial[0] & 0x80 == 0, "{serial:?}");
        // From the CA's notBefore to a year from now.
        let (from, to) = timestamps(&new);
        assert_eq!(from, ca.not_before.unix_timestamp(), "case {i}");
        let year_on = validate::unix_seconds(SystemTime::now()) + KUBEADM_VALIDITY_SECS;
        assert!((year_on - 60..=year_on).contains(&to), "case {i}: {to}");
        // Signed by the CA, read as Go reads it.
        let ca_der = parsed(&std::fs::read(ca.prefix.with_extension("crt")).unwrap());
        let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_der).unwrap();
        let (_, leaf) = x509_parser::parse_x509_certificate(&new).unwrap();
        leaf.verify_signature(Some(ca_cert.public_key()))
            .unwrap_or_else(|e| panic!("case {i}: {e}"));
        crate::x509::strict_certificate(&new).unwrap_or_else(|e| panic!("case {i}: {e}"));
        assert!(leaf.subject().to_string().contains("CN=kube-apiserver"));
    }
}

#[test]
fn reissue_keeps_a_longer_span_and_never_outlasts_the_ca() {
    let d = tempfile::tempdir().unwrap();
    let ca = rsa_ca(d.path());
    // kubeadm's made for 800 days: issued again for as long.
    let old = kubeadms_leaf(&ca, time::Duration::days(800));
    let (from, to) = timestamps(&old);
    let (_, new_to) = timestamps(&again(&ca, &old).unwrap());
    let want = validate::unix_seconds(SystemTime::now()) + (to - from);
    assert!((want - 60..=want).contains(&new_to), "{new_to} vs {want}");

    // A CA that ends in 100 days: the certificate ends with it.
    let d = tempfile::tempdir().unwrap();
    let ca = ca_with(
        d.path(),
        &String::from_utf8(fixture_key(FixtureKey::RsaPkcs1)).unwrap(),
        &String::from_utf8(fixture_key(FixtureKey::RsaPkcs8)).unwrap(),
        &rcgen::PKCS_RSA_SHA256,
        |p| p.not_after = OffsetDateTime::now_utc() + time::Duration::days(100),
    );
    let old = kubeadms_leaf(&ca, time::Duration::hours(1));
    let (_, ca_to) = timestamps(&parsed(
        &std::fs::read(ca.prefix.with_extension("crt")).unwrap(),
    ));
    assert_eq!(timestamps(&again(&ca, &old).unwrap()).1, ca_to);
}

#[test]
fn reissue_refuses_a_certificate_the_ca_did_not_sign() {
    let d = tempfile::tempdir().unwrap();
    let ca = rsa_ca(d.path());
    // Another CA of the same name signed it: never issued again.
    let other_dir = tempfile::tempdir().unwrap();
    let other = ca_with(
        other_dir.path(),
        EC_PKCS8,
        EC_PKCS8,
        &rcgen::PKCS_ECDSA_P256_SHA256,
        |_| {},
    );
    let forged = kubeadms_leaf(&other, time::Duration::hours(1));
    assert!(matches!(again(&ca, &forged), Err(CaError::Template { .. })));
    // Not a certificate at all.
    assert!(matches!(
        again(&ca, b"\x30\x03\x02\x01\x01"),
        Err(CaError::Template { .. })
    ));
}
