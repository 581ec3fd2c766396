//! What a `ca:` issuance reads from the node: the CA certificate (a CA,
//! valid now), the CA key (its modes, its encodings, the certificate's own
//! key), and the identity the template certificate gives.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use rcgen::PublicKeyData;
use rustls::pki_types::PrivatePkcs8KeyDer;
use rustls::pki_types::pem::SectionKind;
use x509_parser::extensions::{GeneralName, ParsedExtension};

use super::{CaError, CaSpec};
use crate::pem::PemError;
use crate::source::csr::{CsrSpec, KU_NAMES, KeyAlg, San, eku_usage};
use crate::validate;

/// CA, template and key files are small.
const LIMIT: u64 = 64 * 1024;

/// The CA certificate, read and checked.
pub(super) struct CaCert {
    pub der: Vec<u8>,
    /// Re-encoded from the DER: published as ca.crt, chains checked with it.
    pub pem: Vec<u8>,
    pub not_after: i64,
    pub alg: KeyAlg,
    /// SubjectPublicKeyInfo (DER), which the key must match.
    pub spki: Vec<u8>,
    /// SubjectKeyIdentifier: the issued certificate's AKI.
    pub ski: Option<Vec<u8>>,
}

/// The CA key, in memory only while a certificate is signed.
pub(super) struct CaKey(rcgen::KeyPair);

impl std::fmt::Debug for CaKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CaKey(redacted)")
    }
}

impl CaKey {
    /// Signs `tbs` (ring: PKCS#1 v1.5 SHA-256 for RSA, ECDSA with the
    /// curve's hash, Ed25519).
    pub(super) fn sign(&self, tbs: &[u8]) -> Result<Vec<u8>, String> {
        use rcgen::SigningKey;
        self.0.sign(tbs).map_err(|e| e.to_string())
    }
}

/// What the next certificate must be.
pub(super) struct Wanted {
    pub ca: CaCert,
    /// Subject, names, usages and key algorithm, the template's filled in.
    pub want: CsrSpec,
    /// The template's subject (DER) as it is; `None`: built from `want`.
    pub subject: Option<Vec<u8>>,
    /// The SANs in their order.
    pub sans: Vec<San>,
}

/// Reads the CA certificate and the template (not the key) as they are now.
pub(super) fn wanted(spec: &CaSpec, now: SystemTime, skew: Duration) -> Result<Wanted, CaError> {
    let ca = read_ca_cert(&spec.ca_cert, now, skew)?;
    let mut want = spec.issue.clone();
    let Some(path) = &spec.template else {
        let sans = (want.dns.iter().map(|d| San::Dns(d.clone())))
            .chain(want.ips.iter().map(|ip| San::Ip(*ip)))
            .collect();
        return Ok(Wanted {
            ca,
            want,
            subject: None,
            sans,
        });
    };
    let t = read_template(path).map_err(|problem| CaError::Template {
        path: path.clone(),
        problem,
    })?;
    want.common_name = t.cn;
    want.organizations = t.o;
    want.dns = (t.sans.iter())
        .filter_map(|s| match s {
            San::Dns(d) => Some(d.clone()),
            San::Ip(_) => None,
        })
        .collect();
    want.ips = (t.sans.iter())
        .filter_map(|s| match s {
            San::Ip(ip) => Some(*ip),
            San::Dns(_) => None,
        })
        .collect();
    want.usages = t.usages;
    if spec.key_alg_from_template {
        want.key_alg = t.alg;
    }
    Ok(Wanted {
        ca,
        want,
        subject: Some(t.subject),
        sans: t.sans,
    })
}

/// The DER of the one certificate in the file at `path`.
fn one_certificate(path: &Path) -> Result<Vec<u8>, String> {
    let bytes = crate::files::read_regular(path, LIMIT).map_err(|e| e.problem())?;
    crate::pem::exactly_one(&bytes, SectionKind::Certificate)
        .map_err(|e| format!("{e} (one CERTIFICATE block is expected)"))
}

