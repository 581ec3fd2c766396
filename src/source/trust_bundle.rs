//! `clustertrustbundle:` sources, published as `ca.crt` as kubelet's
//! projected volumes publish them: one bundle by name, or every bundle of a
//! signer (narrowed by `label=KEY=VALUE`) joined in name order, each
//! certificate once. The selection is watched; an API not served, a
//! selection matching nothing or one too large ([`joined`]) is reported and
//! the last good bundle stays.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::certificates::v1beta1::ClusterTrustBundle;
use kube::runtime::watcher;
use kube::{Api, Client};

use super::watch::{Listed, Watch, WatchError};
use tokio::sync::watch;

pub use super::error::trust_bundle::TrustBundleError;
use super::error::{SourceError, Update};
use crate::bundle::{Bundle, CA_FILE};
use crate::metrics::Metrics;
use crate::validate::{MAX_BUNDLE_SIZE, MAX_TRUST_BUNDLES_SIZE};

/// Which bundles a mapping publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    Name(String),
    Signer {
        signer: String,
        /// All required.
        labels: Vec<(String, String)>,
    },
}

impl std::fmt::Display for Selection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Name(n) => write!(f, "clustertrustbundle {n}"),
            Self::Signer { signer, labels } if labels.is_empty() => {
                write!(f, "clustertrustbundles of signer {signer}")
            }
            Self::Signer { signer, labels } => write!(
                f,
                "clustertrustbundles of signer {signer} labelled {}",
                selector(labels)
            ),
        }
    }
}

/// `KEY=VALUE,...`
fn selector(labels: &[(String, String)]) -> String {
    let l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    l.join(",")
}

impl Selection {
    fn watch(
        &self,
        client: Client,
    ) -> impl futures::Stream<Item = Result<watcher::Event<ClusterTrustBundle>, WatchError>>
    + Send
    + 'static {
        let config = match self {
            Self::Name(n) => watcher::Config::default().fields(&format!("metadata.name={n}")),
            Self::Signer { signer, labels } => {
                let config =
                    watcher::Config::default().fields(&format!("spec.signerName={signer}"));
                if labels.is_empty() {
                    config
                } else {
                    config.labels(&selector(labels))
                }
            }
        };
        Watch::new(Api::all(client), config, self.to_string()).stream()
    }
}

/// The CA bundle of `bundles`: in name order, each certificate once, as
/// kubelet joins them. Anything but CERTIFICATE blocks in a bundle, or a
/// bundle past the API's 1 MiB, refuses the whole set (never a bundle of
/// the blocks that happened to read); so does more than `limit` bytes
/// ([`MAX_TRUST_BUNDLES_SIZE`]). Linear; run off the async runtime.
pub fn joined(
    bundles: &BTreeMap<String, ClusterTrustBundle>,
    selection: &Selection,
    limit: usize,
) -> Result<Vec<u8>, TrustBundleError> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for (name, b) in bundles {
        let invalid = |problem: &str| TrustBundleError::Invalid {
            bundle: crate::escape(name).into_owned(),
            problem: problem.to_owned(),
        };
        if b.spec.trust_bundle.len() > MAX_BUNDLE_SIZE {
            return Err(invalid(&format!(
                "larger than the API's {MAX_BUNDLE_SIZE}-byte limit for one bundle"
            )));
        }
        use crate::pem::PemError;
        let certs =
            crate::pem::certificates(b.spec.trust_bundle.as_bytes()).map_err(|e| match e {
                PemError::Empty => invalid("no certificate"),
                PemError::Kind(_) => invalid("a block that is not a CERTIFICATE"),
                PemError::Syntax(problem) => invalid(&problem),
                other => invalid(&other.to_string()),
            })?;
        for der in certs {
            if seen.insert(der.clone()) {
                out.extend_from_slice(crate::pem::encode("CERTIFICATE", &der).as_bytes());
                if out.len() > limit {
                    return Err(TrustBundleError::TooLarge {
                        selection: selection.to_string(),
                        limit,
                    });
                }
            }
        }
    }
    Ok(out)
}

