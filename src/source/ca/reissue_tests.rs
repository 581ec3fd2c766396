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
    // Go puts the CA's key identifier in every certificate it signs.
    p.use_authority_key_identifier_extension = true;
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

/// Asserts that `new` is `old` (DER) but for serial (another) and
/// validity; both parsed.
fn same_but_serial_and_validity(
    old: &[u8],
    new: &[u8],
    case: usize,
) -> (x509_cert::Certificate, x509_cert::Certificate) {
    use x509_cert::der::Decode;
    let cert = x509_cert::Certificate::from_der(new).unwrap();
    let tbs = &cert.tbs_certificate;
    assert_eq!(
        tbs_with(old, &tbs.serial_number, tbs.validity),
        tbs_with(new, &tbs.serial_number, tbs.validity),
        "case {case}"
    );
    let old_cert = x509_cert::Certificate::from_der(old).unwrap();
    assert_ne!(tbs.serial_number, old_cert.tbs_certificate.serial_number);
    (cert, old_cert)
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
    for (i, (disk, pkcs8, alg)) in key_cases().into_iter().enumerate() {
        let d = tempfile::tempdir().unwrap();
        let ca = ca_with(d.path(), &disk, &pkcs8, alg, |_| {});
        // kubeadm's, ended an hour ago.
        let old = kubeadms_leaf(&ca, -time::Duration::hours(1));
        let new = again(&ca, &old).unwrap_or_else(|e| panic!("case {i}: {e}"));
        // Everything kubeadm encoded, byte for byte, but serial and validity.
        let (cert, old_cert) = same_but_serial_and_validity(&old, &new, i);
        let tbs = &cert.tbs_certificate;
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
    let [(disk, pkcs8, alg), _] = key_cases();
    let ca = ca_with(d.path(), &disk, &pkcs8, alg, |p| {
        p.not_after = OffsetDateTime::now_utc() + time::Duration::days(100)
    });
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
    let r = again(&ca, &forged);
    assert!(
        matches!(
            &r,
            Err(CaError::File { what: "template", problem, .. }) if matches!(problem.as_ref(), CaError::NotIssuedByTheCa { source, .. } if matches!(source.as_ref(), CaError::Signature))
        ),
        "{r:?}"
    );
    // Not a certificate at all.
    let r = again(&ca, b"\x30\x03\x02\x01\x01");
    assert!(
        matches!(
            &r,
            Err(CaError::File { what: "template", problem, .. }) if matches!(problem.as_ref(), CaError::NotIssuedByTheCa { source, .. } if matches!(source.as_ref(), CaError::NotCertificate(_)))
        ),
        "{r:?}"
    );
}

/// Whether Go's `crypto/x509` would verify `leaf` (DER) under the root
/// `root` (DER) at `at` (unix seconds): the root found by subject (and by
/// key identifier, both having one), the root's own validity checked (Go
/// refuses a chain that ends at an expired root), the leaf's signature
/// made by the root's key.
fn go_verifies(leaf: &[u8], root: &[u8], at: i64) -> Result<(), String> {
    let (_, leaf) = x509_parser::parse_x509_certificate(leaf).unwrap();
    let (_, root) = x509_parser::parse_x509_certificate(root).unwrap();
    if leaf.issuer().as_raw() != root.subject().as_raw() {
        return Err("issuer is not the root's subject".into());
    }
    let (aki, ski) = (authority_key_id(&leaf), key_id(&root));
    if let (Some(aki), Some(ski)) = (aki, ski)
        && aki != ski
    {
        return Err("authority key identifier is not the root's".into());
    }
    for (what, c) in [("leaf", &leaf), ("root", &root)] {
        let v = c.validity();
        if at < v.not_before.timestamp() || at > v.not_after.timestamp() {
            return Err(format!("the {what} is not valid then"));
        }
    }
    leaf.verify_signature(Some(root.public_key()))
        .map_err(|_| "the root's key did not sign it".to_owned())
}

fn renewed(ca: &Ca, not_after: i64) -> Result<Vec<u8>, CaError> {
    renew_ca(
        &ca.prefix.with_extension("crt"),
        &ca.prefix.with_extension("key"),
        not_after,
        SystemTime::now(),
    )
}

#[test]
fn a_renewed_ca_keeps_subject_key_and_identifiers_and_verifies_every_old_leaf() {
    for (i, (disk, pkcs8, alg)) in key_cases().into_iter().enumerate() {
        let d = tempfile::tempdir().unwrap();
        // A CA that ends in 10 days, with kubeadm's key identifier.
        let ca = ca_with(d.path(), &disk, &pkcs8, alg, |p| {
            p.not_after = OffsetDateTime::now_utc() + time::Duration::days(10);
            p.key_identifier_method = rcgen::KeyIdMethod::Sha256;
        });
        let old_der = parsed(&std::fs::read(ca.prefix.with_extension("crt")).unwrap());
        let (_, old_to) = timestamps(&old_der);
        // A leaf that outlives the CA that issued it.
        let leaf = kubeadms_leaf(&ca, time::Duration::days(20));
        let ends = old_to + 3650 * 86_400;
        let new = renewed(&ca, ends).unwrap_or_else(|e| panic!("case {i}: {e}"));
        // Everything but serial and validity, byte for byte: subject (its
        // string types), key, SKI, basic constraints, key usage.
        same_but_serial_and_validity(&old_der, &new, i);
        let from = validate::unix_seconds(SystemTime::now()) - 300;
        let (new_from, new_to) = timestamps(&new);
        assert!(
            (from - 5..=from).contains(&new_from),
            "case {i}: {new_from}"
        );
        assert_eq!(new_to, ends, "case {i}");
        crate::x509::strict_certificate(&new).unwrap_or_else(|e| panic!("case {i}: {e}"));
        // Self-signed as before.
        go_verifies(&new, &new, old_to - 60).unwrap_or_else(|e| panic!("case {i}: {e}"));
        // The old leaf verifies under both now; past the old CA's end only
        // under the renewed one (Go checks the root's validity too).
        let now = validate::unix_seconds(SystemTime::now());
        go_verifies(&leaf, &old_der, now).unwrap();
        go_verifies(&leaf, &new, now).unwrap_or_else(|e| panic!("case {i}: {e}"));
        let (_, leaf_to) = timestamps(&leaf);
        let past = old_to + 60;
        assert!(past < leaf_to);
        assert!(go_verifies(&leaf, &old_der, past).is_err());
        go_verifies(&leaf, &new, past).unwrap_or_else(|e| panic!("case {i}: {e}"));
        // The key identifiers were compared, not skipped.
        let (_, l) = x509_parser::parse_x509_certificate(&leaf).unwrap();
        assert!(l.extensions().iter().any(|e| matches!(
            e.parsed_extension(),
            x509_parser::extensions::ParsedExtension::AuthorityKeyIdentifier(_)
        )));
        // And as rustls' webpki reads it (a trust anchor of the renewed).
        let anchor = rustls_pki_types::CertificateDer::from(new.as_slice());
        let anchors = [webpki::anchor_from_trusted_cert(&anchor).unwrap()];
        let leaf_der = rustls_pki_types::CertificateDer::from(leaf.as_slice());
        webpki::EndEntityCert::try_from(&leaf_der)
            .unwrap()
            .verify_for_usage(
                webpki::ALL_VERIFICATION_ALGS,
                &anchors,
                &[],
                rustls_pki_types::UnixTime::now(),
                webpki::KeyUsage::server_auth(),
                None,
                None,
            )
            .unwrap_or_else(|e| panic!("case {i}: {e}"));
    }
}

#[test]
fn only_a_self_signed_ca_with_its_own_key_is_renewed() {
    let d = tempfile::tempdir().unwrap();
    let [(disk, pkcs8, alg), _] = key_cases();
    let ca = ca_with(d.path(), &disk, &pkcs8, alg, |p| {
        p.key_identifier_method = rcgen::KeyIdMethod::Sha256
    });
    let ends = validate::unix_seconds(SystemTime::now()) + 86_400;
    // Another CA's key (EC, where this CA's is RSA) beside it: refused,
    // nothing signed.
    let crt = ca.prefix.with_extension("crt");
    let other = tempfile::tempdir().unwrap();
    let other_ca = ca_with(
        other.path(),
        EC_PKCS8,
        EC_PKCS8,
        &rcgen::PKCS_ECDSA_P256_SHA256,
        |_| {},
    );
    let wrong = renew_ca(
        &crt,
        &other_ca.prefix.with_extension("key"),
        ends,
        SystemTime::now(),
    );
    assert!(
        matches!(
            &wrong,
            Err(CaError::File { what: "CA key", problem, .. }) if matches!(problem.as_ref(), CaError::Unusable { .. })
        ),
        "{wrong:?}"
    );
    // An intermediate: the CA signed by another CA's key.
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name
        .push(DnType::CommonName, "intermediate");
    p.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    p.key_usages = vec![Ku::DigitalSignature, Ku::KeyCertSign];
    p.not_after = OffsetDateTime::now_utc() + time::Duration::days(30);
    let key = KeyPair::from_pem_and_sign_algo(EC_PKCS8, &rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
    let inter = p.signed_by(&key, &ca.issuer).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let inter_crt = dir.path().join("ca.crt");
    std::fs::write(&inter_crt, inter.pem()).unwrap();
    let inter_key = dir.path().join("ca.key");
    std::fs::write(&inter_key, EC_PKCS8).unwrap();
    std::fs::set_permissions(
        &inter_key,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let r = renew_ca(&inter_crt, &inter_key, ends, SystemTime::now());
    assert!(
        matches!(
            &r,
            Err(CaError::File { what: "CA certificate", problem, .. }) if matches!(problem.as_ref(), CaError::NotSelfSigned(i) if matches!(i.as_ref(), CaError::Issuer(_)))
        ),
        "{r:?}"
    );
    // The CA itself: renewed.
    renewed(&ca, ends).unwrap();
}
