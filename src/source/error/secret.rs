//! `KubeError`: why a `secret:` or `configmap:` source cannot be read.

use crate::bundle::BundleError;
use crate::error_chain;
use crate::source::watch::WatchError;

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("{object} not found; keeping the last good files")]
    NotFound { object: String },
    #[error("{object} was deleted; keeping the last good files")]
    Deleted { object: String },
    #[error("{object}: key {key:?} is missing")]
    MissingKey { object: String, key: String },
    #[error(
        "forbidden: cannot {verb} {object}; certsync needs get, list and watch on it \
         (see deploy/rbac.yaml): {message}"
    )]
    Forbidden {
        verb: &'static str,
        object: String,
        message: String,
    },
    #[error("get {object}: {}", error_chain(source))]
    Get {
        object: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0}")]
    Watch(#[source] WatchError),
    #[error(transparent)]
    Name(#[from] BundleError),
}
