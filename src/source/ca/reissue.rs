//! A certificate signed again by the CA key, its TBSCertificate kept but
//! for serial and validity: `kubeadm revert`'s renewal of a kubeadm
//! certificate, and a renewed root CA. Callers give only bytes certsync's
//! container could not have written: re-signing whatever is handed in
//! makes this a signing oracle for whoever wrote it.

use std::path::Path;
use std::time::SystemTime;

use x509_cert::time::Validity;

use super::material::{CaCert, issued_by, read_ca_cert, read_key};
use super::sign::{finish, serial, time};
use super::spec::BACKDATE;
use crate::source::csr::signature_algorithm;
use crate::source::error::ca::CaError;
use crate::x509::Certificate;

/// kubeadm's default `certificateValidityPeriod`.
pub const KUBEADM_VALIDITY_SECS: i64 = 365 * 86_400;

/// kubeadm's certificate `der` (read from `template`) issued again by the
/// CA `ca_cert` with `ca_key`, valid from the CA's notBefore (kubeadm's
/// backdate) to `now` plus a year, or the original's span if longer, never
/// past the CA's notAfter ([`resign`]). DER.
pub fn reissue(
    template: &Path,
    der: &[u8],
    ca_cert: &Path,
    ca_key: &Path,
    now: SystemTime,
) -> Result<Vec<u8>, CaError> {
    let bad = |problem| CaError::file("template", template, problem);
    let ca = read_ca_cert(ca_cert, now, BACKDATE)?;
    let cert = issued_by_ca(der, &ca).map_err(|source| {
        bad(CaError::NotIssuedByTheCa {
            ca_cert: ca_cert.to_owned(),
            source: Box::new(source),
        })
    })?;
    let (from, to) = cert.validity();
    let span = to.saturating_sub(from).max(KUBEADM_VALIDITY_SECS);
    let now_secs = crate::validate::unix_seconds(now);
    let to = now_secs.saturating_add(span).min(ca.not_after);
    resign(&cert, der, &bad, (ca.not_before, to), ca_key, ca_cert, &ca)
}

/// The self-signed CA certificate at `ca_cert` renewed with its own key,
/// valid from `now` (less the backdate) to `not_after`: everything a
/// leaf's chain is matched and verified by is kept, so every leaf the old
/// one issued verifies under the renewed one. An intermediate is refused:
/// renewing it is its issuer's business. DER.
pub fn renew_ca(
    ca_cert: &Path,
    ca_key: &Path,
    not_after: i64,
    now: SystemTime,
) -> Result<Vec<u8>, CaError> {
    let bad = |problem| CaError::file("CA certificate", ca_cert, problem);
    let ca = read_ca_cert(ca_cert, now, BACKDATE)?;
    let cert = issued_by_ca(&ca.der, &ca).map_err(|e| bad(CaError::NotSelfSigned(Box::new(e))))?;
    if ca.ski.is_none() {
        return Err(bad(CaError::NoSubjectKeyId));
    }
    let from = crate::validate::unix_seconds(now) - BACKDATE.as_secs() as i64;
    resign(
        &cert,
        &ca.der,
        &bad,
        (from, not_after),
        ca_key,
        ca_cert,
        &ca,
    )
}

/// `der` (read as `cert`, whose problems `bad` places) signed again by the
/// CA `ca` with its key at `ca_key`, with a serial as kubeadm draws one and
/// the validity `from` to `to`. Refused unless the CA's key signed `der`
/// with the algorithm it signs with, and unless the result reads as Go
/// reads certificates, verifies under the CA and carries the same key.
fn resign(
    cert: &Certificate<'_>,
    der: &[u8],
    bad: &impl Fn(CaError) -> CaError,
    (from, to): (i64, i64),
    ca_key: &Path,
    ca_cert: &Path,
    ca: &CaCert,
) -> Result<Vec<u8>, CaError> {
    let old = crate::x509::strict_der(der).map_err(|e| bad(CaError::certificate(e)))?;
    let alg = signature_algorithm(ca.alg).map_err(|e| CaError::signing(CaError::csr(e)))?;
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
    crate::x509::strict_certificate(&new).map_err(|e| refused(CaError::certificate(e)))?;
    let renewed = issued_by_ca(&new, ca).map_err(refused)?;
    if renewed.spki() != cert.spki() {
        return Err(refused(CaError::RenewedOtherKey));
    }
    Ok(new)
}

fn refused(problem: CaError) -> CaError {
    CaError::Mismatch(Box::new(problem))
}

fn issued_by_ca<'a>(der: &'a [u8], ca: &CaCert) -> Result<Certificate<'a>, CaError> {
    let cert = Certificate::read(der).map_err(|e| CaError::NotCertificate(Box::new(e)))?;
    issued_by(&cert, ca)?;
    Ok(cert)
}
