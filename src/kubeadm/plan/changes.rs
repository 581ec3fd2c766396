//! What adopt would do, as data: serialized for `--output json`, shown by `text`.

use std::path::PathBuf;

use super::super::paths::FileWrite;
use super::super::trust::{CaEnd, Record};

/// A kubeadm file as the plan read it: node path, bytes and mode.
pub type Read = (String, Vec<u8>, u32);

#[derive(Debug, Clone, serde::Serialize)]
pub struct ManifestChange {
    pub path: String,
    /// (flag, old value, new value); `annotations` likewise.
    pub flags: Vec<(String, String, String)>,
    pub volumes_added: Vec<String>,
    pub annotations: Vec<(String, String, String)>,
    #[serde(skip)]
    pub before: Vec<u8>,
    #[serde(skip)]
    pub after: Vec<u8>,
}

#[derive(serde::Serialize)]
pub struct Plan {
    pub kubeadm_dir: PathBuf,
    /// On an adopted node: each choice as it is and as adopt writes it.
    pub choices: Vec<super::super::choices::Choice>,
    pub cluster_configuration_from: String,
    pub files: Vec<FileWrite>,
    pub manifests: Vec<ManifestChange>,
    /// adopt's record as read, with its bytes: what adopt adds to, or puts back.
    #[serde(skip)]
    pub record: Option<(Vec<u8>, super::super::record::State)>,
    #[serde(skip)]
    pub pod: Option<super::super::pod::Current>,
    /// certsync's mirror pod `certsync-NODE` (NODE: `--name` of the etcd manifest the plan
    /// read), named once per command (not on every progress line of a wait); `None`:
    /// etcd.yaml names no node.
    #[serde(skip)]
    pub mirror: Option<String>,
    /// kubeadm's files certsync's pod rewrites that no earlier adoption backed up, as read
    /// (bytes and mode): kubeconfigs, then pairs.
    #[serde(skip)]
    pub kubeadms: Vec<Read>,
    /// admin.conf as the plan read it: the ConfigMaps are written and the waits ask through
    /// it, whatever admin.conf has become since.
    #[serde(skip)]
    pub admin: super::super::admin::Admin,
    /// What adopt does to `kube-public/cluster-info`'s CA data, or why it cannot.
    pub cluster_info: Option<String>,
    #[serde(skip)]
    pub cluster_info_new: Option<k8s_openapi::api::core::v1::ConfigMap>,
    /// What adopt does to `kube-system/certsync-kubeadm-cas`, in words.
    pub cluster_cas: String,
    #[serde(skip)]
    pub cluster_cas_new: Option<k8s_openapi::api::core::v1::ConfigMap>,
    pub backup: String,
    pub kubeconfigs_renewed: Vec<String>,
    pub pairs_renewed: Vec<String>,
    pub cas: Vec<CaEnd>,
    /// kubeconfigs whose CA data becomes `ca_bundle` (PEM).
    pub kubeconfigs_trusted: Vec<String>,
    #[serde(skip)]
    pub ca_bundle: Vec<u8>,
    pub trust: String,
    #[serde(skip)]
    pub trust_record: Record,
    pub image: String,
    pub image_before: Option<String>,
    /// What certsync's pod answers `/readyz` with for this configuration and image.
    pub generation: String,
    /// Its readiness probe's address (`--admin-addr`, an unspecified one on loopback).
    pub probe: std::net::SocketAddr,
    pub admin_addr: std::net::SocketAddr,
    /// (name, target, renewal options) of each `ca:` mapping of certsync.yaml.
    pub mappings: Vec<(String, String, String)>,
}

impl Plan {
    /// Nothing to write, change or trust: the node is adopted as asked.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
            && self.manifests.is_empty()
            && self.kubeconfigs_trusted.is_empty()
            && self.cluster_cas_new.is_none()
            && self.cluster_info_new.is_none()
    }
}
