//! The strict reading of a PKCS#10 certificate request (the approver's
//! policy, `csr review`): nothing but what Go's `crypto/x509` would read
//! from it, or refused. It is decoded by RustCrypto's `x509-cert` (strict
//! DER) and by `x509-parser`, and refused when either fails or they read
//! the subject, the key or an extension differently (as
//! [`Certificate::facts`] compares), or when it holds anything a reader
//! could take two ways:
//! - any attribute but exactly one `extensionRequest` with exactly one
//!   value (Go reads every `extensionRequest`; x509-parser only the first);
//! - a duplicate extension, or one other than subjectAltName, keyUsage,
//!   extKeyUsage and basicConstraints;
//! - a SAN element other than a DNS name or an IP address (Go skips
//!   elements of unknown kinds; x509-parser rejects the whole extension),
//!   a DNS name that is not a host name, an IP of another length than 4
//!   or 16 bytes, or no SAN at all;
//! - a subject RDN with more than one attribute, or a value that is not a
//!   UTF8String or PrintableString.

mod certificate;
mod error;
mod facts;
mod key;
mod oid;
pub use certificate::{strict_certificate, strict_der};
pub use error::X509Error;
pub use facts::{Certificate, Facts, KEY_CERT_SIGN, Name, ip_of, set};
pub use key::{KeyAlg, RSA_BITS};

use std::net::IpAddr;

use rustls_pki_types::pem::SectionKind;
use x509_cert::der::asn1::ObjectIdentifier as Oid;
use x509_cert::der::{Any, Decode, Encode, Tag, TagNumber, Tagged};
use x509_cert::ext::Extension;
use x509_cert::request::CertReq;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::cri_attributes::ParsedCriAttribute;
use x509_parser::extensions::X509Extension;
use x509_parser::prelude::FromDer;

const EXTENSION_REQUEST: Oid = Oid::new_unwrap("1.2.840.113549.1.9.14");
/// id-kp-serverAuth.
pub const SERVER_AUTH: &str = "1.3.6.1.5.5.7.3.1";
pub const COMMON_NAME: &str = "2.5.4.3";
pub const ORGANIZATION: &str = "2.5.4.10";

/// A request as both parsers agreed on reading it: its facts (the
/// subject one `(OID, value)` per RDN; `key_alg` `None` for a key type or
/// curve certsync does not know), and its names.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    der: Vec<u8>,
    pub facts: Facts,
    /// DNS SANs as requested (host-name syntax, case kept).
    pub dns: Vec<String>,
    pub ips: Vec<IpAddr>,
}

impl Request {
    /// Reads `pem` (the CSR's `spec.request`); see the module.
    pub fn read(pem: &[u8]) -> Result<Self, X509Error> {
        let der = crate::pem::exactly_one(pem, SectionKind::Csr)?;
        // Decoded by both parsers, nothing after it, version 1.
        let strict = CertReq::from_der(&der).map_err(X509Error::RequestDer)?;
        let (rest, lax) =
            X509CertificationRequest::from_der(&der).map_err(X509Error::RequestLax)?;
        if !rest.is_empty() {
            return Err(X509Error::Trailing("request"));
        }
        if strict.info.version != x509_cert::request::Version::V1 {
            return Err(X509Error::RequestVersion);
        }
        single_attributes(&strict)?;
        let extensions = extensions(&strict)?;
        let info = &lax.certification_request_info;
        let lax_exts = lax_extensions(&lax, &extensions)?;
        for san in extensions
            .iter()
            .filter(|e| e.extn_id.to_string() == oid::SAN)
        {
            san_kinds(san.extn_value.as_bytes())?;
        }
        let facts = facts::same_facts(
            facts::lax_facts(&info.subject, lax_exts, &info.subject_pki),
            facts::strict_facts(&strict.info.subject, &extensions, &strict.info.public_key),
        )?;
        let (dns, ips) =
            (facts.names()).map_err(|kind| X509Error::SanKind { kind: kind.into() })?;
        // A wildcard is refused with its own words, so no later check has
        // to think about it; every other name is a host name.
        for d in &dns {
            if d.contains('*') {
                return Err(X509Error::SanWildcard { name: d.to_owned() });
            }
            dns_name(d)?;
        }
        if dns.is_empty() && ips.is_empty() {
            return Err(X509Error::NoSans);
        }
        Ok(Request {
            der: der.clone(),
            facts,
            dns,
            ips,
        })
    }

    /// Checks the request's signature with its own key (ring, through
    /// x509-parser). Call after the key was found acceptable: ring refuses
    /// weak RSA keys outright, which would read as a forged signature.
    pub fn verify_signature(&self) -> Result<(), X509Error> {
        X509CertificationRequest::from_der(&self.der)
            .ok()
            .and_then(|(_, r)| r.verify_signature().ok())
            .ok_or(X509Error::Signature)
    }
}

