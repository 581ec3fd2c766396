//! `csr:SIGNER`: certificates obtained through the Kubernetes CSR API, as
//! kubelet's certificate manager does. A key made in memory; a request
//! created (`generateName: certsync-...`) and watched by name, its uid
//! checked on every event, until issued, denied, failed, deleted or timed
//! out. The chain must pass [`check`]; it is published with its key, into
//! one revision, so the pair is never seen mismatched. Rotation:
//! [`renewal`]; after a restart the live revision is the state (a pending
//! request is abandoned: its key lived only in memory).
//!
//! Invariants: the key is never logged (its type's `Debug` is redacted),
//! never sent (only the PKCS#10 request is), and reaches disk only in the
//! revision holding the certificate issued for it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::client::{ApiError, ClientSettings, client_cert_kubeconfig};
use crate::bundle::{Bundle, CA_FILE, CERT_FILE, KEY_FILE};
use crate::validate;
pub use crate::x509::KeyAlg;

mod issued;
mod request;
mod spec;
#[cfg(test)]
mod tests;
mod wait;

pub use request::{San, Sign, generate_name, pkcs10};
pub(crate) use request::{
    der_err, extension, new_request, oid, san_extension, signature_algorithm, subject,
};

pub(crate) mod renewal;
pub(crate) mod renewing;
pub use issued::check;
mod run;

/// [`check`] on the blocking pool: the certificate is the signer's answer
/// and the CA an object others write.
async fn check_off_runtime(
    spec: &Arc<CsrSpec>,
    cert: &[u8],
    key: &[u8],
    ca: Option<&[u8]>,
    skew: Duration,
) -> Result<Window, CsrError> {
    let (spec, cert, key) = (Arc::clone(spec), cert.to_vec(), key.to_vec());
    let ca = ca.map(<[u8]>::to_vec);
    crate::blocking(move || check(&spec, &cert, &key, ca.as_deref(), SystemTime::now(), skew))
        .await?
}
pub use super::error::csr::CsrError;
pub use super::usage::USAGES;
pub(crate) use super::usage::{CaUsage, eku_usage, ku_names, leaf_usages};
pub use spec::{CaSource, CsrSource, CsrSpec, Window};

/// The signers whose usages certsync knows (kube-controller-manager's).
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";

pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";

pub const KUBE_APISERVER_CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// Every API call but the watch itself must answer within this.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// CA files and ConfigMap values are small; a bundle may not exceed 1 MiB.
const CA_LIMIT: u64 = validate::MAX_BUNDLE_SIZE as u64;

/// The usages kubelet asks for with each well-known signer: digital
/// signature, key encipherment for RSA keys only (the others cannot
/// encipher), and server or client auth. `None` for other signers.
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

/// A certificate obtained and checked.
pub struct Issued {
    pub bundle: Bundle,
    pub window: Window,
    pub csr: String,
}