/// [`joined`] of the bundles listed, on the blocking pool; none is an error.
async fn ca_of(
    bundles: &BTreeMap<String, ClusterTrustBundle>,
    selection: &Selection,
) -> Result<Vec<u8>, TrustBundleError> {
    if bundles.is_empty() {
        return Err(TrustBundleError::Empty {
            selection: selection.to_string(),
        });
    }
    let (b, s) = (bundles.clone(), selection.clone());
    crate::blocking(move || joined(&b, &s, MAX_TRUST_BUNDLES_SIZE))
        .await
        .unwrap_or_else(|source| {
            Err(TrustBundleError::Panicked {
                selection: selection.to_string(),
                source,
            })
        })
}

fn watch_error(e: WatchError) -> TrustBundleError {
    if e.code() == Some(404) {
        TrustBundleError::NotServed
    } else {
        TrustBundleError::Watch(e)
    }
}

/// The selection's CA bundle now (one list).
pub async fn read(client: Client, selection: &Selection) -> Result<Vec<u8>, TrustBundleError> {
    let mut events = std::pin::pin!(selection.watch(client));
    let mut listed = Listed::default();
    while let Some(event) = events.next().await {
        listed.apply(event.map_err(watch_error)?);
        if listed.synced() {
            break;
        }
    }
    ca_of(listed.items(), selection).await
}

/// A mapping's ClusterTrustBundle source.
pub struct TrustBundles {
    pub selection: Selection,
    pub mapping: String,
    pub metrics: Arc<Metrics>,
}

impl TrustBundles {
    fn bundle(&self, ca: Result<Vec<u8>, TrustBundleError>) -> Result<Bundle, SourceError> {
        let mut b = Bundle::default();
        b.insert(CA_FILE, ca?, self.selection.to_string())
            .map_err(|source| TrustBundleError::Bundle {
                selection: self.selection.to_string(),
                source,
            })?;
        Ok(b)
    }

    pub async fn run(
        self,
        clients: watch::Receiver<Option<Client>>,
        tx: watch::Sender<Option<Update>>,
        shutdown: watch::Receiver<bool>,
    ) {
        let (this, tx) = (&self, &tx);
        super::client::follow(clients, shutdown, move |client| this.watch(client, tx)).await;
    }

    async fn watch(&self, client: Client, tx: &watch::Sender<Option<Update>>) {
        let mut events = std::pin::pin!(self.selection.watch(client));
        let mut listed = Listed::default();
        while let Some(event) = events.next().await {
            match event {
                Ok(e) => {
                    if listed.apply(e).is_some() {
                        let ca = ca_of(listed.items(), &self.selection).await;
                        super::error::publish(tx, self.bundle(ca));
                    }
                }
                Err(e) => {
                    self.metrics.watch_restarted(&self.mapping);
                    super::error::publish(tx, Err(watch_error(e).into()));
                }
            }
        }
    }

