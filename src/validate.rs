//! Validation of a bundle before anything is written.
//!
//! A bundle passes only if a consumer could load it: PEM parses, every
//! certificate parses as X.509, exactly one private key (PKCS#8, PKCS#1 or
//! SEC1) whose public key equals the *first* (leaf) certificate's, the leaf is
//! inside its validity window (with a clock-skew allowance for not-before), an
//! optional CA bundle holds only certificates, and the whole bundle fits the
//! Kubernetes 1 MiB object limit. Each failure is its own variant naming the
//! file and what is wrong; messages never contain key bytes.
//!
//! PEM is parsed by `rustls-pki-types`; X.509 by `x509-parser`; the key is
//! loaded by rustls' ring provider, whose `public_key()` gives the
//! SubjectPublicKeyInfo compared with the leaf's (as rustls' own
//! `CertifiedKey::keys_match` does).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::{PemObject, SectionKind};
use rustls::pki_types::{PrivateKeyDer, SubjectPublicKeyInfoDer};

use crate::bundle::{Bundle, CA_FILE, CERT_FILE, KEY_FILE};
use crate::pem::READ_DIFFERENTLY;
use crate::x509::Certificate;

mod blocks;
mod error;
mod leaf;

use blocks::pem_blocks;
pub use error::{ValidationError, rfc3339};
use leaf::leaf_facts;
pub use leaf::{Leaf, bundle_judged_by, leaf_of, leaf_of_bundle};

/// Kubernetes caps a Secret or ConfigMap at 1 MiB, and each
/// ClusterTrustBundle's `trustBundle` too; a bundle may not be larger
/// (but see [`MAX_TRUST_BUNDLES_SIZE`]).
pub const MAX_BUNDLE_SIZE: usize = 1024 * 1024;

/// The most a `clustertrustbundle:SIGNER` selection publishes as `ca.crt`:
/// its distinct certificates, each once, up to 4 times what one bundle
/// may hold. Each bundle may be as large as the API allows, so a signer
/// that publishes a second full-size bundle (a CA rotation's overlap) must
/// not freeze the mapping, as one 1 MiB cap on the joined file did.
/// Kubelet's projection sets no bound at all; certsync sets one, because
/// it keeps the file in memory a few times over and on the node's disk in
/// every revision it keeps: 4 is twice an overlap of two full-size bundles
/// (old and new), and 4 MiB of PEM is some 7,000 CA certificates. Past it
/// the selection is refused, naming it, and the last good files stay.
pub const MAX_TRUST_BUNDLES_SIZE: usize = 4 * MAX_BUNDLE_SIZE;

/// The most any mapping publishes in all: a ClusterTrustBundle CA beside
/// a pair (`csr:` with `ca=clustertrustbundle`). The writer reads its own
/// revisions back, and `check` reads targets, with this cap.
pub const MAX_PUBLISHED_SIZE: usize = MAX_TRUST_BUNDLES_SIZE + MAX_BUNDLE_SIZE;

/// What a mapping must contain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Expect {
    /// `tls.crt` + `tls.key`, optional `ca.crt`.
    #[default]
    Pair,
    /// Only `ca.crt` (a CA bundle, e.g. from a ConfigMap); no key allowed.
    CaOnly,
    /// Files under their own names (`files=`), each checked for what it
    /// holds: certificates parse, a private key matches its certificate,
    /// other PEM parses, non-PEM only when allowed.
    Files { allow_non_pem: bool },
}

/// The rules that depend on the caller: what is expected, when "now" is, and
/// how much clock skew to forgive in a not-before.
#[derive(Debug, Clone, Copy)]
pub struct Policy {
    pub expect: Expect,
    pub now: SystemTime,
    pub clock_skew: Duration,
    /// The most bytes the bundle may hold in all: [`MAX_BUNDLE_SIZE`],
    /// or more for a CA from ClusterTrustBundles ([`MAX_PUBLISHED_SIZE`]).
    pub max_size: usize,
}

