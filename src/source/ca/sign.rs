//! The issued certificate, built with RustCrypto `x509-cert` and signed by
//! the CA key through ring: what kubeadm's `NewSignedCert` makes, with a
//! random positive 127-bit serial and a SubjectKeyIdentifier.

use std::time::{Duration, SystemTime};

use rcgen::PublicKeyData;
use x509_cert::TbsCertificate;
use x509_cert::der::asn1::{BitString, GeneralizedTime, OctetString, UtcTime};
use x509_cert::der::flagset::FlagSet;
use x509_cert::der::{Decode, Encode};
use x509_cert::ext::Extension;
use x509_cert::ext::pkix::{
    AuthorityKeyIdentifier, BasicConstraints, ExtendedKeyUsage, KeyUsage, KeyUsages,
    SubjectKeyIdentifier,
};
use x509_cert::name::Name;
use x509_cert::serial_number::SerialNumber;
use x509_cert::spki::SubjectPublicKeyInfoOwned;
use x509_cert::time::{Time, Validity};

use super::material::{CaKey, Wanted};
use crate::source::csr::{
    CsrError, Window, der_err, extension, leaf_usages, oid, san_extension, signature_algorithm,
    subject,
};
use crate::source::error::ca::CaError;
use crate::source::usage::split;

pub(super) fn der(what: &'static str) -> impl Fn(x509_cert::der::Error) -> CaError {
    move |error| CaError::csr(der_err(what)(error))
}

/// A time as RFC 5280 wants it: UTCTime through 2049, GeneralizedTime after.
pub(super) fn time(secs: i64) -> Result<Time, CaError> {
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap_or(0));
    match UtcTime::from_system_time(t) {
        Ok(u) => Ok(Time::UtcTime(u)),
        Err(_) => GeneralizedTime::from_system_time(t)
            .map(Time::GeneralTime)
            .map_err(der("validity")),
    }
}

/// A random serial: `N` bytes from the OS generator, the top bit cleared
/// (positive) and the next set (never short, never zero).
pub(super) fn serial<const N: usize>() -> Result<SerialNumber, CaError> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; N];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| CaError::Random)?;
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    SerialNumber::new(&bytes).map_err(der("serial"))
}

/// The certificate (DER) for `key`, as `w` wants it, valid for `window`
/// (its notBefore never earlier than the CA's: kubeadm's is the CA's
/// notBefore, and nothing is valid before its issuer), signed by `ca_key`.
/// Usages only a CA has are refused here too, whatever asked for them.
pub(super) fn certificate(
    w: &Wanted,
    ca_key: &CaKey,
    key: &rcgen::KeyPair,
    window: Window,
) -> Result<Vec<u8>, CaError> {
    leaf_usages(w.want.usages.iter().map(String::as_str))?;
    let ca = x509_cert::Certificate::from_der(&w.ca.der).map_err(der("CA"))?;
    let subject = match &w.subject {
        Some(d) => Name::from_der(d).map_err(der("template subject"))?,
        None => subject(&w.want).map_err(CaError::csr)?,
    };
    let spki = SubjectPublicKeyInfoOwned::from_der(&key.subject_public_key_info())
        .map_err(der("public key"))?;
    let extensions = extensions(w, &spki, subject.0.is_empty()).map_err(CaError::csr)?;
    let algorithm = signature_algorithm(w.ca.alg).map_err(CaError::csr)?;
    let tbs = TbsCertificate {
        version: x509_cert::certificate::Version::V3,
        serial_number: serial::<16>()?,
        signature: algorithm,
        issuer: ca.tbs_certificate.subject.clone(),
        validity: Validity {
            not_before: time(window.not_before.max(w.ca.not_before))?,
            not_after: time(window.not_after)?,
        },
        subject,
        subject_public_key_info: spki,
        issuer_unique_id: None,
        subject_unique_id: None,
        extensions: Some(extensions),
    };
    finish(tbs, ca_key)
}

/// `tbs` signed by `ca_key`: the certificate, DER.
pub(super) fn finish(tbs: TbsCertificate, ca_key: &CaKey) -> Result<Vec<u8>, CaError> {
    let signature = ca_key.sign(&tbs.to_der().map_err(der("encoding"))?)?;
    x509_cert::Certificate {
        signature_algorithm: tbs.signature.clone(),
        tbs_certificate: tbs,
        signature: BitString::from_bytes(&signature).map_err(der("signature"))?,
    }
    .to_der()
    .map_err(der("encoding"))
}

/// The extensions, in kubeadm's order: key usage (critical) and EKUs (each
/// once) as `w` asks, CA:FALSE (critical), the SKI of `spki`, the AKI from
/// the CA's SKI, the SANs (critical when the subject is empty).
fn extensions(
    w: &Wanted,
    spki: &SubjectPublicKeyInfoOwned,
    empty_subject: bool,
) -> Result<Vec<Extension>, CsrError> {
    let (ku, eku) = split(&w.want.usages).map_err(CsrError::UnknownUsage)?;
    let eku = eku.into_iter().map(oid).collect::<Result<Vec<_>, _>>()?;
    let mut extensions = Vec::new();
    if ku != 0 {
        let flags = FlagSet::<KeyUsages>::new(ku).map_err(CsrError::KeyUsageBits)?;
        extensions.push(extension("2.5.29.15", true, &KeyUsage(flags))?);
    }
    if !eku.is_empty() {
        extensions.push(extension("2.5.29.37", false, &ExtendedKeyUsage(eku))?);
    }
    let not_ca = BasicConstraints {
        ca: false,
        path_len_constraint: None,
    };
    extensions.push(extension("2.5.29.19", true, &not_ca)?);
    // RFC 5280 4.2.1.2 method 1: SHA-1 of the subjectPublicKey bits.
    let bits = spki.subject_public_key.raw_bytes();
    let ski = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, bits);
    let ski = OctetString::new(ski.as_ref()).map_err(der_err("SKI"))?;
    extensions.push(extension("2.5.29.14", false, &SubjectKeyIdentifier(ski))?);
    if let Some(id) = &w.ca.ski {
        let aki = AuthorityKeyIdentifier {
            key_identifier: Some(OctetString::new(id.clone()).map_err(der_err("AKI"))?),
            authority_cert_issuer: None,
            authority_cert_serial_number: None,
        };
        extensions.push(extension("2.5.29.35", false, &aki)?);
    }
    if let Some(san) = san_extension(&w.sans, empty_subject)? {
        extensions.push(san);
    }
    Ok(extensions)
}
