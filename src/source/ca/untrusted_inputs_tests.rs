//! What a `ca:` mapping is handed and must refuse: an unauthenticated,
//! leniently read template, RSA sizes that made key generation run for
//! minutes, CA files someone else owns or may swap, and leaf usages and a
//! notBefore a CA would not give.

use super::*;
use rcgen::{CustomExtension, ExtendedKeyUsagePurpose as Eku, SanType};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// A template certificate signed by `ca` (CN `x`, DNS `kubernetes`, a
/// kubeadm serving certificate's usages), edited, written to `dir/NAME.crt`.
fn template_with(
    ca: &Ca,
    dir: &Path,
    name: &str,
    edit: impl FnOnce(&mut CertificateParams),
) -> PathBuf {
    let key = KeyPair::generate().unwrap();
    let p = params(edit);
    let path = dir.join(format!("{name}.crt"));
    std::fs::write(&path, p.signed_by(&key, &ca.issuer).unwrap().pem()).unwrap();
    path
}

fn params(edit: impl FnOnce(&mut CertificateParams)) -> CertificateParams {
    let mut p = CertificateParams::new(vec!["kubernetes".to_owned()]).unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    p.distinguished_name.push(DnType::CommonName, "x");
    p.key_usages = vec![Ku::DigitalSignature, Ku::KeyEncipherment];
    p.extended_key_usages = vec![Eku::ServerAuth];
    p.is_ca = IsCa::ExplicitNoCa;
    edit(&mut p);
    p
}

fn template_spec(ca: &Ca, template: &Path) -> CaSpec {
    spec(&ca.prefix, &format!(",template={}", template.display()))
}

/// What reading `template` for `ca` says: the template error's text.
fn template_refusal(ca: &Ca, template: &Path) -> String {
    match material::wanted(&template_spec(ca, template), SystemTime::now(), SKEW) {
        Ok(w) => panic!(
            "{}: accepted (CN {:?}, DNS {:?}, usages {:?}, key {})",
            template.display(),
            w.want.common_name,
            w.want.dns,
            w.want.usages,
            w.want.key_alg
        ),
        Err(
            e @ CaError::File {
                what: "template", ..
            },
        ) => e.to_string(),
        Err(e) => panic!("{}: not a template error: {e}", template.display()),
    }
}

/// The control: a template made by the helpers is accepted as it is.
#[test]
fn the_template_helper_makes_an_acceptable_template() {
    let d = tempfile::tempdir().unwrap();
    let ca = rsa_ca(d.path());
    let t = template_with(&ca, d.path(), "plain", |_| {});
    let w = material::wanted(&template_spec(&ca, &t), SystemTime::now(), SKEW).unwrap();
    assert_eq!(w.want.common_name.as_deref(), Some("x"));
    assert_eq!(w.want.dns, ["kubernetes"]);
}

/// A. The template must be signed by the configured CA; its validity window
/// is not checked (an expired kubeadm certificate is a fine template).
#[test]
fn a_template_not_signed_by_the_ca_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let ca = rsa_ca(d.path());
    // Self-signed with its own key.
    let key = KeyPair::generate().unwrap();
    let own = d.path().join("self.crt");
    std::fs::write(&own, params(|_| {}).self_signed(&key).unwrap().pem()).unwrap();
    // Signed by another CA with the same subject (CN kubernetes).
    let other_dir = tempfile::tempdir().unwrap();
    let other = ca_with(
        other_dir.path(),
        EC_PKCS8,
        EC_PKCS8,
        &rcgen::PKCS_ECDSA_P256_SHA256,
        |_| {},
    );
    let forged = template_with(&other, d.path(), "forged", |_| {});
    for t in [&own, &forged] {
        let e = template_refusal(&ca, t);
        assert!(e.contains("is not signed by the CA"), "{e}");
    }
    // Expired, but the CA's: fine.
    let expired = template_with(&ca, d.path(), "expired", |p| {
        p.not_before = OffsetDateTime::now_utc() - time::Duration::days(400);
        p.not_after = OffsetDateTime::now_utc() - time::Duration::days(35);
    });
    material::wanted(&template_spec(&ca, &expired), SystemTime::now(), SKEW).unwrap();
}

