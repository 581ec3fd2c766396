//! The ClusterConfiguration in the `kubeadm-config` ConfigMap: what adopt refuses in it, and its
//! `encryptionAlgorithm`.
//!
//! adopt never writes it: it is cluster-wide, and one naming certsync's targets makes `kubeadm join
//! --control-plane` write manifests for files a new node does not have. Left as kubeadm's, a
//! `kubeadm upgrade` puts a node back on kubeadm's files, which certsync keeps renewed in place,
//! until adopt is run again.

use std::path::Path;

use serde_yaml_ng::Value;

use super::error::{CLUSTER_CONFIGURATION_KEY as KEY, KubeadmError, Refusal};

#[derive(Debug)]
pub struct Stored {
    pub config: Value,
    /// The client it was read through: adopt's write to cluster-info goes
    /// the same way, whatever admin.conf has become since.
    pub client: kube::Config,
}

const MAP: super::api::Map = super::api::Map {
    namespace: "kube-system",
    name: "kubeadm-config",
};

pub async fn read(kubeconfig: &Path) -> Result<Stored, KubeadmError> {
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
