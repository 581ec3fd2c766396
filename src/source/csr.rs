//! `csr:SIGNER`: certificates certsync obtains itself through the
//! Kubernetes CSR API, the way kubelet's certificate manager (client-go
//! `util/certificate`) does for kubelet, for any subject and signer.
//!
//! One cycle: a new private key is generated in memory; a
//! CertificateSigningRequest is created (`generateName: certsync-...`); the
//! object is watched by name, its uid checked on every event, until it is
//! `Approved` with a non-empty `status.certificate` (success) or `Denied`,
//! `Failed`, deleted or still without a certificate after the approval
//! timeout (failure: logged with the condition's reason and message, retried
//! after 2 s doubling, jittered, capped at 5 min). The issued chain is
//! checked against the request ([`check`], read by two X.509 parsers: our
//! key, exactly our subject, SANs and usages, no CA, its validity window,
//! and a chain to the signer's CA when one is configured) and only then
//! published as a bundle, like any
//! other source's, with the key beside it: the sync task writes both into
//! one revision, so the pair can never be seen mismatched.
//!
//! Rotation: at a point drawn uniformly from [70 %, 90 %] of the live
//! certificate's lifetime; at once when there is no live certificate, it
//! has expired, or it does not satisfy the mapping any more (subject, SANs,
//! usages, key algorithm or CA changed in the configuration); never sooner
//! than the renewal floor after the previous issuance ([`renewal`]: a
//! signer issuing certificates already due must not cause a loop). After a
//! restart the live revision is the state: while it is good, nothing is
//! requested. A request pending at a restart is abandoned: its key lived
//! only in the old process's memory.
//!
//! Invariants: the key is never logged (its type's `Debug` is redacted),
//! never sent (only the PKCS#10 request, which holds the public key, is), and
//! reaches disk only in the revision holding the certificate issued for it.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, PostParams};
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio::sync::watch;

use super::client::{ClientError, ClientSettings, client_cert_kubeconfig, read_kubeconfig};
use super::watch::{Watch, WatchError};
use super::{Update, watch_seconds};
use crate::bundle::{Bundle, CA_FILE, CERT_FILE, KEY_FILE};
use crate::events::{CsrRef, EventSink};
use crate::metrics::Metrics;
use crate::validate;

mod issued;
mod renewal;
pub use issued::check;

/// The signers whose usages certsync knows (kube-controller-manager's).
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
pub const KUBE_APISERVER_CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// Failed requests are retried after 2 s, doubling (kubelet's start), at most this.
const RETRY_CAP: Duration = Duration::from_secs(300);
/// Every API call but the watch itself must answer within this.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
/// CA files and ConfigMap values are small; a bundle may not exceed 1 MiB.
const CA_LIMIT: u64 = validate::MAX_BUNDLE_SIZE as u64;

#[derive(Debug, thiserror::Error)]
pub enum CsrError {
    #[error("cannot generate a {alg} key: {message}")]
    KeyGen { alg: KeyAlg, message: String },
    #[error("cannot build the certificate request: {0}")]
    Request(String),
    #[error("{verb} {object}: {message}")]
    Api {
        verb: &'static str,
        object: String,
        message: String,
    },
    #[error("certificatesigningrequest {csr} was denied: {reason}: {message}")]
    Denied {
        csr: String,
        reason: String,
        message: String,
    },
    #[error("certificatesigningrequest {csr} failed: {reason}: {message}")]
    Failed {
        csr: String,
        reason: String,
        message: String,
    },
    #[error("certificatesigningrequest {csr} was deleted before a certificate was issued")]
    Deleted { csr: String },
    #[error("certificatesigningrequest {csr} was replaced by another object of the same name")]
    Replaced { csr: String },
    #[error(
        "certificatesigningrequest {csr}: no certificate issued within {}; approve it with `kubectl certificate approve {csr}`",
        humantime::format_duration(*waited)
    )]
    Timeout { csr: String, waited: Duration },
    #[error("certificatesigningrequest {csr}: the issued certificate is refused: {problem}")]
    Mismatch { csr: String, problem: String },
    #[error("API client for certificate requests: {0}")]
    Client(String),
    #[error("signer CA {source_name}: {message}")]
    Ca {
        source_name: String,
        message: String,
    },
}

impl CsrError {
    /// A short, fixed label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::KeyGen { .. } | Self::Request(_) => "request",
            Self::Api { .. } | Self::Client(_) => "api",
            Self::Denied { .. } => "denied",
            Self::Failed { .. } => "failed",
            Self::Deleted { .. } | Self::Replaced { .. } => "deleted",
            Self::Timeout { .. } => "timeout",
            Self::Mismatch { .. } => "mismatch",
            Self::Ca { .. } => "ca",
        }
    }
}

/// The key algorithm of requested certificates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyAlg {
    #[default]
    EcdsaP256,
    EcdsaP384,
    /// Modulus size in bits: 2048, 3072 or 4096.
    Rsa(usize),
    Ed25519,
}

impl std::fmt::Display for KeyAlg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::EcdsaP256 => f.write_str("ecdsa-p256"),
            Self::EcdsaP384 => f.write_str("ecdsa-p384"),
            Self::Rsa(bits) => write!(f, "rsa-{bits}"),
            Self::Ed25519 => f.write_str("ed25519"),
        }
    }
}

impl std::str::FromStr for KeyAlg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Ok(match s.to_ascii_lowercase().as_str() {
            "ecdsa-p256" | "p256" | "ecdsa" => Self::EcdsaP256,
            "ecdsa-p384" | "p384" => Self::EcdsaP384,
            "rsa-2048" | "rsa" => Self::Rsa(2048),
            "rsa-3072" => Self::Rsa(3072),
            "rsa-4096" => Self::Rsa(4096),
            "ed25519" => Self::Ed25519,
            _ => {
                return Err(format!(
                    "key algorithm {s:?} is not one of ecdsa-p256, ecdsa-p384, rsa-2048, \
                     rsa-3072, rsa-4096, ed25519"
                ));
            }
        })
    }
}

