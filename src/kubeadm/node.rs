//! Reading a kubeadm node's files: certificates, kubeconfigs, manifests.

use std::path::Path;

use super::error::{FileProblem, KubeadmError};
use super::paths::{FileWrite, host};
use crate::x509::{Certificate, KeyAlg};

const LIMIT: u64 = 1 << 20;

pub fn read(dir: &Path, node_path: &str) -> Result<String, KubeadmError> {
    text(dir, node_path, read_optional(dir, node_path)?)
}

/// The text of `node_path` as read (`None`: absent); refused when absent or not UTF-8.
pub fn text(dir: &Path, node_path: &str, read: Option<Vec<u8>>) -> Result<String, KubeadmError> {
    let path = host(dir, node_path);
    let bytes = read.ok_or_else(|| KubeadmError::file(&path, FileProblem::Missing))?;
    String::from_utf8(bytes).map_err(|_| KubeadmError::file(&path, FileProblem::NotUtf8))
}

/// The file's bytes if it exists, reached with no link followed: adopt reads
/// as root where certsync's container may have planted one.
pub fn read_optional(dir: &Path, node_path: &str) -> Result<Option<Vec<u8>>, KubeadmError> {
    Ok(read_with_mode(dir, node_path)?.map(|(bytes, _)| bytes))
}

/// [`read_optional`] with the file's permission bits (never set-ID or sticky: what is
/// written with them is root's, whoever they were set for), of the descriptor it read.
pub fn read_with_mode(dir: &Path, node_path: &str) -> Result<Option<(Vec<u8>, u32)>, KubeadmError> {
    let path = host(dir, node_path);
    let walked = match super::moves::reach(dir, node_path) {
        Ok(w) => w,
        Err(FileProblem::Missing) => return Ok(None),
        Err(e) => return Err(KubeadmError::file(&path, e)),
    };
    walked
        .read(LIMIT)
        .map(|bytes| Some((bytes, walked.st.st_mode & 0o777)))
        .map_err(|e| KubeadmError::file(&path, FileProblem::Read(e)))
}

/// `bytes` to write at `node_path`, unless the file already holds them; one with other
/// bytes is refused with `not_adopts` when given.
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
    Ok(Some(FileWrite {
        path: node_path.to_owned(),
        before,
        mode,
        what,
        bytes,
    }))
}

/// The certificates (DER) of a PEM file; refused unless every block is a certificate.
pub fn certificates(at: &Path, pem: &[u8]) -> Result<Vec<Vec<u8>>, KubeadmError> {
    use crate::pem::PemError;
    match crate::pem::certificates(pem) {
        Err(PemError::Empty) => Ok(Vec::new()),
        Err(PemError::Kind(_)) => Err(KubeadmError::file(at, FileProblem::NotOnlyCertificates)),
        found => found.map_err(|e| KubeadmError::file(at, e)),
    }
}

