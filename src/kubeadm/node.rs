//! Reading a kubeadm node's files: certificates (kubeadm's, each issued by
//! the CA adopt will renew it from), kubeconfigs (the server each
//! component talks to), manifests.

use std::path::Path;

use super::error::{FileProblem, KubeadmError};
use super::paths::{FileWrite, host};

/// Files on a node are small: a manifest, a kubeconfig, a certificate.
const LIMIT: u64 = 1 << 20;

/// A node file's text. The last component is never followed: adopt reads
/// these as root where certsync's container may have put a link.
pub fn read(dir: &Path, node_path: &str) -> Result<String, KubeadmError> {
    let path = host(dir, node_path);
    let bytes = read_optional(dir, node_path)?
        .ok_or_else(|| KubeadmError::file(&path, FileProblem::Missing))?;
    String::from_utf8(bytes).map_err(|_| KubeadmError::file(&path, FileProblem::NotUtf8))
}

/// The file's bytes if it exists (`None` when missing; other errors are
/// errors), reached from `dir` one name at a time with no link followed
/// on the way or at the end ([`super::moves::reach`]): certsync's
/// container may plant one anywhere it can write below /etc/kubernetes.
pub fn read_optional(dir: &Path, node_path: &str) -> Result<Option<Vec<u8>>, KubeadmError> {
    let path = host(dir, node_path);
    let walked = match super::moves::reach(dir, node_path) {
        Ok(w) => w,
        Err(FileProblem::Missing) => return Ok(None),
        Err(e) => return Err(KubeadmError::file(&path, e)),
    };
    walked
        .read(LIMIT)
        .map(Some)
        .map_err(|e| KubeadmError::file(&path, FileProblem::Read(e)))
}

/// `bytes` to write at `node_path` (mode `mode`), unless the file already
/// holds them; one there with other bytes is replaced only when adopt
/// wrote it, else refused with `not_adopts`.
pub fn to_write(
    dir: &Path,
    node_path: &str,
    mode: u32,
    what: String,
    bytes: Vec<u8>,
    not_adopts: Option<KubeadmError>,
) -> Result<Option<FileWrite>, KubeadmError> {
    let before = match (read_optional(dir, node_path)?, not_adopts) {
        (Some(old), _) if old == bytes => return Ok(None),
        (Some(_), Some(refused)) => return Err(refused),
        (before, _) => before,
    };
    let path = node_path.to_owned();
    Ok(Some(FileWrite {
        path,
        before,
        mode,
        what,
        bytes,
    }))
}

/// The first certificate of a PEM file, as DER.
fn cert_der(dir: &Path, node_path: &str) -> Result<Vec<u8>, FileProblem> {
    let text = read(dir, node_path).map_err(|e| FileProblem::Unreadable(Box::new(e)))?;
    crate::pem::first_certificate(text.as_bytes()).map_err(|e| FileProblem::NotPem(e).of(node_path))
}

/// The keys kubeadm makes: (its `encryptionAlgorithm`, certsync's
/// `key-alg=`, RSA (else ECDSA), size in bits).
pub const KEY_ALGS: [(&str, &str, bool, usize); 5] = [
    ("RSA-2048", "rsa-2048", true, 2048),
    ("RSA-3072", "rsa-3072", true, 3072),
    ("RSA-4096", "rsa-4096", true, 4096),
    ("ECDSA-P256", "ecdsa-p256", false, 256),
    ("ECDSA-P384", "ecdsa-p384", false, 384),
];

/// The `key-alg=` of kubeadm's keys on the node, read from the public key
/// of `cert` (kubeadm makes every key with the ClusterConfiguration's
/// `encryptionAlgorithm`): what adopt uses when that ClusterConfiguration
/// cannot be read. `None` for a key kubeadm does not make.
pub fn key_alg(dir: &Path, cert: &str) -> Result<Option<&'static str>, FileProblem> {
    use x509_parser::public_key::PublicKey;
    let der = cert_der(dir, cert)?;
    let (_, c) = x509_parser::parse_x509_certificate(&der)
        .map_err(|e| FileProblem::NotCertificate(e).of(cert))?;
    let key = c
        .public_key()
        .parsed()
        .map_err(|e| FileProblem::PublicKey(e).of(cert))?;
    let rsa = match &key {
        PublicKey::RSA(_) => true,
        PublicKey::EC(_) => false,
        _ => return Ok(None),
    };
    Ok(KEY_ALGS
        .iter()
        .find(|(_, _, r, size)| *r == rsa && *size == key.key_size())
        .map(|(_, alg, ..)| *alg))
}

