//! A new key (in memory only) and the PKCS#10 request for it.

use std::net::IpAddr;

use super::spec::CsrSpec;
use crate::source::error::csr::CsrError;
use crate::x509::KeyAlg;

impl KeyAlg {
    /// A new key from the OS generator, made by ring; RSA keys by the `rsa`
    /// crate (ring cannot), but ring signs with them, so `rsa`'s
    /// non-constant-time operations (RUSTSEC-2023-0071) are never used.
    pub(crate) fn generate(self) -> Result<rcgen::KeyPair, CsrError> {
        let err = |source: Box<dyn std::error::Error + Send + Sync>| CsrError::KeyGen {
            alg: self,
            source,
        };
        self.issuable().map_err(|e| err(e.into()))?;
        match self {
            Self::EcdsaP256 | Self::EcdsaP384 | Self::Ed25519 => {
                rcgen::KeyPair::generate_for(self.signing())
            }
            Self::Rsa(bits) => {
                use rsa::pkcs8::EncodePrivateKey;
                let key = rsa::RsaPrivateKey::new(&mut rand_core::OsRng, bits)
                    .map_err(|e| err(e.into()))?;
                let der = key.to_pkcs8_der().map_err(|e| err(e.into()))?;
                let der = rustls::pki_types::PrivatePkcs8KeyDer::from(der.as_bytes());
                rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&der, self.signing())
            }
        }
        .map_err(|e| err(e.into()))
    }

    /// What a key of this algorithm signs with, through ring.
    pub(crate) fn signing(self) -> &'static rcgen::SignatureAlgorithm {
        match self {
            Self::Rsa(_) => &rcgen::PKCS_RSA_SHA256,
            Self::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
            Self::EcdsaP384 => &rcgen::PKCS_ECDSA_P384_SHA384,
            Self::Ed25519 => &rcgen::PKCS_ED25519,
        }
    }
}

/// A fresh key and the PEM request for it.
pub(crate) struct Request {
    pub(crate) key_pem: String,
    pub(crate) csr_pem: String,
}

impl std::fmt::Debug for Request {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request").finish_non_exhaustive()
    }
}

/// Generates a key and the PKCS#10 request `spec` describes, signed with it.
pub(crate) fn new_request(spec: &CsrSpec) -> Result<Request, CsrError> {
    use rcgen::{PublicKeyData, SigningKey};
    let key = spec.key_alg.generate()?;
    let csr_pem = pkcs10(spec, &key.subject_public_key_info(), &|tbs| key.sign(tbs))
        .map_err(|e| CsrError::Request(Box::new(e)))?;
    Ok(Request {
        key_pem: key.serialize_pem(),
        csr_pem,
    })
}

impl CsrSpec {
    /// The subjectAltNames asked for: DNS names, then IP addresses.
    pub(crate) fn sans(&self) -> Vec<San> {
        let dns = self.dns.iter().map(|d| San::Dns(d.clone()));
        dns.chain(self.ips.iter().map(|ip| San::Ip(*ip))).collect()
    }
}

/// Signs the DER of a request with the key (signature bytes, or why not).
pub type Sign<'a> = dyn Fn(&[u8]) -> Result<Vec<u8>, rcgen::Error> + 'a;

/// A subjectAltName entry, in the order it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum San {
    Dns(String),
    Ip(IpAddr),
}

pub(crate) fn der_err(what: &'static str) -> impl Fn(x509_cert::der::Error) -> CsrError {
    move |error| CsrError::Der { what, error }
}

pub(crate) fn oid(oid: &'static str) -> Result<x509_cert::spki::ObjectIdentifier, CsrError> {
    x509_cert::spki::ObjectIdentifier::new(oid).map_err(|error| CsrError::Oid { oid, error })
}

/// The extension `id` holding `value`, DER-encoded: the request's SANs and
/// every extension of a certificate the `ca:` source issues.
pub(crate) fn extension(
    id: &'static str,
    critical: bool,
    value: &impl x509_cert::der::Encode,
) -> Result<x509_cert::ext::Extension, CsrError> {
    let err = der_err(id);
    let der = value.to_der().map_err(&err)?;
    Ok(x509_cert::ext::Extension {
        extn_id: oid(id)?,
        critical,
        extn_value: x509_cert::der::asn1::OctetString::new(der).map_err(err)?,
    })
}

