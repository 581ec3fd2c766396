//! What adopt would do, as data: the `Plan` (what it read to decide, and
//! each `FileWrite` and `ManifestChange`), serialized for `--output json`
//! and shown by `text`.

use std::path::PathBuf;

use super::super::paths::FileWrite;
use super::super::trust::{CaEnd, Record};

/// A manifest adopt changes.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ManifestChange {
    pub path: String,
    /// (flag, old value, new value).
    pub flags: Vec<(String, String, String)>,
    pub volumes_added: Vec<String>,
    /// (annotation, old value, new value): the trust bundles' digest.
    pub annotations: Vec<(String, String, String)>,
    #[serde(skip)]
    pub before: Vec<u8>,
    #[serde(skip)]
    pub after: Vec<u8>,
}

/// Everything adopt would do on the node, and what it read to decide.
#[derive(Debug, serde::Serialize)]
pub struct Plan {
    pub kubeadm_dir: PathBuf,
    /// On an adopted node: each choice (`--admin-addr`, the `--set`
    /// options) as it is and as adopt writes it; kept unless given now.
    pub choices: Vec<super::super::choices::Choice>,
    /// Where the ClusterConfiguration came from, or why it could not be read.
    pub cluster_configuration_from: String,
    pub files: Vec<FileWrite>,
    pub manifests: Vec<ManifestChange>,
    /// adopt's record as the plan read it, with its bytes (`None`: there
    /// was none): what adopt adds to, or puts back.
    #[serde(skip)]
    pub record: Option<(Vec<u8>, super::super::record::State)>,
    /// certsync's pod manifest as the plan found it: the pod a run that
    /// replaces a file it mounts stops first.
    #[serde(skip)]
    pub pod: Option<super::super::pod::Current>,
    /// The client the ClusterConfiguration was read through, when it was:
    /// `kube-public/cluster-info` is written the same way.
    #[serde(skip)]
    pub client: Option<kube::Config>,
    /// What adopt does to `kube-public/cluster-info`'s CA data, or why it
    /// cannot (`None`: it already trusts the CA's certificates).
    pub cluster_info: Option<String>,
    /// The ConfigMap to write, when it lacks a CA certificate.
    #[serde(skip)]
    pub cluster_info_new: Option<k8s_openapi::api::core::v1::ConfigMap>,
    /// What adopt does to the cluster's CA certificates
    /// (`kube-system/certsync-kubeadm-cas`), in words.
    pub cluster_cas: String,
    /// That ConfigMap as adopt writes it, when it does.
    #[serde(skip)]
    pub cluster_cas_new: Option<k8s_openapi::api::core::v1::ConfigMap>,
    /// Where the files changed are copied first.
    pub backup: String,
    /// kubeadm's kubeconfigs whose embedded pair certsync renews.
    pub kubeconfigs_renewed: Vec<String>,
    /// kubeadm's pairs (prefixes) certsync keeps in step.
    pub pairs_renewed: Vec<String>,
    /// Each CA: its end, and its renewal's when adopt renews it.
    pub cas: Vec<CaEnd>,
    /// kubeconfigs whose CA data adopt sets to the CA's certificates side
    /// by side.
    pub kubeconfigs_trusted: Vec<String>,
    /// That CA data (PEM).
    #[serde(skip)]
    pub ca_bundle: Vec<u8>,
    /// The trust bundles' digest (the components' annotation).
    pub trust: String,
    /// The bundles' certificates, for adopt's record.
    #[serde(skip)]
    pub trust_record: Record,
    /// certsync's static pod's image.
    pub image: String,
    /// The image of the certsync pod adopt replaces, when it is another
    /// (a re-adopt that upgrades certsync or corrects a typo).
    pub image_before: Option<String>,
    /// The token certsync's pod answers `/readyz` with for this
    /// configuration and image (`run --generation`): adopt waits for it.
    pub generation: String,
    /// Where adopt asks certsync's pod whether it is ready: its readiness
    /// probe's address (`--admin-addr`, an unspecified one on loopback).
    pub probe: std::net::SocketAddr,
    /// certsync's `--admin-addr` as this adopt writes it (kept in adopt's
    /// record).
    pub admin_addr: std::net::SocketAddr,
    /// Each `ca:` mapping of certsync.yaml: (name, target, renewal options
    /// as written, or the defaults).
    pub mappings: Vec<(String, String, String)>,
}

impl Plan {
    /// Nothing to write, change or trust: the node is adopted as asked.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
            && self.manifests.is_empty()
            && self.kubeconfigs_trusted.is_empty()
            && self.cluster_cas_new.is_none()
    }
}
