//! Template fidelity: certificates made the way kubeadm makes them, renewed
//! from `template=`, compared field by field.
//!
//! kubeadm's rules, from its sources:
//! - `cmd/kubeadm/app/phases/certs/certlist.go`: `apiserver` is CN
//!   `kube-apiserver` with ExtKeyUsageServerAuth and the SANs of
//!   `GetAPIServerAltNames`; `apiserver-kubelet-client` is CN
//!   `kube-apiserver-kubelet-client`, O `system:masters` (MastersGroup),
//!   ExtKeyUsageClientAuth; etcd `server` is CN the node name with
//!   ExtKeyUsageServerAuth and ExtKeyUsageClientAuth (etcd 3.2 wants both)
//!   and the SANs of `GetEtcdAltNames`.
//! - `cmd/kubeadm/app/util/pkiutil/pki_helpers.go`: `GetAPIServerAltNames`
//!   is DNS [node name, kubernetes, kubernetes.default,
//!   kubernetes.default.svc, kubernetes.default.svc.<dnsDomain>] then IPs
//!   [the Service range's first address, the advertise address];
//!   `getAltNames` (etcd) DNS [node name, localhost], IPs [advertise
//!   address, 127.0.0.1, ::1]; `RemoveDuplicateAltNames` sorts the DNS
//!   names. `NewSignedCert`: a random serial, subject {CN, O} (Go writes O
//!   before CN), KeyUsage KeyEncipherment|DigitalSignature for every leaf,
//!   ExtKeyUsage as listed, BasicConstraintsValid with IsCA false, NotBefore
//!   the CA's NotBefore, NotAfter now + CertificateValidity (a year); the
//!   CA itself is backdated by CertificateBackdate (5 min), so the leaf's
//!   validity is a year and five minutes, which is what certsync's
//!   5-minute backdate gives too. Go sets the AKI from the CA's SKI.

use super::*;
use rcgen::{ExtendedKeyUsagePurpose as Eku, SanType};

struct Kubeadm {
    name: &'static str,
    o: Option<&'static str>,
    cn: &'static str,
    dns: &'static [&'static str],
    ips: &'static [&'static str],
    eku: &'static [Eku],
    rsa: bool,
}

const CERTS: [Kubeadm; 3] = [
    Kubeadm {
        name: "apiserver",
        o: None,
        cn: "kube-apiserver",
        dns: &[
            "cp-1",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ],
        ips: &["10.96.0.1", "192.168.0.10"],
        eku: &[Eku::ServerAuth],
        rsa: true,
    },
    Kubeadm {
        name: "apiserver-kubelet-client",
        o: Some("system:masters"),
        cn: "kube-apiserver-kubelet-client",
        dns: &[],
        ips: &[],
        eku: &[Eku::ClientAuth],
        rsa: false,
    },
    Kubeadm {
        name: "etcd-server",
        o: None,
        cn: "cp-1",
        dns: &["cp-1", "localhost"],
        ips: &["192.168.0.10", "127.0.0.1", "::1"],
        eku: &[Eku::ServerAuth, Eku::ClientAuth],
        rsa: false,
    },
];

/// The certificate kubeadm's rules make for `k`, signed by `ca`.
fn kubeadm_cert(k: &Kubeadm, ca: &Ca) -> String {
    kubeadm_cert_ending(k, ca, time::Duration::days(365))
}

/// [`kubeadm_cert`] ending `ends` from now (negative: ended).
fn kubeadm_cert_ending(k: &Kubeadm, ca: &Ca, ends: time::Duration) -> String {
    let key = if k.rsa {
        use rsa::pkcs8::EncodePrivateKey;
        let rsa = rsa::RsaPrivateKey::new(&mut rand_core::OsRng, 2048).unwrap();
        let pem = crate::pem::encode("PRIVATE KEY", rsa.to_pkcs8_der().unwrap().as_bytes());
        KeyPair::from_pem_and_sign_algo(&pem, &rcgen::PKCS_RSA_SHA256).unwrap()
    } else {
        KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap()
    };
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.distinguished_name = rcgen::DistinguishedName::new();
    if let Some(o) = k.o {
        p.distinguished_name.push(DnType::OrganizationName, o);
    }
    p.distinguished_name.push(DnType::CommonName, k.cn);
    for d in k.dns {
        p.subject_alt_names
            .push(SanType::DnsName((*d).try_into().unwrap()));
    }
    for ip in k.ips {
        p.subject_alt_names
            .push(SanType::IpAddress(ip.parse().unwrap()));
    }
    p.key_usages = vec![Ku::DigitalSignature, Ku::KeyEncipherment];
    p.extended_key_usages = k.eku.to_vec();
    p.is_ca = IsCa::ExplicitNoCa;
    p.use_authority_key_identifier_extension = true;
    p.not_before = ca.not_before;
    p.not_after = OffsetDateTime::now_utc() + ends;
    p.signed_by(&key, &ca.issuer).unwrap().pem()
}

