//! A certificate issued again from kubeadm's own, exactly as kubeadm
//! encoded it: its TBSCertificate kept as it is (subject and its string
//! types, SANs, usages, extensions, AKI, signature algorithm, public key)
//! but for a new serial and a new validity, signed by the CA key. What
//! `certsync kubeadm revert` writes for a kubeadm certificate that has
//! ended or ends within a day, as `kubeadm certs renew` would have
//! renewed it (its key stays the one it had).
//!
//! The caller gives only bytes certsync's container could not have
//! written (kubeadm's copy in adopt's backup): re-signing whatever is
//! handed in makes this a signing oracle for whoever wrote it.

use std::path::Path;
use std::time::SystemTime;

use x509_cert::der::asn1::BitString;
use x509_cert::der::{Decode, Encode};
use x509_cert::serial_number::SerialNumber;
use x509_cert::time::Validity;

use super::CaError;
use super::material::{read_ca_cert, read_key};
use super::sign::{der, time};
use crate::source::csr::signature_algorithm;

/// kubeadm's default certificate validity (`certificateValidityPeriod`):
/// a year.
pub const KUBEADM_VALIDITY_SECS: i64 = 365 * 86_400;

/// kubeadm's certificate `der` (read from `template`, named in errors)
/// issued again by the CA `ca_cert` with its key `ca_key`: the same
/// TBSCertificate with a random serial as kubeadm makes one (positive,
/// below 2^63) and a validity from the CA's notBefore (kubeadm's
/// backdate) to `now` plus kubeadm's year, or the original's span if
/// longer, never past the CA's notAfter. Refused unless the CA's key
/// signed `der` with the algorithm it signs with, and unless the result
/// reads as Go reads certificates and verifies under the CA. DER.
pub fn reissue(
    template: &Path,
    der: &[u8],
    ca_cert: &Path,
    ca_key: &Path,
    now: SystemTime,
) -> Result<Vec<u8>, CaError> {
    let bad = |problem| CaError::Template {
        path: template.to_owned(),
        problem: Box::new(problem),
    };
    let ca = read_ca_cert(ca_cert, now, super::BACKDATE)?;
    let ca_parsed = parse_ca(ca_cert, &ca.der)?;
    signed_by_ca(der, &ca.subject, &ca_parsed).map_err(|source| {
        bad(CaError::NotIssuedByTheCa {
            ca_cert: ca_cert.to_owned(),
            source: Box::new(source),
        })
    })?;
    let old = x509_cert::Certificate::from_der(der).map_err(|e| bad(CaError::NotStrictDer(e)))?;
    let alg = signature_algorithm(ca.alg).map_err(CaError::encoding)?;
    if old.signature_algorithm != alg || old.tbs_certificate.signature != alg {
        return Err(bad(CaError::SignedWith {
            signed: old.signature_algorithm.oid.to_string(),
            signs: alg.oid.to_string(),
        }));
    }
    let (_, parsed) =
        x509_parser::parse_x509_certificate(der).map_err(|e| bad(CaError::Parse(e.to_string())))?;
    let (from, to) = (
        parsed.validity().not_before.timestamp(),
        parsed.validity().not_after.timestamp(),
    );
    let span = to.saturating_sub(from).max(KUBEADM_VALIDITY_SECS);
    let now_secs = crate::validate::unix_seconds(now);
    let mut tbs = old.tbs_certificate.clone();
    tbs.serial_number = serial()?;
    tbs.validity = Validity {
        not_before: time(ca.not_before).map_err(CaError::signing)?,
        not_after: time(now_secs.saturating_add(span).min(ca.not_after))
            .map_err(CaError::signing)?,
    };
    let new = signed(tbs, old.signature_algorithm, ca_key, ca_cert, &ca)?;
    signed_by_ca(&new, &ca.subject, &ca_parsed).map_err(refused)?;
    Ok(new)
}

