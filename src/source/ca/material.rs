//! What a `ca:` issuance reads: the CA certificate, key and template.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use rcgen::PublicKeyData;
use rustls::pki_types::PrivatePkcs8KeyDer;
use rustls::pki_types::pem::SectionKind;

mod cert;
mod template;
pub(super) use cert::{CaCert, issued_by};
use cert::{LIMIT, one_certificate};
pub(super) use template::Wanted;
use template::read_template;

use super::spec::CaSpec;
use crate::beneath::{self, Entry, Links, Start, Trust};
use crate::pem::PemError;
use crate::source::csr::{KeyAlg, leaf_usages};
use crate::source::error::ca::CaError;
use crate::validate;
use crate::x509::Certificate;

/// The CA key, in memory only while a certificate is signed.
pub(super) struct CaKey(rcgen::KeyPair);

impl std::fmt::Debug for CaKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CaKey(redacted)")
    }
}

impl CaKey {
    pub(super) fn sign(&self, tbs: &[u8]) -> Result<Vec<u8>, CaError> {
        use rcgen::SigningKey;
        self.0.sign(tbs).map_err(CaError::KeySign)
    }
}

/// Reads the CA certificate and the template (not the key) as they are now.
pub(super) fn wanted(spec: &CaSpec, now: SystemTime, skew: Duration) -> Result<Wanted, CaError> {
    let want = spec.issue.clone();
    let mut w = Wanted {
        ca: read_ca_cert(&spec.ca_cert, now, skew)?,
        sans: want.sans(),
        want,
        subject: None,
        template_not_after: None,
    };
    match &spec.template {
        Some(path) => read_template(path, &mut w, spec.key_alg_from_template)
            .map_err(|problem| CaError::file("template", path, problem))?,
        None => leaf_usages(w.want.usages.iter().map(String::as_str))
            .map_err(|e| CaError::signing(e.into()))?,
    }
    Ok(w)
}

/// Who may own the CA's files and the key's directories: root or
/// certsync's own user (anyone else may replace them; `allow-loose-ca-key`
/// never allows another owner). A directory group or others may write
/// lets them swap ca.key and ca.crt for their own (ssh's StrictModes):
/// accepted only with `allow_loose`.
fn ca_trust(allow_loose: bool) -> Trust {
    Trust {
        writable_ok: allow_loose,
        ..Trust::STRICT
    }
}

/// The CA file at `path`, opened once, if [`ca_trust`] accepts its owner.
fn open_owned(path: &Path) -> Result<(std::fs::File, std::fs::Metadata), CaError> {
    let file = beneath::open_file(path, Links::Follow).map_err(CaError::Read)?;
    let meta = file.metadata().map_err(CaError::Io)?;
    owned(&Entry::from_metadata(Path::new(""), &meta), None)?;
    Ok((file, meta))
}

/// Refuses `entry` (a CA file, or `dir`, a directory on the way to the
/// key) if [`ca_trust`] refuses its owner.
fn owned(entry: &Entry, dir: Option<&Path>) -> Result<(), CaError> {
    if !ca_trust(true).faults(entry).owner {
        return Ok(());
    }
    let (uid, euid) = (entry.uid, nix::unistd::geteuid().as_raw());
    let dir = dir.map(Path::to_owned);
    Err(CaError::Owner { dir, uid, euid })
}

/// The CA key's directories (as named, and where a link leads), judged by
/// [`ca_trust`] on the directory walked to.
fn key_directories(path: &Path, allow_loose: bool) -> Result<(), CaError> {
    let parent = |p: &Path| {
        let dir = p.parent().unwrap_or(Path::new("/")).to_owned();
        if dir.as_os_str().is_empty() {
            Path::new(".").to_owned()
        } else {
            dir
        }
    };
    let mut dirs = vec![parent(path)];
    let real = std::fs::canonicalize(path).map_err(CaError::Unresolved)?;
    if parent(&real) != dirs[0] {
        dirs.push(parent(&real));
    }
    for dir in dirs {
        // Walked to, never opened for reading: a FIFO blocks nothing.
        let entry = beneath::walk(Start::Path, &dir, Links::Follow, &mut |_| Ok(()))
            .and_then(|w| Entry::held(&dir, std::os::fd::AsFd::as_fd(&w.fd)))
            .map_err(CaError::Directory)?;
        owned(&entry, Some(&dir))?;
        if ca_trust(allow_loose).judge(&entry).is_err() {
            let mode = entry.mode;
            return Err(CaError::DirectoryWritable { dir, mode });
        }
    }
    Ok(())
}

