//! The ClusterConfiguration in the `kubeadm-config` ConfigMap, read
//! through admin.conf: what adopt refuses in it, and its
//! `encryptionAlgorithm`; the client it was read through reaches
//! `kube-public/cluster-info` too.
//!
//! adopt never writes it, keeping certsync's flags in the node's manifests
//! only: the ClusterConfiguration is cluster-wide, and one naming
//! certsync's targets makes `kubeadm join --control-plane` write manifests
//! for files a new node does not have (its etcd exits on the missing peer
//! certificate and the join fails). Left as kubeadm's, a join writes
//! kubeadm's own manifests, and a `kubeadm upgrade` puts a node back on
//! kubeadm's files, which certsync keeps renewed in place (`update-pair:`,
//! `update-kubeconfig:`), until adopt is run again.

use std::path::Path;

use serde_yaml_ng::Value;

use super::error::{CLUSTER_CONFIGURATION_KEY as KEY, KubeadmError, Refusal};

/// The ClusterConfiguration as read, and the client that read it.
#[derive(Debug)]
pub struct Stored {
    pub config: Value,
    /// The client configuration it was read through (admin.conf as judged
    /// then): adopt's write to cluster-info goes the same way, whatever
    /// admin.conf has become since.
    pub client: kube::Config,
}

/// `kube-system/kubeadm-config`.
const MAP: super::api::Map = super::api::Map {
    namespace: "kube-system",
    name: "kubeadm-config",
};

/// Reads the ConfigMap through `kubeconfig` (admin.conf).
pub async fn read(kubeconfig: &Path) -> Result<Stored, KubeadmError> {
    // admin.conf as kubeadm writes it, its server and CA the backup's once
    // adopt made one (see `admin`).
    let client = super::admin::config(kubeconfig).await?;
    let object = MAP.existing(&client, super::api::TIMEOUT).await?;
    let text = object
        .data
        .as_ref()
        .and_then(|d| d.get(KEY))
        .ok_or(KubeadmError::NoClusterConfiguration)?;
    let config: Value =
        serde_yaml_ng::from_str(text).map_err(KubeadmError::ClusterConfiguration)?;
    Ok(Stored { config, client })
}

/// What adopt refuses in a ClusterConfiguration, if anything.
pub fn refusal(config: &Value) -> Option<Refusal> {
    if config["apiVersion"] != "kubeadm.k8s.io/v1beta4" {
        return Some(Refusal::ApiVersion {
            found: config["apiVersion"].as_str().unwrap_or("").to_owned(),
        });
    }
    if !config["etcd"]["external"].is_null() {
        return Some(Refusal::ExternalEtcd);
    }
    match config["certificatesDir"].as_str() {
        None | Some("/etc/kubernetes/pki") => None,
        Some(other) => Some(Refusal::CertificatesDir {
            dir: other.to_owned(),
        }),
    }
}