impl KeyAlg {
    /// A new key, from the operating system's random generator. ECDSA and
    /// Ed25519 keys are made by ring (through rcgen). ring cannot make RSA
    /// keys, so the RustCrypto `rsa` crate makes them; ring still does all
    /// signing with them (the request's signature), so `rsa`'s
    /// non-constant-time private-key operations (RUSTSEC-2023-0071) are
    /// never used.
    fn generate(self) -> Result<rcgen::KeyPair, CsrError> {
        let err = |e: &dyn std::fmt::Display| CsrError::KeyGen {
            alg: self,
            message: e.to_string(),
        };
        match self {
            Self::EcdsaP256 => rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256),
            Self::EcdsaP384 => rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384),
            Self::Ed25519 => rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519),
            Self::Rsa(bits) => {
                use rsa::pkcs8::EncodePrivateKey;
                let key =
                    rsa::RsaPrivateKey::new(&mut rand_core::OsRng, bits).map_err(|e| err(&e))?;
                let der = key.to_pkcs8_der().map_err(|e| err(&e))?;
                let der = rustls::pki_types::PrivatePkcs8KeyDer::from(der.as_bytes());
                rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&der, &rcgen::PKCS_RSA_SHA256)
            }
        }
        .map_err(|e| err(&e))
    }

    /// The algorithm of a public key, if it is one certsync requests (RSA
    /// of any size, for callers that judge the size).
    pub fn of_spki(spki: &x509_parser::x509::SubjectPublicKeyInfo<'_>) -> Option<Self> {
        match spki.algorithm.algorithm.to_id_string().as_str() {
            "1.2.840.113549.1.1.1" => match spki.parsed().ok()? {
                x509_parser::public_key::PublicKey::RSA(k) => Some(Self::Rsa(k.key_size())),
                _ => None,
            },
            "1.2.840.10045.2.1" => {
                let curve = spki.algorithm.parameters.as_ref()?.as_oid().ok()?;
                match curve.to_id_string().as_str() {
                    "1.2.840.10045.3.1.7" => Some(Self::EcdsaP256),
                    "1.3.132.0.34" => Some(Self::EcdsaP384),
                    _ => None,
                }
            }
            "1.3.101.112" => Some(Self::Ed25519),
            _ => None,
        }
    }
}

/// Where the signer's CA certificates come from, to check the issued chain
/// (and published as `ca.crt`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CaSource {
    /// A PEM file on the node.
    File(PathBuf),
    /// A key of a ConfigMap, e.g. `kube-system/kube-root-ca.crt` `ca.crt`.
    ConfigMap {
        namespace: String,
        name: String,
        key: String,
    },
    /// Every ClusterTrustBundle (`certificates.k8s.io/v1beta1`) of a
    /// signer, in name order, as kubelet's projected volumes select them.
    TrustBundles { signer: String },
}

impl std::fmt::Display for CaSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::File(p) => write!(f, "file {}", p.display()),
            Self::ConfigMap {
                namespace,
                name,
                key,
            } => write!(f, "configmap {namespace}/{name} key {key}"),
            Self::TrustBundles { signer } => write!(f, "clustertrustbundles of signer {signer}"),
        }
    }
}

/// What a `csr:` mapping asks for.
#[derive(Debug, Clone, PartialEq)]
pub struct CsrSpec {
    pub signer: String,
    pub common_name: Option<String>,
    pub organizations: Vec<String>,
    pub dns: Vec<String>,
    pub ips: Vec<IpAddr>,
    pub key_alg: KeyAlg,
    /// `spec.expirationSeconds`; the signer's default when `None`.
    pub lifetime: Option<Duration>,
    /// Kubernetes usage names ("digital signature", "client auth", ...).
    pub usages: Vec<String>,
    pub ca: Option<CaSource>,
    /// Renewal point, as shares of the lifetime: uniformly drawn from
    /// `[renew.0, renew.1]` (kubelet: 0.7 to 0.9).
    pub renew: (f64, f64),
    /// How long a request may stay without a certificate.
    pub approval_timeout: Duration,
    /// Requests authenticate with this kubeconfig (a bootstrap token) until
    /// the mapping holds a valid pair, then with that pair.
    pub bootstrap: Option<PathBuf>,
    /// A kubeconfig written into the target beside the pair, pointing at it.
    pub write_kubeconfig: Option<String>,
}

// `renew` holds finite shares only (the config parser refuses anything
// else), so equality is an equivalence.
impl Eq for CsrSpec {}

/// The usages kubelet asks for with each well-known signer: a digital
/// signature, key encipherment only for RSA keys (RSA key exchange; ECDSA
/// and Ed25519 keys cannot encipher), and server or client auth. `None` for
/// other signers, whose usages the user must give.
pub fn default_usages(signer: &str, alg: KeyAlg) -> Option<Vec<String>> {
    let auth = match signer {
        KUBELET_SERVING => "server auth",
        KUBE_APISERVER_CLIENT | KUBE_APISERVER_CLIENT_KUBELET => "client auth",
        _ => return None,
    };
    let mut usages = vec!["digital signature".to_owned()];
    if matches!(alg, KeyAlg::Rsa(_)) {
        usages.push("key encipherment".to_owned());
    }
    usages.push(auth.to_owned());
    Some(usages)
}

/// The usage names the API accepts (`pkg/apis/certificates`).
pub const USAGES: &[&str] = &[
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];

/// A certificate's validity window, seconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub not_before: i64,
    pub not_after: i64,
}

