//! Everything `certsync approve` needs (`ApproverConfig`), its Lease among it.

use std::time::Duration;

use super::error::ApproveError;
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

    /// Takes the namespace the client configuration implies when no flag
    /// or `POD_NAMESPACE` named one; refused unless a Kubernetes namespace,
    /// as those are: it is a segment of every Lease request's path, where
    /// a `/` would address another object.
    pub(super) fn imply(&mut self, implied: Option<String>) -> Result<(), ApproveError> {
        if let Some(ns) = implied.filter(|_| self.namespace.is_none()) {
            if !super::cluster::hostport::dns1123_label(&ns) {
                return Err(ApproveError::ImpliedNamespace { namespace: ns });
            }
            self.namespace = Some(ns);
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(namespace: Option<&str>) -> LeaseSettings {
        LeaseSettings {
            name: "certsync-approver".into(),
            namespace: namespace.map(Into::into),
            identity: "pod-0".into(),
            duration: Duration::from_secs(15),
        }
    }

    /// A kubeconfig context's namespace goes into the path of every Lease
    /// request as the flags do: one that is not a Kubernetes name (a `/`
    /// addresses another object) is refused, not requested.
    #[test]
    fn attack_an_implied_namespace_that_is_not_a_kubernetes_name_is_refused() {
        for bad in ["kube-system/leases/other", "..", "Kube-System", ""] {
            let mut l = lease(None);
            let e = l.imply(Some(bad.into())).unwrap_err();
            assert!(
                matches!(&e, ApproveError::ImpliedNamespace { namespace } if namespace == bad),
                "{bad:?}: {e}"
            );
        }
        let mut l = lease(None);
        l.imply(Some("certsync".into())).unwrap();
        assert_eq!(l.namespace(), "certsync");
        // A namespace given by flag or POD_NAMESPACE (checked where it is
        // read) is kept; the implied one is not looked at.
        let mut l = lease(Some("approvers"));
        l.imply(Some("a/b".into())).unwrap();
        assert_eq!(l.namespace(), "approvers");
        let mut l = lease(None);
        l.imply(None).unwrap();
        assert_eq!(l.namespace(), LEASE_NAMESPACE);
    }
}
