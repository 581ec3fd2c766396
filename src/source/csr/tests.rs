use super::request::Request;
use super::*;
use crate::x509::X509Error;

fn spec() -> CsrSpec {
    CsrSpec {
        signer: "example.com/test".into(),
        common_name: Some("svc".into()),
        organizations: Vec::new(),
        dns: vec!["svc.example".into()],
        ips: vec!["10.0.0.1".parse().unwrap()],
        key_alg: KeyAlg::EcdsaP256,
        lifetime: None,
        usages: vec!["digital signature".into(), "server auth".into()],
        ca: None,
        renew: (0.7, 0.9),
        approval_timeout: Duration::from_secs(900),
        bootstrap: None,
        write_kubeconfig: None,
    }
}

/// Signs `req` with a throwaway CA as a signer would, with `tweak`
/// applied to what is issued.
fn issue(req: &Request, tweak: impl FnOnce(&mut rcgen::CertificateParams)) -> (String, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let key = rcgen::KeyPair::from_pem(&req.key_pem).unwrap();
    let mut params = rcgen::CertificateParams::new(vec!["svc.example".to_owned()]).unwrap();
    params
        .subject_alt_names
        .push(rcgen::SanType::IpAddress("10.0.0.1".parse().unwrap()));
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "svc");
    params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    tweak(&mut params);
    let cert = params.signed_by(&key, &issuer).unwrap();
    (cert.pem(), ca.pem())
}

#[test]
fn issued_certificates_are_checked_against_the_request() {
    let s = spec();
    let req = new_request(&s).unwrap();
    let now = SystemTime::now();
    let skew = Duration::from_secs(300);
    let (cert, ca) = issue(&req, |_| {});
    let key = req.key_pem.as_bytes();
    assert!(check(&s, cert.as_bytes(), key, Some(ca.as_bytes()), now, skew).is_ok());

    let (_, other_ca) = issue(&req, |_| {});
    let e = check(
        &s,
        cert.as_bytes(),
        key,
        Some(other_ca.as_bytes()),
        now,
        skew,
    )
    .unwrap_err();
    assert!(matches!(e, CsrError::Chain(_)), "{e}");

    let (extra_san, _) = issue(&req, |p| {
        p.subject_alt_names
            .push(rcgen::SanType::DnsName("evil.example".try_into().unwrap()));
    });
    let e = check(&s, extra_san.as_bytes(), key, None, now, skew).unwrap_err();
    assert!(
        matches!(&e, CsrError::DnsNames { got, want }
            if *got == ["evil.example", "svc.example"] && *want == ["svc.example"]),
        "{e}"
    );

    let (client_only, _) = issue(&req, |p| {
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    });
    let e = check(&s, client_only.as_bytes(), key, None, now, skew).unwrap_err();
    assert!(
        matches!(&e, CsrError::ExtKeyUsage { got, want }
            if *got == ["1.3.6.1.5.5.7.3.2"] && *want == ["1.3.6.1.5.5.7.3.1"]),
        "{e}"
    );

    let (wrong_cn, _) = issue(&req, |p| {
        p.distinguished_name
            .push(rcgen::DnType::CommonName, "system:masters");
    });
    let e = check(&s, wrong_cn.as_bytes(), key, None, now, skew).unwrap_err();
    assert!(
        matches!(&e, CsrError::Subject { got, .. }
            if *got == [("2.5.4.3".to_owned(), "system:masters".to_owned())]),
        "{e}"
    );

    let other = new_request(&s).unwrap();
    let e = check(
        &s,
        cert.as_bytes(),
        other.key_pem.as_bytes(),
        None,
        now,
        skew,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            CsrError::Invalid(crate::validate::ValidationError::KeyMismatch { .. })
        ),
        "{e}"
    );

    let mut p384 = s.clone();
    p384.key_alg = KeyAlg::EcdsaP384;
    let e = check(&p384, cert.as_bytes(), key, None, now, skew).unwrap_err();
    assert!(
        matches!(
            e,
            CsrError::IssuedKeyAlg {
                got: KeyAlg::EcdsaP256,
                want: KeyAlg::EcdsaP384
            }
        ),
        "{e}"
    );
}

