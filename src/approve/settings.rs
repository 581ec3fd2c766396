//! Everything `certsync approve` needs (`ApproverConfig`), its Lease among it.

use std::time::Duration;

use super::policy::Policy;
use crate::source::client::ClientSettings;

/// Leader election through a Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSettings {
    pub name: String,
    /// `None`: the namespace the client configuration implies (the
    /// kubeconfig context's, or the pod's), else [`LEASE_NAMESPACE`].
    pub namespace: Option<String>,
    /// This replica's identity (the pod name).
    pub identity: String,
    pub duration: Duration,
}

/// The Lease's namespace when nothing names one.
pub const LEASE_NAMESPACE: &str = "kube-system";

impl LeaseSettings {
    pub(super) fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or(LEASE_NAMESPACE)
    }
}

/// Everything `certsync approve` needs.
#[derive(Debug, Clone)]
pub struct ApproverConfig {
    pub client: ClientSettings,
    pub policy: std::sync::Arc<Policy>,
    pub dry_run: bool,
    /// `None`: this is the only replica and always writes.
    pub lease: Option<LeaseSettings>,
    pub events: bool,
    pub admin_addr: std::net::SocketAddr,
    /// Decide only CSRs with these labels.
    pub selector: Option<String>,
}