/// x509-parser's extensions of the one `extensionRequest`, when they are
/// `strict`'s, in order, with the same criticality and value.
fn lax_extensions<'a>(
    lax: &'a X509CertificationRequest<'_>,
    strict: &[Extension],
) -> Result<&'a [X509Extension<'a>], X509Error> {
    let differ = |field| X509Error::ReadDifferently { field };
    let lax_exts = match lax.certification_request_info.attributes() {
        [one] => match one.parsed_attribute() {
            ParsedCriAttribute::ExtensionRequest(r) => &r.extensions,
            _ => return Err(differ("attributes")),
        },
        _ => return Err(differ("attributes")),
    };
    let same = strict.len() == lax_exts.len()
        && strict.iter().zip(lax_exts).all(|(a, b)| {
            a.extn_id.to_string() == b.oid.to_id_string()
                && a.critical == b.critical
                && a.extn_value.as_bytes() == b.value
        });
    if !same {
        return Err(differ("extensions"));
    }
    Ok(lax_exts)
}

/// Each subject RDN holds one attribute, a UTF8String or PrintableString.
fn single_attributes(req: &CertReq) -> Result<(), X509Error> {
    for rdn in &req.info.subject.0 {
        let atvs: Vec<_> = rdn.0.iter().collect();
        let [atv] = atvs.as_slice() else {
            return Err(X509Error::RdnAttributes { count: atvs.len() });
        };
        if !matches!(atv.value.tag(), Tag::Utf8String | Tag::PrintableString) {
            let (oid, tag) = (atv.oid, atv.value.tag());
            return Err(X509Error::SubjectTag { oid, tag });
        }
    }
    Ok(())
}

/// The extensions of the one `extensionRequest` attribute, each known and
/// present once.
fn extensions(req: &CertReq) -> Result<Vec<Extension>, X509Error> {
    let attrs: Vec<_> = req.info.attributes.iter().collect();
    if attrs.is_empty() {
        return Err(X509Error::NoExtensionRequest);
    }
    let [attr] = attrs.as_slice() else {
        return Err(X509Error::AttributeCount { count: attrs.len() });
    };
    if attr.oid != EXTENSION_REQUEST {
        return Err(X509Error::OtherAttribute { oid: attr.oid });
    }
    let values: Vec<&Any> = attr.values.iter().collect();
    let [value] = values.as_slice() else {
        return Err(X509Error::ExtensionRequestValues {
            count: values.len(),
        });
    };
    let bytes = value.to_der().map_err(X509Error::RequestDer)?;
    let exts = Vec::<Extension>::from_der(&bytes).map_err(X509Error::ExtensionsParse)?;
    for (i, ext) in exts.iter().enumerate() {
        certificate::once(&exts[..i], ext)?;
        if !oid::READ.contains(&ext.extn_id.to_string().as_str()) {
            return Err(X509Error::ExtensionUnknown { oid: ext.extn_id });
        }
    }
    Ok(exts)
}

/// Refuses a SAN element other than a DNS name or an IP address by its
/// tag, so the error names its kind (the parsers' errors do not).
fn san_kinds(value: &[u8]) -> Result<(), X509Error> {
    let elements = Vec::<Any>::from_der(value).map_err(X509Error::SanParse)?;
    for e in &elements {
        let kind = match e.tag() {
            Tag::ContextSpecific {
                constructed: false,
                number,
            } if number == TagNumber::N2 || number == TagNumber::N7 => continue,
            Tag::ContextSpecific { number, .. } => match number.value() {
                0 => "an otherName".to_owned(),
                1 => "an email address".to_owned(),
                4 => "a directory name".to_owned(),
                5 => "an EDI party name".to_owned(),
                6 => "a URI".to_owned(),
                8 => "a registered ID".to_owned(),
                n => format!("a [{n}] element"),
            },
            tag => format!("a {tag} element"),
        };
        return Err(X509Error::SanKind { kind });
    }
    Ok(())
}

/// One label of a host name: 1-63 letters, digits and inner hyphens.
fn host_label(l: &str) -> bool {
    !l.is_empty()
        && l.len() <= 63
        && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !l.starts_with('-')
        && !l.ends_with('-')
}

/// Whether an IPv4 reader (glibc's `inet_aton`, the WHATWG URL parser)
/// takes host `d` for an address: its last label is a decimal, octal or
/// `0x` hex number (`127.1`, `0177.1`, `0x7f000001`, a bare `0x`). No
/// top-level domain is numeric, so such a name is refused wherever a DNS
/// name is read: it cannot carry an address past the IP checks.
pub fn reads_as_ipv4(d: &str) -> bool {
    let last = d.rsplit('.').next().unwrap_or_default();
    let hex = last
        .strip_prefix("0x")
        .or_else(|| last.strip_prefix("0X"))
        .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
    hex || (!last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()))
}

/// A DNS name an issued certificate may carry (`dns=`, without case): an
/// optional `*.`, then host-name labels ([`host_label`], none empty: no
/// `..` or outer dot), 253 in all, the last not a number ([`reads_as_ipv4`]).
pub fn dns_name(d: &str) -> Result<(), X509Error> {
    let given = || d.to_owned();
    let name = d.strip_prefix("*.").unwrap_or(d).to_ascii_lowercase();
    if name.is_empty() || d.len() > 253 {
        return Err(X509Error::DnsNameLength { name: given() });
    }
    if reads_as_ipv4(&name) {
        return Err(X509Error::DnsNameIp { name: given() });
    }
    if !name.split('.').all(host_label) {
        return Err(X509Error::DnsNameNotHost { name: given() });
    }
    Ok(())
}