pub(super) fn read_ca_cert(
    path: &Path,
    now: SystemTime,
    skew: Duration,
) -> Result<CaCert, CaError> {
    let err = |problem| CaError::file("CA certificate", path, problem);
    let (file, _) = open_owned(path).map_err(err)?;
    let bytes = beneath::read_capped(file, path, LIMIT).map_err(|e| err(CaError::Read(e)))?;
    let der = one_certificate(&bytes).map_err(err)?;
    let cert = Certificate::read(&der).map_err(|e| err(CaError::certificate(e)))?;
    match cert.basic_constraints() {
        Ok(Some((true, _))) => {}
        Ok(_) => {
            return Err(err(CaError::NotCa(
                "its basic constraints do not say CA:TRUE",
            )));
        }
        Err(e) => return Err(err(CaError::certificate(e))),
    }
    match cert.key_usage() {
        Ok(Some(ku)) if ku & crate::x509::KEY_CERT_SIGN != 0 => {}
        Ok(Some(_)) => return Err(err(CaError::NotCa("its keyUsage lacks keyCertSign"))),
        Ok(None) => {
            return Err(err(CaError::NotCa(
                "it has no keyUsage extension with keyCertSign (openssl: -addext \
                 keyUsage=critical,keyCertSign,cRLSign)",
            )));
        }
        Err(e) => return Err(err(CaError::certificate(e))),
    }
    let (not_before, not_after) = cert.validity();
    let now = validate::unix_seconds(now);
    if not_after <= now {
        return Err(err(CaError::Expired { not_after }));
    }
    if not_before > now + skew.as_secs() as i64 {
        return Err(err(CaError::NotYetValid { not_before }));
    }
    let alg = cert.key_alg().ok_or_else(|| err(CaError::UnknownKeyAlg))?;
    let ski = cert.subject_key_id();
    Ok(CaCert {
        pem: crate::pem::encode("CERTIFICATE", &der).into_bytes(),
        spki: cert.spki().to_vec(),
        subject: cert.subject().to_vec(),
        der,
        not_before,
        not_after,
        alg,
        ski,
    })
}

/// Reads the CA key at `path`: a regular file owned by root or certsync's
/// user, that no one else may read or write, in directories no one else
/// may write (modes: unless `allow_loose`), the key of `ca` (read from
/// `ca_cert`). The bytes read are overwritten once the key is loaded.
pub(super) fn read_key(
    path: &Path,
    ca_cert: &Path,
    allow_loose: bool,
    ca: &CaCert,
) -> Result<CaKey, CaError> {
    let err = |problem| CaError::file("CA key", path, problem);
    let (file, meta) = open_owned(path).map_err(err)?;
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 && !allow_loose {
        return Err(err(CaError::LooseKey { mode }));
    }
    key_directories(path, allow_loose).map_err(err)?;
    let mut pem = beneath::read_capped(file, path, LIMIT).map_err(|e| err(CaError::Read(e)))?;
    let key = key_pair(&pem, ca.alg);
    pem.fill(0);
    std::hint::black_box(&pem);
    let key = key.map_err(err)?;
    if key.subject_public_key_info() != ca.spki {
        return Err(err(CaError::NotTheCasKey {
            ca_cert: ca_cert.to_owned(),
        }));
    }
    Ok(CaKey(key))
}

/// A key pair from PEM for a key of `alg`: PKCS#8 ("PRIVATE KEY"), PKCS#1
/// ("RSA PRIVATE KEY", kubeadm's default) or SEC1 ("EC PRIVATE KEY"), one
/// unencrypted block. ring (through rcgen) loads PKCS#8 only, so PKCS#1
/// and SEC1 are wrapped into PKCS#8 as they are (the DER is not re-encoded;
/// ring then checks it).
pub fn key_pair(pem: &[u8], alg: KeyAlg) -> Result<rcgen::KeyPair, CaError> {
    use rsa::pkcs8::der::Encode;
    use rsa::pkcs8::der::asn1::{AnyRef, ObjectIdentifier};
    use rsa::pkcs8::{AlgorithmIdentifierRef, PrivateKeyInfo};
    const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
    let kinds = [
        SectionKind::PrivateKey,
        SectionKind::RsaPrivateKey,
        SectionKind::EcPrivateKey,
    ];
    let found = kinds
        .into_iter()
        .find_map(|kind| match crate::pem::exactly_one(pem, kind) {
            Ok(der) => Some(Ok((kind, der))),
            Err(PemError::Kind(_)) => None,
            Err(e) => Some(Err(CaError::KeyPem(e))),
        });
    let (kind, mut der) = found.ok_or(CaError::NoKey)??;
    let wrapped = match (kind, alg) {
        (SectionKind::PrivateKey, _) => Ok(None),
        (SectionKind::RsaPrivateKey, KeyAlg::Rsa(_)) => {
            PrivateKeyInfo::new(rsa::pkcs1::ALGORITHM_ID, &der)
                .to_der()
                .map(Some)
                .map_err(CaError::Wrap)
        }
        (SectionKind::EcPrivateKey, KeyAlg::EcdsaP256 | KeyAlg::EcdsaP384) => {
            let curve = ObjectIdentifier::new_unwrap(if alg == KeyAlg::EcdsaP256 {
                "1.2.840.10045.3.1.7"
            } else {
                "1.3.132.0.34"
            });
            let id = AlgorithmIdentifierRef {
                oid: EC_PUBLIC_KEY,
                parameters: Some(AnyRef::from(&curve)),
            };
            let info = PrivateKeyInfo::new(id, &der);
            info.to_der().map(Some).map_err(CaError::Wrap)
        }
        _ => Err(CaError::KeyEncoding {
            encoding: if kind == SectionKind::RsaPrivateKey {
                "PKCS#1 RSA"
            } else {
                "SEC1 EC"
            },
            alg,
        }),
    };
    // The PKCS#1 or SEC1 key, once wrapped (or refused), is overwritten.
    let mut pkcs8 = match wrapped {
        Ok(None) => der,
        wrapped => {
            der.fill(0);
            wrapped?.unwrap_or_default()
        }
    };
    let key = rcgen::KeyPair::from_pkcs8_der_and_sign_algo(
        &PrivatePkcs8KeyDer::from(pkcs8.as_slice()),
        alg.signing(),
    )
    .map_err(|source| CaError::Unusable { alg, source });
    pkcs8.fill(0);
    std::hint::black_box(&pkcs8);
    key
}
