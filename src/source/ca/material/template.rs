//! The identity a `ca:` mapping's `template=` certificate gives, read
//! strictly as data someone else may have written: signed by the CA, one
//! strict DER certificate, nothing in it certsync would silently drop.

use std::path::Path;

use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::{GeneralName, ParsedExtension};

use super::{CaCert, CaError, LIMIT, one_certificate};
use crate::source::csr::{KeyAlg, San, eku_usage, ku_names, leaf_usages};

/// What a template certificate says the issued one must be.
pub(super) struct Template {
    /// The subject as it is encoded (DER), copied into the issued one.
    pub(super) subject: Vec<u8>,
    pub(super) cn: Option<String>,
    pub(super) o: Vec<String>,
    pub(super) sans: Vec<San>,
    /// Key usages (bit order), then EKUs (the template's order).
    pub(super) usages: Vec<String>,
    pub(super) alg: KeyAlg,
    pub(super) not_after: i64,
}

/// Reads the identity of a template, strictly, as data someone else may
/// have written: it must be signed by the CA (its validity is not checked:
/// an expired certificate is the usual template), one strict DER
/// certificate, each extension once. It may hold a subject of CN and O
/// only, DNS names that pass [`crate::x509::dns_name`] and IP SANs, key
/// usages and EKUs the CSR API names and a leaf may have, a key certsync
/// can make, and no CA, name constraints or critical extension certsync
/// does not copy. Anything else is refused rather than dropped, so nothing
/// the template says is silently left out of the renewal; non-critical
/// extensions certsync does not copy (SKI, AKI, authorityInfoAccess, CRL
/// distribution points) are the signer's own and are ignored.
pub(super) fn read_template(path: &Path, ca: &CaCert) -> Result<Template, CaError> {
    let bytes = crate::beneath::read_file(path, LIMIT).map_err(CaError::Read)?;
    let der = one_certificate(&bytes)?;
    let (rest, cert) = x509_parser::parse_x509_certificate(&der).map_err(CaError::Parse)?;
    if !rest.is_empty() {
        return Err(CaError::TrailingInPem);
    }
    crate::x509::strict_certificate(&der).map_err(|e| CaError::NotStrict(Box::new(e)))?;
    signed_by(&cert, ca)?;
    let (cn, o) = subject(&cert)?;
    let (sans, ku, ekus) = extensions(&cert)?;
    if cn.is_none() && sans.is_empty() {
        return Err(CaError::NoName);
    }
    let ku_names = ku_names(ku);
    leaf_usages(ku_names.iter().copied())?;
    let usages = ku_names
        .into_iter()
        .chain(ekus)
        .map(str::to_owned)
        .collect();
    let alg = KeyAlg::of_spki(cert.public_key())
        .ok_or(CaError::UnknownKeyAlg)?
        .issuable()
        .map_err(CaError::NotIssuable)?;
    Ok(Template {
        subject: cert.subject().as_raw().to_vec(),
        cn,
        o,
        sans,
        usages,
        alg,
        not_after: cert.validity().not_after.timestamp(),
    })
}

/// `cert` names the CA as its issuer and carries its signature.
fn signed_by(cert: &X509Certificate<'_>, ca: &CaCert) -> Result<(), CaError> {
    use x509_parser::prelude::FromDer;
    let (_, ca_key) = x509_parser::x509::SubjectPublicKeyInfo::from_der(&ca.spki)
        .map_err(CaError::CaPublicKey)?;
    if cert.issuer().as_raw() != ca.subject.as_slice()
        || cert.verify_signature(Some(&ca_key)).is_err()
    {
        return Err(CaError::NotSignedByCa);
    }
    Ok(())
}