/// Checks `bundle` against `policy`; a bundle that passes gives its leaf
/// (`None` for a CA-only bundle). Pure: no I/O, no clock but `policy.now`.
pub fn validate(bundle: &Bundle, policy: &Policy) -> Result<Option<Leaf>, ValidationError> {
    let size = bundle.size();
    if size > policy.max_size {
        let largest = bundle
            .files()
            .max_by_key(|(_, b)| b.len())
            .map_or("", |(n, _)| n);
        return Err(ValidationError::TooLarge {
            file: bundle.origin(largest).to_owned(),
            size,
            limit: policy.max_size,
        });
    }
    let ca_bundle = || {
        let (ca_name, ca) = required(bundle, CA_FILE)?;
        certificates(&ca_name, &pem_blocks(&ca_name, ca)?).map(drop)
    };
    match policy.expect {
        Expect::Files { allow_non_pem } => validate_files(bundle, policy, allow_non_pem),
        Expect::CaOnly => {
            ca_bundle()?;
            match [CERT_FILE, KEY_FILE]
                .into_iter()
                .find(|n| bundle.get(n).is_some())
            {
                Some(name) => Err(ValidationError::UnexpectedKey {
                    file: bundle.origin(name).to_owned(),
                }),
                None => Ok(None),
            }
        }
        Expect::Pair => {
            if bundle.get(CA_FILE).is_some() {
                ca_bundle()?;
            }
            validate_pair(bundle, policy).map(Some)
        }
    }
}

/// `name` of `bundle`, as its origin names it, or the error that it is
/// missing.
fn required<'a>(bundle: &'a Bundle, name: &str) -> Result<(String, &'a [u8]), ValidationError> {
    let origin = bundle.origin(name).to_owned();
    match bundle.get(name) {
        Some(bytes) => Ok((origin, bytes)),
        None => Err(ValidationError::Missing { file: origin }),
    }
}

/// `tls.crt` and `tls.key`: the certificates parse, the one key is the
/// first certificate's, and that leaf is inside its validity window.
fn validate_pair(bundle: &Bundle, policy: &Policy) -> Result<Leaf, ValidationError> {
    let (cert_name, cert_pem) = required(bundle, CERT_FILE)?;
    let (key_name, key_pem) = required(bundle, KEY_FILE)?;
    let certs = certificates(&cert_name, &pem_blocks(&cert_name, cert_pem)?)?;
    let spki = public_key(&key_name, &pem_blocks(&key_name, key_pem)?)?;
    if !certifies(&certs[0], &spki) {
        return Err(match certs.iter().position(|c| certifies(c, &spki)) {
            Some(index) => ValidationError::LeafNotFirst {
                cert_file: cert_name,
                index: index + 1,
            },
            None => ValidationError::KeyMismatch {
                cert_file: cert_name,
                key_file: key_name,
            },
        });
    }
    // `certificates` read it above.
    let leaf = leaf_facts(&certs[0]).unwrap_or_default();
    let now = unix_seconds(policy.now);
    if now > leaf.not_after {
        return Err(ValidationError::Expired {
            file: cert_name,
            not_after: leaf.not_after,
        });
    }
    let skew = i64::try_from(policy.clock_skew.as_secs()).unwrap_or(i64::MAX);
    if leaf.not_before > now.saturating_add(skew) {
        return Err(ValidationError::NotYetValid {
            file: cert_name,
            not_before: leaf.not_before,
        });
    }
    Ok(leaf)
}