impl Window {
    /// When to renew: `not_before` plus a share of the lifetime drawn
    /// uniformly from `[lo, hi]` (kubelet's `nextRotationDeadline`).
    pub fn deadline(&self, (lo, hi): (f64, f64), draw: f64) -> SystemTime {
        let life = (self.not_after - self.not_before).max(0) as f64;
        let at = self.not_before as f64 + life * (lo + (hi - lo) * draw);
        SystemTime::UNIX_EPOCH + Duration::from_secs_f64(at.max(0.0))
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
    let csr_pem = pkcs10(spec, &key.subject_public_key_info(), &|tbs| {
        key.sign(tbs).map_err(|e| e.to_string())
    })
    .map_err(CsrError::Request)?;
    Ok(Request {
        key_pem: key.serialize_pem(),
        csr_pem,
    })
}

/// Signs the DER of a request with the key (signature bytes, or why not).
pub type Sign<'a> = dyn Fn(&[u8]) -> Result<Vec<u8>, String> + 'a;

/// The PKCS#10 request (PEM) for the public key `spki` (DER): subject O=…
/// (each organization its own RDN, as Kubernetes reads groups) then CN, the
/// SANs in an extensionRequest, signed with `sign` (the key, through ring)
/// by `spec.key_alg`'s algorithm. Encoded with the RustCrypto `x509-cert`
/// types, as rcgen's subject holds one value per attribute type and
/// Kubernetes groups need several organizations.
pub fn pkcs10(spec: &CsrSpec, spki: &[u8], sign: &Sign<'_>) -> Result<String, String> {
    use x509_cert::attr::AttributeTypeAndValue;
    use x509_cert::der::asn1::{Any, BitString, Ia5String, OctetString, SetOfVec, Utf8StringRef};
    use x509_cert::der::pem::LineEnding;
    use x509_cert::der::{Decode, Encode, EncodePem};
    use x509_cert::ext::Extension;
    use x509_cert::ext::pkix::SubjectAltName;
    use x509_cert::ext::pkix::name::GeneralName;
    use x509_cert::name::{RdnSequence, RelativeDistinguishedName};
    use x509_cert::request::{CertReq, CertReqInfo, ExtensionReq, Version};
    use x509_cert::spki::{AlgorithmIdentifierOwned, ObjectIdentifier, SubjectPublicKeyInfoOwned};
    const CN: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.3");
    const O: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.4.10");
    const SAN: ObjectIdentifier = ObjectIdentifier::new_unwrap("2.5.29.17");
    fn e(what: &'static str) -> impl Fn(x509_cert::der::Error) -> String {
        move |err| format!("{what}: {err}")
    }

    let rdn = |oid, value: &str| -> Result<RelativeDistinguishedName, String> {
        let value = Any::encode_from(&Utf8StringRef::new(value).map_err(e("subject"))?)
            .map_err(e("subject"))?;
        let set =
            SetOfVec::try_from(vec![AttributeTypeAndValue { oid, value }]).map_err(e("subject"))?;
        Ok(RelativeDistinguishedName::from(set))
    };
    let mut rdns = Vec::new();
    for o in &spec.organizations {
        rdns.push(rdn(O, o)?);
    }
    if let Some(cn) = &spec.common_name {
        rdns.push(rdn(CN, cn)?);
    }
    let subject_empty = rdns.is_empty();

    let mut names = Vec::new();
    for d in &spec.dns {
        names.push(GeneralName::DnsName(
            Ia5String::new(d).map_err(e("DNS name"))?,
        ));
    }
    for ip in &spec.ips {
        let bytes = match ip {
            IpAddr::V4(v4) => v4.octets().to_vec(),
            IpAddr::V6(v6) => v6.octets().to_vec(),
        };
        names.push(GeneralName::IpAddress(
            OctetString::new(bytes).map_err(e("IP address"))?,
        ));
    }
    let mut attributes = SetOfVec::new();
    if !names.is_empty() {
        let san = SubjectAltName(names)
            .to_der()
            .map_err(e("subjectAltName"))?;
        let ext = Extension {
            extn_id: SAN,
            // RFC 5280 4.2.1.6: critical when the subject is empty.
            critical: subject_empty,
            extn_value: OctetString::new(san).map_err(e("subjectAltName"))?,
        };
        let attr = ExtensionReq(vec![ext])
            .try_into()
            .map_err(e("extensionRequest"))?;
        attributes.insert(attr).map_err(e("extensionRequest"))?;
    }
    let info = CertReqInfo {
        version: Version::V1,
        subject: RdnSequence(rdns),
        public_key: SubjectPublicKeyInfoOwned::from_der(spki).map_err(e("public key"))?,
        attributes,
    };
    let tbs = info.to_der().map_err(e("request"))?;
    let signature = sign(&tbs).map_err(|err| format!("signing: {err}"))?;
    let (alg, null_params) = match spec.key_alg {
        KeyAlg::EcdsaP256 => ("1.2.840.10045.4.3.2", false),
        KeyAlg::EcdsaP384 => ("1.2.840.10045.4.3.3", false),
        KeyAlg::Ed25519 => ("1.3.101.112", false),
        KeyAlg::Rsa(_) => ("1.2.840.113549.1.1.11", true),
    };
    let algorithm = AlgorithmIdentifierOwned {
        oid: ObjectIdentifier::new(alg).map_err(|err| format!("{alg}: {err}"))?,
        parameters: null_params.then(Any::null),
    };
    CertReq {
        info,
        algorithm,
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

/// Where an object stands.
enum State {
    Pending { approved: bool },
    Issued(Vec<u8>),
    Denied { reason: String, message: String },
    Failed { reason: String, message: String },
}

fn state(csr: &CertificateSigningRequest) -> State {
    let status = csr.status.as_ref();
    let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
    let find = |ty: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == ty && c.status == "True")
            .map(|c| {
                (
                    c.reason.clone().unwrap_or_default(),
                    c.message.clone().unwrap_or_default(),
                )
            })
    };
    if let Some((reason, message)) = find("Denied") {
        return State::Denied { reason, message };
    }
    if let Some((reason, message)) = find("Failed") {
        return State::Failed { reason, message };
    }
    let approved = find("Approved").is_some();
    match status.and_then(|s| s.certificate.as_ref()) {
        Some(cert) if approved && !cert.0.is_empty() => State::Issued(cert.0.clone()),
        _ => State::Pending { approved },
    }
}

/// What a wait has said once already.
#[derive(Default)]
struct Said {
    waiting: bool,
    approved: bool,
}

/// A mapping's CSR source.
pub struct CsrSource {
    pub spec: Arc<CsrSpec>,
    pub mapping: String,
    pub metrics: Arc<Metrics>,
    pub clock_skew: Duration,
    /// The mapping's target: where its live pair is, for self-renewal.
    pub target: PathBuf,
    /// How the process reaches the API server (`--kubeconfig` or the pod's).
    pub settings: ClientSettings,
    /// The newest request (name, uid), for Events about it.
    pub current: CsrRef,
    /// `--events`: failures are recorded on the request.
    pub events: Option<EventSink>,
    /// `--csr-renew-floor`: no request sooner than this (or 10 % of the
    /// lifetime) after the previous issuance ([`renewal`]).
    pub renew_floor: Duration,
}

/// A certificate obtained and checked.
pub struct Issued {
    pub bundle: Bundle,
    pub window: Window,
    pub csr: String,
}

impl CsrSource {
    /// The live pair's window if it still satisfies the mapping; `None`
    /// (logged) if a new certificate is needed now.
    pub async fn adopt(&self, client: &Client, live: Option<&Bundle>) -> Option<Window> {
        let live = live?;
        let (Some(cert), Some(key)) = (live.get(CERT_FILE), live.get(KEY_FILE)) else {
            return None;
        };
        // The CA is checked too when it can be read now; when it cannot,
        // the pair is given the benefit of the doubt rather than replaced
        // because of an API hiccup.
        let ca = match self.ca(client).await {
            Ok(ca) => ca,
            Err(e) => {
                tracing::warn!(mapping = %self.mapping, error = %e, "cannot read the signer CA; checking the live certificate without it");
                None
            }
        };
        match check(
            &self.spec,
            cert,
            key,
            ca.as_deref(),
            SystemTime::now(),
            self.clock_skew,
        ) {
            Ok(w) => Some(w),
            Err(problem) => {
                tracing::info!(mapping = %self.mapping, %problem, "the live certificate does not satisfy the mapping; requesting a new one");
                None
            }
        }
    }

