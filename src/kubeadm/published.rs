//! `kube-system/certsync-kubeadm-cas`: the cluster's certificates of each kubeadm CA, side by side,
//! so a CA is renewed once for the whole cluster: the first node whose adopt finds it due renews it
//! and writes it here; the others take that renewal.
//!
//! Never proof by itself: anyone who may write ConfigMaps in kube-system could put a certificate
//! here. `trust` takes one only when it is the CA's own (signed by its key) and lasts no longer
//! than a renewal would.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;

use super::api::Map;
use super::error::KubeadmError;

pub const MAP: Map = Map {
    namespace: "kube-system",
    name: "certsync-kubeadm-cas",
};

pub fn key(ca: &str) -> String {
    format!("{ca}.crt")
}

#[derive(Debug, Clone, Default)]
pub struct Published {
    pub object: Option<ConfigMap>,
    pub pem: BTreeMap<String, String>,
}

pub async fn read(config: &kube::Config) -> Result<Published, KubeadmError> {
    let object = MAP.get(config, super::api::TIMEOUT).await?;
    let pem = object.as_ref().and_then(|o| o.data.clone());
    let pem = pem.unwrap_or_default();
    Ok(Published { object, pem })
}

impl Published {
    /// The ConfigMap holding `pem` unless it does, carrying the
    /// resourceVersion read: two nodes renewing at once cannot both win.
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
