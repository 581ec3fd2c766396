//! The ClusterConfiguration in the `kubeadm-config` ConfigMap: read, the
//! fields an earlier certsync adopt added found and taken out, written back
//! with the resourceVersion read (a concurrent change makes the write fail,
//! never lost).
//!
//! adopt keeps certsync's flags in the node's manifests only: the
//! ClusterConfiguration is cluster-wide, and one naming certsync's targets
//! made `kubeadm join --control-plane` write manifests for files a new node
//! does not have (its etcd exited on the missing peer certificate and the
//! join failed). Left as kubeadm's, a join writes kubeadm's own manifests,
//! and a `kubeadm upgrade` puts a node back on kubeadm's files, which
//! certsync keeps renewed in place (`update-pair:`, `update-kubeconfig:`),
//! until adopt is run again.

use std::path::Path;

use k8s_openapi::api::core::v1::ConfigMap;
use serde_yaml_ng::{Mapping, Value};

use super::manifest::Component;
use super::{KubeadmError, Refusal};

const KEY: &str = "ClusterConfiguration";

/// The ConfigMap as read: its ClusterConfiguration, parsed, and the object
/// to write back.
#[derive(Debug)]
pub struct Stored {
    pub config: Value,
    pub text: String,
    object: ConfigMap,
    /// The client configuration it was read through, judged once: the
    /// write goes the same way, whatever admin.conf has become since.
    client: kube::Config,
}

impl Stored {
    /// The client configuration it was read through (admin.conf as judged
    /// then): adopt's other writes go the same way.
    pub fn client(&self) -> &kube::Config {
        &self.client
    }
}

/// Why the ConfigMap could not be read or written. The client's errors
/// are said with their causes, once.
#[derive(Debug, thiserror::Error)]
pub enum ClusterConfigError {
    #[error("{}", crate::error_chain(.0))]
    Client(#[source] crate::source::client::ClientError),
    #[error("{}", crate::error_chain(.0))]
    Api(#[source] kube::Error),
    #[error("no {KEY} key")]
    NoKey,
    #[error("{KEY}: {0}")]
    Yaml(#[source] serde_yaml_ng::Error),
    #[error("no answer within 15 s")]
    Timeout,
    /// The ClusterConfiguration to write, not encodable.
    #[error("{0}")]
    Encode(#[source] serde_yaml_ng::Error),
}

impl From<ClusterConfigError> for KubeadmError {
    fn from(e: ClusterConfigError) -> Self {
        Self::ClusterConfig(Box::new(e))
    }
}

fn api(config: &kube::Config) -> Result<kube::Api<ConfigMap>, KubeadmError> {
    let client = crate::source::client::ClientSettings::default()
        .client_for(config)
        .map_err(ClusterConfigError::Client)?;
    Ok(kube::Api::namespaced(client, "kube-system"))
}

/// Reads the ConfigMap through `kubeconfig` (admin.conf), within 15 s.
pub async fn read(kubeconfig: &Path) -> Result<Stored, KubeadmError> {
    let get = async {
        // admin.conf as kubeadm writes it, its server and CA the backup's
        // once adopt made one (see `admin`).
        let client = super::admin::config(kubeconfig).await?;
        let object = api(&client)?
            .get("kubeadm-config")
            .await
            .map_err(ClusterConfigError::Api)?;
        let text = object
            .data
            .as_ref()
            .and_then(|d| d.get(KEY))
            .cloned()
            .ok_or(ClusterConfigError::NoKey)?;
        let config: Value = serde_yaml_ng::from_str(&text).map_err(ClusterConfigError::Yaml)?;
        Ok(Stored {
            config,
            text,
            object,
            client,
        })
    };
    tokio::time::timeout(std::time::Duration::from_secs(15), get)
        .await
        .map_err(|_| ClusterConfigError::Timeout)?
}

/// Writes `config` back (a replace carrying the resourceVersion read),
/// through the client configuration it was read with.
pub async fn write(stored: &Stored, config: &Value) -> Result<(), KubeadmError> {
    let text = serde_yaml_ng::to_string(config).map_err(ClusterConfigError::Encode)?;
    let mut object = stored.object.clone();
    object
        .data
        .get_or_insert_with(Default::default)
        .insert(KEY.into(), text);
    api(&stored.client)?
        .replace("kubeadm-config", &Default::default(), &object)
        .await
        .map_err(ClusterConfigError::Api)?;
    Ok(())
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

/// The section of `config` at `path` (`etcd.local`), made a mapping if missing.
fn section<'a>(config: &'a mut Value, path: &str) -> &'a mut Value {
    let mut v = config;
    for p in path.split('.') {
        if !v[p].is_mapping()
            && let Value::Mapping(m) = v
        {
            m.insert(p.into(), Value::Mapping(Mapping::new()));
        }
        v = &mut v[p];
    }
    v
}

fn entry(pairs: &[(&str, Value)]) -> Value {
    Value::Mapping(
        pairs
            .iter()
            .map(|(k, v)| (Value::from(*k), v.clone()))
            .collect(),
    )
}

fn volume_entry(v: &super::manifest::Volume) -> Value {
    entry(&[
        ("name", v.name.clone().into()),
        ("hostPath", v.path.clone().into()),
        ("mountPath", v.path.clone().into()),
        ("readOnly", true.into()),
        ("pathType", v.kind.into()),
    ])
}

/// A field adopt sets: (`apiServer.extraArgs`, name, value).
pub type Field = (String, String, String);

/// The entries of adopt's already in `config` (an earlier certsync adopt
/// put them there): what adopt takes out.
pub fn present(config: &Value, components: &[Component]) -> Vec<Field> {
    let mut found = Vec::new();
    for c in components {
        let mut s = config;
        for p in c.section.split('.') {
            s = &s[p];
        }
        if let Some(args) = s["extraArgs"].as_sequence() {
            for (flag, _, ours) in &c.flags {
                if args
                    .iter()
                    .any(|a| a["name"] == *flag && a["value"] == ours.as_str())
                {
                    found.push((
                        format!("{}.extraArgs", c.section),
                        flag.to_string(),
                        ours.clone(),
                    ));
                }
            }
        }
        if let Some(vols) = s["extraVolumes"].as_sequence() {
            for v in &c.volumes {
                if vols.iter().any(|e| *e == volume_entry(v)) {
                    found.push((
                        format!("{}.extraVolumes", c.section),
                        v.name.clone(),
                        v.path.clone(),
                    ));
                }
            }
        }
    }
    found
}

/// Takes out exactly the entries adopt adds (same name and value); a list
/// left empty goes too. Whether anything changed.
pub fn unadopt(config: &mut Value, components: &[Component]) -> bool {
    let mut changed = false;
    for c in components {
        let s = section(config, c.section);
        let Value::Mapping(m) = s else { continue };
        if let Some(Value::Sequence(args)) = m.get_mut("extraArgs") {
            let before = args.len();
            args.retain(|a| {
                !c.flags
                    .iter()
                    .any(|(f, _, ours)| a["name"] == *f && a["value"] == ours.as_str())
            });
            changed |= args.len() != before;
        }
        if let Some(Value::Sequence(vols)) = m.get_mut("extraVolumes") {
            let before = vols.len();
            vols.retain(|e| !c.volumes.iter().any(|v| *e == volume_entry(v)));
            changed |= vols.len() != before;
        }
        for key in ["extraArgs", "extraVolumes"] {
            if m.get(key)
                .and_then(Value::as_sequence)
                .is_some_and(Vec::is_empty)
            {
                m.remove(key);
            }
        }
    }
    changed
}