/// `files=` bundles: every file checked for what it holds. A file with a
/// private key is checked as a pair with its certificate: the same file's
/// certificates, else `STEM.crt` / `STEM.pem` / `STEM.cert` beside it
/// (`apiserver.key` with `apiserver.crt`; `tls.key` with `tls.crt`). The
/// leaf of the first pair (by name) is the mapping's certificate for
/// expiry metrics.
fn validate_files(
    bundle: &Bundle,
    policy: &Policy,
    allow_non_pem: bool,
) -> Result<Option<Leaf>, ValidationError> {
    let mut leaf = None;
    for (name, bytes) in bundle.files() {
        let origin = bundle.origin(name).to_owned();
        let blocks = match pem_blocks(&origin, bytes) {
            Ok(b) if !b.is_empty() => b,
            Err(
                e @ (ValidationError::EncryptedKey { .. }
                | ValidationError::Pem {
                    problem: READ_DIFFERENTLY,
                    ..
                }),
            ) => return Err(e),
            // PEM of a kind rustls does not know (DH parameters, a
            // signature): published once every block parses.
            _ if crate::pem::all_decode(bytes) => continue,
            _ if allow_non_pem => continue,
            _ => return Err(ValidationError::NotPem { file: origin }),
        };
        let has_cert = blocks.iter().any(|(k, _)| *k == SectionKind::Certificate);
        let has_key = blocks.iter().any(|(k, _)| is_key(*k));
        if has_cert {
            certificates(&origin, &blocks)?;
        }
        if !has_key {
            continue;
        }
        let stem = name.rsplit_once('.').map_or(name, |(s, _)| s);
        let cert_name = if has_cert {
            Some(name.to_owned())
        } else {
            ["crt", "pem", "cert"]
                .iter()
                .map(|ext| format!("{stem}.{ext}"))
                .find(|n| n != name && bundle.get(n).is_some())
        };
        let Some(cert_name) = cert_name else {
            return Err(ValidationError::Unpaired {
                key_file: origin,
                stem: stem.to_owned(),
            });
        };
        let mut pair = Bundle::default();
        let cert_bytes = bundle.get(&cert_name).unwrap_or_default().to_vec();
        let _ = pair.insert(CERT_FILE, cert_bytes, bundle.origin(&cert_name));
        let _ = pair.insert(KEY_FILE, bytes.to_vec(), origin);
        // No larger than the bundle, which passed the size check.
        let checked = validate_pair(&pair, policy)?;
        leaf = leaf.or(Some(checked));
    }
    Ok(leaf)
}

/// Whether `bytes` may be published with the certificate mode: nothing but
/// CERTIFICATE blocks, each one X.509 certificate, with only whitespace
/// before, between and after them. Anything else (text around a
/// certificate, such as a config file with a password beside its CA
/// certificate; a private key; another PEM label such as a CRL; non-PEM
/// such as a token) may be secret, and certsync cannot tell: it gets the
/// key mode. Fail closed: a wrongly private file costs a `group=`, a
/// wrongly public one leaks.
pub fn certificates_only(bytes: &[u8]) -> bool {
    // Every block, with its text: an unknown label or a syntax error fails.
    let Ok(blocks) = crate::pem::blocks(bytes) else {
        return false;
    };
    let mut end = 0;
    for b in &blocks {
        let start = b.text.as_ptr() as usize - bytes.as_ptr() as usize;
        let text = b.text.trim_ascii();
        let count = |needle: &[u8]| text.windows(needle.len()).filter(|w| *w == needle).count();
        let one_block = b.kind == SectionKind::Certificate
            && text.starts_with(b"-----BEGIN CERTIFICATE-----")
            && text.ends_with(b"-----END CERTIFICATE-----")
            && count(b"-----BEGIN ") == 1
            && count(b"-----END ") == 1;
        let between = &bytes[end..start];
        if !one_block || !between.iter().all(u8::is_ascii_whitespace) {
            return false;
        }
        if Certificate::read(&b.der).is_err() {
            return false;
        }
        end = start + b.text.len();
    }
    !blocks.is_empty() && bytes[end..].iter().all(u8::is_ascii_whitespace)
}

