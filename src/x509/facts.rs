//! A certificate's facts. [`Certificate::read`] is the one reading of a
//! certificate's DER (x509-parser: exactly one, nothing after it). One
//! someone else wrote that grants something ([`Certificate::facts`]) is
//! read again strictly as Go reads it ([`super::strict_certificate`]) and
//! refused when either reader fails or they read a field differently: an
//! encoding one reader takes one way and a consumer another cannot slip
//! extra authority past a check.

use std::net::IpAddr;

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::ParsedExtension;

use super::error::X509Error;
use super::key::KeyAlg;
use super::oid::{BASIC_CONSTRAINTS, EXT_KEY_USAGE, KEY_USAGE, READ, SAN};

/// keyUsage keyCertSign (bit 5, bit 0 first as both readers number them).
pub const KEY_CERT_SIGN: u16 = 1 << 5;

/// One X.509 certificate as x509-parser reads it.
pub struct Certificate<'a> {
    der: &'a [u8],
    cert: X509Certificate<'a>,
}

impl<'a> Certificate<'a> {
    pub fn read(der: &'a [u8]) -> Result<Self, X509Error> {
        let (rest, cert) =
            x509_parser::parse_x509_certificate(der).map_err(X509Error::Certificate)?;
        if !rest.is_empty() {
            return Err(X509Error::Trailing("certificate"));
        }
        Ok(Self { der, cert })
    }

    /// The signed part, every field as read: for a comparison field by
    /// field (a CA renewal differs from the CA only in serial and validity).
    pub fn signed_part(&self) -> &x509_parser::certificate::TbsCertificate<'a> {
        &self.cert.tbs_certificate
    }

    /// The subject and the issuer as encoded (DER).
    pub fn subject(&self) -> &[u8] {
        self.cert.subject().as_raw()
    }

    pub fn issuer(&self) -> &[u8] {
        self.cert.issuer().as_raw()
    }

    pub fn subject_text(&self) -> String {
        self.cert.subject().to_string()
    }

    pub fn issuer_text(&self) -> String {
        self.cert.issuer().to_string()
    }

    pub fn spki(&self) -> &[u8] {
        self.cert.public_key().raw
    }

    pub fn key_alg(&self) -> Option<KeyAlg> {
        KeyAlg::of_spki(self.cert.public_key())
    }

    /// notBefore and notAfter, Unix seconds.
    pub fn validity(&self) -> (i64, i64) {
        let v = self.cert.validity();
        (v.not_before.timestamp(), v.not_after.timestamp())
    }

    /// As [`Facts::basic_constraints`].
    pub fn basic_constraints(&self) -> Result<Option<(bool, Option<u32>)>, X509Error> {
        let bc = self
            .cert
            .basic_constraints()
            .map_err(X509Error::Extensions)?;
        Ok(bc.map(|bc| (bc.value.ca, bc.value.path_len_constraint)))
    }

    pub fn is_ca(&self) -> bool {
        matches!(self.basic_constraints(), Ok(Some((true, _))))
    }

    /// Version 3: the only version with extensions.
    pub fn is_v3(&self) -> bool {
        self.cert.version() == x509_parser::x509::X509Version::V3
    }

    /// As [`Facts::key_usage`].
    pub fn key_usage(&self) -> Result<Option<u16>, X509Error> {
        let ku = self.cert.key_usage().map_err(X509Error::Extensions)?;
        Ok(ku.map(|ku| ku.value.flags))
    }

    pub fn subject_key_id(&self) -> Option<Vec<u8>> {
        self.cert
            .extensions()
            .iter()
            .find_map(|e| match e.parsed_extension() {
                ParsedExtension::SubjectKeyIdentifier(id) => Some(id.0.to_vec()),
                _ => None,
            })
    }

    /// Whether the key whose SubjectPublicKeyInfo is `spki` (DER) signed it.
    pub fn signed_by(&self, spki: &[u8]) -> bool {
        use x509_parser::prelude::FromDer;
        x509_parser::x509::SubjectPublicKeyInfo::from_der(spki)
            .is_ok_and(|(_, key)| self.cert.verify_signature(Some(&key)).is_ok())
    }

    /// The DNS names and IP addresses of the subjectAltName as text, for
    /// reports; nothing when it does not read.
    pub fn san_text(&self) -> Vec<String> {
        let Ok(Some(san)) = self.cert.subject_alternative_name() else {
            return Vec::new();
        };
        (san.value.general_names.iter())
            .filter_map(|n| match lax_name(n) {
                Ok(Name::Dns(d)) => Some(d),
                Ok(Name::Ip(ip)) => Some(ip.to_string()),
                _ => None,
            })
            .collect()
    }

    /// What it says about whom it is for and what it may do; see the module.
    pub fn facts(&self) -> Result<Facts, X509Error> {
        let strict = super::certificate::strict_certificate(self.der)?;
        let tbs = &strict.tbs_certificate;
        let cert = &self.cert;
        same_facts(
            lax_facts(cert.subject(), cert.extensions(), cert.public_key()),
            strict_facts(
                &tbs.subject,
                tbs.extensions.as_deref().unwrap_or_default(),
                &tbs.subject_public_key_info,
            ),
        )
    }
}