    /// Requests, waits for and checks one certificate.
    pub async fn obtain(&self, client: &Client) -> Result<Issued, CsrError> {
        let spec = Arc::clone(&self.spec);
        let request = tokio::task::spawn_blocking(move || new_request(&spec))
            .await
            .map_err(|e| CsrError::Request(e.to_string()))??;
        let api: Api<CertificateSigningRequest> = Api::all(client.clone());
        let object = CertificateSigningRequest {
            metadata: ObjectMeta {
                generate_name: Some(generate_name(&self.mapping)),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(request.csr_pem.clone().into_bytes()),
                signer_name: self.spec.signer.clone(),
                usages: Some(self.spec.usages.clone()),
                expiration_seconds: self
                    .spec
                    .lifetime
                    .map(|d| i32::try_from(d.as_secs()).unwrap_or(i32::MAX)),
                ..Default::default()
            },
            status: None,
        };
        let created = timed(
            "create",
            "certificatesigningrequest",
            api.create(&PostParams::default(), &object),
        )
        .await?;
        let name = created.metadata.name.clone().unwrap_or_default();
        let uid = created.metadata.uid.clone().unwrap_or_default();
        *self
            .current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((name.clone(), uid.clone()));
        tracing::info!(mapping = %self.mapping, csr = %name, signer = %self.spec.signer, "certificate requested");
        self.metrics.csr_pending(&self.mapping, true);
        let issued = self.wait(&api, &name, &uid, created).await;
        self.metrics.csr_pending(&self.mapping, false);
        let cert = issued?;
        let ca = self.ca(client).await?;
        let window = check(
            &self.spec,
            &cert,
            request.key_pem.as_bytes(),
            ca.as_deref(),
            SystemTime::now(),
            self.clock_skew,
        )
        .map_err(|problem| CsrError::Mismatch {
            csr: name.clone(),
            problem,
        })?;
        let mut bundle = Bundle::default();
        let origin = format!("certificatesigningrequest {name}");
        let insert = |b: &mut Bundle, file: &str, bytes: Vec<u8>| {
            b.insert(file, bytes, &origin)
                .map_err(|e| CsrError::Request(e.to_string()))
        };
        insert(&mut bundle, CERT_FILE, cert)?;
        insert(&mut bundle, KEY_FILE, request.key_pem.into_bytes())?;
        if let Some(ca) = ca {
            insert(&mut bundle, CA_FILE, ca)?;
        }
        if let Some(file) = &self.spec.write_kubeconfig {
            insert(&mut bundle, file, self.kubeconfig().await?.into_bytes())?;
        }
        Ok(Issued {
            bundle,
            window,
            csr: name,
        })
    }

