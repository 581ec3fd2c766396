//! Test certificates, made with rcgen at test time so they never expire.
//!
//! Included by the library's unit tests (`#[path]`) and by the integration
//! tests (`tests/support/mod.rs`), so there is one place that makes them.
#![allow(dead_code)]

use rcgen::{CertificateParams, DnType, IsCa, Issuer, KeyPair};
use time::{Duration, OffsetDateTime};

/// A CA-signed leaf: `cert` (leaf PEM), `key` (PKCS#8 PEM), `ca_cert`.
#[derive(Clone)]
pub struct Pair {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
    pub ca_cert: Vec<u8>,
    key_pair_public_pem: String,
}

const DAY: i64 = 86_400;

impl Pair {
    /// A P-256 leaf for `cn`, valid from a day ago for a year.
    pub fn new(cn: &str) -> Self {
        Self::with_validity(cn, -DAY, 365 * DAY)
    }

    /// A leaf valid from `now + from_secs` to `now + to_secs`.
    pub fn with_validity(cn: &str, from_secs: i64, to_secs: i64) -> Self {
        let key = KeyPair::generate().expect("generate key");
        Self::signed(cn, key, from_secs, to_secs)
    }

    /// An Ed25519 leaf.
    pub fn ed25519() -> Self {
        let key = KeyPair::generate_for(&rcgen::PKCS_ED25519).expect("ed25519 key");
        Self::signed("ed25519", key, -DAY, 365 * DAY)
    }

    fn signed(cn: &str, key: KeyPair, from_secs: i64, to_secs: i64) -> Self {
        let ca_key = KeyPair::generate().expect("ca key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
        ca_params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("{cn} test CA"));
        let now = OffsetDateTime::now_utc();
        ca_params.not_before = now - Duration::days(30);
        ca_params.not_after = now + Duration::days(3650);
        let ca_cert = ca_params.self_signed(&ca_key).expect("ca cert");
        let issuer = Issuer::new(ca_params, ca_key);

        let mut params = CertificateParams::new(vec![cn.to_owned()]).expect("leaf params");
        params.distinguished_name.push(DnType::CommonName, cn);
        params.not_before = now + Duration::seconds(from_secs);
        params.not_after = now + Duration::seconds(to_secs);
        let cert = params.signed_by(&key, &issuer).expect("leaf cert");
        Self {
            cert: cert.pem().into_bytes(),
            key: key.serialize_pem().into_bytes(),
            ca_cert: ca_cert.pem().into_bytes(),
            key_pair_public_pem: key.public_key_pem(),
        }
    }

    /// The leaf's public key as a `PUBLIC KEY` PEM block (not a certificate).
    pub fn key_as_public_pem(&self) -> Vec<u8> {
        self.key_pair_public_pem.clone().into_bytes()
    }

    /// Certificate and key in one PEM, as kubelet's `kubelet-server-current.pem`.
    pub fn combined(&self) -> Vec<u8> {
        [self.cert.clone(), self.key.clone()].concat()
    }
}

/// Fixed keys in encodings rcgen cannot generate with ring.
#[derive(Clone, Copy)]
pub enum FixtureKey {
    RsaPkcs1,
    RsaPkcs8,
    EcSec1,
}

const RSA_PKCS8: &str = include_str!("../fixtures/rsa-pkcs8.key");
const RSA_PKCS1: &str = include_str!("../fixtures/rsa-pkcs1.key");
const EC_PKCS8: &str = include_str!("../fixtures/ec-pkcs8.key");
const EC_SEC1: &str = include_str!("../fixtures/ec-sec1.key");

/// The key file as it would be published.
pub fn fixture_key(k: FixtureKey) -> Vec<u8> {
    match k {
        FixtureKey::RsaPkcs1 => RSA_PKCS1,
        FixtureKey::RsaPkcs8 => RSA_PKCS8,
        FixtureKey::EcSec1 => EC_SEC1,
    }
    .as_bytes()
    .to_vec()
}

