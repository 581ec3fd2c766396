//! Why the approver, or `csr review`, decided nothing: an API call that
//! failed, a cluster fact that cannot be read as kubeadm reads it, or a
//! policy value that does not parse.

use crate::files::YamlError;
use crate::source::client::{ApiError, ClientError};

#[derive(Debug, thiserror::Error)]
pub enum ApproveError {
    #[error("API client: {0}")]
    Client(#[from] ClientError),
    #[error(transparent)]
    Api(ApiError),
    #[error("get certificatesigningrequest {name}: not found")]
    NoSuchCsr { name: String },
    #[error("read servicecidr {name}: {cidr:?} is not a CIDR such as 10.0.0.0/8 or fd00::/64")]
    ServiceCidr { name: String, cidr: String },
    #[error("read {object}: its {key} is not YAML: {source}")]
    NotYaml {
        object: String,
        key: String,
        #[source]
        source: YamlError,
    },
    #[error(
        "read configmap kube-system/kubeadm-config: its ClusterConfiguration's \
         controlPlaneEndpoint is not a string, which kubeadm does not read either; deciding \
         nothing"
    )]
    EndpointNotString,
    /// kubeadm's `ParseHostPort` refuses the endpoint, in its words.
    #[error(
        "read configmap kube-system/kubeadm-config: its ClusterConfiguration's \
         controlPlaneEndpoint {endpoint:?} is not read by kubeadm either ({kubeadm_says}); what \
         it reserves is unknown, so nothing is decided"
    )]
    Endpoint {
        endpoint: String,
        kubeadm_says: &'static str,
    },
    #[error(
        "read servicecidrs.networking.k8s.io: the cluster names no Service range (the \
         ServiceCIDR API of Kubernetes 1.33+ is absent or empty): pass --service-cidr with the \
         API server's --service-cluster-ip-range"
    )]
    NoServiceRange,
    /// The client configuration's namespace (its context's, or the
    /// pod's), which would be a segment of every Lease request's path.
    #[error(
        "leader election: the namespace {namespace:?} of the client configuration's context is not \
         a Kubernetes namespace (lower-case DNS-1123 label): give --lease-namespace"
    )]
    ImpliedNamespace { namespace: String },
    #[error("leader election (lease {lease}): {source}")]
    Lease {
        lease: String,
        #[source]
        source: kube_lease_manager::LeaseManagerError,
    },
    /// A `--reserved` value.
    #[error("{0:?} is not an IP address, a CIDR or a DNS name")]
    Reserved(String),
    #[error("{0:?} is not a CIDR such as 10.0.0.0/8 or fd00::/64")]
    Cidr(String),
}