/// A. Every odd shape of an attacker's template is refused, by name.
#[test]
fn a_template_read_leniently_would_let_these_through() {
    let d = tempfile::tempdir().unwrap();
    let ca = rsa_ca(d.path());
    let ext = |oid: &[u64], content: Vec<u8>, critical: bool| {
        let mut e = CustomExtension::from_oid_content(oid, content);
        e.set_criticality(critical);
        e
    };
    // keyUsage BIT STRING with keyCertSign only; a SAN of evil.example.
    let ku_cert_sign = vec![0x03, 0x02, 0x02, 0x04];
    let mut evil_san = vec![0x30, 0x0e, 0x82, 0x0c];
    evil_san.extend_from_slice(b"evil.example");
    // NameConstraints: permitted DNS example.com.
    let mut nc = vec![0x30, 0x11, 0xa0, 0x0f, 0x30, 0x0d, 0x82, 0x0b];
    nc.extend_from_slice(b"example.com");
    type Edit = Box<dyn FnOnce(&mut CertificateParams)>;
    let dns = |names: &'static [&'static str]| -> Edit {
        Box::new(move |p: &mut CertificateParams| {
            p.subject_alt_names = (names.iter())
                .map(|n| SanType::DnsName((*n).try_into().unwrap()))
                .collect();
        })
    };
    let cases: Vec<(&str, Edit, &str)> = vec![
        (
            "duplicate keyUsage",
            Box::new(move |p| {
                p.custom_extensions
                    .push(ext(&[2, 5, 29, 15], ku_cert_sign, false));
            }),
            "twice",
        ),
        (
            "duplicate subjectAltName",
            Box::new(move |p| {
                p.custom_extensions
                    .push(ext(&[2, 5, 29, 17], evil_san, false));
            }),
            "twice",
        ),
        ("DNS *", dns(&["*"]), "\"*\""),
        ("DNS a b", dns(&["a b"]), "\"a b\""),
        ("DNS ..", dns(&[".."]), "\"..\""),
        ("DNS a..b", dns(&["kubernetes", "a..b"]), "\"a..b\""),
        ("DNS empty", dns(&[""]), "\"\""),
        ("DNS *.*.com", dns(&["*.*.com"]), "\"*.*.com\""),
        (
            "unknown critical extension",
            Box::new(move |p| {
                p.custom_extensions
                    .push(ext(&[1, 2, 3, 4, 5], vec![0x05, 0x00], true));
            }),
            "critical extension 1.2.3.4.5",
        ),
        (
            "name constraints",
            Box::new(move |p| {
                p.custom_extensions.push(ext(&[2, 5, 29, 30], nc, true));
            }),
            "name constraints",
        ),
        (
            "critical SKI (certsync makes its own, it does not copy it)",
            Box::new(move |p| {
                // NoCa: rcgen then writes no SKI of its own.
                p.is_ca = IsCa::NoCa;
                p.custom_extensions
                    .push(ext(&[2, 5, 29, 14], vec![0x04, 0x02, 0x01, 0x02], true));
            }),
            "critical extension 2.5.29.14",
        ),
        (
            "empty subject and no SAN",
            Box::new(|p| {
                p.distinguished_name = rcgen::DistinguishedName::new();
                p.subject_alt_names.clear();
            }),
            "no CN, DNS name or IP address",
        ),
    ];
    for (what, edit, want) in cases {
        let t = template_with(&ca, d.path(), "odd", edit);
        let e = template_refusal(&ca, &t);
        assert!(e.contains(want), "{what}: {e}");
    }
}

/// A. One certificate exactly: nothing after the DER inside the block,
/// nothing but white space after the block.
#[test]
fn a_template_with_trailing_bytes_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let ca = rsa_ca(d.path());
    let t = template_with(&ca, d.path(), "t", |_| {});
    let mut der = parsed(&std::fs::read(&t).unwrap());
    der.extend_from_slice(&[0x30, 0x03, 0x02, 0x01, 0x05]);
    std::fs::write(&t, crate::pem::encode("CERTIFICATE", &der)).unwrap();
    let e = template_refusal(&ca, &t);
    assert!(e.contains("trailing bytes"), "{e}");
    let t = template_with(&ca, d.path(), "t", |_| {});
    let mut pem = std::fs::read(&t).unwrap();
    pem.extend_from_slice(b"garbage\n");
    std::fs::write(&t, pem).unwrap();
    template_refusal(&ca, &t);
}

/// An RSA SubjectPublicKeyInfo of `bits` bits (a made-up modulus: nothing
/// signs or verifies with it), for a template rcgen cannot make.
struct FakeRsa(Vec<u8>);