/// A self-signed certificate for the fixture key, made now.
pub fn fixture_cert(k: FixtureKey) -> Vec<u8> {
    let (pkcs8, alg) = match k {
        FixtureKey::RsaPkcs1 | FixtureKey::RsaPkcs8 => (RSA_PKCS8, &rcgen::PKCS_RSA_SHA256),
        FixtureKey::EcSec1 => (EC_PKCS8, &rcgen::PKCS_ECDSA_P256_SHA256),
    };
    let key = KeyPair::from_pem_and_sign_algo(pkcs8, alg).expect("fixture key");
    let mut params = CertificateParams::new(vec!["fixture".to_owned()]).expect("params");
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::days(1);
    params.not_after = now + Duration::days(365);
    params.self_signed(&key).expect("cert").pem().into_bytes()
}

pub fn fixture_encrypted_key() -> Vec<u8> {
    include_bytes!("../fixtures/encrypted-pkcs8.key").to_vec()
}

pub fn fixture_legacy_encrypted_key() -> Vec<u8> {
    include_bytes!("../fixtures/encrypted-legacy.key").to_vec()
}

/// A PEM PKCS#10 request for `cn` with DNS SAN `dns`, signed by a new
/// P-256 key.
pub fn csr_pem(cn: &str, dns: &str) -> String {
    let key = KeyPair::generate().expect("generate key");
    let mut params = rcgen::CertificateParams::new(vec![dns.to_owned()]).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cn);
    params
        .serialize_request(&key)
        .expect("serialize request")
        .pem()
        .expect("pem")
}

/// A CA for `ca:` mappings written as `dir/ca.crt` and `dir/ca.key` (PKCS#8
/// P-256, mode 0600), valid until `now + not_after_secs`; returns the
/// prefix `dir/ca`.
pub fn ca_files(dir: &std::path::Path, not_after_secs: i64) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let key = KeyPair::generate().expect("ca key");
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::CommonName, "certsync test CA");
    params.is_ca = IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![
        rcgen::KeyUsagePurpose::DigitalSignature,
        rcgen::KeyUsagePurpose::KeyCertSign,
    ];
    let now = OffsetDateTime::now_utc();
    params.not_before = now - Duration::minutes(5);
    params.not_after = now + Duration::seconds(not_after_secs);
    let cert = params.self_signed(&key).expect("ca cert");
    let prefix = dir.join("ca");
    std::fs::write(prefix.with_extension("crt"), cert.pem()).expect("ca.crt");
    let key_path = prefix.with_extension("key");
    std::fs::write(&key_path, key.serialize_pem()).expect("ca.key");
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    prefix
}

/// What `ca:` mappings in the tests issue: a serving certificate.
pub const CA_SERVER: &str =
    "cn=svc,dns=svc.example,ip=127.0.0.1,usage=digital-signature,usage=server-auth";

/// A `ca:` mapping from the CA at `prefix` into `target`, issuing
/// [`CA_SERVER`] with `opts` (",lifetime=5s", ...) after it.
pub fn ca_spec(prefix: &std::path::Path, target: &std::path::Path, opts: &str) -> String {
    format!(
        "ca:{}={},{CA_SERVER}{opts}",
        prefix.display(),
        target.display()
    )
}

/// `pem`'s first certificate as version 4 (the version field's `02` made
/// `03`, not re-signed): one of the shapes Go's `x509.ParseCertificate`
/// refuses ("x509: invalid version") and x509-parser reads.
pub fn as_version_4(pem: &[u8]) -> Vec<u8> {
    use base64::Engine as _;
    let (_, block) = x509_parser::pem::parse_x509_pem(pem).expect("PEM");
    let mut der = block.contents;
    let at = der
        .windows(5)
        .position(|w| w == [0xa0, 0x03, 0x02, 0x01, 0x02])
        .expect("a v3 certificate");
    der[at + 4] = 0x03;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).expect("base64 is ASCII"))
        .collect();
    format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        lines.join("\n")
    )
    .into_bytes()
}

/// notAfter minus notBefore of a PEM certificate, in seconds.
pub fn validity_secs(pem: &[u8]) -> i64 {
    use rustls_pki_types::pem::PemObject as _;
    let der = rustls_pki_types::CertificateDer::from_pem_slice(pem).expect("a PEM certificate");
    let (_, cert) = x509_parser::parse_x509_certificate(&der).expect("a certificate");
    let v = cert.validity();
    v.not_after.timestamp() - v.not_before.timestamp()
}