/// Everything compared, as (field, value) read back with x509-parser (and
/// x509-cert for the EKU order).
fn fields(pem: &[u8]) -> Vec<(&'static str, String)> {
    use x509_cert::der::Decode;
    let der = parsed(pem);
    let (_, c) = x509_parser::parse_x509_certificate(&der).unwrap();
    let mut out = vec![
        ("subject", hex::encode(c.subject().as_raw())),
        ("issuer", hex::encode(c.issuer().as_raw())),
        (
            "validity length (s)",
            (c.validity().not_after.timestamp() - c.validity().not_before.timestamp()).to_string(),
        ),
    ];
    for e in c.extensions() {
        match e.parsed_extension() {
            ParsedExtension::SubjectAlternativeName(san) => {
                for n in &san.general_names {
                    let v = match n {
                        GeneralName::DNSName(d) => format!("DNS:{d}"),
                        GeneralName::IPAddress(b) => {
                            format!("IP:{}", crate::x509::ip_of(b).unwrap())
                        }
                        other => format!("{other:?}"),
                    };
                    out.push(("SAN (in order)", v));
                }
            }
            ParsedExtension::KeyUsage(ku) => {
                out.push(("key usage", format!("{} critical={}", ku, e.critical)));
            }
            ParsedExtension::ExtendedKeyUsage(_) => {
                let eku = x509_cert::ext::pkix::ExtendedKeyUsage::from_der(e.value).unwrap();
                for oid in eku.0 {
                    out.push(("EKU (in order)", oid.to_string()));
                }
            }
            ParsedExtension::BasicConstraints(bc) => {
                out.push((
                    "basic constraints",
                    format!("{bc:?} critical={}", e.critical),
                ));
            }
            ParsedExtension::AuthorityKeyIdentifier(a) => {
                let id = a.key_identifier.as_ref().map(|k| hex::encode(k.0));
                out.push(("AKI", format!("{id:?}")));
            }
            _ => {}
        }
    }
    // Extensions in any order; entries within one keep theirs (stable).
    out.sort_by_key(|(field, _)| *field);
    out
}

fn spki(pem: &[u8]) -> Vec<u8> {
    let der = parsed(pem);
    let (_, c) = x509_parser::parse_x509_certificate(&der).unwrap();
    c.public_key().raw.to_vec()
}