/// The facts when both readers (`lax`, `strict`) read them the same.
pub(super) fn same_facts(
    lax: Result<Facts, X509Error>,
    strict: Result<Facts, X509Error>,
) -> Result<Facts, X509Error> {
    let unread = |parser| {
        move |problem| X509Error::Unread {
            parser,
            problem: Box::new(problem),
        }
    };
    let a = lax.map_err(unread("x509-parser"))?;
    let b = strict.map_err(unread("x509-cert"))?;
    let eku = |f: &Facts| f.ext_key_usage.clone().map(set);
    let differ = [
        ("subject", a.subject != b.subject),
        ("subjectAltName", a.sans != b.sans),
        ("key usage", a.key_usage != b.key_usage),
        ("extended key usage", eku(&a) != eku(&b)),
        (
            "basic constraints",
            a.basic_constraints != b.basic_constraints,
        ),
        ("extensions", a.extensions != b.extensions),
        ("public key", a.spki != b.spki),
    ];
    match differ.iter().find(|(_, d)| *d) {
        Some((field, _)) => Err(X509Error::ReadDifferently { field }),
        // x509-cert keeps the EKU order, x509-parser does not.
        None => Ok(Facts {
            ext_key_usage: b.ext_key_usage,
            ..a
        }),
    }
}

/// What a certificate says about whom it is for and what it may do.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Facts {
    /// Every subject attribute (OID, value), in order, RDNs flattened: a
    /// signer may group them into RDNs differently (Go puts several O
    /// values in one RDN) without changing what the subject asserts.
    pub subject: Vec<(String, String)>,
    /// The subjectAltName entries, in order.
    pub sans: Vec<Name>,
    /// Key usage bits (bit 0: digitalSignature); `None`: no extension.
    pub key_usage: Option<u16>,
    /// Extended key usage OIDs in the certificate's order; `None`: no
    /// extension.
    pub ext_key_usage: Option<Vec<String>>,
    /// basicConstraints: (cA, pathLenConstraint); `None`: no extension.
    pub basic_constraints: Option<(bool, Option<u32>)>,
    /// Every extension but the four above, (OID, critical), in order.
    pub extensions: Vec<(String, bool)>,
    /// The SubjectPublicKeyInfo, DER.
    pub spki: Vec<u8>,
    /// The key's algorithm, if it is one certsync knows (x509-parser's).
    pub key_alg: Option<KeyAlg>,
}

impl Facts {
    /// The DNS names and IP addresses of the subjectAltName; `Err` names
    /// the kind of the first entry of another kind.
    pub fn names(&self) -> Result<(Vec<String>, Vec<IpAddr>), &'static str> {
        let (mut dns, mut ips) = (Vec::new(), Vec::new());
        for name in &self.sans {
            match name {
                Name::Dns(d) => dns.push(d.clone()),
                Name::Ip(ip) => ips.push(*ip),
                Name::Other(kind) => return Err(kind),
            }
        }
        Ok((dns, ips))
    }

    /// A leaf's: not a CA, no path length, and no critical extension but
    /// the four certsync reads (a verifier that does not know one would
    /// refuse the certificate, one that does may grant what it says).
    pub fn leaf_only(&self) -> Result<(), X509Error> {
        match self.basic_constraints {
            Some((true, _)) => return Err(X509Error::IsCa),
            Some((false, Some(_))) => return Err(X509Error::PathLength),
            None | Some((false, None)) => {}
        }
        match self.extensions.iter().find(|(_, critical)| *critical) {
            Some((oid, _)) => Err(X509Error::UnknownCritical { oid: oid.clone() }),
            None => Ok(()),
        }
    }
}

