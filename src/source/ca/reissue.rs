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

use x509_cert::der::Decode;
use x509_cert::time::Validity;

use super::CaError;
use super::material::{CaCert, read_ca_cert, read_key};
use super::sign::{finish, serial, time};
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
    let (_, parsed) =
        x509_parser::parse_x509_certificate(der).map_err(|e| bad(CaError::Parse(e)))?;
    let (from, to) = (
        parsed.validity().not_before.timestamp(),
        parsed.validity().not_after.timestamp(),
    );
    let span = to.saturating_sub(from).max(KUBEADM_VALIDITY_SECS);
    let now_secs = crate::validate::unix_seconds(now);
    let to = now_secs.saturating_add(span).min(ca.not_after);
    resign(
        der,
        &bad,
        (ca.not_before, to),
        ca_cert,
        ca_key,
        &ca,
        &ca_parsed,
    )
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
    let from = crate::validate::unix_seconds(now) - super::BACKDATE.as_secs() as i64;
    let new = resign(
        &ca.der,
        &bad,
        (from, not_after),
        ca_cert,
        ca_key,
        &ca,
        &parsed,
    )?;
    let (_, renewed) = x509_parser::parse_x509_certificate(&new)
        .map_err(|e| refused(CaError::RenewedUnread(e)))?;
    if renewed.public_key().raw != ca.spki.as_slice() {
        return Err(refused(CaError::RenewedOtherKey));
    }
    Ok(new)
}

/// `der` (whose problems `bad` places) signed again by the CA `ca` (read
/// from `ca_cert`, and `parsed`) with its key at `ca_key`: its
/// TBSCertificate kept but for a serial as kubeadm draws one and the
/// validity `from` to `to` (unix seconds). Refused unless the CA's key
/// signed `der` with the algorithm it signs with, and unless the result
/// reads as Go reads certificates and verifies under the CA. DER.
fn resign(
    der: &[u8],
    bad: &impl Fn(CaError) -> CaError,
    (from, to): (i64, i64),
    ca_cert: &Path,
    ca_key: &Path,
    ca: &CaCert,
    parsed: &x509_parser::certificate::X509Certificate<'_>,
) -> Result<Vec<u8>, CaError> {
    let old = x509_cert::Certificate::from_der(der).map_err(|e| bad(CaError::NotStrictDer(e)))?;
    let alg = signature_algorithm(ca.alg).map_err(CaError::encoding)?;
    if old.signature_algorithm != alg || old.tbs_certificate.signature != alg {
        return Err(bad(CaError::SignedWith {
            signed: old.signature_algorithm.oid.to_string(),
            signs: alg.oid.to_string(),
        }));
    }
    let mut tbs = old.tbs_certificate;
    // kubeadm draws `rand.Int` below `math.MaxInt64`: 8 bytes.
    tbs.serial_number = serial::<8>().map_err(CaError::signing)?;
    tbs.validity = Validity {
        not_before: time(from).map_err(CaError::signing)?,
        not_after: time(to).map_err(CaError::signing)?,
    };
    let key = read_key(ca_key, ca_cert, false, ca)?;
    let new = finish(tbs, &key).map_err(CaError::signing)?;
    crate::x509::strict_certificate(&new).map_err(|e| refused(CaError::NotStrict(Box::new(e))))?;
    signed_by_ca(&new, &ca.subject, parsed).map_err(refused)?;
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
            problem: Box::new(CaError::Parse(e)),
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
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(CaError::NotCertificate)?;
    if cert.issuer().as_raw() != subject {
        return Err(CaError::Issuer(
            crate::escape(&cert.issuer().to_string()).into_owned(),
        ));
    }
    cert.verify_signature(Some(ca.public_key()))
        .map_err(|_| CaError::Signature)
}