#[test]
fn a_renewal_from_template_is_what_kubeadm_would_make() {
    let d = tempfile::tempdir().unwrap();
    let start = std::time::Instant::now();
    let ca = rsa_ca(d.path());
    for k in &CERTS {
        let template = d.path().join(format!("{}.crt", k.name));
        let made = kubeadm_cert(k, &ca);
        std::fs::write(&template, &made).unwrap();
        let opts = format!(",template={}", template.display());
        let renewed = issue(&spec(&ca.prefix, &opts), None, SKEW)
            .unwrap_or_else(|e| panic!("{}: {e}", k.name));
        let cert = renewed.bundle.get(CERT_FILE).unwrap();
        let (want, got) = (fields(made.as_bytes()), fields(cert));
        for (w, g) in want.iter().zip(&got) {
            if w.0 == "validity length (s)" {
                // kubeadm's is a year from when it signs plus the 5 min its
                // CA was backdated by: exactly that at `kubeadm init`, more
                // the later it signs (here, key generations later: bounded
                // by the time since the CA was made, long on a busy machine).
                let (w, g): (i64, i64) = (w.1.parse().unwrap(), g.1.parse().unwrap());
                assert_eq!(g, 365 * 86_400 + 300, "{}: a year and 5 min", k.name);
                let since_ca = i64::try_from(start.elapsed().as_secs()).unwrap() + 1;
                assert!(
                    (0..=since_ca).contains(&(w - g)),
                    "{}: {g} s, kubeadm's {w} s",
                    k.name
                );
            } else {
                assert_eq!(g, w, "{}", k.name);
            }
        }
        assert_eq!(
            got.len(),
            want.len(),
            "{}: {got:?}\nkubeadm: {want:?}",
            k.name
        );
        // A new key by default, of the template's algorithm.
        assert_ne!(spki(cert), spki(made.as_bytes()), "{}", k.name);

        // keep-key: the renewal after this one keeps the live key.
        let keep = spec(&ca.prefix, &format!("{opts},keep-key"));
        let first = issue(&keep, None, SKEW).unwrap();
        let second = issue(&keep, Some(&first.bundle), SKEW).unwrap();
        let (a, b) = (&first.bundle, &second.bundle);
        assert_eq!(a.get(KEY_FILE), b.get(KEY_FILE), "{}: same key", k.name);
        assert_eq!(
            spki(a.get(CERT_FILE).unwrap()),
            spki(b.get(CERT_FILE).unwrap())
        );
        assert_ne!(
            a.get(CERT_FILE),
            b.get(CERT_FILE),
            "{}: a new certificate",
            k.name
        );
        assert_eq!(fields(b.get(CERT_FILE).unwrap()).len(), want.len());
        // Without keep-key, the same live pair gets a new key.
        let fresh = issue(&spec(&ca.prefix, &opts), Some(&first.bundle), SKEW).unwrap();
        assert_ne!(fresh.bundle.get(KEY_FILE), a.get(KEY_FILE), "{}", k.name);
    }
}

/// A template edited (a SAN added, as `kubeadm init phase certs` with a new
/// certSANs would) makes the live pair unfit: renewal is due at once.
#[test]
fn a_changed_template_makes_the_live_pair_unfit() {
    let d = tempfile::tempdir().unwrap();
    let ca = rsa_ca(d.path());
    let template = d.path().join("etcd-server.crt");
    std::fs::write(&template, kubeadm_cert(&CERTS[2], &ca)).unwrap();
    let s = spec(&ca.prefix, &format!(",template={}", template.display()));
    let issued = issue(&s, None, SKEW).unwrap();
    let now = SystemTime::now();
    let w = material::wanted(&s, now, SKEW).unwrap();
    live_ok(&w, &issued.bundle, now, SKEW).unwrap();
    let more = Kubeadm {
        dns: &["cp-1", "localhost", "etcd.example"],
        ..CERTS[2]
    };
    std::fs::write(&template, kubeadm_cert(&more, &ca)).unwrap();
    let w = material::wanted(&s, now, SKEW).unwrap();
    let e = live_ok(&w, &issued.bundle, now, SKEW).unwrap_err();
    assert!(
        matches!(&e, CaError::Csr(c) if matches!(c.as_ref(), crate::source::csr::CsrError::DnsNames { got, want }
            if got.len() == 2 && want.len() == 3)),
        "{e}"
    );
}

#[test]
fn template_and_explicit_identity_conflict() {
    for opt in [
        "cn=x",
        "o=y",
        "dns=a.example",
        "ip=10.0.0.1",
        "usage=server-auth",
    ] {
        let flag = format!("ca:/pki/ca=/t,template=/pki/apiserver.crt,{opt}");
        let e = MappingSpec::parse_flag(&flag)
            .unwrap()
            .ca_spec("/pki/ca", None, None)
            .unwrap_err();
        assert!(
            matches!(e, crate::config::ConfigError::TemplateAndOption { .. }),
            "{opt}: {e}"
        );
    }
}

#[test]
fn a_template_with_what_certsync_cannot_issue_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let ca = rsa_ca(d.path());
    let key = KeyPair::generate().unwrap();
    let mut p = CertificateParams::new(vec!["a.example".to_owned()]).unwrap();
    p.subject_alt_names
        .push(SanType::URI("spiffe://x/y".try_into().unwrap()));
    p.distinguished_name.push(DnType::CommonName, "a");
    let template = d.path().join("odd.crt");
    std::fs::write(&template, p.signed_by(&key, &ca.issuer).unwrap().pem()).unwrap();
    let s = spec(&ca.prefix, &format!(",template={}", template.display()));
    let e = issue(&s, None, SKEW).err().unwrap();
    assert!(
        matches!(
            &e,
            CaError::File { what: "template", problem, .. } if matches!(problem.as_ref(), CaError::OtherSan { .. })
        ),
        "{e}"
    );
    assert_eq!(e.reason(), "template");
}

