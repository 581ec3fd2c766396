//! `kube-system/certsync-kubeadm-cas`: the cluster's certificates of each
//! kubeadm CA, as every adopted node keeps them side by side (the last one
//! the CA certificate in place). Each node's adopt takes them from here,
//! so a CA is renewed once for the whole cluster: the first node whose
//! adopt finds the CA due renews it and writes its certificates here; the
//! others take that renewal instead of making their own, and every node's
//! bundles, kubeconfigs and `kube-public/cluster-info` hold the same
//! certificates.
//!
//! What is read here is never proof by itself: anyone who may write
//! ConfigMaps in kube-system could put a certificate here. `trust` takes
//! one only when it is the CA's own (its subject and key, signed by that
//! key, which only a holder of the CA key can do) and lasts no longer
//! than the certificate in place.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;

use super::api::Map;
use super::error::KubeadmError;

pub const MAP: Map = Map {
    namespace: "kube-system",
    name: "certsync-kubeadm-cas",
};

/// Each CA's key in the ConfigMap: its name in `trust::CAS`, `.crt`.
pub fn key(ca: &str) -> String {
    format!("{ca}.crt")
}

/// The ConfigMap as read (`None`: there is none yet), each key's PEM.
#[derive(Debug, Clone, Default)]
pub struct Published {
    pub object: Option<ConfigMap>,
    pub pem: BTreeMap<String, String>,
}

/// Reads it through `config` (admin.conf as adopt judges it).
pub async fn read(config: &kube::Config) -> Result<Published, KubeadmError> {
    let object = MAP.get(config, super::api::TIMEOUT).await?;
    let pem = object.as_ref().and_then(|o| o.data.clone());
    let pem = pem.unwrap_or_default();
    Ok(Published { object, pem })
}

impl Published {
    /// The ConfigMap holding `pem` (each CA's key and certificates),
    /// unless it already does; carrying the resourceVersion read, so that
    /// two nodes renewing at once cannot both win.
    pub fn with(&self, pem: &BTreeMap<String, String>) -> Option<ConfigMap> {
        if &self.pem == pem {
            return None;
        }
        let mut object = self.object.clone().unwrap_or_else(|| ConfigMap {
            metadata: kube::api::ObjectMeta {
                name: Some(MAP.name.into()),
                namespace: Some(MAP.namespace.into()),
                ..Default::default()
            },
            ..Default::default()
        });
        object.data = Some(pem.clone().into_iter().collect());
        Some(object)
    }
}