/// Seconds since the Unix epoch (negative before it).
pub fn unix_seconds(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

/// The certificates of `blocks` in order; each must parse as X.509 (and as
/// Go reads it, [`crate::x509::strict_certificate`]), and a
/// certificate file must not carry a private key (it is published 0644).
fn certificates(
    file: &str,
    blocks: &[(SectionKind, Vec<u8>)],
) -> Result<Vec<Vec<u8>>, ValidationError> {
    if blocks.iter().any(|(k, _)| is_key(*k)) {
        return Err(ValidationError::KeyInCertFile { file: file.into() });
    }
    let certs: Vec<Vec<u8>> = blocks
        .iter()
        .filter(|(k, _)| *k == SectionKind::Certificate)
        .map(|(_, der)| der.clone())
        .collect();
    if certs.is_empty() {
        return Err(ValidationError::NoCertificate { file: file.into() });
    }
    for (i, der) in certs.iter().enumerate() {
        Certificate::read(der)
            .and_then(|_| crate::x509::strict_certificate(der))
            .map_err(|source| ValidationError::BadCertificate {
                file: file.to_owned(),
                index: i + 1,
                source: Box::new(source),
            })?;
    }
    Ok(certs)
}

fn is_key(kind: SectionKind) -> bool {
    matches!(
        kind,
        SectionKind::PrivateKey | SectionKind::RsaPrivateKey | SectionKind::EcPrivateKey
    )
}

/// The public key (SubjectPublicKeyInfo) of the one private key in
/// `blocks`, as the ring provider loads the key.
fn public_key(
    file: &str,
    blocks: &[(SectionKind, Vec<u8>)],
) -> Result<SubjectPublicKeyInfoDer<'static>, ValidationError> {
    let keys: Vec<PrivateKeyDer<'static>> = blocks
        .iter()
        .filter_map(|(kind, der)| PrivateKeyDer::from_pem(*kind, der.clone()))
        .collect();
    let key = match keys.as_slice() {
        [] => return Err(ValidationError::NoKey { file: file.into() }),
        [key] => key,
        more => {
            return Err(ValidationError::MultipleKeys {
                file: file.into(),
                count: more.len(),
            });
        }
    };
    let key = rustls::crypto::ring::sign::any_supported_type(key).map_err(|source| {
        ValidationError::UnsupportedKey {
            file: file.into(),
            source: Box::new(source),
        }
    })?;
    key.public_key()
        .map(SubjectPublicKeyInfoDer::into_owned)
        .ok_or_else(|| ValidationError::NoPublicKey { file: file.into() })
}

/// Whether the certificate `der` is for the key whose public key is `spki`
/// (compared as rustls' `CertifiedKey::keys_match` does).
fn certifies(der: &[u8], spki: &SubjectPublicKeyInfoDer<'_>) -> bool {
    Certificate::read(der).is_ok_and(|c| c.spki() == spki.as_ref())
}

/// Whether the private key in `key_pem` belongs to the first certificate in
/// `cert_pem` (for reports on files already on disk; `validate` is the
/// gate for new content). Errors say what cannot be read.
pub fn key_matches(cert_pem: &[u8], key_pem: &[u8]) -> Result<bool, ValidationError> {
    let certs = certificates("certificate", &pem_blocks("certificate", cert_pem)?)?;
    let spki = public_key("key", &pem_blocks("key", key_pem)?)?;
    Ok(certifies(&certs[0], &spki))
}

#[cfg(test)]
mod files_tests {
    use super::*;
    use crate::test_certs as certs;

    fn policy() -> Policy {
        Policy {
            expect: Expect::Files {
                allow_non_pem: false,
            },
            now: SystemTime::now(),
            clock_skew: Duration::from_secs(300),
            max_size: MAX_BUNDLE_SIZE,
        }
    }