/// The value `metrics` shows for `certsync_ca_template_ttl_seconds` of
/// mapping `m`, if any.
fn template_ttl(metrics: &Metrics, m: &str) -> Option<f64> {
    let text = metrics.encode();
    let line = text.lines().find(|l| {
        l.starts_with("certsync_ca_template_ttl_seconds{") && l.contains(&format!("\"{m}\""))
    })?;
    line.rsplit(' ').next()?.parse().ok()
}

/// An expired template is only a shape: certsync issues from it, as
/// `kubeadm certs renew` does from an expired certificate. But it is the
/// certificate `kubeadm revert` would hand back, and revert refuses one
/// that ends within 24 h: the mapping says so once (a warning) and shows
/// the template's time left (`certsync_ca_template_ttl_seconds`), so the
/// operator knows before trying to revert.
#[tokio::test]
async fn an_expired_template_still_serves_and_says_when_revert_would_refuse_it() {
    let d = tempfile::tempdir().unwrap();
    let ca = rsa_ca(d.path());
    let template = d.path().join("apiserver.crt");
    let source = |template: &Path| CaSource {
        spec: Arc::new(spec(
            &ca.prefix,
            &format!(",template={}", template.display()),
        )),
        mapping: "apiserver".into(),
        metrics: Arc::new(Metrics::new(0.9)),
        clock_skew: SKEW,
        renew_floor: Duration::from_secs(300),
        recheck: Duration::from_secs(60),
        events: None,
        template_due: Arc::default(),
        template_is_copy: false,
    };
    // A template good for a year: nothing to say.
    std::fs::write(&template, kubeadm_cert(&CERTS[0], &ca)).unwrap();
    let s = source(&template);
    s.obtain(None).await.unwrap();
    assert!(!s.template_due.load(Ordering::Relaxed));
    let ttl = template_ttl(&s.metrics, "apiserver").expect("the metric");
    assert!(ttl > 364.0 * 86400.0, "{ttl}");

    // Expired an hour ago: issued from all the same, with its identity.
    std::fs::write(
        &template,
        kubeadm_cert_ending(&CERTS[0], &ca, -time::Duration::hours(1)),
    )
    .unwrap();
    let s = source(&template);
    let issued = s.obtain(None).await.unwrap();
    let want = fields(std::fs::read(&template).unwrap().as_slice());
    let got = fields(issued.bundle.get(CERT_FILE).unwrap());
    for f in ["subject", "SAN (in order)", "key usage", "EKU (in order)"] {
        let pick = |all: &[(&'static str, String)]| {
            all.iter().find(|(k, _)| *k == f).map(|(_, v)| v.clone())
        };
        assert_eq!(pick(&got), pick(&want), "{f}");
    }
    assert!(s.template_due.load(Ordering::Relaxed), "warned");
    let ttl = template_ttl(&s.metrics, "apiserver").expect("the metric");
    assert!((-3700.0..-3500.0).contains(&ttl), "{ttl}");
    // Once: the next issuance says nothing more.
    let now = validate::unix_seconds(SystemTime::now());
    assert!(!s.template_expiry(Some(now - 3600)));
    // Renewed (a year): quiet again; ending within 24 h: said again.
    assert!(!s.template_expiry(Some(now + 365 * 86400)));
    assert!(!s.template_due.load(Ordering::Relaxed));
    assert!(s.template_expiry(Some(now + 23 * 3600)));

    // The template is the mapping's own
    // `update-pair=` copy (adopt's kubeadm pairs at an 8-minute lifetime):
    // its end is the live certificate's, not what revert hands back; no
    // warning, no metric.
    let copy = CaSource {
        metrics: Arc::new(Metrics::new(0.9)),
        template_is_copy: true,
        ..source(&template)
    };
    assert!(!copy.template_expiry(Some(now + 480)));
    assert!(!copy.template_due.load(Ordering::Relaxed));
    assert_eq!(template_ttl(&copy.metrics, "apiserver"), None);
}