    /// Waits for `name` (whose uid is `uid`) to be issued, denied, failed
    /// or deleted, or for the approval timeout: `created`, then the request
    /// as `source::watch`'s loop sees it (listed, then watched; a watch
    /// that fails, stalls or is ended at once by the server is retried
    /// with backoff there, so a wait never spins).
    async fn wait(
        &self,
        api: &Api<CertificateSigningRequest>,
        name: &str,
        uid: &str,
        created: CertificateSigningRequest,
    ) -> Result<Vec<u8>, CsrError> {
        let deadline = tokio::time::Instant::now() + self.spec.approval_timeout;
        let mut said = Said::default();
        if let Some(done) = self.settled(name, uid, &created, &mut said) {
            return done;
        }
        // A consistent list (not from the cache, whose copy may predate
        // the create) and no paging: one object.
        let mut config = watcher::Config::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(watch_seconds(self.settings.watch_timeout));
        config.page_size = None;
        let events = Watch::new(api.clone(), config)
            .named(format!("certificatesigningrequest {name}"))
            .stream();
        let mut events = std::pin::pin!(events);
        // Whether the list being reported holds the request.
        let mut listed = false;
        loop {
            let Ok(event) = tokio::time::timeout_at(deadline, events.next()).await else {
                return Err(CsrError::Timeout {
                    csr: name.into(),
                    waited: self.spec.approval_timeout,
                });
            };
            let obj = match event {
                Some(Ok(Event::Init)) => {
                    listed = false;
                    continue;
                }
                Some(Ok(Event::InitApply(o) | Event::Apply(o))) => {
                    listed = true;
                    o
                }
                Some(Ok(Event::InitDone)) if listed => continue,
                Some(Ok(Event::InitDone | Event::Delete(_))) => {
                    return Err(CsrError::Deleted { csr: name.into() });
                }
                Some(Err(e @ WatchError::Stalled { .. })) => {
                    tracing::warn!(mapping = %self.mapping, csr = %name, "{e}");
                    continue;
                }
                Some(Err(e)) => {
                    tracing::debug!(mapping = %self.mapping, csr = %name, error = %e, "watch failed; watching again");
                    continue;
                }
                // The loop never ends; if it did, that is a failure to
                // retry, not a verdict.
                None => {
                    return Err(CsrError::Api {
                        verb: "watch",
                        object: format!("certificatesigningrequest {name}"),
                        message: "the watch ended".into(),
                    });
                }
            };
            if let Some(done) = self.settled(name, uid, &obj, &mut said) {
                return done;
            }
        }
    }

    /// What `obj` says about the request: issued, denied, failed or
    /// replaced (`Some`), or still pending (`None`, said once each: waiting
    /// for approval, approved).
    fn settled(
        &self,
        name: &str,
        uid: &str,
        obj: &CertificateSigningRequest,
        said: &mut Said,
    ) -> Option<Result<Vec<u8>, CsrError>> {
        if obj.metadata.uid.as_deref() != Some(uid) {
            return Some(Err(CsrError::Replaced { csr: name.into() }));
        }
        match state(obj) {
            State::Issued(cert) => Some(Ok(cert)),
            State::Denied { reason, message } => Some(Err(CsrError::Denied {
                csr: name.into(),
                reason,
                message,
            })),
            State::Failed { reason, message } => Some(Err(CsrError::Failed {
                csr: name.into(),
                reason,
                message,
            })),
            State::Pending { approved: true } => {
                if !said.approved {
                    said.approved = true;
                    tracing::info!(mapping = %self.mapping, csr = %name, "approved; waiting for the signer to issue the certificate");
                }
                None
            }
            State::Pending { approved: false } => {
                if !said.waiting {
                    said.waiting = true;
                    tracing::warn!(
                        mapping = %self.mapping,
                        csr = %name,
                        signer = %self.spec.signer,
                        "waiting for approval; an administrator can approve it with: kubectl certificate approve {name}"
                    );
                }
                None
            }
        }
    }

    /// The client configuration requests are made with: the bootstrap
    /// kubeconfig's, or the process's.
    async fn client_config(&self) -> Result<kube::Config, CsrError> {
        let err = |e: ClientError| CsrError::Client(e.to_string());
        match &self.spec.bootstrap {
            Some(path) => read_kubeconfig(path).await.map_err(err),
            None => self.settings.config().await.map_err(err),
        }
    }

    /// The kubeconfig published beside the pair: the same cluster, and the
    /// pair itself as the client certificate, by relative paths (resolved
    /// against the kubeconfig's directory, the target, wherever the
    /// consumer mounts it).
    async fn kubeconfig(&self) -> Result<String, CsrError> {
        Ok(client_cert_kubeconfig(
            &self.client_config().await?,
            CERT_FILE,
            KEY_FILE,
        ))
    }

    /// The client for the next request. With a bootstrap kubeconfig: its
    /// credentials while there is no valid pair (`own_pair` false), else
    /// its cluster with the live pair as client certificate, as kubelet's
    /// TLS bootstrap renews with its own certificate. Without one: the
    /// process's client. `None` on shutdown.
    pub async fn client(
        &self,
        clients: &mut watch::Receiver<Option<Client>>,
        shutdown: &mut watch::Receiver<bool>,
        own_pair: bool,
    ) -> Option<Client> {
        if self.spec.bootstrap.is_none() {
            return super::newest_client(clients, shutdown).await;
        }
        let mut failures = 0;
        loop {
            let built = match self.client_config().await {
                Ok(mut config) => {
                    if own_pair {
                        let path = |f: &str| Some(self.target.join(f).display().to_string());
                        config.auth_info = kube::config::AuthInfo {
                            client_certificate: path(CERT_FILE),
                            client_key: path(KEY_FILE),
                            ..Default::default()
                        };
                    }
                    self.settings
                        .client_for(&config)
                        .map_err(|e| CsrError::Client(e.to_string()))
                }
                Err(e) => Err(e),
            };
            match built {
                Ok(c) => return Some(c),
                Err(e) => {
                    failures += 1;
                    let retry = crate::backoff(Duration::from_secs(1), failures).min(RETRY_CAP);
                    tracing::error!(mapping = %self.mapping, error = %e, retry_in = ?retry, "cannot build the API client for certificate requests");
                    tokio::select! {
                        () = crate::sync::stopped(shutdown) => return None,
                        () = tokio::time::sleep(retry) => {}
                    }
                }
            }
        }
    }