/// A signer's answer is held to exactly what was asked: an extra
/// subject attribute, usage, name kind, CA:TRUE or unknown critical
/// extension is refused, naming the field.
#[test]
fn issued_certificates_with_more_than_was_asked_are_refused() {
    use rcgen::{ExtendedKeyUsagePurpose as Eku, KeyUsagePurpose as Ku};
    let s = spec();
    let req = new_request(&s).unwrap();
    let (now, skew) = (SystemTime::now(), Duration::from_secs(300));
    let key = req.key_pem.as_bytes();
    let refused = |tweak: &dyn Fn(&mut rcgen::CertificateParams)| {
        let (cert, ca) = issue(&req, tweak);
        check(&s, cert.as_bytes(), key, Some(ca.as_bytes()), now, skew).unwrap_err()
    };
    let (plain, ca) = issue(&req, |p| p.is_ca = rcgen::IsCa::ExplicitNoCa);
    check(&s, plain.as_bytes(), key, Some(ca.as_bytes()), now, skew)
        .expect("CA:FALSE is what a leaf says");
    type Tweak<'a> = &'a dyn Fn(&mut rcgen::CertificateParams);
    type Want<'a> = &'a dyn Fn(&CsrError) -> bool;
    let (o, ou) = ("2.5.4.10".to_owned(), "2.5.4.11".to_owned());
    let cases: [(&str, Want<'_>, Tweak<'_>); 9] = [
        (
            "O",
            &|e| matches!(e, CsrError::Subject { got, .. } if got.iter().any(|a| a.0 == o)),
            &|p| {
                p.distinguished_name
                    .push(rcgen::DnType::OrganizationName, "system:masters");
            },
        ),
        (
            "OU",
            &|e| matches!(e, CsrError::Subject { got, .. } if got.iter().any(|a| a.0 == ou)),
            &|p| {
                p.distinguished_name
                    .push(rcgen::DnType::OrganizationalUnitName, "ops");
            },
        ),
        (
            "client auth",
            &|e| matches!(e, CsrError::ExtKeyUsage { got, .. } if got.len() == 2),
            &|p| p.extended_key_usages.push(Eku::ClientAuth),
        ),
        (
            "code signing",
            &|e| matches!(e, CsrError::ExtKeyUsage { got, .. } if got.len() == 2),
            &|p| p.extended_key_usages.push(Eku::CodeSigning),
        ),
        (
            "cert sign",
            &|e| {
                matches!(
                    e,
                    CsrError::KeyUsage {
                        got: 0b10_0001,
                        want: 1
                    }
                )
            },
            &|p| p.key_usages.push(Ku::KeyCertSign),
        ),
        (
            "no key usage",
            &|e| matches!(e, CsrError::KeyUsage { got: 0, want: 1 }),
            &|p| p.key_usages.clear(),
        ),
        (
            "CA:TRUE",
            &|e| matches!(e, CsrError::Leaf(X509Error::IsCa)),
            &|p| {
                p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            },
        ),
        (
            "critical extension",
            &|e| matches!(e, CsrError::Leaf(X509Error::UnknownCritical { oid }) if oid == "1.2.3.4"),
            &|p| {
                let mut ext = rcgen::CustomExtension::from_oid_content(&[1, 2, 3, 4], vec![5, 0]);
                ext.set_criticality(true);
                p.custom_extensions.push(ext);
            },
        ),
        (
            "URI",
            &|e| matches!(e, CsrError::OtherName { kind: "a URI" }),
            &|p| {
                p.subject_alt_names
                    .push(rcgen::SanType::URI("spiffe://x/y".try_into().unwrap()));
            },
        ),
    ];
    for (case, want, tweak) in cases {
        let e = refused(tweak);
        assert!(want(&e), "{case}: {e:?}");
    }

    // Not strict DER (BOOLEAN TRUE as 0x01): one parser at least
    // refuses it, so the certificate is refused.
    let (crit, _) = issue(&req, |p| p.is_ca = rcgen::IsCa::ExplicitNoCa);
    let der = CertificateDer::from_pem_slice(crit.as_bytes())
        .unwrap()
        .to_vec();
    let at = der.windows(3).position(|w| w == [1, 1, 0xff]).unwrap();
    let mut ber = der.clone();
    ber[at + 2] = 1;
    let pem = crate::pem::encode("CERTIFICATE", &ber);
    let e = check(&s, pem.as_bytes(), key, None, now, skew).unwrap_err();
    assert!(
        matches!(
            e,
            CsrError::Invalid(crate::validate::ValidationError::BadCertificate { .. })
        ),
        "{e:?}"
    );
}

