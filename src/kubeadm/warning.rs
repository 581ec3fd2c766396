//! What `status` warns about. A leaf: trust and status make them.

/// Healthy now, but an outage or a date ahead stops the node unless someone
/// acts: each kind is its own series (`certsync_kubeadm_status_warning{kind}`),
/// so an alert can ask for a person before it becomes a problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum WarningKind {
    /// A trial `lifetime=` left in place: a short outage of certsync ends a certificate.
    ShortLifetime,
    /// A CA has less than 90% of its span left: the next `adopt` renews it.
    CaRenewalDue,
    /// An earlier CA certificate beside a renewal has ended.
    EarlierCaEnded,
    /// This node's kubelet.conf trusts only a CA certificate that ends.
    KubeletConf,
    /// `kube-public/cluster-info` could not be checked or does not hold the CA in place.
    ClusterInfo,
}

impl WarningKind {
    pub const ALL: [Self; 5] = [
        Self::ShortLifetime,
        Self::CaRenewalDue,
        Self::EarlierCaEnded,
        Self::KubeletConf,
        Self::ClusterInfo,
    ];
}

/// A unit variant's name as serde writes it: one spelling for JSON, text and labels.
pub(super) fn name_of(variant: &impl serde::Serialize) -> String {
    match serde_json::to_value(variant) {
        Ok(serde_json::Value::String(name)) => name,
        _ => String::new(),
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Warning {
    pub kind: WarningKind,
    pub message: String,
}

impl Warning {
    pub(super) fn new(kind: WarningKind, message: impl Into<String>) -> Self {
        let message = message.into();
        Self { kind, message }
    }
}