impl CsrSource {
    /// The live pair's window if it still fits; `None` (logged): request.
    pub async fn adopt(&self, client: &Client, live: Option<&Bundle>) -> Option<Window> {
        let live = live?;
        let (Some(cert), Some(key)) = (live.get(CERT_FILE), live.get(KEY_FILE)) else {
            return None;
        };
        // A CA that cannot be read now gives the pair the benefit of the
        // doubt rather than replacing it for an API hiccup.
        let ca = self.ca(client).await;
        self.metrics.source_up(&self.mapping, ca.is_ok());
        let ca = ca.unwrap_or_else(|e| {
            tracing::warn!(mapping = %self.mapping, error = %e, "cannot read the signer CA; checking the live certificate without it");
            None
        });
        match check_off_runtime(&self.spec, cert, key, ca.as_deref(), self.clock_skew).await {
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
        let request = crate::blocking(move || new_request(&spec))
            .await
            .map_err(|e| CsrError::Request(Box::new(CsrError::Panicked(e))))??;
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
        *crate::lock(&self.current) = Some((name.clone(), uid.clone()));
        tracing::info!(mapping = %self.mapping, csr = %name, signer = %self.spec.signer, "certificate requested");
        self.metrics.csr_pending(&self.mapping, true);
        let issued = self.wait(&api, &name, &uid, created).await;
        self.metrics.csr_pending(&self.mapping, false);
        let cert = issued?;
        let ca = self.ca(client).await?;
        let window = check_off_runtime(
            &self.spec,
            &cert,
            request.key_pem.as_bytes(),
            ca.as_deref(),
            self.clock_skew,
        )
        .await
        .map_err(|problem| CsrError::Mismatch {
            csr: name.clone(),
            problem: Box::new(problem),
        })?;
        let mut bundle = Bundle::default();
        let origin = format!("certificatesigningrequest {name}");
        let insert = |b: &mut Bundle, file: &str, bytes: Vec<u8>| {
            b.insert(file, bytes, &origin)
                .map_err(|e| CsrError::Request(Box::new(CsrError::IssuedBundle(e))))
        };
        insert(&mut bundle, CERT_FILE, cert)?;
        insert(&mut bundle, KEY_FILE, request.key_pem.into_bytes())?;
        if let Some(ca) = ca {
            insert(&mut bundle, CA_FILE, ca)?;
        }
        // The same cluster, the pair by relative paths (wherever mounted).
        if let Some(file) = &self.spec.write_kubeconfig {
            let config = self.client_config().await?;
            let kubeconfig = client_cert_kubeconfig(&config, CERT_FILE, KEY_FILE);
            insert(&mut bundle, file, kubeconfig.into_bytes())?;
        }
        Ok(Issued {
            bundle,
            window,
            csr: name,
        })
    }

    /// The bootstrap kubeconfig's client configuration (its current
    /// context), or the process's.
    async fn client_config(&self) -> Result<kube::Config, CsrError> {
        let bootstrap = (self.spec.bootstrap.clone()).map(|path| ClientSettings {
            kubeconfig: Some(path),
            ..ClientSettings::default()
        });
        let settings = bootstrap.as_ref().unwrap_or(&self.settings);
        Ok(settings.load().await.map_err(CsrError::Client)?.config)
    }

    /// The signer's CA certificates (PEM), if a CA is configured.
    async fn ca(&self, client: &Client) -> Result<Option<Vec<u8>>, CsrError> {
        let Some(source) = &self.spec.ca else {
            return Ok(None);
        };
        let err = |problem| CsrError::Ca {
            source_name: source.to_string(),
            problem: Box::new(problem),
        };
        let pem = match source {
            CaSource::File(path) => {
                let path = path.clone();
                crate::blocking(move || crate::files::read_steering(&path, CA_LIMIT))
                    .await
                    .map_err(|e| err(CsrError::Panicked(e)))?
                    .map_err(|e| err(CsrError::CaFile(e)))?
            }
            CaSource::ConfigMap {
                namespace,
                name,
                key,
            } => {
                let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
                let cm = timed("get", &source.to_string(), api.get(name))
                    .await
                    .map_err(err)?;
                use super::secret::Payload;
                cm.value(key)
                    .ok_or_else(|| err(CsrError::CaNoKey { key: key.clone() }))?
            }
            CaSource::TrustBundles { signer } => {
                use super::trust_bundle::{Selection, read};
                let selection = Selection::Signer {
                    signer: signer.clone(),
                    labels: Vec::new(),
                };
                match tokio::time::timeout(CALL_TIMEOUT, read(client.clone(), &selection)).await {
                    Ok(Ok(pem)) => pem,
                    Ok(Err(source)) => return Err(err(CsrError::CaBundles { source })),
                    Err(_) => return Err(err(CsrError::CaTimeout(CALL_TIMEOUT))),
                }
            }
        };
        crate::blocking(move || {
            let has_cert = CertificateDer::pem_slice_iter(&pem).next().is_some();
            has_cert
                .then_some(Some(pem))
                .ok_or(CsrError::CaNoCertificate)
        })
        .await
        .unwrap_or_else(|e| Err(CsrError::Panicked(e)))
        .map_err(err)
    }
}

/// An API call under [`CALL_TIMEOUT`], its error named.
async fn timed<T>(
    verb: &'static str,
    object: &str,
    call: impl Future<Output = kube::Result<T>>,
) -> Result<T, CsrError> {
    let object = || object.to_owned();
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(source)) => Err(CsrError::Api(ApiError {
            verb,
            object: object(),
            source,
        })),
        Err(_) => Err(CsrError::ApiTimeout {
            verb,
            object: object(),
            waited: CALL_TIMEOUT,
        }),
    }
}
