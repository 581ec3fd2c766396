//! `TrustBundleError`: why a `clustertrustbundle:` source cannot be read.

use crate::source::watch::WatchError;

#[derive(Debug, thiserror::Error)]
pub enum TrustBundleError {
    #[error(
        "the API server does not serve ClusterTrustBundles (certificates.k8s.io/v1beta1: enable \
         the ClusterTrustBundle feature gate and that API version)"
    )]
    NotServed,
    #[error("{selection}: no ClusterTrustBundle matches")]
    Empty { selection: String },
    #[error("{0}")]
    Watch(#[source] WatchError),
    #[error("{selection}: reading the bundles panicked: {source}")]
    Panicked {
        selection: String,
        #[source]
        source: crate::Panicked,
    },
    #[error("{selection}: {source}")]
    Bundle {
        selection: String,
        #[source]
        source: crate::bundle::BundleError,
    },
    #[error(
        "clustertrustbundle {bundle}: {problem}: refused, with the whole selection (a trust \
         bundle holds only CERTIFICATE blocks; kube-apiserver refuses any other)"
    )]
    Invalid { bundle: String, problem: String },
    #[error(
        "{selection}: the selected bundles hold more than {limit} bytes of distinct \
         certificates; refused, the last good files stay (remove bundles the signer no \
         longer needs)"
    )]
    TooLarge { selection: String, limit: usize },
}
