//! The leaf of a signer's answer read twice, by x509-parser and by
//! RustCrypto `x509-cert` (strict DER), into the same [`Facts`]: refused
//! when either parser fails or they read a field differently, so an
//! encoding one reader takes one way and a consumer another cannot slip
//! extra authority past the check.

use std::net::IpAddr;

use crate::source::csr::CsrError;

const OID_SAN: &str = "2.5.29.17";
const OID_KU: &str = "2.5.29.15";
const OID_EKU: &str = "2.5.29.37";
const OID_BC: &str = "2.5.29.19";

/// What the leaf says about whom it is for and what it may do: the same
/// from either parser, or the certificate is refused.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Facts {
    /// Every subject attribute (OID, value), sorted: a signer may group
    /// them into RDNs differently (Go puts several O values in one RDN)
    /// without changing what the subject asserts.
    pub(super) subject: Vec<(String, String)>,
    /// DNS names as written, sorted.
    pub(super) dns: Vec<String>,
    pub(super) ips: Vec<IpAddr>,
    /// Any other kind of subjectAltName entry, by kind.
    pub(super) other_names: Vec<&'static str>,
    /// Key usage bits (bit 0: digitalSignature); `None`: no extension.
    pub(super) key_usage: Option<u16>,
    /// Extended key usage OIDs, sorted, once each; `None`: no extension.
    pub(super) ext_key_usage: Option<Vec<String>>,
    /// basicConstraints: (cA, pathLenConstraint); `None`: no extension.
    pub(super) basic_constraints: Option<(bool, Option<u32>)>,
    /// Critical extensions other than the four above, by OID.
    pub(super) unknown_critical: Vec<String>,
    /// The SubjectPublicKeyInfo, DER.
    pub(super) spki: Vec<u8>,
}