impl FakeRsa {
    fn new(bits: usize) -> Self {
        use rsa::pkcs1::der::Encode;
        let mut n = vec![0x5au8; bits / 8];
        n[0] = 0xc3;
        let last = n.len() - 1;
        n[last] |= 1;
        let key = rsa::pkcs1::RsaPublicKey {
            modulus: rsa::pkcs1::UintRef::new(&n).unwrap(),
            public_exponent: rsa::pkcs1::UintRef::new(&[1, 0, 1]).unwrap(),
        };
        Self(key.to_der().unwrap())
    }
}

impl rcgen::PublicKeyData for FakeRsa {
    fn der_bytes(&self) -> &[u8] {
        &self.0
    }
    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_RSA_SHA256
    }
}

/// B. An RSA template key of another size than 2048, 3072 or 4096 bits is
/// refused when the template is read, before any key is made.
#[test]
fn a_template_with_an_odd_rsa_size_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let ca = rsa_ca(d.path());
    for bits in [1024, 4104, 8192, 16384] {
        let t = d.path().join(format!("rsa{bits}.crt"));
        let cert = params(|_| {})
            .signed_by(&FakeRsa::new(bits), &ca.issuer)
            .unwrap();
        std::fs::write(&t, cert.pem()).unwrap();
        let e = template_refusal(&ca, &t);
        assert!(
            e.contains(&format!("RSA-{bits}")) && e.contains("2048, 3072 or 4096"),
            "{bits}: {e}"
        );
    }
    // The sizes allowed are read as they are.
    let t = d.path().join("rsa3072.crt");
    let cert = params(|_| {})
        .signed_by(&FakeRsa::new(3072), &ca.issuer)
        .unwrap();
    std::fs::write(&t, cert.pem()).unwrap();
    let w = material::wanted(&template_spec(&ca, &t), SystemTime::now(), SKEW).unwrap();
    assert_eq!(w.want.key_alg, crate::x509::KeyAlg::Rsa(3072));
}

/// B. Key generation itself makes no RSA key of another size (1024 first:
/// before the fix it is made, quickly; 16384 would run for minutes).
#[test]
fn no_rsa_key_of_an_odd_size_is_generated() {
    for bits in [1024, 2047, 4100, 16384] {
        let e = crate::x509::KeyAlg::Rsa(bits).generate().err();
        let e = e
            .unwrap_or_else(|| panic!("RSA-{bits} generated"))
            .to_string();
        assert!(e.contains("2048, 3072 or 4096"), "{bits}: {e}");
    }
}

/// C. The CA key and certificate are owned by root or certsync's own user.
#[test]
fn ca_files_owned_by_another_user_are_refused() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: chown to another user needs root");
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let ca = rsa_ca(d.path());
    let other = Some(nix::unistd::Uid::from_raw(4242));
    for ext in ["key", "crt"] {
        let path = ca.prefix.with_extension(ext);
        nix::unistd::chown(&path, other, None).unwrap();
        let e = issue(&spec(&ca.prefix, SERVER), None, SKEW).err().unwrap();
        let s = e.to_string();
        assert!(
            s.contains(&path.display().to_string()) && s.contains("owned by uid 4242"),
            "{ext}: {s}"
        );
        // allow-loose-ca-key is about modes, never about someone else's file.
        let loose = spec(&ca.prefix, &format!("{SERVER},allow-loose-ca-key"));
        assert!(issue(&loose, None, SKEW).is_err(), "{ext}");
        nix::unistd::chown(&path, Some(nix::unistd::geteuid()), None).unwrap();
        issue(&spec(&ca.prefix, SERVER), None, SKEW).unwrap();
    }
}

/// C. The CA key's directory may not be written by group or others (who
/// could swap ca.crt and ca.key), unless allow-loose-ca-key says so.
#[test]
fn a_ca_key_in_a_directory_others_may_write_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let pki = d.path().join("pki");
    std::fs::create_dir(&pki).unwrap();
    let ca = rsa_ca(&pki);
    for mode in [0o777, 0o775, 0o757, 0o1777] {
        std::fs::set_permissions(&pki, std::fs::Permissions::from_mode(mode)).unwrap();
        let e = issue(&spec(&ca.prefix, SERVER), None, SKEW).err().unwrap();
        assert!(
            matches!(
                &e,
                CaError::File { what: "CA key", problem, .. } if matches!(problem.as_ref(), CaError::DirectoryWritable { dir, mode: m }
                    if *dir == pki && *m == mode & 0o7777)
            ),
            "{mode:o}: {e}"
        );
        let loose = spec(&ca.prefix, &format!("{SERVER},allow-loose-ca-key"));
        issue(&loose, None, SKEW).unwrap();
    }
    std::fs::set_permissions(&pki, std::fs::Permissions::from_mode(0o755)).unwrap();
    issue(&spec(&ca.prefix, SERVER), None, SKEW).unwrap();
    assert_eq!(
        std::fs::metadata(ca.prefix.with_extension("key"))
            .unwrap()
            .uid(),
        nix::unistd::geteuid().as_raw()
    );
}