    #[test]
    fn files_are_checked_by_what_they_hold() {
        let p = certs::Pair::new("files");
        let mut b = Bundle::default();
        b.insert("server.crt", p.cert.clone(), "t").unwrap();
        b.insert("server.key", p.key.clone(), "t").unwrap();
        b.insert(
            "dh.pem",
            b"-----BEGIN DH PARAMETERS-----\nMAYCAQACAQI=\n-----END DH PARAMETERS-----\n".to_vec(),
            "t",
        )
        .unwrap();
        let v = validate(&b, &policy()).unwrap();
        assert!(v.is_some(), "the pair's leaf is the mapping's certificate");

        let mut lone = Bundle::default();
        lone.insert("orphan.key", p.key.clone(), "t").unwrap();
        assert!(matches!(
            validate(&lone, &policy()),
            Err(ValidationError::Unpaired { .. })
        ));
        let mut garbage = Bundle::default();
        garbage.insert("blob", vec![0, 1, 2], "t").unwrap();
        assert!(matches!(
            validate(&garbage, &policy()),
            Err(ValidationError::NotPem { .. })
        ));
        let allowed = Policy {
            expect: Expect::Files {
                allow_non_pem: true,
            },
            ..policy()
        };
        assert!(validate(&garbage, &allowed).is_ok());
    }