/// One subjectAltName entry, as either parser read it.
enum Name<'a> {
    Dns(&'a str),
    Ip(&'a [u8]),
    /// Any other kind, by kind.
    Other(&'static str),
}

impl Facts {
    fn normalize(mut self) -> Self {
        self.subject.sort();
        self.dns.sort();
        self.ips.sort();
        self.other_names.sort_unstable();
        self.ext_key_usage = self.ext_key_usage.map(super::set);
        self.unknown_critical.sort();
        self
    }

    /// Adds a subjectAltName entry; an IP of another length than 4 or 16
    /// bytes is refused.
    fn add_name(&mut self, name: Name<'_>) -> Result<(), CsrError> {
        match name {
            Name::Dns(d) => self.dns.push(d.to_owned()),
            Name::Ip(b) => self
                .ips
                .push(crate::x509::ip_of(b).ok_or(CsrError::MalformedIp)?),
            Name::Other(kind) => self.other_names.push(kind),
        }
        Ok(())
    }
}

/// The leaf read by x509-parser.
fn read_x509_parser(der: &[u8]) -> Result<Facts, CsrError> {
    use x509_parser::extensions::ParsedExtension;
    let (rest, cert) = x509_parser::parse_x509_certificate(der).map_err(CsrError::Malformed)?;
    if !rest.is_empty() {
        return Err(CsrError::Trailing);
    }
    // Refuses an extension that appears twice (RFC 5280 4.2).
    cert.tbs_certificate
        .extensions_map()
        .map_err(CsrError::Extensions)?;
    let mut facts = Facts {
        subject: lax_subject(cert.subject())?,
        ..Facts::default()
    };
    for ext in cert.extensions() {
        let oid = ext.oid.to_id_string();
        // A known extension the parser fell back to "unsupported" for is
        // not one it understood.
        let known = [OID_SAN, OID_KU, OID_EKU, OID_BC].contains(&oid.as_str());
        if known && ext.parsed_extension().unsupported() {
            return Err(CsrError::Unsupported { oid });
        }
        match ext.parsed_extension() {
            ParsedExtension::SubjectAlternativeName(san) => {
                for name in &san.general_names {
                    facts.add_name(lax_name(name)?)?;
                }
            }
            ParsedExtension::KeyUsage(ku) => facts.key_usage = Some(ku.flags),
            ParsedExtension::ExtendedKeyUsage(eku) => facts.ext_key_usage = Some(lax_eku(eku)),
            ParsedExtension::BasicConstraints(bc) => {
                facts.basic_constraints = Some((bc.ca, bc.path_len_constraint));
            }
            ParsedExtension::ParseError { error } => {
                return Err(CsrError::Extension {
                    oid,
                    problem: error.to_string(),
                });
            }
            _ if ext.critical => facts.unknown_critical.push(oid),
            _ => {}
        }
    }
    facts.spki = cert.public_key().raw.to_vec();
    Ok(facts.normalize())
}

/// Every subject attribute as x509-parser reads it; a value of another
/// type than UTF8String or PrintableString is refused.
fn lax_subject(name: &x509_parser::x509::X509Name<'_>) -> Result<Vec<(String, String)>, CsrError> {
    use x509_parser::asn1_rs::Tag;
    let mut subject = Vec::new();
    for atv in name.iter().flat_map(|rdn| rdn.iter()) {
        let oid = atv.attr_type().to_id_string();
        if !matches!(
            atv.attr_value().tag(),
            Tag::Utf8String | Tag::PrintableString
        ) {
            return Err(CsrError::SubjectType { oid });
        }
        let value = atv.as_str().map_err(|e| CsrError::SubjectValue {
            oid: oid.clone(),
            problem: e.to_string(),
        })?;
        subject.push((oid, value.to_owned()));
    }
    Ok(subject)
}

/// A subjectAltName entry as x509-parser reads it.
fn lax_name<'a>(name: &'a x509_parser::extensions::GeneralName<'_>) -> Result<Name<'a>, CsrError> {
    use x509_parser::extensions::GeneralName;
    Ok(match name {
        GeneralName::DNSName(d) => Name::Dns(d),
        GeneralName::IPAddress(b) => Name::Ip(b),
        GeneralName::OtherName(..) => Name::Other("otherName"),
        GeneralName::RFC822Name(_) => Name::Other("an email address"),
        GeneralName::X400Address(_) => Name::Other("an X.400 address"),
        GeneralName::DirectoryName(_) => Name::Other("a directory name"),
        GeneralName::EDIPartyName(_) => Name::Other("an EDI party name"),
        GeneralName::URI(_) => Name::Other("a URI"),
        GeneralName::RegisteredID(_) => Name::Other("a registered ID"),
        GeneralName::Invalid(..) => return Err(CsrError::InvalidSan),
    })
}

/// The extended key usage OIDs x509-parser read, the ones it names as
/// flags first.
fn lax_eku(eku: &x509_parser::extensions::ExtendedKeyUsage<'_>) -> Vec<String> {
    let mut oids: Vec<String> = [
        (eku.any, "2.5.29.37.0"),
        (eku.server_auth, "1.3.6.1.5.5.7.3.1"),
        (eku.client_auth, "1.3.6.1.5.5.7.3.2"),
        (eku.code_signing, "1.3.6.1.5.5.7.3.3"),
        (eku.email_protection, "1.3.6.1.5.5.7.3.4"),
        (eku.time_stamping, "1.3.6.1.5.5.7.3.8"),
        (eku.ocsp_signing, "1.3.6.1.5.5.7.3.9"),
    ]
    .into_iter()
    .filter(|(set, _)| *set)
    .map(|(_, oid)| oid.to_owned())
    .collect();
    oids.extend(eku.other.iter().map(|o| o.to_id_string()));
    oids
}

/// The leaf read by RustCrypto `x509-cert` (strict DER).
fn read_x509_cert(der: &[u8]) -> Result<Facts, CsrError> {
    use x509_cert::der::{Decode, Encode};
    use x509_cert::ext::pkix::{BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAltName};
    let cert = x509_cert::Certificate::from_der(der).map_err(CsrError::MalformedDer)?;
    let tbs = &cert.tbs_certificate;
    let mut facts = Facts {
        subject: strict_subject(&tbs.subject)?,
        ..Facts::default()
    };
    let mut seen = Vec::new();
    for ext in tbs.extensions.iter().flatten() {
        let oid = ext.extn_id.to_string();
        if seen.contains(&oid) {
            return Err(CsrError::Twice { oid });
        }
        seen.push(oid.clone());
        let bytes = ext.extn_value.as_bytes();
        let err = |e: x509_cert::der::Error| CsrError::Extension {
            oid: oid.clone(),
            problem: e.to_string(),
        };
        match oid.as_str() {
            OID_SAN => {
                let san = SubjectAltName::from_der(bytes).map_err(err)?;
                for name in &san.0 {
                    facts.add_name(strict_name(name))?;
                }
            }
            OID_KU => facts.key_usage = Some(KeyUsage::from_der(bytes).map_err(err)?.0.bits()),
            OID_EKU => {
                let eku = ExtendedKeyUsage::from_der(bytes).map_err(err)?;
                facts.ext_key_usage = Some(eku.0.iter().map(ToString::to_string).collect());
            }
            OID_BC => {
                let bc = BasicConstraints::from_der(bytes).map_err(err)?;
                facts.basic_constraints = Some((bc.ca, bc.path_len_constraint.map(u32::from)));
            }
            _ if ext.critical => facts.unknown_critical.push(oid),
            _ => {}
        }
    }
    facts.spki = tbs
        .subject_public_key_info
        .to_der()
        .map_err(CsrError::PublicKey)?;
    Ok(facts.normalize())
}

/// Every subject attribute as x509-cert reads it; a value of another type
/// than UTF8String or PrintableString is refused.
fn strict_subject(name: &x509_cert::name::Name) -> Result<Vec<(String, String)>, CsrError> {
    use x509_cert::der::asn1::{PrintableStringRef, Utf8StringRef};
    use x509_cert::der::{Tag, Tagged};
    let mut subject = Vec::new();
    for atv in name.0.iter().flat_map(|rdn| rdn.0.iter()) {
        let oid = atv.oid.to_string();
        let value = match atv.value.tag() {
            Tag::Utf8String => atv
                .value
                .decode_as::<Utf8StringRef<'_>>()
                .map(|s| s.to_string()),
            Tag::PrintableString => atv
                .value
                .decode_as::<PrintableStringRef<'_>>()
                .map(|s| s.to_string()),
            _ => return Err(CsrError::SubjectType { oid }),
        }
        .map_err(|e| CsrError::SubjectValue {
            oid: oid.clone(),
            problem: e.to_string(),
        })?;
        subject.push((oid, value));
    }
    Ok(subject)
}

/// A subjectAltName entry as x509-cert reads it.
fn strict_name(name: &x509_cert::ext::pkix::name::GeneralName) -> Name<'_> {
    use x509_cert::ext::pkix::name::GeneralName;
    match name {
        GeneralName::DnsName(d) => Name::Dns(d.as_str()),
        GeneralName::IpAddress(b) => Name::Ip(b.as_bytes()),
        GeneralName::OtherName(_) => Name::Other("otherName"),
        GeneralName::Rfc822Name(_) => Name::Other("an email address"),
        GeneralName::DirectoryName(_) => Name::Other("a directory name"),
        GeneralName::EdiPartyName(_) => Name::Other("an EDI party name"),
        GeneralName::UniformResourceIdentifier(_) => Name::Other("a URI"),
        GeneralName::RegisteredId(_) => Name::Other("a registered ID"),
    }
}

/// The leaf's facts when both parsers read it, and read it the same.
pub(super) fn read_strictly(der: &[u8]) -> Result<Facts, CsrError> {
    let unread = |parser| {
        move |problem| CsrError::Unread {
            parser,
            problem: Box::new(problem),
        }
    };
    let a = read_x509_parser(der).map_err(unread("x509-parser"))?;
    let b = read_x509_cert(der).map_err(unread("x509-cert"))?;
    let differ = [
        ("subject", a.subject != b.subject),
        (
            "subjectAltName",
            a.dns != b.dns || a.ips != b.ips || a.other_names != b.other_names,
        ),
        ("key usage", a.key_usage != b.key_usage),
        ("extended key usage", a.ext_key_usage != b.ext_key_usage),
        (
            "basic constraints",
            a.basic_constraints != b.basic_constraints,
        ),
        (
            "critical extensions",
            a.unknown_critical != b.unknown_critical,
        ),
        ("public key", a.spki != b.spki),
    ];
    match differ.iter().find(|(_, d)| *d) {
        Some((field, _)) => Err(CsrError::ReadDifferently { field }),
        None => Ok(a),
    }
}
