//! Facts of a certificate (subject, names, window, fingerprint) for logs,
//! metrics, events and reports on files already on disk; [`super::validate`]
//! is the gate for new content.

use rustls::pki_types::pem::SectionKind;

use super::blocks::pem_blocks;
use crate::bundle::{Bundle, CERT_FILE};
use crate::x509::Certificate;

/// Facts about a validated leaf certificate (for logs, metrics and checks).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Leaf {
    pub subject: String,
    pub issuer: String,
    /// DNS names and IP addresses from the subjectAltName extension.
    pub sans: Vec<String>,
    /// basicConstraints CA:true.
    pub is_ca: bool,
    pub serial: String,
    /// Seconds since the Unix epoch.
    pub not_before: i64,
    pub not_after: i64,
    /// SHA-256 of the leaf's DER, as `openssl x509 -fingerprint -sha256` shows.
    pub sha256: [u8; 32],
}

/// The leaf certificate of a bundle, if it has one.
pub fn leaf_of_bundle(bundle: &Bundle) -> Option<Leaf> {
    bundle.get(CERT_FILE).and_then(leaf_of)
}

/// Parses the certificate at the head of `pem` and returns its facts, for
/// reporting on files that are already on disk. `None` if nothing parses.
pub fn leaf_of(pem: &[u8]) -> Option<Leaf> {
    let blocks = pem_blocks("", pem).ok()?;
    let (_, der) = blocks
        .iter()
        .find(|(k, _)| *k == SectionKind::Certificate)?;
    leaf_facts(der)
}

/// The certificate a trust bundle (CA certificates only) is judged by:
/// each CA in it (subject and key) by its certificate that ends last (a CA
/// renewed with its own key, beside its old certificate), the bundle by
/// the CA that ends first (an intermediate that ended is not hidden by its
/// root). `None` unless every block is a CA certificate that parses.
pub fn bundle_judged_by(pem: &[u8]) -> Option<Leaf> {
    // A CA: its subject and public key, as written.
    type Ca = (Vec<u8>, Vec<u8>);
    let mut latest: Vec<(Ca, Leaf)> = Vec::new();
    for (kind, der) in pem_blocks("", pem).ok()? {
        if kind != SectionKind::Certificate {
            return None;
        }
        let c = Certificate::read(&der).ok()?;
        if !c.is_ca() {
            return None;
        }
        let ca = (c.subject().to_vec(), c.spki().to_vec());
        let leaf = leaf_facts(&der)?;
        match latest.iter_mut().find(|(k, _)| *k == ca) {
            Some((_, kept)) if kept.not_after >= leaf.not_after => {}
            Some((_, kept)) => *kept = leaf,
            None => latest.push((ca, leaf)),
        }
    }
    latest
        .into_iter()
        .map(|(_, l)| l)
        .min_by_key(|l| l.not_after)
}

/// Facts of the certificate `der`, if it reads.
pub(super) fn leaf_facts(der: &[u8]) -> Option<Leaf> {
    let c = Certificate::read(der).ok()?;
    let (not_before, not_after) = c.validity();
    Some(Leaf {
        subject: c.subject_text(),
        issuer: c.issuer_text(),
        sans: c.san_text(),
        is_ca: c.is_ca(),
        serial: c.signed_part().raw_serial_as_string(),
        not_before,
        not_after,
        sha256: crate::bundle::sha256(der),
    })
}