    /// The certificate mode is for certificate blocks and whitespace only.
    #[test]
    fn only_pure_certificate_pem_is_public() {
        let p = certs::Pair::new("modes");
        let cat = |parts: &[&[u8]]| parts.concat();
        let crl = b"-----BEGIN X509 CRL-----\nMAA=\n-----END X509 CRL-----\n".as_slice();
        let public = [
            p.cert.clone(),
            cat(&[&p.cert, &p.ca_cert]),
            cat(&[b"\n \t\r\n", &p.cert, b"\n\n", &p.ca_cert, b"  \n"]),
            String::from_utf8(p.cert.clone())
                .unwrap()
                .replace('\n', "\r\n")
                .into_bytes(),
        ];
        for bytes in &public {
            assert!(
                certificates_only(bytes),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        let end = b"-----END CERTIFICATE-----".as_slice();
        let tail = p.cert.len() - end.len() - 1;
        let secret = [
            cat(&[b"password=hunter2\n", &p.ca_cert]),
            cat(&[&p.ca_cert, b"password=hunter2\n"]),
            cat(&[&p.cert, b"password=hunter2\n", &p.ca_cert]),
            cat(&[b"# the cluster CA\n", &p.cert]),
            cat(&[&p.cert[..tail], end, b" token=x\n"]),
            cat(&[&p.cert, &p.key]),
            cat(&[&p.cert, crl]),
            crl.to_vec(),
            p.key.clone(),
            // A CERTIFICATE label around something that is not one.
            b"-----BEGIN CERTIFICATE-----\naHVudGVyMg==\n-----END CERTIFICATE-----\n".to_vec(),
            cat(&[b"-----BEGIN CERTIFICATE-----\n", &p.cert]),
            b"s3cr3t-token".to_vec(),
            b"  \n".to_vec(),
            Vec::new(),
        ];
        for bytes in &secret {
            assert!(
                !certificates_only(bytes),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_certs::*;

    const DAY: i64 = 86_400;

    fn policy() -> Policy {
        Policy {
            expect: Expect::Pair,
            now: SystemTime::now(),
            clock_skew: Duration::from_secs(300),
            max_size: MAX_BUNDLE_SIZE,
        }
    }

    fn pair(cert: &[u8], key: &[u8]) -> Bundle {
        let mut b = Bundle::default();
        b.insert(CERT_FILE, cert.to_vec(), "src/tls.crt").unwrap();
        b.insert(KEY_FILE, key.to_vec(), "src/tls.key").unwrap();
        b
    }

    #[test]
    fn accepts_good_pairs_of_every_key_encoding() {
        let ec = Pair::new("ec");
        let ed = Pair::ed25519();
        let cases: Vec<(&str, Vec<u8>, Vec<u8>)> = vec![
            ("ecdsa pkcs8", ec.cert.clone(), ec.key.clone()),
            (
                "ecdsa sec1",
                fixture_cert(FixtureKey::EcSec1),
                fixture_key(FixtureKey::EcSec1),
            ),
            (
                "rsa pkcs1",
                fixture_cert(FixtureKey::RsaPkcs1),
                fixture_key(FixtureKey::RsaPkcs1),
            ),
            (
                "rsa pkcs8",
                fixture_cert(FixtureKey::RsaPkcs8),
                fixture_key(FixtureKey::RsaPkcs8),
            ),
            ("ed25519", ed.cert.clone(), ed.key.clone()),
            ("crlf endings", crlf(&ec.cert), crlf(&ec.key)),
            ("chain after leaf", chain(&ec), ec.key.clone()),
        ];
        for (name, cert, key) in cases {
            let v =
                validate(&pair(&cert, &key), &policy()).unwrap_or_else(|e| panic!("{name}: {e}"));
            let leaf = v.expect("leaf facts");
            assert!(leaf.not_after > leaf.not_before, "{name}");
        }
    }

    #[test]
    fn accepts_optional_ca_and_ca_only() {
        let p = Pair::new("svc");
        let mut b = pair(&p.cert, &p.key);
        b.insert(CA_FILE, p.ca_cert.clone(), "src/ca.crt").unwrap();
        validate(&b, &policy()).unwrap();

        let mut ca = Bundle::default();
        ca.insert(CA_FILE, p.ca_cert.clone(), "cm/ca-bundle.crt")
            .unwrap();
        let ca_only = Policy {
            expect: Expect::CaOnly,
            ..policy()
        };
        assert_eq!(validate(&ca, &ca_only).unwrap(), None);
        assert_eq!(
            validate(&b, &ca_only).unwrap_err().reason(),
            "unexpected_key"
        );
    }

    /// One case per error kind, with the reason label and a fragment the
    /// message must contain (the file it names and what is wrong).
    #[test]
    fn every_error_kind() {
        let p = Pair::new("a");
        let other = Pair::new("b");
        let expired = Pair::with_validity("old", -10 * DAY, -DAY);
        let future = Pair::with_validity("new", DAY, 10 * DAY);
        let mut truncated = p.cert.clone();
        truncated.truncate(p.cert.len() / 2);
        let garbage_b64 =
            b"-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n".to_vec();
        let not_x509 =
            b"-----BEGIN CERTIFICATE-----\naGVsbG8=\n-----END CERTIFICATE-----\n".to_vec();
        let two_keys = [p.key.clone(), other.key.clone()].concat();
        let cert_with_key = [p.cert.clone(), p.key.clone()].concat();
        let wrong_order = [p.ca_cert.clone(), p.cert.clone()].concat();
        let big = vec![b'a'; MAX_BUNDLE_SIZE];

        let cases: Vec<(&str, Bundle, &str, &str)> = vec![
            (
                "empty cert",
                pair(b"", &p.key),
                "empty",
                "src/tls.crt: file is empty",
            ),
            (
                "garbage",
                pair(b"hello world\n", &p.key),
                "bad_pem",
                "src/tls.crt: not valid PEM",
            ),
            (
                "truncated",
                pair(&truncated, &p.key),
                "bad_pem",
                "no END line",
            ),
            (
                "bad base64",
                pair(&garbage_b64, &p.key),
                "bad_pem",
                "base64",
            ),
            (
                "not x509",
                pair(&not_x509, &p.key),
                "bad_certificate",
                "certificate #1",
            ),
            (
                "key in cert slot",
                pair(&p.key, &p.key),
                "key_in_cert_file",
                "src/tls.crt",
            ),
            (
                "cert without key",
                pair(&p.cert, &p.cert),
                "no_key",
                "src/tls.key: no private key",
            ),
            (
                "key without cert",
                {
                    let mut b = Bundle::default();
                    b.insert(KEY_FILE, p.key.clone(), "src/tls.key").unwrap();
                    b
                },
                "missing_file",
                "tls.crt: required file is missing",
            ),
            (
                "no certificate block",
                pair(&other.key_as_public_pem(), &p.key),
                "no_certificate",
                "src/tls.crt",
            ),
            (
                "mismatched pair",
                pair(&p.cert, &other.key),
                "key_mismatch",
                "src/tls.key does not match",
            ),
            (
                "leaf not first",
                pair(&wrong_order, &p.key),
                "leaf_not_first",
                "certificate #2",
            ),
            (
                "expired",
                pair(&expired.cert, &expired.key),
                "expired",
                "expired at",
            ),
            (
                "not yet valid",
                pair(&future.cert, &future.key),
                "not_yet_valid",
                "not valid before",
            ),
            (
                "encrypted pkcs8",
                pair(&p.cert, &fixture_encrypted_key()),
                "encrypted_key",
                "encrypted",
            ),
            (
                "encrypted legacy",
                pair(&p.cert, &fixture_legacy_encrypted_key()),
                "encrypted_key",
                "encrypted",
            ),
            (
                "two keys",
                pair(&p.cert, &two_keys),
                "multiple_keys",
                "2 private keys",
            ),
            (
                "cert file with key",
                pair(&cert_with_key, &p.key),
                "key_in_cert_file",
                "certificate permissions",
            ),
            (
                "unloadable key",
                pair(
                    &p.cert,
                    b"-----BEGIN PRIVATE KEY-----\naGVsbG8=\n-----END PRIVATE KEY-----\n",
                ),
                "unsupported_key",
                "cannot be loaded",
            ),
            (
                "oversize",
                pair(&[p.cert.clone(), big].concat(), &p.key),
                "too_large",
                "over the 1048576-byte limit",
            ),
            (
                "bad ca",
                {
                    let mut b = pair(&p.cert, &p.key);
                    b.insert(CA_FILE, b"nope".to_vec(), "src/ca.crt").unwrap();
                    b
                },
                "bad_pem",
                "src/ca.crt",
            ),
        ];
        for (name, bundle, reason, fragment) in cases {
            let err = validate(&bundle, &policy()).expect_err(name);
            assert_eq!(err.reason(), reason, "{name}: {err}");
            let msg = err.to_string();
            assert!(msg.contains(fragment), "{name}: {msg:?} lacks {fragment:?}");
            assert!(
                !msg.contains("MII"),
                "{name}: message quotes PEM data: {msg}"
            );
        }
    }

    #[test]
    fn clock_skew_allowance_applies_to_not_before() {
        // Valid from one minute from now: inside a 5-minute allowance.
        let soon = Pair::with_validity("soon", 60, DAY);
        validate(&pair(&soon.cert, &soon.key), &policy()).unwrap();
        let strict = Policy {
            clock_skew: Duration::ZERO,
            ..policy()
        };
        assert_eq!(
            validate(&pair(&soon.cert, &soon.key), &strict)
                .unwrap_err()
                .reason(),
            "not_yet_valid"
        );
    }

    #[test]
    fn leaf_facts_are_reported() {
        let p = Pair::new("facts.example");
        let leaf = validate(&pair(&p.cert, &p.key), &policy())
            .unwrap()
            .unwrap();
        assert!(leaf.subject.contains("facts.example"), "{}", leaf.subject);
        assert!(
            leaf.issuer.contains("facts.example test CA"),
            "{}",
            leaf.issuer
        );
        assert_eq!(leaf.sans, vec!["facts.example".to_owned()]);
        assert!(!leaf.is_ca);
        assert_eq!(key_matches(&p.cert, &p.key), Ok(true));
        assert_eq!(key_matches(&p.cert, &Pair::new("other").key), Ok(false));
        assert_eq!(leaf_of(&p.ca_cert).map(|l| l.is_ca), Some(true));
        assert_eq!(leaf_of(&p.cert), Some(leaf));
        assert_eq!(leaf_of(b"junk"), None);
    }

    /// Certificates Go's `x509.ParseCertificate` refuses were published over
    /// the last good pair, and kube-apiserver then failed at its next start.
    /// Every certificate of `tls.crt` and `ca.crt` goes through
    /// [`crate::x509::strict_certificate`] (one shape per rule is in
    /// `src/x509/certificate.rs`); here, that validate calls it, for the
    /// leaf and for a CA.
    #[test]
    fn certificates_go_refuses_are_refused_naming_the_file() {
        let p = Pair::new("go");
        let v4 = crate::test_certs::as_version_4;
        let e = validate(&pair(&v4(&p.cert), &p.key), &policy()).unwrap_err();
        assert_eq!(e.reason(), "bad_certificate", "{e}");
        assert!(
            matches!(&e, ValidationError::BadCertificate { file, source, .. }
                if file == "src/tls.crt" && matches!(**source, crate::x509::X509Error::StrictDer(_))),
            "{e}"
        );
        let mut b = pair(&p.cert, &p.key);
        b.insert(CA_FILE, v4(&p.ca_cert), "src/ca.crt").unwrap();
        let e = validate(&b, &policy()).unwrap_err();
        assert!(
            matches!(&e, ValidationError::BadCertificate { file, source, .. }
                if file == "src/ca.crt" && matches!(**source, crate::x509::X509Error::StrictDer(_))),
            "{e}"
        );
        // The unedited pair, with its CA, passes.
        let mut b = pair(&p.cert, &p.key);
        b.insert(CA_FILE, p.ca_cert.clone(), "src/ca.crt").unwrap();
        validate(&b, &policy()).unwrap();
    }

    /// Go's `tls.X509KeyPair` (every Go consumer's key reader) takes the
    /// first block whose label is `PRIVATE KEY` or ends with ` PRIVATE KEY`;
    /// rustls-pki-types steps over a label it does not know. A Secret's
    /// `tls.key` holding `DSA PRIVATE KEY` (another key's DER) before the
    /// matching key passes validation, is published, and the consumer loads
    /// the first one: "private key does not match public key".
    /// `crate::pem::blocks` refuses a block it would step over.
    #[test]
    fn attack_a_key_block_of_an_unknown_label_before_the_key_is_refused() {
        let p = Pair::new("a");
        let other = Pair::new("b");
        let relabelled = String::from_utf8(other.key.clone())
            .unwrap()
            .replace(
                "-----BEGIN PRIVATE KEY-----",
                "-----BEGIN DSA PRIVATE KEY-----",
            )
            .replace("-----END PRIVATE KEY-----", "-----END DSA PRIVATE KEY-----");
        let key = [relabelled.as_bytes(), &p.key].concat();
        // What Go's key reader takes: the first label ending " PRIVATE KEY".
        let go = crate::pem::go_blocks(&key);
        let (label, _) = (go.iter())
            .find(|(l, _)| l == b"PRIVATE KEY" || l.ends_with(b" PRIVATE KEY"))
            .expect("Go finds a key");
        assert_eq!(label, b"DSA PRIVATE KEY");
        assert!(
            crate::pem::blocks(&key).is_err(),
            "the one reader refuses it"
        );
        let got = validate(&pair(&p.cert, &key), &policy());
        assert!(
            matches!(&got, Err(ValidationError::Pem { problem, .. }) if *problem == crate::pem::READ_DIFFERENTLY),
            "published, and Go loads another key: {got:?}"
        );
        // Parameters before the key (`openssl ecparam -genkey`): skipped by Go's key reader too.
        let params =
            "-----BEGIN EC PARAMETERS-----\nBggqhkjOPQMBBw==\n-----END EC PARAMETERS-----\n";
        let with_params = [params.as_bytes(), &p.key].concat();
        validate(&pair(&p.cert, &with_params), &policy()).expect("EC parameters and the key");
    }

    fn crlf(pem: &[u8]) -> Vec<u8> {
        String::from_utf8(pem.to_vec())
            .unwrap()
            .replace('\n', "\r\n")
            .into_bytes()
    }

    fn chain(p: &Pair) -> Vec<u8> {
        [p.cert.clone(), p.ca_cert.clone()].concat()
    }
}
