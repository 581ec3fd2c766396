//! The CA certificate as read (`CaCert`), and whether it issued one.

use rustls::pki_types::pem::SectionKind;

use crate::source::error::ca::CaError;
use crate::x509::{Certificate, KeyAlg};

pub(super) const LIMIT: u64 = 64 * 1024;

/// The CA certificate, read and checked.
pub(crate) struct CaCert {
    pub der: Vec<u8>,
    /// Re-encoded from the DER: published as ca.crt, chains checked with it.
    pub pem: Vec<u8>,
    pub not_before: i64,
    pub not_after: i64,
    /// DER.
    pub subject: Vec<u8>,
    pub alg: KeyAlg,
    /// DER; the key must match it.
    pub spki: Vec<u8>,
    /// The issued certificate's AKI.
    pub ski: Option<Vec<u8>>,
}

/// `cert` names the CA as its issuer and the CA's key signed it.
pub(crate) fn issued_by(cert: &Certificate<'_>, ca: &CaCert) -> Result<(), CaError> {
    if cert.issuer() != ca.subject.as_slice() {
        return Err(CaError::Issuer(
            crate::escape(&cert.issuer_text()).into_owned(),
        ));
    }
    if !cert.signed_by(&ca.spki) {
        return Err(CaError::Signature);
    }
    Ok(())
}

pub(super) fn one_certificate(bytes: &[u8]) -> Result<Vec<u8>, CaError> {
    crate::pem::exactly_one(bytes, SectionKind::Certificate).map_err(CaError::NotOneCertificate)
}
