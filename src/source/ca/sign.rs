//! The issued certificate, built with RustCrypto `x509-cert` and signed by
//! the CA key through ring: what kubeadm's `NewSignedCert` makes
//! (`cmd/kubeadm/app/util/pkiutil/pki_helpers.go`: key usage critical,
//! extended key usage, basic constraints CA:FALSE critical, AKI from the
//! CA's SKI, SANs), with a random positive 127-bit serial and a
//! SubjectKeyIdentifier.

use std::time::{Duration, SystemTime};

use rcgen::PublicKeyData;
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
use x509_cert::spki::{ObjectIdentifier, SubjectPublicKeyInfoOwned};
use x509_cert::time::{Time, Validity};

use super::material::{CaKey, Wanted};
use crate::source::csr::{
    Usage, Window, leaf_usages, san_extension, signature_algorithm, subject, usage,
};

/// A time as RFC 5280 wants it: UTCTime through 2049, GeneralizedTime after.
pub(super) fn time(secs: i64) -> Result<Time, String> {
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap_or(0));
    match UtcTime::from_system_time(t) {
        Ok(u) => Ok(Time::UtcTime(u)),
        Err(_) => GeneralizedTime::from_system_time(t)
            .map(Time::GeneralTime)
            .map_err(|e| format!("validity: {e}")),
    }
}

fn extension(oid: &str, critical: bool, value: &impl Encode) -> Result<Extension, String> {
    let der = value
        .to_der()
        .map_err(|e| format!("extension {oid}: {e}"))?;
    Ok(Extension {
        extn_id: ObjectIdentifier::new(oid).map_err(|e| format!("{oid}: {e}"))?,
        critical,
        extn_value: OctetString::new(der).map_err(|e| format!("extension {oid}: {e}"))?,
    })
}

/// A random serial: 16 bytes from the OS generator, the top bit cleared
/// (positive) and the next set (never short, never zero).
fn serial() -> Result<SerialNumber, String> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| "the OS random generator failed".to_owned())?;
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    SerialNumber::new(&bytes).map_err(|e| format!("serial: {e}"))
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
) -> Result<Vec<u8>, String> {
    leaf_usages(w.want.usages.iter().map(String::as_str))?;
    let ca = x509_cert::Certificate::from_der(&w.ca.der).map_err(|e| format!("CA: {e}"))?;
    let subject = match &w.subject {
        Some(der) => Name::from_der(der).map_err(|e| format!("template subject: {e}"))?,
        None => subject(&w.want)?,
    };
    let spki = SubjectPublicKeyInfoOwned::from_der(&key.subject_public_key_info())
        .map_err(|e| format!("public key: {e}"))?;

    let (mut ku, mut eku) = (0u16, Vec::new());
    for u in &w.want.usages {
        match usage(u) {
            Some(Usage::Ku(bit)) => ku |= bit,
            Some(Usage::Eku(oid)) => {
                let oid = ObjectIdentifier::new(oid).map_err(|e| format!("{oid}: {e}"))?;
                if !eku.contains(&oid) {
                    eku.push(oid);
                }
            }
            None => return Err(format!("usage {u:?} is not one the CSR API knows")),
        }
    }
    let mut extensions = Vec::new();
    if ku != 0 {
        let flags = FlagSet::<KeyUsages>::new(ku).map_err(|e| format!("key usage: {e}"))?;
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
    let ski = OctetString::new(ski.as_ref()).map_err(|e| format!("SKI: {e}"))?;
    extensions.push(extension("2.5.29.14", false, &SubjectKeyIdentifier(ski))?);
    if let Some(id) = &w.ca.ski {
        let aki = AuthorityKeyIdentifier {
            key_identifier: Some(OctetString::new(id.clone()).map_err(|e| format!("AKI: {e}"))?),
            authority_cert_issuer: None,
            authority_cert_serial_number: None,
        };
        extensions.push(extension("2.5.29.35", false, &aki)?);
    }
    if let Some(san) = san_extension(&w.sans, subject.0.is_empty())? {
        extensions.push(san);
    }

    let algorithm = signature_algorithm(w.ca.alg)?;
    let tbs = x509_cert::TbsCertificate {
        version: x509_cert::certificate::Version::V3,
        serial_number: serial()?,
        signature: algorithm.clone(),
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
    let signature = ca_key.sign(&tbs.to_der().map_err(|e| format!("encoding: {e}"))?)?;
    x509_cert::Certificate {
        tbs_certificate: tbs,
        signature_algorithm: algorithm,
        signature: BitString::from_bytes(&signature).map_err(|e| format!("signature: {e}"))?,
    }
    .to_der()
    .map_err(|e| format!("encoding: {e}"))
}
