//! The check of an issued certificate against the request: the signer's
//! answer is data someone else wrote, never proof by itself.

use std::time::SystemTime;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};

use super::{CsrError, CsrSpec, Window};
use crate::bundle::{Bundle, CERT_FILE, KEY_FILE};
use crate::validate::{self, Expect, Policy};
use crate::x509::{COMMON_NAME as OID_CN, Certificate, Facts, ORGANIZATION as OID_O, set};

/// What a CSR API usage string puts into the certificate: a key usage bit
/// (bit 0: digitalSignature) or an EKU OID, as Kubernetes'
/// `keyUsagesFromStrings` maps them.
pub(crate) enum Usage {
    Ku(u16),
    Eku(&'static str),
}

pub(crate) fn usage(name: &str) -> Option<Usage> {
    Some(match name {
        "signing" | "digital signature" => Usage::Ku(1 << 0),
        "content commitment" => Usage::Ku(1 << 1),
        "key encipherment" => Usage::Ku(1 << 2),
        "data encipherment" => Usage::Ku(1 << 3),
        "key agreement" => Usage::Ku(1 << 4),
        "cert sign" => Usage::Ku(1 << 5),
        "crl sign" => Usage::Ku(1 << 6),
        "encipher only" => Usage::Ku(1 << 7),
        "decipher only" => Usage::Ku(1 << 8),
        "any" => Usage::Eku("2.5.29.37.0"),
        "server auth" => Usage::Eku("1.3.6.1.5.5.7.3.1"),
        "client auth" => Usage::Eku("1.3.6.1.5.5.7.3.2"),
        "code signing" => Usage::Eku("1.3.6.1.5.5.7.3.3"),
        "email protection" | "s/mime" => Usage::Eku("1.3.6.1.5.5.7.3.4"),
        "ipsec end system" => Usage::Eku("1.3.6.1.5.5.7.3.5"),
        "ipsec tunnel" => Usage::Eku("1.3.6.1.5.5.7.3.6"),
        "ipsec user" => Usage::Eku("1.3.6.1.5.5.7.3.7"),
        "timestamping" => Usage::Eku("1.3.6.1.5.5.7.3.8"),
        "ocsp signing" => Usage::Eku("1.3.6.1.5.5.7.3.9"),
        "microsoft sgc" => Usage::Eku("1.3.6.1.4.1.311.10.3.3"),
        "netscape sgc" => Usage::Eku("2.16.840.1.113730.4.1"),
        _ => return None,
    })
}

/// Refuses usages only a CA certificate has: keyCertSign and cRLSign on a
/// CA:FALSE leaf are read one way by some verifiers and the other by
/// others; certsync issues no CA certificates.
pub(crate) fn leaf_usages<'a>(usages: impl IntoIterator<Item = &'a str>) -> Result<(), CaUsage> {
    for u in usages {
        if let Some(Usage::Ku(bit)) = usage(u)
            && bit & (crate::x509::KEY_CERT_SIGN | CRL_SIGN) != 0
        {
            return Err(CaUsage(u.into()));
        }
    }
    Ok(())
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "usage {0:?} belongs to a CA certificate (keyCertSign, cRLSign); certsync issues leaf \
     certificates only (CA:FALSE)"
)]
pub struct CaUsage(pub String);

const CRL_SIGN: u16 = 1 << 6;

/// The usage name that asks for an EKU OID, if one does.
pub(crate) fn eku_usage(oid: &str) -> Option<&'static str> {
    crate::source::csr::USAGES
        .iter()
        .find(|u| matches!(usage(u), Some(Usage::Eku(o)) if o == oid))
        .copied()
}

/// EKU OIDs by the usage names that ask for them, for messages.
pub(super) fn eku_names(oids: &[String]) -> Vec<String> {
    let name = |o: &String| eku_usage(o).map_or_else(|| o.clone(), str::to_owned);
    oids.iter().map(name).collect()
}

/// Subject attributes for messages: `CN="x", O="y"`.
pub(super) fn attributes(s: &[(String, String)]) -> String {
    s.iter()
        .map(|(o, v)| attribute(o, v))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The names of the key usage bits set in `bits`, bit 0 first (the last
/// name [`USAGES`](super::USAGES) gives a bit: "digital signature", not
/// "signing").
pub(crate) fn ku_names(bits: u16) -> Vec<&'static str> {
    let name = |bit: u16| {
        let named = |u: &&&str| matches!(usage(u), Some(Usage::Ku(b)) if b == bit);
        super::USAGES.iter().rev().find(named).copied()
    };
    (0..9)
        .map(|i| 1 << i)
        .filter(|b| bits & b != 0)
        .filter_map(name)
        .collect()
}

/// A subject attribute for messages: `CN="x"`, `O="y"`, else the OID.
fn attribute(oid: &str, value: &str) -> String {
    let name = match oid {
        OID_CN => "CN",
        OID_O => "O",
        "2.5.4.11" => "OU",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.5" => "serialNumber",
        other => other,
    };
    format!("{name}={value:?}")
}

/// Checks that `cert_pem` (leaf first, then any intermediates) is what
/// `spec` asks for, for the key in `key_pem`: the key matches the leaf, the
/// leaf is valid now, read by two parsers that agree ([`Certificate::facts`],
/// else refused), and holds exactly the requested subject, DNS and IP names
/// (no other kind), key usages and EKUs (as kube-controller-manager's
/// signer maps them), no CA, no unknown critical extension, the requested
/// key algorithm, and chains to `ca` (PEM) when given. Pure: `now` is the
/// only clock. The error names the field; the signer's values are escaped.
pub fn check(
    spec: &CsrSpec,
    cert_pem: &[u8],
    key_pem: &[u8],
    ca: Option<&[u8]>,
    now: SystemTime,
    clock_skew: std::time::Duration,
) -> Result<Window, CsrError> {
    let leaf = valid_pair(cert_pem, key_pem, now, clock_skew)?;
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
    facts.leaf_only().map_err(CsrError::NotLeaf)?;
    key_alg(spec, &facts)?;
    if let Some(ca) = ca {
        chains_to(&chain, ca, &spec.usages, now)?;
    }
    Ok(Window {
        not_before: leaf.not_before,
        not_after: leaf.not_after,
    })
}

/// The leaf of the pair, when certsync's own validation passes it.
fn valid_pair(
    cert_pem: &[u8],
    key_pem: &[u8],
    now: SystemTime,
    clock_skew: std::time::Duration,
) -> Result<validate::Leaf, CsrError> {
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
    validate::validate(&pair, &policy)
        .map_err(CsrError::Invalid)?
        .leaf
        .ok_or(CsrError::NoLeaf)
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
    let (mut want_ku, mut want_eku) = (0u16, Vec::new());
    for u in &spec.usages {
        match usage(u) {
            Some(Usage::Ku(bit)) => want_ku |= bit,
            Some(Usage::Eku(oid)) => want_eku.push(oid.to_owned()),
            None => return Err(CsrError::UnknownUsage(u.clone())),
        }
    }
    let want_eku = set(want_eku);
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

fn key_alg(spec: &CsrSpec, facts: &Facts) -> Result<(), CsrError> {
    match facts.key_alg {
        Some(alg) if alg == spec.key_alg => Ok(()),
        Some(got) => Err(CsrError::IssuedKeyAlg {
            got,
            want: spec.key_alg,
        }),
        None => Err(CsrError::UnknownKeyAlg),
    }
}

/// The chain (leaf first) verifies up to a CA certificate in `ca_pem`,
/// with the EKU asked for (rustls' webpki).
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