/// D. keyCertSign and cRLSign belong to CAs: refused from usage= options
/// (before anything is signed) and from a template.
#[test]
fn cert_sign_and_crl_sign_on_a_leaf_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let ca = rsa_ca(d.path());
    // From usage=: refused when the mapping is read, before any issuance
    // (config::tests::dns_names_and_usages_are_checked_as_for_issued_certificates).
    for usage in ["cert-sign", "crl-sign"] {
        let flag = format!(
            "ca:{}=/nonexistent{SERVER},usage={usage}",
            ca.prefix.display()
        );
        let e = MappingSpec::parse_flag(&flag)
            .unwrap()
            .ca_spec(&ca.prefix.display().to_string(), None, None)
            .err()
            .unwrap();
        assert!(
            matches!(&e, crate::config::ConfigError::NotLeaf(crate::source::csr::CaUsage(u))
                if *u == usage.replace('-', " ")),
            "{e}"
        );
    }
    for (ku, name) in [(Ku::KeyCertSign, "cert sign"), (Ku::CrlSign, "crl sign")] {
        let t = template_with(&ca, d.path(), "ku", |p| p.key_usages.push(ku));
        let e = template_refusal(&ca, &t);
        assert!(e.contains(name) && e.contains("CA"), "{e}");
    }
}

/// D. The issued certificate's notBefore is never before the CA's.
#[test]
fn not_before_is_never_before_the_cas() {
    let rsa8 = String::from_utf8(fixture_key(FixtureKey::RsaPkcs8)).unwrap();
    let d = tempfile::tempdir().unwrap();
    let ca = ca_with(d.path(), &rsa8, &rsa8, &rcgen::PKCS_RSA_SHA256, |p| {
        p.not_before = OffsetDateTime::now_utc() - time::Duration::seconds(60);
    });
    let issued = issue(&spec(&ca.prefix, SERVER), None, SKEW).unwrap();
    let ca_nb = ca.not_before.unix_timestamp();
    assert_eq!(issued.window.not_before, ca_nb, "clamped to the CA's");
    let der = parsed(issued.bundle.get(CERT_FILE).unwrap());
    let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
    assert_eq!(cert.validity().not_before.timestamp(), ca_nb);
}

/// A CA key file in the wrong shape is refused by what is wrong with it,
/// before ring is asked: nothing, no key block, two, a PKCS#1 or SEC1 block of
/// another algorithm than the certificate's; a block of the right kind
/// that ring cannot load says which algorithm it was read as.
#[test]
fn a_key_file_of_the_wrong_shape_is_refused_by_kind() {
    use crate::x509::KeyAlg;
    let block = |label| crate::pem::encode(label, b"not a key").into_bytes();
    let e = key_pair(&block("CERTIFICATE"), KeyAlg::EcdsaP256);
    assert!(matches!(e, Err(CaError::NoKey)), "{e:?}");
    let e = key_pair(b"", KeyAlg::EcdsaP256);
    assert!(
        matches!(e, Err(CaError::KeyPem(crate::pem::PemError::Empty))),
        "{e:?}"
    );
    let e = key_pair(
        &[block("PRIVATE KEY"), block("PRIVATE KEY")].concat(),
        KeyAlg::EcdsaP256,
    );
    assert!(matches!(e, Err(CaError::KeyPem(_))), "{e:?}");
    let e = key_pair(&block("RSA PRIVATE KEY"), KeyAlg::EcdsaP256);
    assert!(
        matches!(
            e,
            Err(CaError::KeyEncoding {
                encoding: "PKCS#1 RSA",
                alg: KeyAlg::EcdsaP256
            })
        ),
        "{e:?}"
    );
    let e = key_pair(&block("EC PRIVATE KEY"), KeyAlg::Ed25519);
    assert!(
        matches!(
            e,
            Err(CaError::KeyEncoding {
                encoding: "SEC1 EC",
                alg: KeyAlg::Ed25519
            })
        ),
        "{e:?}"
    );
    let e = key_pair(&block("EC PRIVATE KEY"), KeyAlg::EcdsaP384);
    assert!(
        matches!(
            e,
            Err(CaError::Unusable {
                alg: KeyAlg::EcdsaP384,
                ..
            })
        ),
        "{e:?}"
    );
}