    /// The signer's CA certificates (PEM), if a CA is configured.
    async fn ca(&self, client: &Client) -> Result<Option<Vec<u8>>, CsrError> {
        let Some(source) = &self.spec.ca else {
            return Ok(None);
        };
        let err = |message: String| CsrError::Ca {
            source_name: source.to_string(),
            message,
        };
        let pem = match source {
            CaSource::File(path) => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || crate::files::read_regular(&path, CA_LIMIT))
                    .await
                    .map_err(|e| err(e.to_string()))?
                    .map_err(|e| err(e.problem()))?
            }
            CaSource::ConfigMap {
                namespace,
                name,
                key,
            } => {
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
                let cm = timed("get", &source.to_string(), api.get(name))
                    .await
                    .map_err(|e| err(e.to_string()))?;
                cm.data
                    .and_then(|mut d| d.remove(key))
                    .map(String::into_bytes)
                    .or_else(|| cm.binary_data.and_then(|mut d| d.remove(key)).map(|b| b.0))
                    .ok_or_else(|| err(format!("key {key:?} is missing")))?
            }
            CaSource::TrustBundles { signer } => {
                use super::trust_bundle::{Selection, TrustBundleError, read};
                let selection = Selection::Signer {
                    signer: signer.clone(),
                    labels: Vec::new(),
                };
                match tokio::time::timeout(CALL_TIMEOUT, read(client.clone(), &selection)).await {
                    Ok(Ok(pem)) => pem,
                    Ok(Err(e @ TrustBundleError::NotServed)) => {
                        return Err(err(format!("{e}; give ca=file: or ca=configmap: instead")));
                    }
                    Ok(Err(e)) => return Err(err(e.to_string())),
                    Err(_) => return Err(err(format!("no answer within {CALL_TIMEOUT:?}"))),
                }
            }
        };
        if CertificateDer::pem_slice_iter(&pem).next().is_none() {
            return Err(err("holds no CERTIFICATE block".into()));
        }
        Ok(Some(pem))
    }

    /// Keeps the mapping's certificate current until shutdown: adopts the
    /// live pair, then renews at the deadline, retrying failures with
    /// backoff. Publishes every issued bundle into `tx`.
    pub async fn run(
        self,
        mut clients: watch::Receiver<Option<Client>>,
        live: Option<Bundle>,
        tx: watch::Sender<Option<Update>>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let Some(client) = self
            .client(&mut clients, &mut shutdown, live.is_some())
            .await
        else {
            return;
        };
        let mut current = self.adopt(&client, live.as_ref()).await;
        // When the live certificate was issued to us: an adopted one, at
        // its notBefore (so a restart loop cannot request faster either).
        let mut issued_at: Option<SystemTime> = None;
        let mut held = 0u32;
        let mut failures = 0u32;
        loop {
            let wait = if failures > 0 {
                crate::backoff(Duration::from_secs(2), failures).min(RETRY_CAP)
            } else {
                match current {
                    Some(w) => {
                        let since = issued_at.unwrap_or_else(|| {
                            SystemTime::UNIX_EPOCH
                                + Duration::from_secs(u64::try_from(w.not_before).unwrap_or(0))
                        });
                        let next = renewal::next(
                            w,
                            self.spec.renew,
                            crate::random_fraction(),
                            since,
                            self.renew_floor,
                            held,
                            crate::random_fraction(),
                        );
                        let renew_at = validate::rfc3339(validate::unix_seconds(next.at));
                        match next.held {
                            Some(why) => {
                                held = held.saturating_add(1);
                                self.metrics.csr_error(&self.mapping, "renewal_floor");
                                tracing::warn!(mapping = %self.mapping, %renew_at, not_after = %validate::rfc3339(w.not_after), "renewal held back: {why}");
                            }
                            None => {
                                held = 0;
                                tracing::info!(mapping = %self.mapping, %renew_at, "certificate is current; renewal scheduled");
                            }
                        }
                        next.at
                            .duration_since(SystemTime::now())
                            .unwrap_or_default()
                    }
                    None => Duration::ZERO,
                }
            };
            tokio::select! {
                () = crate::sync::stopped(&mut shutdown) => return,
                () = tokio::time::sleep(wait) => {}
            }
            // The live pair authenticates renewals only while it is valid.
            let own_pair =
                current.is_some_and(|w| w.not_after > validate::unix_seconds(SystemTime::now()));
            let Some(client) = self.client(&mut clients, &mut shutdown, own_pair).await else {
                return;
            };
            let result = tokio::select! {
                () = crate::sync::stopped(&mut shutdown) => return,
                r = self.obtain(&client) => r,
            };
            match result {
                Ok(issued) => {
                    tracing::info!(mapping = %self.mapping, csr = %issued.csr, not_after = %validate::rfc3339(issued.window.not_after), "certificate issued");
                    failures = 0;
                    issued_at = Some(SystemTime::now());
                    let now = validate::unix_seconds(SystemTime::now());
                    // A certificate issued already due (a CA about to expire
                    // clips it) may end before the live one: the live pair
                    // stays while it is valid and outlasts it.
                    match current {
                        Some(live)
                            if live.not_after > now && live.not_after > issued.window.not_after =>
                        {
                            tracing::warn!(mapping = %self.mapping, csr = %issued.csr, not_after = %validate::rfc3339(issued.window.not_after), live_not_after = %validate::rfc3339(live.not_after), "the issued certificate expires before the live one; keeping the live pair");
                        }
                        prev => {
                            if let Some(prev) = prev {
                                let lived = now - prev.not_before;
                                self.metrics.csr_rotated(&self.mapping, lived.max(0) as f64);
                            }
                            current = Some(issued.window);
                            super::publish(&tx, Ok(issued.bundle));
                        }
                    }
                }
                Err(e) => {
                    failures = failures.saturating_add(1);
                    self.metrics.csr_error(&self.mapping, e.reason());
                    if let Some(events) = &self.events {
                        events.request_failed(e.to_string());
                    }
                    tracing::error!(mapping = %self.mapping, error = %e, attempt = failures, "certificate request failed; retrying with backoff");
                }
            }
        }
    }

    /// `run --once`: the live pair if it satisfies the mapping, else one
    /// request waited for (up to the approval timeout).
    pub async fn once(
        &self,
        client: &Client,
        live: Option<&Bundle>,
    ) -> Result<Option<Bundle>, CsrError> {
        if self.adopt(client, live).await.is_some() {
            return Ok(None);
        }
        self.obtain(client).await.map(|i| Some(i.bundle))
    }
}