fn read_ca_cert(path: &Path, now: SystemTime, skew: Duration) -> Result<CaCert, CaError> {
    let err = |problem: String| CaError::CaCert {
        path: path.to_owned(),
        problem,
    };
    let der = one_certificate(path).map_err(err)?;
    let (rest, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| err(e.to_string()))?;
    if !rest.is_empty() {
        return Err(err("trailing bytes after the certificate".into()));
    }
    match cert.basic_constraints() {
        Ok(Some(bc)) if bc.value.ca => {}
        Ok(_) => {
            return Err(err(
                "not usable as a CA: its basic constraints do not say CA:TRUE".into(),
            ));
        }
        Err(e) => return Err(err(format!("basic constraints: {e}"))),
    }
    match cert.key_usage() {
        Ok(Some(ku)) if ku.value.key_cert_sign() => {}
        Ok(Some(_)) => return Err(err("not usable as a CA: its keyUsage lacks keyCertSign".into())),
        Ok(None) => return Err(err("not usable as a CA: it has no keyUsage extension with keyCertSign (openssl: -addext keyUsage=critical,keyCertSign,cRLSign)".into())),
        Err(e) => return Err(err(format!("key usage: {e}"))),
    }
    let (not_before, not_after) = (
        cert.validity().not_before.timestamp(),
        cert.validity().not_after.timestamp(),
    );
    let now = validate::unix_seconds(now);
    if not_after <= now {
        return Err(err(format!(
            "expired at {}; renew the CA first",
            validate::rfc3339(not_after)
        )));
    }
    if not_before > now + skew.as_secs() as i64 {
        return Err(err(format!(
            "not valid until {}",
            validate::rfc3339(not_before)
        )));
    }
    let alg = KeyAlg::of_spki(cert.public_key())
        .ok_or_else(|| err("its key is not RSA, ECDSA P-256/P-384 or Ed25519".into()))?;
    let ski = cert
        .extensions()
        .iter()
        .find_map(|e| match e.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(id) => Some(id.0.to_vec()),
            _ => None,
        });
    Ok(CaCert {
        pem: super::sign::pem("CERTIFICATE", &der).into_bytes(),
        spki: cert.public_key().raw.to_vec(),
        der,
        not_after,
        alg,
        ski,
    })
}

/// Reads the CA key: a regular file no one but its owner may read or
/// write (unless allowed), the CA certificate's own key. The bytes read
/// are overwritten once the key is loaded.
pub(super) fn read_ca_key(spec: &CaSpec, ca: &CaCert) -> Result<CaKey, CaError> {
    let path = &spec.ca_key;
    let err = |problem: String| CaError::CaKey {
        path: path.clone(),
        problem,
    };
    let file = crate::files::open_regular(path).map_err(|e| err(e.problem()))?;
    let mode = file
        .metadata()
        .map_err(|e| err(e.to_string()))?
        .permissions()
        .mode()
        & 0o7777;
    if mode & 0o077 != 0 && !spec.allow_loose_ca_key {
        return Err(err(format!(
            "mode {mode:04o} lets group or others at the CA key; chmod 600 it (kubeadm \
             writes it so), or give allow-loose-ca-key to use it anyway"
        )));
    }
    let mut pem = crate::files::read_capped(file, path, LIMIT).map_err(|e| err(e.problem()))?;
    let key = key_pair(&pem, ca.alg);
    pem.fill(0);
    std::hint::black_box(&pem);
    let key = key.map_err(&err)?;
    if key.subject_public_key_info() != ca.spki {
        return Err(err(format!(
            "it is not the key of the CA certificate {} (their public keys differ)",
            spec.ca_cert.display()
        )));
    }
    Ok(CaKey(key))
}

/// A key pair from PEM for a key of `alg`: PKCS#8 ("PRIVATE KEY"), PKCS#1
/// ("RSA PRIVATE KEY", kubeadm's default) or SEC1 ("EC PRIVATE KEY"), one
/// unencrypted block. ring (through rcgen) loads PKCS#8 only, so PKCS#1
/// and SEC1 are wrapped into PKCS#8 as they are (the DER is not re-encoded;
/// ring then checks it).
pub fn key_pair(pem: &[u8], alg: KeyAlg) -> Result<rcgen::KeyPair, String> {
    use rsa::pkcs8::der::Encode;
    use rsa::pkcs8::der::asn1::{AnyRef, ObjectIdentifier};
    use rsa::pkcs8::{AlgorithmIdentifierRef, PrivateKeyInfo};
    const EC_PUBLIC_KEY: ObjectIdentifier = ObjectIdentifier::new_unwrap("1.2.840.10045.2.1");
    let kinds = [
        SectionKind::PrivateKey,
        SectionKind::RsaPrivateKey,
        SectionKind::EcPrivateKey,
    ];
    let mut found = None;
    for kind in kinds {
        match crate::pem::exactly_one(pem, kind) {
            Ok(der) => {
                found = Some((kind, der));
                break;
            }
            Err(PemError::Kind(_)) => {}
            Err(e) => {
                return Err(format!(
                    "{e} (one unencrypted PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block)"
                ));
            }
        }
    }
    let (kind, mut der) =
        found.ok_or("holds no PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block")?;
    let wrapped = match (kind, alg) {
        (SectionKind::PrivateKey, _) => Ok(None),
        (SectionKind::RsaPrivateKey, KeyAlg::Rsa(_)) => {
            PrivateKeyInfo::new(rsa::pkcs1::ALGORITHM_ID, &der)
                .to_der()
                .map(Some)
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
            PrivateKeyInfo::new(id, &der).to_der().map(Some)
        }
        _ => {
            der.fill(0);
            return Err(format!(
                "a {} key cannot be the certificate's {alg} key",
                if kind == SectionKind::RsaPrivateKey {
                    "PKCS#1 RSA"
                } else {
                    "SEC1 EC"
                }
            ));
        }
    }
    .map_err(|e| e.to_string());
    let mut pkcs8 = match wrapped {
        Ok(Some(w)) => {
            der.fill(0);
            w
        }
        Ok(None) => der,
        Err(e) => {
            der.fill(0);
            return Err(format!("cannot read the key: {e}"));
        }
    };
    let sign_alg = match alg {
        KeyAlg::Rsa(_) => &rcgen::PKCS_RSA_SHA256,
        KeyAlg::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
        KeyAlg::EcdsaP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
        KeyAlg::Ed25519 => &rcgen::PKCS_ED25519,
    };
    let key = rcgen::KeyPair::from_pkcs8_der_and_sign_algo(
        &PrivatePkcs8KeyDer::from(pkcs8.as_slice()),
        sign_alg,
    )
    .map_err(|e| format!("not a usable {alg} private key: {e}"));
    pkcs8.fill(0);
    std::hint::black_box(&pkcs8);
    key
}