/// The subject's CN (one at most) and O values; no other attribute, none
/// empty.
fn subject(cert: &X509Certificate<'_>) -> Result<(Option<String>, Vec<String>), CaError> {
    let (mut cn, mut o) = (None, Vec::new());
    for atv in cert.subject().iter().flat_map(|rdn| rdn.iter()) {
        let oid = atv.attr_type().to_id_string();
        let value = atv
            .as_str()
            .map_err(|problem| CaError::SubjectAttribute {
                oid: oid.clone(),
                problem,
            })?
            .to_owned();
        if value.is_empty() {
            return Err(CaError::EmptyAttribute { oid });
        }
        match oid.as_str() {
            crate::x509::COMMON_NAME if cn.is_none() => cn = Some(value),
            crate::x509::COMMON_NAME => return Err(CaError::TwoCns),
            crate::x509::ORGANIZATION => o.push(value),
            _ => return Err(CaError::SubjectOther { oid }),
        }
    }
    Ok((cn, o))
}

/// The names, key usage bits and EKU usage names (the template's order,
/// once each) of the extensions; a CA, name constraints, a known extension
/// not understood or an unknown critical one is refused.
fn extensions(cert: &X509Certificate<'_>) -> Result<(Vec<San>, u16, Vec<&'static str>), CaError> {
    let (mut sans, mut ku, mut ekus) = (Vec::new(), 0u16, Vec::new());
    // Each extension once: [`crate::x509::strict_certificate`] above.
    for ext in cert.extensions() {
        let oid = ext.oid.to_id_string();
        match ext.parsed_extension() {
            ParsedExtension::SubjectAlternativeName(san) => {
                for name in &san.general_names {
                    sans.push(san_of(name)?);
                }
            }
            ParsedExtension::KeyUsage(k) => ku = k.flags,
            ParsedExtension::ExtendedKeyUsage(_) => ekus_of(ext.value, &mut ekus)?,
            ParsedExtension::BasicConstraints(bc) if bc.ca => {
                return Err(CaError::TemplateIsCa);
            }
            ParsedExtension::BasicConstraints(bc) if bc.path_len_constraint.is_some() => {
                return Err(CaError::PathLength);
            }
            // CA:FALSE: what certsync writes itself.
            ParsedExtension::BasicConstraints(_) => {}
            ParsedExtension::NameConstraints(_) => return Err(CaError::NameConstraints),
            ParsedExtension::ParseError { error } => {
                return Err(CaError::Extension {
                    oid,
                    problem: error.clone(),
                });
            }
            // The four above, not read as what they are: not understood.
            _ if ["2.5.29.17", "2.5.29.15", "2.5.29.37", "2.5.29.19"].contains(&oid.as_str()) => {
                return Err(CaError::Unreadable { oid });
            }
            _ if ext.critical => return Err(CaError::Critical { oid }),
            _ => {}
        }
    }
    Ok((sans, ku, ekus))
}

/// A DNS name that passes [`crate::x509::dns_name`] or an IP address; any
/// other kind of name is refused.
fn san_of(name: &GeneralName<'_>) -> Result<San, CaError> {
    Ok(match name {
        GeneralName::DNSName(d) => {
            crate::x509::dns_name(d).map_err(CaError::DnsName)?;
            San::Dns((*d).to_owned())
        }
        GeneralName::IPAddress(b) => San::Ip(crate::x509::ip_of(b).ok_or(CaError::MalformedIp)?),
        other => {
            return Err(CaError::OtherSan {
                san: format!("{other:?}"),
            });
        }
    })
}

/// Adds the usage name of each EKU in `value` to `ekus`, once each, in the
/// template's order (x509-parser's EKU loses the order; x509-cert's keeps
/// it); an EKU the CSR API does not name is refused.
fn ekus_of(value: &[u8], ekus: &mut Vec<&'static str>) -> Result<(), CaError> {
    use x509_cert::der::Decode;
    let eku = x509_cert::ext::pkix::ExtendedKeyUsage::from_der(value).map_err(CaError::Eku)?;
    for oid in eku.0 {
        let oid = oid.to_string();
        let name = eku_usage(&oid).ok_or_else(|| CaError::UnknownEku { oid: oid.clone() })?;
        if !ekus.contains(&name) {
            ekus.push(name);
        }
    }
    Ok(())
}