/// Checks that `template` is a certificate `ca` issued (issuer name and
/// signature): a certificate kubeadm made, not one planted or brought from
/// elsewhere, whose identity adopt would copy into every renewal.
pub fn issued_by(dir: &Path, template: &str, ca: &str) -> Result<(), FileProblem> {
    signed_by(&cert_der(dir, template)?, template, &cert_der(dir, ca)?, ca)
}

/// Checks that the certificate `leaf_der` (named `template` in errors) was
/// issued by the CA certificate `ca_der` (issuer name and signature).
fn signed_by(leaf_der: &[u8], template: &str, ca_der: &[u8], ca: &str) -> Result<(), FileProblem> {
    let (_, ca_cert) = x509_parser::parse_x509_certificate(ca_der)
        .map_err(|e| FileProblem::NotCertificate(e).of(ca))?;
    let (_, leaf) = x509_parser::parse_x509_certificate(leaf_der)
        .map_err(|e| FileProblem::NotCertificate(e).of(template))?;
    if leaf.issuer().as_raw() != ca_cert.subject().as_raw() {
        return Err(FileProblem::OtherIssuer {
            template: template.to_owned(),
            issuer: crate::escape(&leaf.issuer().to_string()).into_owned(),
            ca: ca.to_owned(),
            subject: crate::escape(&ca_cert.subject().to_string()).into_owned(),
        });
    }
    leaf.verify_signature(Some(ca_cert.public_key()))
        .map_err(|_| FileProblem::NotSigned {
            template: template.to_owned(),
            ca: ca.to_owned(),
        })
}

/// Checks that `cert_pem` and `key_pem` are a pair the CA at node path
/// `ca` issued: what revert may leave in place of kubeadm's backup. A
/// pair someone rewrote (self-signed, another CA's, a key that is not the
/// certificate's) is not; the error says which, as revert shows it.
pub fn sound_pair(
    dir: &Path,
    cert_pem: &[u8],
    key_pem: &[u8],
    ca: &str,
) -> Result<(), FileProblem> {
    let der = crate::pem::first_certificate(cert_pem).map_err(FileProblem::NotPem)?;
    let ca_der = cert_der(dir, ca)?;
    signed_by(&der, "it", &ca_der, ca).map_err(|e| FileProblem::NotNodeCas(Box::new(e)))?;
    match crate::validate::key_matches(cert_pem, key_pem) {
        Ok(true) => Ok(()),
        Ok(false) => Err(FileProblem::KeyMismatch),
        Err(e) => Err(FileProblem::Key(Box::new(e))),
    }
}

/// The API server address of a kubeadm kubeconfig (its only cluster).
pub fn server(dir: &Path, node_path: &str) -> Result<String, KubeadmError> {
    let text = read(dir, node_path)?;
    let path = host(dir, node_path);
    let config =
        crate::source::client::parse_kubeconfig(&text).map_err(|e| KubeadmError::file(&path, e))?;
    let clusters = &config.clusters;
    match clusters.as_slice() {
        [one] => one
            .cluster
            .as_ref()
            .and_then(|c| c.server.clone())
            .ok_or_else(|| KubeadmError::file(&path, FileProblem::NoServer)),
        _ => Err(KubeadmError::file(
            &path,
            FileProblem::Clusters(clusters.len()),
        )),
    }
}

/// notAfter of the first certificate in PEM `bytes`.
pub fn not_after(bytes: &[u8]) -> Result<x509_parser::time::ASN1Time, FileProblem> {
    let der = crate::pem::first_certificate(bytes).map_err(FileProblem::NotPem)?;
    let (_, cert) =
        x509_parser::parse_x509_certificate(&der).map_err(FileProblem::NotCertificate)?;
    Ok(cert.validity().not_after)
}