/// What a template certificate says the issued one must be.
struct Template {
    /// The subject as it is encoded (DER), copied into the issued one.
    subject: Vec<u8>,
    cn: Option<String>,
    o: Vec<String>,
    sans: Vec<San>,
    /// Key usages (bit order), then EKUs (the template's order).
    usages: Vec<String>,
    alg: KeyAlg,
}

/// Reads the identity of a template: a subject of CN and O only, DNS and
/// IP SANs only, key usages and EKUs the CSR API names, not a CA. Anything
/// else is refused rather than dropped, so nothing the template says is
/// silently left out of the renewal.
fn read_template(path: &Path) -> Result<Template, String> {
    use x509_cert::der::Decode;
    let der = one_certificate(path)?;
    let (_, cert) = x509_parser::parse_x509_certificate(&der).map_err(|e| e.to_string())?;
    let (mut cn, mut o) = (None, Vec::new());
    for rdn in cert.subject().iter() {
        for atv in rdn.iter() {
            let oid = atv.attr_type().to_id_string();
            let value = atv
                .as_str()
                .map_err(|e| format!("subject attribute {oid}: {e}"))?
                .to_owned();
            match oid.as_str() {
                crate::x509::COMMON_NAME if cn.is_none() => cn = Some(value),
                crate::x509::COMMON_NAME => return Err("its subject holds two CNs".into()),
                crate::x509::ORGANIZATION => o.push(value),
                other => {
                    return Err(format!(
                        "its subject holds {other}; certsync issues CN and O only"
                    ));
                }
            }
        }
    }
    let (mut sans, mut ku, mut ekus) = (Vec::new(), 0u16, Vec::new());
    for ext in cert.extensions() {
        match ext.parsed_extension() {
            ParsedExtension::SubjectAlternativeName(san) => {
                for name in &san.general_names {
                    sans.push(match name {
                        GeneralName::DNSName(d) => San::Dns((*d).to_owned()),
                        GeneralName::IPAddress(b) => {
                            San::Ip(crate::x509::ip_of(b).ok_or("a malformed IP address SAN")?)
                        }
                        other => {
                            return Err(format!(
                                "its SAN {other:?} is not a DNS name or IP address"
                            ));
                        }
                    });
                }
            }
            ParsedExtension::KeyUsage(k) => ku = k.flags,
            // x509-parser's EKU loses the order; x509-cert's keeps it.
            ParsedExtension::ExtendedKeyUsage(_) => {
                let eku = x509_cert::ext::pkix::ExtendedKeyUsage::from_der(ext.value)
                    .map_err(|e| format!("extended key usage: {e}"))?;
                for oid in eku.0 {
                    let oid = oid.to_string();
                    let name = eku_usage(&oid).ok_or_else(|| {
                        format!("its extended key usage {oid} is not one the CSR API names")
                    })?;
                    if !ekus.contains(&name) {
                        ekus.push(name);
                    }
                }
            }
            ParsedExtension::BasicConstraints(bc) if bc.ca => {
                return Err("it is a CA certificate".into());
            }
            ParsedExtension::ParseError { error } => {
                return Err(format!("extension {}: {error}", ext.oid.to_id_string()));
            }
            _ => {}
        }
    }
    let usages = (0..KU_NAMES.len())
        .filter(|i| ku & (1 << i) != 0)
        .map(|i| KU_NAMES[i])
        .chain(ekus)
        .map(str::to_owned)
        .collect();
    Ok(Template {
        subject: cert.subject().as_raw().to_vec(),
        cn,
        o,
        sans,
        usages,
        alg: KeyAlg::of_spki(cert.public_key())
            .ok_or("its key is not RSA, ECDSA P-256/P-384 or Ed25519")?,
    })
}