    pub async fn get(&self, client: Client) -> Result<Bundle, SourceError> {
        self.bundle(read(client, &self.selection).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_certs as certs;
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    #[test]
    fn bundles_join_in_name_order_once_each() {
        let (a, b) = (certs::Pair::new("a"), certs::Pair::new("b"));
        let a = String::from_utf8(a.ca_cert).unwrap();
        let b = String::from_utf8(b.ca_cert).unwrap();
        let ctb = |pem: String| {
            let mut c = ClusterTrustBundle::default();
            c.spec.trust_bundle = pem;
            c
        };
        let bundles = BTreeMap::from([
            ("z-old".to_owned(), ctb(format!("{a}{b}"))),
            ("a-new".to_owned(), ctb(b.clone())),
        ]);
        let joined = String::from_utf8(
            joined(
                &bundles,
                &Selection::Name("t".into()),
                MAX_TRUST_BUNDLES_SIZE,
            )
            .unwrap(),
        )
        .unwrap();
        // b (from a-new) first, then a; b not repeated.
        let der = |p: &str| {
            CertificateDer::from_pem_slice(p.as_bytes())
                .unwrap()
                .to_vec()
        };
        let got: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(joined.as_bytes())
            .map(|c| c.unwrap().to_vec())
            .collect();
        assert_eq!(got, [der(&b), der(&a)]);
    }

    /// Fail closed: a bundle holding anything but well-formed CERTIFICATE
    /// blocks (kube-apiserver refuses such a bundle, so it comes from
    /// something else that answers as the API server) refuses the whole
    /// selection, naming the bundle, rather than publishing the blocks
    /// that happened to read.
    #[test]
    fn a_bundle_with_anything_but_certificates_is_refused_by_name() {
        let a = String::from_utf8(certs::Pair::new("a").ca_cert).unwrap();
        let key = String::from_utf8(certs::Pair::new("k").key).unwrap();
        let ctb = |pem: String| {
            let mut c = ClusterTrustBundle::default();
            c.spec.trust_bundle = pem;
            c
        };
        let broken = a.replacen("MII", "MII*", 1);
        let unterminated = format!("{a}-----BEGIN CERTIFICATE-----\nMIIB\n");
        let unknown = format!("{a}-----BEGIN X509 CRL-----\nAAAA\n-----END X509 CRL-----\n");
        for (why, bad) in [
            ("a private key", format!("{a}{key}")),
            ("bad base64", broken),
            ("a BEGIN without END", unterminated),
            ("an unknown label", unknown),
            ("nothing", String::new()),
        ] {
            let bundles = BTreeMap::from([
                ("good".to_owned(), ctb(a.clone())),
                ("hostile".to_owned(), ctb(bad)),
            ]);
            let e = joined(
                &bundles,
                &Selection::Name("t".into()),
                MAX_TRUST_BUNDLES_SIZE,
            )
            .expect_err(why)
            .to_string();
            assert!(e.contains("clustertrustbundle hostile"), "{why}: {e}");
        }
    }

    /// A signer's bundles are joined up to the bound given,
    /// counting each certificate once, and refused past it by the
    /// selection's name; one bundle larger than the API allows is refused
    /// by its own, before it is read.
    #[test]
    fn the_joined_bound_counts_each_certificate_once() {
        let pems: Vec<String> = ["x", "y", "z"]
            .iter()
            .map(|n| String::from_utf8(certs::Pair::new(n).ca_cert).unwrap())
            .collect();
        let ctb = |pem: String| {
            let mut c = ClusterTrustBundle::default();
            c.spec.trust_bundle = pem;
            c
        };
        let selection = Selection::Signer {
            signer: "example.com/s".into(),
            labels: Vec::new(),
        };
        let two = pems[0].len() + pems[1].len();
        let mut bundles = BTreeMap::from([
            ("a".to_owned(), ctb(pems[0].clone())),
            ("b".to_owned(), ctb(pems[1].clone())),
            ("c-copy".to_owned(), ctb(format!("{}{}", pems[1], pems[0]))),
        ]);
        let out = joined(&bundles, &selection, two).unwrap();
        assert_eq!(out, format!("{}{}", pems[0], pems[1]).into_bytes());
        bundles.insert("d".into(), ctb(pems[2].clone()));
        let e = joined(&bundles, &selection, two).unwrap_err();
        assert!(matches!(e, TrustBundleError::TooLarge { .. }), "{e}");
        let e = e.to_string();
        assert!(
            e.contains("clustertrustbundles of signer example.com/s")
                && e.contains(&two.to_string()),
            "{e}"
        );
        assert_eq!(
            SourceError::TrustBundle(joined(&bundles, &selection, two).unwrap_err()).reason(),
            "too_large"
        );
        assert!(joined(&bundles, &selection, two + pems[2].len()).is_ok());

        let huge = format!("{}{}", pems[0], " ".repeat(MAX_BUNDLE_SIZE));
        let one = BTreeMap::from([("huge".to_owned(), ctb(huge))]);
        let e = joined(&one, &selection, MAX_TRUST_BUNDLES_SIZE)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("clustertrustbundle huge") && e.contains("1048576"),
            "{e}"
        );
    }
}