/// An API call under [`CALL_TIMEOUT`], its error named.
async fn timed<T>(
    verb: &'static str,
    object: &str,
    call: impl Future<Output = kube::Result<T>>,
) -> Result<T, CsrError> {
    let err = |message: String| CsrError::Api {
        verb,
        object: object.to_owned(),
        message,
    };
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(err(crate::error_chain(&e))),
        Err(_) => Err(err(format!("no answer within {CALL_TIMEOUT:?}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> CsrSpec {
        CsrSpec {
            signer: "example.com/test".into(),
            common_name: Some("svc".into()),
            organizations: Vec::new(),
            dns: vec!["svc.example".into()],
            ips: vec!["10.0.0.1".parse().unwrap()],
            key_alg: KeyAlg::EcdsaP256,
            lifetime: None,
            usages: vec!["digital signature".into(), "server auth".into()],
            ca: None,
            renew: (0.7, 0.9),
            approval_timeout: Duration::from_secs(900),
            bootstrap: None,
            write_kubeconfig: None,
        }
    }

    /// Signs `req` with a throwaway CA as a signer would, with `tweak`
    /// applied to what is issued.
    fn issue(req: &Request, tweak: impl FnOnce(&mut rcgen::CertificateParams)) -> (String, String) {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = rcgen::Issuer::new(ca_params, ca_key);
        let key = rcgen::KeyPair::from_pem(&req.key_pem).unwrap();
        let mut params = rcgen::CertificateParams::new(vec!["svc.example".to_owned()]).unwrap();
        params
            .subject_alt_names
            .push(rcgen::SanType::IpAddress("10.0.0.1".parse().unwrap()));
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "svc");
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        tweak(&mut params);
        let cert = params.signed_by(&key, &issuer).unwrap();
        (cert.pem(), ca.pem())
    }

    #[test]
    fn issued_certificates_are_checked_against_the_request() {
        let s = spec();
        let req = new_request(&s).unwrap();
        let now = SystemTime::now();
        let skew = Duration::from_secs(300);
        let (cert, ca) = issue(&req, |_| {});
        let key = req.key_pem.as_bytes();
        assert!(check(&s, cert.as_bytes(), key, Some(ca.as_bytes()), now, skew).is_ok());

        let (_, other_ca) = issue(&req, |_| {});
        let e = check(
            &s,
            cert.as_bytes(),
            key,
            Some(other_ca.as_bytes()),
            now,
            skew,
        )
        .unwrap_err();
        assert!(e.contains("does not chain"), "{e}");

        let (extra_san, _) = issue(&req, |p| {
            p.subject_alt_names
                .push(rcgen::SanType::DnsName("evil.example".try_into().unwrap()));
        });
        let e = check(&s, extra_san.as_bytes(), key, None, now, skew).unwrap_err();
        assert!(e.contains("DNS names"), "{e}");

        let (client_only, _) = issue(&req, |p| {
            p.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        });
        let e = check(&s, client_only.as_bytes(), key, None, now, skew).unwrap_err();
        assert!(e.contains("server auth"), "{e}");

        let (wrong_cn, _) = issue(&req, |p| {
            p.distinguished_name
                .push(rcgen::DnType::CommonName, "system:masters");
        });
        let e = check(&s, wrong_cn.as_bytes(), key, None, now, skew).unwrap_err();
        assert!(e.contains("subject is [CN=\"system:masters\"]"), "{e}");

        let other = new_request(&s).unwrap();
        let e = check(
            &s,
            cert.as_bytes(),
            other.key_pem.as_bytes(),
            None,
            now,
            skew,
        )
        .unwrap_err();
        assert!(e.contains("does not match"), "{e}");

        let mut p384 = s.clone();
        p384.key_alg = KeyAlg::EcdsaP384;
        let e = check(&p384, cert.as_bytes(), key, None, now, skew).unwrap_err();
        assert!(e.contains("key algorithm is ecdsa-p256"), "{e}");
    }

    /// A signer's answer is held to exactly what was asked: an extra
    /// subject attribute, usage, name kind, CA:TRUE or unknown critical
    /// extension is refused, naming the field.
    #[test]
    fn issued_certificates_with_more_than_was_asked_are_refused() {
        use rcgen::{ExtendedKeyUsagePurpose as Eku, KeyUsagePurpose as Ku};
        let s = spec();
        let req = new_request(&s).unwrap();
        let (now, skew) = (SystemTime::now(), Duration::from_secs(300));
        let key = req.key_pem.as_bytes();
        let refused = |tweak: &dyn Fn(&mut rcgen::CertificateParams)| {
            let (cert, ca) = issue(&req, tweak);
            check(&s, cert.as_bytes(), key, Some(ca.as_bytes()), now, skew).unwrap_err()
        };
        let (plain, ca) = issue(&req, |p| p.is_ca = rcgen::IsCa::ExplicitNoCa);
        check(&s, plain.as_bytes(), key, Some(ca.as_bytes()), now, skew)
            .expect("CA:FALSE is what a leaf says");
        type Tweak<'a> = &'a dyn Fn(&mut rcgen::CertificateParams);
        let cases: [(&str, Tweak<'_>); 9] = [
            ("subject", &|p| {
                p.distinguished_name
                    .push(rcgen::DnType::OrganizationName, "system:masters");
            }),
            ("subject", &|p| {
                p.distinguished_name
                    .push(rcgen::DnType::OrganizationalUnitName, "ops");
            }),
            ("extended key usage", &|p| {
                p.extended_key_usages.push(Eku::ClientAuth);
            }),
            ("extended key usage", &|p| {
                p.extended_key_usages.push(Eku::CodeSigning);
            }),
            ("key usage", &|p| p.key_usages.push(Ku::KeyCertSign)),
            ("key usage", &|p| p.key_usages.clear()),
            ("CA:TRUE", &|p| {
                p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
            }),
            ("critical extension 1.2.3.4", &|p| {
                let mut ext = rcgen::CustomExtension::from_oid_content(&[1, 2, 3, 4], vec![5, 0]);
                ext.set_criticality(true);
                p.custom_extensions.push(ext);
            }),
            ("subjectAltName holds a URI", &|p| {
                p.subject_alt_names
                    .push(rcgen::SanType::URI("spiffe://x/y".try_into().unwrap()));
            }),
        ];
        for (want, tweak) in cases {
            let e = refused(tweak);
            assert!(e.contains(want), "{want}: {e}");
        }

        // Not strict DER (BOOLEAN TRUE as 0x01): one parser at least
        // refuses it, so the certificate is refused.
        let (crit, _) = issue(&req, |p| p.is_ca = rcgen::IsCa::ExplicitNoCa);
        let der = CertificateDer::from_pem_slice(crit.as_bytes())
            .unwrap()
            .to_vec();
        let at = der.windows(3).position(|w| w == [1, 1, 0xff]).unwrap();
        let mut ber = der.clone();
        ber[at + 2] = 1;
        let pem = crate::bundle::certificate_pem(&ber);
        let e = check(&s, pem.as_bytes(), key, None, now, skew).unwrap_err();
        assert!(e.contains("leaf certificate"), "{e}");
    }

    /// Every algorithm's request parses, its signature verifies, and it
    /// carries the subject (each organization its own RDN) and the SANs.
    #[test]
    fn every_key_algorithm_makes_a_request_that_verifies() {
        use x509_parser::certification_request::X509CertificationRequest;
        use x509_parser::extensions::ParsedExtension;
        use x509_parser::prelude::FromDer;
        for alg in [
            KeyAlg::EcdsaP256,
            KeyAlg::EcdsaP384,
            KeyAlg::Ed25519,
            KeyAlg::Rsa(2048),
        ] {
            let mut s = spec();
            s.key_alg = alg;
            s.organizations = vec!["system:masters".into(), "team-a".into()];
            let r = new_request(&s).unwrap();
            let der = rustls_pki_types::CertificateSigningRequestDer::from_pem_slice(
                r.csr_pem.as_bytes(),
            )
            .unwrap();
            let (_, req) = X509CertificationRequest::from_der(der.as_ref()).unwrap();
            req.verify_signature()
                .unwrap_or_else(|e| panic!("{alg}: {e:?}"));
            let subject = &req.certification_request_info.subject;
            assert_eq!(
                subject.to_string(),
                "O=system:masters, O=team-a, CN=svc",
                "{alg}"
            );
            let sans: Vec<String> = req
                .requested_extensions()
                .into_iter()
                .flatten()
                .filter_map(|e| match e {
                    ParsedExtension::SubjectAlternativeName(san) => Some(san),
                    _ => None,
                })
                .flat_map(|san| san.general_names.iter().map(|n| n.to_string()))
                .collect();
            assert_eq!(
                sans,
                ["DNSName(svc.example)", "IPAddress(0a:00:00:01)"],
                "{alg}"
            );
            assert!(
                r.csr_pem.starts_with("-----BEGIN CERTIFICATE REQUEST-----"),
                "{alg}"
            );
            assert!(
                r.key_pem.starts_with("-----BEGIN PRIVATE KEY-----"),
                "{alg}"
            );
            assert!(!format!("{r:?}").contains("PRIVATE"), "Debug is redacted");
        }
    }

    #[test]
    fn usages_default_per_signer() {
        assert_eq!(
            default_usages(KUBELET_SERVING, KeyAlg::EcdsaP256).unwrap(),
            ["digital signature", "server auth"]
        );
        assert_eq!(
            default_usages(KUBELET_SERVING, KeyAlg::Rsa(2048)).unwrap(),
            ["digital signature", "key encipherment", "server auth"]
        );
        assert_eq!(
            default_usages(KUBE_APISERVER_CLIENT, KeyAlg::Ed25519).unwrap(),
            ["digital signature", "client auth"]
        );
        assert!(default_usages("example.com/x", KeyAlg::EcdsaP256).is_none());
    }

    #[test]
    fn deadlines_fall_in_the_renewal_window() {
        let w = Window {
            not_before: 1_000,
            not_after: 2_000,
        };
        let at = |draw| validate::unix_seconds(w.deadline((0.7, 0.9), draw));
        assert_eq!(at(0.0), 1_700);
        assert_eq!(at(0.5), 1_800);
        assert_eq!(at(1.0), 1_900);
        for _ in 0..100 {
            let t = at(crate::random_fraction());
            assert!((1_700..=1_900).contains(&t), "{t}");
        }
    }

    #[test]
    fn generate_names_are_dns_labels() {
        assert_eq!(
            generate_name("/etc/certs/kube-scheduler"),
            "certsync-etc-certs-kube-scheduler-"
        );
        assert_eq!(generate_name("Client_Cert"), "certsync-client-cert-");
        assert_eq!(generate_name("..."), "certsync-");
        assert!(generate_name(&"x".repeat(100)).len() <= 50);
    }
}
