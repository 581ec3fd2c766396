//! `ClientError`, why no API client could be made, and `ApiError`, an API call that failed.

/// Why no API client was made.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("kubeconfig {path}: {problem}")]
    Kubeconfig {
        path: String,
        #[source]
        problem: Box<ClientError>,
    },
    #[error(
        "in-cluster configuration: {0} (no --kubeconfig, no KUBECONFIG and no ~/.kube/config; \
         give one when not running in a pod)"
    )]
    InCluster(#[source] kube::config::InClusterError),
    #[error(
        "--context {0}: contexts come from a kubeconfig, and none was found (give --kubeconfig)"
    )]
    ContextWithoutKubeconfig(String),
    #[error("cannot build the API client: {0}")]
    Build(#[source] kube::Error),
    #[error(
        "cannot build the API client: proxy-url {0} is not supported; certsync connects to the \
         API server directly"
    )]
    Proxy(http::Uri),
    #[error("cannot build the API client: tls-server-name {name:?}: {source}")]
    ServerName {
        name: String,
        #[source]
        source: rustls::pki_types::InvalidDnsNameError,
    },
    #[error("connect to the API server {server}: {}", crate::error_chain(&**source))]
    Connect {
        server: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },

    // Why root certsync will not run an `exec` credential plugin.
    #[error("not found as an executable file in PATH's absolute directories")]
    ExecNotFound,
    #[error("not an absolute path")]
    ExecNotAbsolute,
    #[error("not an executable regular file")]
    ExecNotExecutable,
    #[error("{0}: root certsync would run what another user may change")]
    ExecOthersMayChange(#[source] crate::beneath::PathError),
    #[error("not UTF-8")]
    ExecNotUtf8,

    // Why a kubeconfig gives no client configuration (after its path).
    #[error("{}", .0.problem())]
    Unreadable(#[source] crate::beneath::PathError),
    #[error("not UTF-8 text")]
    NotUtf8,
    #[error("{0}")]
    Yaml(#[source] crate::files::YamlError),
    #[error("{0}")]
    Parse(#[from] serde_yaml_ng::Error),
    #[error("{0}")]
    Kube(#[source] kube::config::KubeconfigError),
    #[error("KUBECONFIG names no file that exists")]
    NoFile,
    #[error("{path}: {}", problem.problem())]
    Named {
        path: String,
        #[source]
        problem: crate::beneath::PathError,
    },
    #[error("exec command {command}: {problem}")]
    Exec {
        command: String,
        problem: Box<ClientError>,
    },
}

/// A Kubernetes API call that failed (the approver's and the CSR source's).
#[derive(Debug, thiserror::Error)]
#[error("{verb} {object}: {}", crate::error_chain(source))]
pub struct ApiError {
    pub verb: &'static str,
    pub object: String,
    #[source]
    pub source: kube::Error,
}
