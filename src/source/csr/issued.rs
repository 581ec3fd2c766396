//! The signer's answer checked: data someone else wrote, never proof.

use std::time::SystemTime;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};

use super::spec::{CsrSpec, Window};
use crate::bundle::{Bundle, CERT_FILE, KEY_FILE};
use crate::source::error::csr::CsrError;
use crate::source::usage::{ku_names, leaf_usages, split};
use crate::validate::{self, Expect, Policy};
use crate::x509::{COMMON_NAME as OID_CN, Certificate, Facts, ORGANIZATION as OID_O, set};

/// Checks that `cert_pem` (leaf first) is what `spec` asks for, for the key
/// in `key_pem`: the key matches, the leaf is valid now, read alike by two
/// parsers ([`Certificate::facts`]), with exactly the subject, DNS and IP
/// names, usages and key algorithm asked for, no CA, no unknown critical
/// extension, chaining to `ca` when given. Pure; errors name the field.
pub fn check(
    spec: &CsrSpec,
    cert_pem: &[u8],
    key_pem: &[u8],
    ca: Option<&[u8]>,
    now: SystemTime,
    clock_skew: std::time::Duration,
) -> Result<Window, CsrError> {
    // certsync's own validation of the pair first.
    let mut pair = Bundle::default();
    pair.insert(CERT_FILE, cert_pem.to_vec(), "issued certificate")
        .map_err(CsrError::IssuedBundle)?;
    pair.insert(KEY_FILE, key_pem.to_vec(), "private key")
        .map_err(CsrError::IssuedBundle)?;
    let policy = Policy {
        expect: Expect::Pair,
        now,
        clock_skew,
        max_size: validate::MAX_BUNDLE_SIZE,
    };
    let validated = validate::validate(&pair, &policy).map_err(CsrError::Invalid)?;
    let leaf = validated.ok_or(CsrError::NoLeaf)?;
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<_, _>>()
        .map_err(CsrError::Pem)?;
    let der = chain.first().ok_or(CsrError::NoLeaf)?;
    let facts = Certificate::read(der)
        .and_then(|c| c.facts())
        .map_err(CsrError::Leaf)?;
    subject(spec, &facts)?;
    names(spec, &facts)?;
    usages(spec, &facts)?;
    facts.leaf_only().map_err(CsrError::Leaf)?;
    match facts.key_alg {
        Some(alg) if alg == spec.key_alg => {}
        Some(got) => {
            let want = spec.key_alg;
            return Err(CsrError::IssuedKeyAlg { got, want });
        }
        None => return Err(CsrError::UnknownKeyAlg),
    }
    if let Some(ca) = ca {
        chains_to(&chain, ca, &spec.usages, now)?;
    }
    Ok(Window {
        not_before: leaf.not_before,
        not_after: leaf.not_after,
    })
}

fn subject(spec: &CsrSpec, facts: &Facts) -> Result<(), CsrError> {
    let orgs = spec
        .organizations
        .iter()
        .map(|o| (OID_O.to_owned(), o.clone()));
    let cn = spec
        .common_name
        .iter()
        .map(|cn| (OID_CN.to_owned(), cn.clone()));
    let mut want: Vec<(String, String)> = orgs.chain(cn).collect();
    want.sort();
    let mut got = facts.subject.clone();
    got.sort();
    if got != want {
        return Err(CsrError::Subject { got, want });
    }
    Ok(())
}

/// The DNS names (without case) and IP addresses `spec` asks for, and no
/// other kind of name.
fn names(spec: &CsrSpec, facts: &Facts) -> Result<(), CsrError> {
    let (dns, ips) = facts.names().map_err(|kind| CsrError::OtherName { kind })?;
    let lower = |names: &[String]| set(names.iter().map(|d| d.to_ascii_lowercase()).collect());
    let (got, want) = (lower(&dns), lower(&spec.dns));
    if got != want {
        return Err(CsrError::DnsNames { got, want });
    }
    let (got, want) = (set(ips), set(spec.ips.clone()));
    if got != want {
        return Err(CsrError::IpAddresses { got, want });
    }
    Ok(())
}

fn usages(spec: &CsrSpec, facts: &Facts) -> Result<(), CsrError> {
    let (want_ku, want_eku) = split(&spec.usages).map_err(CsrError::UnknownUsage)?;
    let want_eku = set(want_eku.into_iter().map(str::to_owned).collect());
    let ku = facts.key_usage.unwrap_or(0);
    if ku != want_ku {
        return Err(CsrError::KeyUsage {
            got: ku,
            want: want_ku,
        });
    }
    let eku = set(facts.ext_key_usage.clone().unwrap_or_default());
    if eku != want_eku {
        return Err(CsrError::ExtKeyUsage {
            got: eku,
            want: want_eku,
        });
    }
    // Asked for and given: still refused (a leaf is never a signer).
    leaf_usages(ku_names(ku))?;
    Ok(())
}

/// The chain verifies up to `ca_pem` with the EKU asked for (webpki).
fn chains_to(
    chain: &[CertificateDer<'_>],
    ca_pem: &[u8],
    usages: &[String],
    now: SystemTime,
) -> Result<(), CsrError> {
    let cas: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(ca_pem)
        .collect::<Result<_, _>>()
        .map_err(CsrError::CaPem)?;
    let anchors: Vec<_> = cas
        .iter()
        .filter_map(|c| webpki::anchor_from_trusted_cert(c).ok())
        .collect();
    if anchors.is_empty() {
        return Err(CsrError::NoAnchor);
    }
    let leaf = webpki::EndEntityCert::try_from(&chain[0]).map_err(CsrError::EndEntity)?;
    let has = |u: &str| usages.iter().any(|x| x == u);
    let usage = if has("server auth") {
        webpki::KeyUsage::server_auth()
    } else if has("client auth") {
        webpki::KeyUsage::client_auth()
    } else {
        // id-kp-serverAuth, only if present: any other purpose is not
        // webpki's to check (the usages were compared exactly above).
        webpki::KeyUsage::required_if_present(&[43, 6, 1, 5, 5, 7, 3, 1])
    };
    let time = UnixTime::since_unix_epoch(
        now.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default(),
    );
    leaf.verify_for_usage(
        webpki::ALL_VERIFICATION_ALGS,
        &anchors,
        &chain[1..],
        time,
        usage,
        None,
        None,
    )
    .map(|_| ())
    .map_err(CsrError::Chain)
}
