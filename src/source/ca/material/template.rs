//! The identity a `ca:` mapping's `template=` certificate gives.

use std::path::Path;

use super::cert::{CaCert, LIMIT, issued_by, one_certificate};
use crate::source::csr::{CsrSpec, San, eku_usage, ku_names, leaf_usages};
use crate::source::error::ca::CaError;
use crate::x509::{Certificate, Facts, Name};

const NAME_CONSTRAINTS: &str = "2.5.29.30";

/// What the next certificate must be.
pub(crate) struct Wanted {
    pub ca: CaCert,
    /// The mapping's, the template's identity filled in.
    pub want: CsrSpec,
    /// The template's subject (DER) as it is, copied into the issued one;
    /// `None`: built from `want`.
    pub subject: Option<Vec<u8>>,
    /// In their order.
    pub sans: Vec<San>,
    pub template_not_after: Option<i64>,
}

/// Reads a template as data someone else may have written: one strict DER
/// certificate signed by the CA (expired is the usual case), subject CN and
/// O only, DNS and IP SANs, usages a leaf may have, a key certsync makes,
/// no CA, name constraints or unknown critical extension. Anything else is
/// refused, never silently left out; non-critical extensions are ignored.
/// Its CN, O, SANs and usages (key usages in bit order, then EKUs in its
/// order), and with `take_alg` its key algorithm, are written into
/// `w.want`; its subject, SANs and end into `w`.
pub(super) fn read_template(path: &Path, w: &mut Wanted, take_alg: bool) -> Result<(), CaError> {
    let bytes = crate::beneath::read_file(path, LIMIT).map_err(CaError::Read)?;
    let der = one_certificate(&bytes)?;
    let cert = Certificate::read(&der).map_err(CaError::certificate)?;
    let facts = cert.facts().map_err(CaError::certificate)?;
    issued_by(&cert, &w.ca).map_err(|_| CaError::NotSignedByCa)?;
    let (cn, o) = subject(&facts)?;
    let sans = sans(&facts)?;
    leaf_only(&facts)?;
    if cn.is_none() && sans.is_empty() {
        return Err(CaError::NoName);
    }
    let ku_names = ku_names(facts.key_usage.unwrap_or(0));
    leaf_usages(ku_names.iter().copied())?;
    let usages = ku_names.into_iter().chain(ekus(&facts)?);
    let alg = facts
        .key_alg
        .ok_or(CaError::UnknownKeyAlg)?
        .issuable()
        .map_err(CaError::NotIssuable)?;
    let want = &mut w.want;
    (want.common_name, want.organizations) = (cn, o);
    want.usages = usages.map(str::to_owned).collect();
    (want.dns, want.ips) = (Vec::new(), Vec::new());
    for san in &sans {
        match san {
            San::Dns(d) => want.dns.push(d.clone()),
            San::Ip(ip) => want.ips.push(*ip),
        }
    }
    if take_alg {
        want.key_alg = alg;
    }
    w.subject = Some(cert.subject().to_vec());
    (w.sans, w.template_not_after) = (sans, Some(cert.validity().1));
    Ok(())
}

fn subject(facts: &Facts) -> Result<(Option<String>, Vec<String>), CaError> {
    let (mut cn, mut o) = (None, Vec::new());
    for (oid, value) in &facts.subject {
        if value.is_empty() {
            return Err(CaError::EmptyAttribute { oid: oid.clone() });
        }
        match oid.as_str() {
            crate::x509::COMMON_NAME if cn.is_none() => cn = Some(value.clone()),
            crate::x509::COMMON_NAME => return Err(CaError::TwoCns),
            crate::x509::ORGANIZATION => o.push(value.clone()),
            _ => return Err(CaError::SubjectOther { oid: oid.clone() }),
        }
    }
    Ok((cn, o))
}

fn sans(facts: &Facts) -> Result<Vec<San>, CaError> {
    (facts.sans.iter())
        .map(|name| match name {
            Name::Dns(d) => {
                crate::x509::dns_name(d).map_err(CaError::certificate)?;
                Ok(San::Dns(d.clone()))
            }
            Name::Ip(ip) => Ok(San::Ip(*ip)),
            Name::Other(kind) => Err(CaError::OtherSan { kind }),
        })
        .collect()
}

fn leaf_only(facts: &Facts) -> Result<(), CaError> {
    if facts
        .extensions
        .iter()
        .any(|(oid, _)| oid == NAME_CONSTRAINTS)
    {
        return Err(CaError::NameConstraints);
    }
    facts.leaf_only().map_err(CaError::certificate)
}

fn ekus(facts: &Facts) -> Result<Vec<&'static str>, CaError> {
    let mut ekus = Vec::new();
    for oid in facts.ext_key_usage.iter().flatten() {
        let name = eku_usage(oid).ok_or_else(|| CaError::UnknownEku { oid: oid.clone() })?;
        if !ekus.contains(&name) {
            ekus.push(name);
        }
    }
    Ok(ekus)
}