/// Every algorithm's request parses, its signature verifies, and it
/// carries the subject (each organization its own RDN) and the SANs.
#[test]
fn every_key_algorithm_makes_a_request_that_verifies() {
    use x509_parser::certification_request::X509CertificationRequest;
    use x509_parser::extensions::ParsedExtension;
    use x509_parser::prelude::FromDer;
    for alg in [
        KeyAlg::EcdsaP256,
        KeyAlg::EcdsaP384,
        KeyAlg::Ed25519,
        KeyAlg::Rsa(2048),
    ] {
        let mut s = spec();
        s.key_alg = alg;
        s.organizations = vec!["system:masters".into(), "team-a".into()];
        let r = new_request(&s).unwrap();
        let der =
            rustls_pki_types::CertificateSigningRequestDer::from_pem_slice(r.csr_pem.as_bytes())
                .unwrap();
        let (_, req) = X509CertificationRequest::from_der(der.as_ref()).unwrap();
        req.verify_signature()
            .unwrap_or_else(|e| panic!("{alg}: {e:?}"));
        let subject = &req.certification_request_info.subject;
        assert_eq!(
            subject.to_string(),
            "O=system:masters, O=team-a, CN=svc",
            "{alg}"
        );
        let sans: Vec<String> = req
            .requested_extensions()
            .into_iter()
            .flatten()
            .filter_map(|e| match e {
                ParsedExtension::SubjectAlternativeName(san) => Some(san),
                _ => None,
            })
            .flat_map(|san| san.general_names.iter().map(|n| n.to_string()))
            .collect();
        assert_eq!(
            sans,
            ["DNSName(svc.example)", "IPAddress(0a:00:00:01)"],
            "{alg}"
        );
        assert!(
            r.csr_pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----"),
            "{alg}"
        );
        assert!(
            r.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"),
            "{alg}"
        );
        assert!(!format!("{r:?}").contains("PRIVATE"), "Debug is redacted");
    }
}

#[test]
fn usages_default_per_signer() {
    assert_eq!(
        default_usages(KUBELET_SERVING, KeyAlg::EcdsaP256).unwrap(),
        ["digital signature", "server auth"]
    );
    assert_eq!(
        default_usages(KUBELET_SERVING, KeyAlg::Rsa(2048)).unwrap(),
        ["digital signature", "key encipherment", "server auth"]
    );
    assert_eq!(
        default_usages(KUBE_APISERVER_CLIENT, KeyAlg::Ed25519).unwrap(),
        ["digital signature", "client auth"]
    );
    assert!(default_usages("example.com/x", KeyAlg::EcdsaP256).is_none());
}