/// The subject `spec` asks for: O=… (each organization its own RDN, as
/// Kubernetes reads groups) then CN, as UTF8Strings. Encoded with the
/// RustCrypto `x509-cert` types, as rcgen's subject holds one value per
/// attribute type and Kubernetes groups need several organizations.
pub(crate) fn subject(spec: &CsrSpec) -> Result<x509_cert::name::RdnSequence, CsrError> {
    use x509_cert::attr::AttributeTypeAndValue;
    use x509_cert::der::asn1::{Any, SetOfVec, Utf8StringRef};
    use x509_cert::name::{RdnSequence, RelativeDistinguishedName};
    use x509_cert::spki::ObjectIdentifier;
    const CN: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.3");
    const O: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.10");
    let e = der_err("subject");
    let rdn = |oid, value: &str| -> Result<RelativeDistinguishedName, CsrError> {
        let value = Any::encode_from(&Utf8StringRef::new(value).map_err(&e)?).map_err(&e)?;
        let set = SetOfVec::try_from(vec![AttributeTypeAndValue { oid, value }]).map_err(&e)?;
        Ok(RelativeDistinguishedName::from(set))
    };
    let mut rdns = Vec::new();
    for o in &spec.organizations {
        rdns.push(rdn(O, o)?);
    }
    if let Some(cn) = &spec.common_name {
        rdns.push(rdn(CN, cn)?);
    }
    Ok(RdnSequence(rdns))
}

/// The subjectAltName extension holding `names` in their order; critical
/// when the subject is empty (RFC 5280 4.2.1.6). `None` without names.
pub(crate) fn san_extension(
    names: &[San],
    subject_empty: bool,
) -> Result<Option<x509_cert::ext::Extension>, CsrError> {
    use x509_cert::der::asn1::{Ia5String, OctetString};
    use x509_cert::ext::pkix::SubjectAltName;
    use x509_cert::ext::pkix::name::GeneralName;
    if names.is_empty() {
        return Ok(None);
    }
    let mut general = Vec::new();
    for name in names {
        general.push(match name {
            San::Dns(d) => GeneralName::DnsName(Ia5String::new(d).map_err(der_err("DNS name"))?),
            San::Ip(ip) => {
                let bytes = match ip {
                    IpAddr::V4(v4) => v4.octets().to_vec(),
                    IpAddr::V6(v6) => v6.octets().to_vec(),
                };
                GeneralName::IpAddress(OctetString::new(bytes).map_err(der_err("IP address"))?)
            }
        });
    }
    extension("2.5.29.17", subject_empty, &SubjectAltName(general)).map(Some)
}

/// The signature algorithm a key of `alg` signs with through ring.
pub(crate) fn signature_algorithm(
    alg: KeyAlg,
) -> Result<x509_cert::spki::AlgorithmIdentifierOwned, CsrError> {
    use x509_cert::der::asn1::Any;
    use x509_cert::spki::AlgorithmIdentifierOwned;
    let (id, null_params) = match alg {
        KeyAlg::EcdsaP256 => ("1.2.840.10045.4.3.2", false),
        KeyAlg::EcdsaP384 => ("1.2.840.10045.4.3.3", false),
        KeyAlg::Ed25519 => ("1.3.101.112", false),
        KeyAlg::Rsa(_) => ("1.2.840.113549.1.1.11", true),
    };
    Ok(AlgorithmIdentifierOwned {
        oid: oid(id)?,
        parameters: null_params.then(Any::null),
    })
}

/// The PKCS#10 request (PEM) for `spki` (DER), its SANs in an
/// extensionRequest, signed with `sign` by `spec.key_alg`'s algorithm.
pub fn pkcs10(spec: &CsrSpec, spki: &[u8], sign: &Sign<'_>) -> Result<String, CsrError> {
    use x509_cert::der::asn1::{BitString, SetOfVec};
    use x509_cert::der::pem::LineEnding;
    use x509_cert::der::{Decode, Encode, EncodePem};
    use x509_cert::request::{CertReq, CertReqInfo, ExtensionReq, Version};
    use x509_cert::spki::SubjectPublicKeyInfoOwned;
    let e = der_err;

    let subject = subject(spec)?;
    let mut attributes = SetOfVec::new();
    if let Some(ext) = san_extension(&spec.sans(), subject.0.is_empty())? {
        let attr = ExtensionReq(vec![ext])
            .try_into()
            .map_err(e("extensionRequest"))?;
        attributes.insert(attr).map_err(e("extensionRequest"))?;
    }
    let info = CertReqInfo {
        version: Version::V1,
        subject,
        public_key: SubjectPublicKeyInfoOwned::from_der(spki).map_err(e("public key"))?,
        attributes,
    };
    let tbs = info.to_der().map_err(e("request"))?;
    let signature = sign(&tbs).map_err(CsrError::Signing)?;
    CertReq {
        info,
        algorithm: signature_algorithm(spec.key_alg)?,
        signature: BitString::from_bytes(&signature).map_err(e("signature"))?,
    }
    .to_pem(LineEnding::LF)
    .map_err(e("PEM"))
}

/// A `generateName` prefix that says who asked: `certsync-` and the
/// mapping's name reduced to DNS-1123 characters (at most 40 of them).
pub fn generate_name(mapping: &str) -> String {
    let mut slug = String::new();
    for c in mapping.chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() {
            slug.push(c);
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
        if slug.len() >= 40 {
            break;
        }
    }
    let slug = slug.trim_end_matches('-');
    if slug.is_empty() {
        "certsync-".to_owned()
    } else {
        format!("certsync-{slug}-")
    }
}