/// `f` of the first certificate of the file at `node_path`, read once ([`read_with_mode`]),
/// each problem named by its path; with the file's text and mode as read.
fn first_certificate<T>(
    dir: &Path,
    node_path: &str,
    f: impl FnOnce(&Certificate<'_>) -> Result<T, FileProblem>,
) -> Result<(T, String, u32), FileProblem> {
    let unreadable = |e| FileProblem::Unreadable(Box::new(e));
    let (bytes, mode) = read_with_mode(dir, node_path).map_err(unreadable)?.unzip();
    let text = text(dir, node_path, bytes).map_err(unreadable)?;
    let der = crate::pem::first_certificate(text.as_bytes())
        .map_err(|e| FileProblem::Pem(e).of(node_path))?;
    let t = f(&Certificate::read(&der).map_err(|e| FileProblem::from(e).of(node_path))?)?;
    Ok((t, text, mode.unwrap_or_default()))
}

/// What a certificate is judged by (a CA is its subject and key, which a
/// renewal keeps).
#[derive(Debug, Clone)]
pub struct Cert {
    pub der: Vec<u8>,
    pub subject: Vec<u8>,
    pub spki: Vec<u8>,
    pub not_before: i64,
    pub not_after: i64,
}

impl Cert {
    pub fn parse(der: Vec<u8>) -> Result<Self, FileProblem> {
        let c = Certificate::read(&der)?;
        let (not_before, not_after) = c.validity();
        Ok(Self {
            subject: c.subject().to_vec(),
            spki: c.spki().to_vec(),
            not_before,
            not_after,
            der,
        })
    }
}

fn kubeadm_makes(alg: KeyAlg) -> bool {
    matches!(
        alg,
        KeyAlg::Rsa(2048 | 3072 | 4096) | KeyAlg::EcdsaP256 | KeyAlg::EcdsaP384
    )
}

/// The key algorithm an `encryptionAlgorithm` names, spelt as kubeadm spells it.
pub fn encryption_algorithm(name: &str) -> Option<KeyAlg> {
    let alg: KeyAlg = name.parse().ok()?;
    (kubeadm_makes(alg) && alg.to_string().to_ascii_uppercase() == name).then_some(alg)
}

/// The key algorithm of `cert`'s key; `None` for one kubeadm does not make.
pub fn key_alg(dir: &Path, cert: &str) -> Result<Option<KeyAlg>, FileProblem> {
    let alg = |c: &Certificate<'_>| Ok(c.key_alg().filter(|a| kubeadm_makes(*a)));
    Ok(first_certificate(dir, cert, alg)?.0)
}

/// Checks that `template` is a certificate the CA at `ca` (`in_place`, as the command read
/// it) issued: not one planted or brought from elsewhere, whose identity adopt would copy
/// into every renewal. Its bytes and mode as read once and judged ([`read_with_mode`]).
pub fn issued_by(
    dir: &Path,
    template: &str,
    ca: &str,
    in_place: Result<&Cert, FileProblem>,
) -> Result<(Vec<u8>, u32), FileProblem> {
    let signed = |leaf: &Certificate<'_>| signed_by(leaf, template, in_place?, ca);
    let ((), text, mode) = first_certificate(dir, template, signed)?;
    Ok((text.into_bytes(), mode))
}

pub fn signed_by(
    leaf: &Certificate<'_>,
    template: &str,
    in_place: &Cert,
    ca: &str,
) -> Result<(), FileProblem> {
    let ca_cert = Certificate::read(&in_place.der).map_err(|e| FileProblem::from(e).of(ca))?;
    if leaf.issuer() != ca_cert.subject() {
        return Err(FileProblem::OtherIssuer {
            template: template.to_owned(),
            issuer: crate::escape(&leaf.issuer_text()).into_owned(),
            ca: ca.to_owned(),
            subject: crate::escape(&ca_cert.subject_text()).into_owned(),
        });
    }
    if !leaf.signed_by(ca_cert.spki()) {
        return Err(FileProblem::NotSigned {
            template: template.to_owned(),
            ca: ca.to_owned(),
        });
    }
    Ok(())
}

/// Checks that `cert_pem` and `key_pem` are a pair the CA at `path` issued, as the command
/// read it once (`ca`, from [`super::trust::Cas`]); its notAfter.
pub fn sound_pair(
    cert_pem: &[u8],
    key_pem: &[u8],
    path: &str,
    ca: &Cert,
) -> Result<i64, FileProblem> {
    let der = crate::pem::first_certificate(cert_pem)?;
    let leaf = Certificate::read(&der)?;
    signed_by(&leaf, "it", ca, path).map_err(|e| e.of("not issued by the node's CA"))?;
    match crate::validate::key_matches(cert_pem, key_pem) {
        Ok(true) => Ok(leaf.validity().1),
        Ok(false) => Err(FileProblem::KeyMismatch),
        Err(e) => Err(FileProblem::Key(Box::new(e))),
    }
}

pub fn base64_field(at: &Path, field: &'static str, data: &str) -> Result<Vec<u8>, KubeadmError> {
    crate::writer::base64_data(field, data).map_err(|e| KubeadmError::file(at, e))
}

pub fn kubeconfig(path: &Path, text: &str) -> Result<kube::config::Kubeconfig, KubeadmError> {
    crate::source::client::parse_kubeconfig(text).map_err(|e| KubeadmError::file(path, e))
}

/// The one server of the kubeconfig `text` (read from `path`).
pub fn server(path: &Path, text: &str) -> Result<String, KubeadmError> {
    let config = kubeconfig(path, text)?;
    let clusters = &config.clusters;
    match clusters.as_slice() {
        [one] => one
            .cluster
            .as_ref()
            .and_then(|c| c.server.clone())
            .ok_or_else(|| KubeadmError::file(path, FileProblem::NoServer)),
        _ => Err(KubeadmError::file(
            path,
            crate::writer::WriterError::Clusters(clusters.len()),
        )),
    }
}