#[test]
fn deadlines_fall_in_the_renewal_window() {
    let w = Window {
        not_before: 1_000,
        not_after: 2_000,
    };
    let at = |draw| validate::unix_seconds(w.deadline((0.7, 0.9), draw));
    assert_eq!(at(0.0), 1_700);
    assert_eq!(at(0.5), 1_800);
    assert_eq!(at(1.0), 1_900);
    for _ in 0..100 {
        let t = at(crate::random_fraction());
        assert!((1_700..=1_900).contains(&t), "{t}");
    }
}

#[test]
fn generate_names_are_dns_labels() {
    assert_eq!(
        generate_name("/etc/certs/kube-scheduler"),
        "certsync-etc-certs-kube-scheduler-"
    );
    assert_eq!(generate_name("Client_Cert"), "certsync-client-cert-");
    assert_eq!(generate_name("..."), "certsync-");
    assert!(generate_name(&"x".repeat(100)).len() <= 50);
}

/// Attack: a signer answers with PEM that rustls (certsync's reader) and
/// Go's `encoding/pem` (kube-apiserver's, which accepts it, and every Go
/// consumer's: `tls.LoadX509KeyPair` takes the first CERTIFICATE block)
/// read differently. certsync checked the first block it read, exactly
/// what was asked; Go skips that block (text after its END line, a
/// vertical tab in its base64, base64 without padding) and takes the
/// next, signed by the same CA for the same key, as the leaf: client
/// auth and another name the check never saw.
#[test]
fn attack_an_issued_pem_go_reads_another_leaf_from_is_refused() {
    let s = spec();
    let req = new_request(&s).unwrap();
    let (now, skew) = (SystemTime::now(), Duration::from_secs(300));
    let key = rcgen::KeyPair::from_pem(&req.key_pem).unwrap();
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap().pem();
    let issuer = rcgen::Issuer::new(ca_params, ca_key);
    let leaf = |evil: bool| {
        let mut p = rcgen::CertificateParams::new(vec!["svc.example".to_owned()]).unwrap();
        p.subject_alt_names
            .push(rcgen::SanType::IpAddress("10.0.0.1".parse().unwrap()));
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(rcgen::DnType::CommonName, "svc");
        p.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        if evil {
            p.subject_alt_names.push(rcgen::SanType::DnsName(
                "kubernetes.default".try_into().unwrap(),
            ));
            p.extended_key_usages
                .push(rcgen::ExtendedKeyUsagePurpose::ClientAuth);
        }
        p.signed_by(&key, &issuer).unwrap().pem()
    };
    let (good, evil) = (leaf(false), leaf(true));
    let k = req.key_pem.as_bytes();
    check(&s, good.as_bytes(), k, Some(ca.as_bytes()), now, skew).unwrap();
    check(&s, evil.as_bytes(), k, Some(ca.as_bytes()), now, skew).unwrap_err();

    let end = "-----END CERTIFICATE-----";
    let mut variants = vec![
        // Go: "the line must end with only whitespace"; rustls: any.
        good.replace(end, &format!("{end} x")) + &evil,
        // Go's base64 has no vertical tab; rustls skips it as space.
        good.replacen('\n', "\n\u{b}", 2) + &evil,
    ];
    // Go's base64 needs its padding; rustls does without.
    if good.contains("=\n") {
        variants.push(good.replace("=\n", "\n") + &evil);
    }
    for pem in variants {
        let e = check(&s, pem.as_bytes(), k, Some(ca.as_bytes()), now, skew);
        assert!(e.is_err(), "published, and Go reads the other leaf:\n{pem}");
    }
}

#[test]
fn key_usage_bits_are_named_as_the_csr_api_names_them() {
    let all = [
        "digital signature",
        "content commitment",
        "key encipherment",
        "data encipherment",
        "key agreement",
        "cert sign",
        "crl sign",
        "encipher only",
        "decipher only",
    ];
    assert_eq!(ku_names(0x1ff), all);
    assert_eq!(ku_names(0b101), ["digital signature", "key encipherment"]);
    assert_eq!(ku_names(1 << 9), Vec::<&str>::new());
}