/// The self-signed CA certificate at `ca_cert` renewed with its own key
/// `ca_key`: its TBSCertificate kept (subject and its string types, key,
/// subject key identifier, basic constraints, key usage: everything a
/// leaf's chain is matched and verified by) but for a new serial and a
/// validity from `now` (less kubeadm's 5-minute backdate) to `not_after`
/// (unix seconds), so the renewal's span is its own. Every leaf
/// the old certificate issued verifies under the renewed one, so trust
/// holding both (or the renewed alone) outlives the old one's end. A CA
/// that is not self-signed (an intermediate) is refused: renewing it is
/// its issuer's business. DER.
pub fn renew_ca(
    ca_cert: &Path,
    ca_key: &Path,
    not_after: i64,
    now: SystemTime,
) -> Result<Vec<u8>, CaError> {
    let bad = |problem| CaError::CaCert {
        path: ca_cert.to_owned(),
        problem: Box::new(problem),
    };
    let ca = read_ca_cert(ca_cert, now, super::BACKDATE)?;
    let parsed = parse_ca(ca_cert, &ca.der)?;
    signed_by_ca(&ca.der, &ca.subject, &parsed)
        .map_err(|e| bad(CaError::NotSelfSigned(Box::new(e))))?;
    if ca.ski.is_none() {
        return Err(bad(CaError::NoSubjectKeyId));
    }
    let old =
        x509_cert::Certificate::from_der(&ca.der).map_err(|e| bad(CaError::NotStrictDer(e)))?;
    let alg = signature_algorithm(ca.alg).map_err(CaError::encoding)?;
    if old.signature_algorithm != alg || old.tbs_certificate.signature != alg {
        return Err(bad(CaError::SignedWith {
            signed: old.signature_algorithm.oid.to_string(),
            signs: alg.oid.to_string(),
        }));
    }
    let mut tbs = old.tbs_certificate.clone();
    tbs.serial_number = serial()?;
    let from = crate::validate::unix_seconds(now) - super::BACKDATE.as_secs() as i64;
    tbs.validity = Validity {
        not_before: time(from).map_err(CaError::signing)?,
        not_after: time(not_after).map_err(CaError::signing)?,
    };
    let new = signed(tbs, old.signature_algorithm, ca_key, ca_cert, &ca)?;
    let (_, renewed) = x509_parser::parse_x509_certificate(&new)
        .map_err(|e| refused(CaError::RenewedUnread(e)))?;
    signed_by_ca(&new, &ca.subject, &parsed).map_err(refused)?;
    if renewed.public_key().raw != ca.spki.as_slice() {
        return Err(refused(CaError::RenewedOtherKey));
    }
    Ok(new)
}

/// `tbs` signed by the CA key at `ca_key` (the key of `ca`, read from
/// `ca_cert`) with `alg`, and read back as Go reads certificates. DER.
fn signed(
    tbs: x509_cert::TbsCertificate,
    alg: x509_cert::spki::AlgorithmIdentifierOwned,
    ca_key: &Path,
    ca_cert: &Path,
    ca: &super::material::CaCert,
) -> Result<Vec<u8>, CaError> {
    let key = read_key(ca_key, ca_cert, false, ca)?;
    let signature = key
        .sign(
            &tbs.to_der()
                .map_err(|e| CaError::signing(der("encoding")(e)))?,
        )
        .map_err(CaError::signing)?;
    let new = x509_cert::Certificate {
        tbs_certificate: tbs,
        signature_algorithm: alg,
        signature: BitString::from_bytes(&signature)
            .map_err(|e| CaError::signing(der("signature")(e)))?,
    }
    .to_der()
    .map_err(|e| CaError::signing(der("encoding")(e)))?;
    crate::x509::strict_certificate(&new).map_err(|e| refused(CaError::NotStrict(Box::new(e))))?;
    Ok(new)
}

/// The CA certificate [`read_ca_cert`] read, parsed for its key and
/// subject.
fn parse_ca<'a>(
    ca_cert: &Path,
    der: &'a [u8],
) -> Result<x509_parser::certificate::X509Certificate<'a>, CaError> {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, c)| c)
        .map_err(|e| CaError::CaCert {
            path: ca_cert.to_owned(),
            problem: Box::new(CaError::Parse(e.to_string())),
        })
}

/// A certificate issued again that is not what it must be.
fn refused(problem: CaError) -> CaError {
    CaError::Mismatch(Box::new(problem))
}

/// Checks that `der` names the CA (`subject`, DER) as its issuer and that
/// the CA's key signed it.
fn signed_by_ca(
    der: &[u8],
    subject: &[u8],
    ca: &x509_parser::certificate::X509Certificate<'_>,
) -> Result<(), CaError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| CaError::NotCertificate(e.to_string()))?;
    if cert.issuer().as_raw() != subject {
        return Err(CaError::Issuer(
            crate::escape(&cert.issuer().to_string()).into_owned(),
        ));
    }
    cert.verify_signature(Some(ca.public_key()))
        .map_err(|_| CaError::Signature)
}

/// A serial as kubeadm draws one (`rand.Int` below `math.MaxInt64`):
/// positive, below 2^63; 8 random bytes, the top bit cleared and the next
/// set (never short, never zero).
fn serial() -> Result<SerialNumber, CaError> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 8];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| CaError::signing(CaError::Random))?;
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    SerialNumber::new(&bytes).map_err(|e| CaError::signing(der("serial")(e)))
}