/// `v` sorted, each value once: the form two lists are compared in.
pub fn set<T: Ord>(mut v: Vec<T>) -> Vec<T> {
    v.sort();
    v.dedup();
    v
}

/// One subjectAltName entry.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Name {
    /// As written.
    Dns(String),
    Ip(IpAddr),
    /// Any other kind, by kind.
    Other(&'static str),
}

impl Name {
    /// An IP address entry; another length than 4 or 16 bytes is refused.
    fn ip(b: &[u8]) -> Result<Self, X509Error> {
        ip_of(b)
            .map(Self::Ip)
            .ok_or(X509Error::SanIpLength { len: b.len() })
    }
}

/// The facts as x509-parser reads them.
pub(super) fn lax_facts(
    subject: &x509_parser::x509::X509Name<'_>,
    extensions: &[x509_parser::extensions::X509Extension<'_>],
    spki: &x509_parser::x509::SubjectPublicKeyInfo<'_>,
) -> Result<Facts, X509Error> {
    let mut facts = Facts {
        subject: lax_subject(subject)?,
        spki: spki.raw.to_vec(),
        key_alg: KeyAlg::of_spki(spki),
        ..Facts::default()
    };
    for ext in extensions {
        let oid = ext.oid.to_id_string();
        // A known extension the parser fell back to "unsupported" for is
        // not one it understood.
        let known = READ.contains(&oid.as_str());
        if known && ext.parsed_extension().unsupported() {
            return Err(X509Error::Unsupported { oid });
        }
        match ext.parsed_extension() {
            ParsedExtension::SubjectAlternativeName(san) => {
                for name in &san.general_names {
                    facts.sans.push(lax_name(name)?);
                }
            }
            ParsedExtension::KeyUsage(ku) => facts.key_usage = Some(ku.flags),
            ParsedExtension::ExtendedKeyUsage(eku) => facts.ext_key_usage = Some(lax_eku(eku)),
            ParsedExtension::BasicConstraints(bc) => {
                facts.basic_constraints = Some((bc.ca, bc.path_len_constraint));
            }
            ParsedExtension::ParseError { error } => {
                return Err(X509Error::Extension {
                    oid,
                    problem: error.to_string(),
                });
            }
            _ => facts.extensions.push((oid, ext.critical)),
        }
    }
    Ok(facts)
}

/// Every subject attribute as x509-parser reads it; a value of another
/// type than UTF8String or PrintableString is refused.
fn lax_subject(name: &x509_parser::x509::X509Name<'_>) -> Result<Vec<(String, String)>, X509Error> {
    use x509_parser::asn1_rs::Tag;
    let mut subject = Vec::new();
    for atv in name.iter().flat_map(|rdn| rdn.iter()) {
        let oid = atv.attr_type().to_id_string();
        if !matches!(
            atv.attr_value().tag(),
            Tag::Utf8String | Tag::PrintableString
        ) {
            return Err(X509Error::SubjectType { oid });
        }
        let value = atv.as_str().map_err(|e| X509Error::SubjectValue {
            oid: oid.clone(),
            problem: e.to_string(),
        })?;
        subject.push((oid, value.to_owned()));
    }
    Ok(subject)
}

/// A subjectAltName entry as x509-parser reads it.
fn lax_name(name: &x509_parser::extensions::GeneralName<'_>) -> Result<Name, X509Error> {
    use x509_parser::extensions::GeneralName;
    Ok(match name {
        GeneralName::DNSName(d) => Name::Dns((*d).to_owned()),
        GeneralName::IPAddress(b) => Name::ip(b)?,
        GeneralName::OtherName(..) => Name::Other("otherName"),
        GeneralName::RFC822Name(_) => Name::Other("an email address"),
        GeneralName::X400Address(_) => Name::Other("an X.400 address"),
        GeneralName::DirectoryName(_) => Name::Other("a directory name"),
        GeneralName::EDIPartyName(_) => Name::Other("an EDI party name"),
        GeneralName::URI(_) => Name::Other("a URI"),
        GeneralName::RegisteredID(_) => Name::Other("a registered ID"),
        GeneralName::Invalid(..) => return Err(X509Error::InvalidSan),
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

/// The facts as RustCrypto `x509-cert` reads them (strict DER; each
/// extension once, [`super::strict_certificate`]).
pub(super) fn strict_facts(
    subject: &x509_cert::name::Name,
    extensions: &[x509_cert::ext::Extension],
    spki: &x509_cert::spki::SubjectPublicKeyInfoOwned,
) -> Result<Facts, X509Error> {
    use x509_cert::der::{Decode, Encode};
    use x509_cert::ext::pkix::{BasicConstraints, ExtendedKeyUsage, KeyUsage, SubjectAltName};
    let mut facts = Facts {
        subject: strict_subject(subject)?,
        spki: spki.to_der().map_err(X509Error::PublicKey)?,
        ..Facts::default()
    };
    for ext in extensions {
        let oid = ext.extn_id.to_string();
        let bytes = ext.extn_value.as_bytes();
        let err = |e: x509_cert::der::Error| X509Error::Extension {
            oid: oid.clone(),
            problem: e.to_string(),
        };
        match oid.as_str() {
            SAN => {
                let san = SubjectAltName::from_der(bytes).map_err(err)?;
                for name in &san.0 {
                    facts.sans.push(strict_name(name)?);
                }
            }
            KEY_USAGE => facts.key_usage = Some(KeyUsage::from_der(bytes).map_err(err)?.0.bits()),
            EXT_KEY_USAGE => {
                let eku = ExtendedKeyUsage::from_der(bytes).map_err(err)?;
                facts.ext_key_usage = Some(eku.0.iter().map(ToString::to_string).collect());
            }
            BASIC_CONSTRAINTS => {
                let bc = BasicConstraints::from_der(bytes).map_err(err)?;
                facts.basic_constraints = Some((bc.ca, bc.path_len_constraint.map(u32::from)));
            }
            _ => facts.extensions.push((oid, ext.critical)),
        }
    }
    Ok(facts)
}

/// Every subject attribute as x509-cert reads it ([`lax_subject`]).
fn strict_subject(name: &x509_cert::name::Name) -> Result<Vec<(String, String)>, X509Error> {
    use x509_cert::der::{Tag, Tagged};
    let mut subject = Vec::new();
    for atv in name.0.iter().flat_map(|rdn| rdn.0.iter()) {
        let oid = atv.oid.to_string();
        let value = match atv.value.tag() {
            Tag::Utf8String | Tag::PrintableString => {
                super::certificate::string_value(&atv.value).map(Option::unwrap_or_default)
            }
            _ => return Err(X509Error::SubjectType { oid }),
        }
        .map_err(|e| X509Error::SubjectValue {
            oid: oid.clone(),
            problem: e.to_string(),
        })?;
        subject.push((oid, value));
    }
    Ok(subject)
}

/// A subjectAltName entry as x509-cert reads it.
fn strict_name(name: &x509_cert::ext::pkix::name::GeneralName) -> Result<Name, X509Error> {
    use x509_cert::ext::pkix::name::GeneralName;
    Ok(match name {
        GeneralName::DnsName(d) => Name::Dns(d.as_str().to_owned()),
        GeneralName::IpAddress(b) => Name::ip(b.as_bytes())?,
        GeneralName::OtherName(_) => Name::Other("otherName"),
        GeneralName::Rfc822Name(_) => Name::Other("an email address"),
        GeneralName::DirectoryName(_) => Name::Other("a directory name"),
        GeneralName::EdiPartyName(_) => Name::Other("an EDI party name"),
        GeneralName::UniformResourceIdentifier(_) => Name::Other("a URI"),
        GeneralName::RegisteredId(_) => Name::Other("a registered ID"),
    })
}

/// An IP SAN's bytes: 4 (IPv4) or 16 (IPv6), nothing else.
pub fn ip_of(b: &[u8]) -> Option<IpAddr> {
    match b.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(b).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(b).ok()?)),
        _ => None,
    }
}
