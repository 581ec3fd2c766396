//! The ConfigMaps adopt and status read and write through admin.conf: one deadline per
//! call, and a write carrying the resourceVersion read, so a concurrent change fails it
//! rather than being overwritten.
//!
//! `kube-system/kubeadm-config`: the ClusterConfiguration, what adopt refuses in it and its
//! `encryptionAlgorithm`. adopt never writes it: it is cluster-wide, and one naming
//! certsync's targets makes `kubeadm join --control-plane` write manifests for files a new
//! node does not have. Left as kubeadm's, a `kubeadm upgrade` puts a node back on kubeadm's
//! files, which certsync keeps renewed in place, until adopt is run again.
//!
//! `kube-public/cluster-info`: the kubeconfig `kubeadm join` discovery fetches, whose CA data
//! a joining node trusts. kubeadm writes it once, at init, so once adopt has renewed the CA a
//! join after the old certificate's end cannot verify the API server. adopt puts there the CA
//! data its kubeconfigs get (old and renewed side by side); the bootstrap signer re-signs it.
//! Only that CA data changes; a shape kubeadm does not write is reported and left alone,
//! never guessed at.
//!
//! `kube-system/certsync-kubeadm-cas`: the cluster's certificates of each kubeadm CA, side by
//! side, so a CA is renewed once for the whole cluster: the first node whose adopt finds it
//! due renews it and writes it here; the others take that renewal. Never proof by itself:
//! anyone who may write ConfigMaps in kube-system could put a certificate here. `trust` takes
//! one only when it is the CA's own (signed by its key) and lasts no longer than a renewal
//! would.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use serde_yaml_ng::Value;

use super::admin::Access;
use super::error::{FileProblem, KubeadmError, Refusal};
use crate::writer::{CaCluster, WriterError};

/// How long adopt waits for each answer (status: a third).
pub const TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, Clone, Copy)]
pub struct Map {
    pub namespace: &'static str,
    pub name: &'static str,
}

impl Map {
    async fn call<T>(
        &self,
        client: &kube::Client,
        (timeout, action): (Duration, &'static str),
        call: impl AsyncFnOnce(kube::Api<ConfigMap>) -> Result<T, kube::Error>,
    ) -> Result<T, KubeadmError> {
        let (namespace, name) = (self.namespace, self.name);
        let api = kube::Api::namespaced(client.clone(), namespace);
        match tokio::time::timeout(timeout, call(api)).await {
            Err(_) => Err(KubeadmError::ApiTimeout {
                namespace,
                name,
                timeout,
            }),
            Ok(r) => r.map_err(|source| KubeadmError::Api {
                namespace,
                name,
                action,
                source,
            }),
        }
    }

    pub async fn get(
        &self,
        client: &kube::Client,
        timeout: Duration,
    ) -> Result<Option<ConfigMap>, KubeadmError> {
        self.call(client, (timeout, "read"), async |api| {
            api.get_opt(self.name).await
        })
        .await
    }

    pub async fn existing(
        &self,
        client: &kube::Client,
        timeout: Duration,
    ) -> Result<ConfigMap, KubeadmError> {
        let (namespace, name) = (self.namespace, self.name);
        (self.get(client, timeout).await?).ok_or(KubeadmError::NoMap { namespace, name })
    }

    /// Created without a resourceVersion, else replaced at that version.
    pub async fn put(&self, client: &kube::Client, object: &ConfigMap) -> Result<(), KubeadmError> {
        let params = kube::api::PostParams::default();
        let replace = object.metadata.resource_version.is_some();
        let action = if replace { "write" } else { "create" };
        self.call(client, (TIMEOUT, action), async |api| match replace {
            true => api.replace(self.name, &params, object).await,
            false => api.create(&params, object).await,
        })
        .await
        .map(drop)
    }
}

const KUBEADM_CONFIG: Map = Map {
    namespace: "kube-system",
    name: "kubeadm-config",
};

/// The ClusterConfiguration, read through admin.conf as `access` holds it, and the client
/// it was read through: adopt reads the other ConfigMaps the same way.
pub async fn kubeadm_config(access: &Access) -> Result<(Value, kube::Client), KubeadmError> {
    let client = access.client(None)?;
    let object = KUBEADM_CONFIG.existing(&client, TIMEOUT).await?;
    let at = Path::new("ConfigMap kube-system/kubeadm-config: ClusterConfiguration");
    let text = object
        .data
        .as_ref()
        .and_then(|d| d.get("ClusterConfiguration"));
    let text = text.ok_or_else(|| KubeadmError::file(at, FileProblem::Missing))?;
    // kubeadm reads it with go-yaml: what that reads otherwise (a merge key, a tag) is refused.
    let config: Value = crate::files::parse_yaml(text)
        .map_err(|e| KubeadmError::file(at, FileProblem::NotYaml(e)))?;
    Ok((config, client))
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

pub const PUBLISHED: Map = Map {
    namespace: "kube-system",
    name: "certsync-kubeadm-cas",
};

#[derive(Debug, Clone, Default)]
pub struct Published {
    pub object: Option<ConfigMap>,
    pub pem: BTreeMap<String, String>,
}

pub async fn published(client: &kube::Client) -> Result<Published, KubeadmError> {
    let object = PUBLISHED.get(client, TIMEOUT).await?;
    let pem = (object.as_ref().and_then(|o| o.data.clone())).unwrap_or_default();
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
                name: Some(PUBLISHED.name.into()),
                namespace: Some(PUBLISHED.namespace.into()),
                ..Default::default()
            },
            ..Default::default()
        });
        object.data = Some(pem.clone().into_iter().collect());
        Some(object)
    }
}

pub const CLUSTER_INFO: Map = Map {
    namespace: "kube-public",
    name: "cluster-info",
};
const KUBECONFIG: &str = "kubeconfig";
/// What cluster-info's refusals are said of.
const WHERE: &str = "ConfigMap kube-public/cluster-info: its kubeconfig";

#[derive(Debug, Clone)]
pub struct ClusterInfo {
    object: ConfigMap,
    pub trusted: Vec<Vec<u8>>,
}

pub async fn cluster_info(
    client: &kube::Client,
    timeout: Duration,
) -> Result<ClusterInfo, KubeadmError> {
    parse(CLUSTER_INFO.existing(client, timeout).await?)
}

fn kubeconfig(object: &ConfigMap) -> Result<&str, KubeadmError> {
    let text = object.data.as_ref().and_then(|d| d.get(KUBECONFIG));
    text.map(String::as_str)
        .ok_or_else(|| KubeadmError::file(Path::new(WHERE), FileProblem::Missing))
}

fn parse(object: ConfigMap) -> Result<ClusterInfo, KubeadmError> {
    let at = Path::new(WHERE);
    let trusted = super::trust::embedded(at, kubeconfig(&object)?, CaCluster::One)?
        .ok_or_else(|| KubeadmError::file(at, WriterError::NoCaData))?;
    if trusted.is_empty() {
        return Err(KubeadmError::file(at, FileProblem::NotOnlyCertificates));
    }
    Ok(ClusterInfo { object, trusted })
}

impl ClusterInfo {
    /// The ConfigMap with `bundle` (PEM) as its cluster's CA data, unless
    /// it already trusts each of those certificates.
    pub fn with_ca(&self, bundle: &[u8]) -> Result<Option<ConfigMap>, KubeadmError> {
        let trusts = (kubeconfig(&self.object)?, self.trusted.as_slice());
        let text = super::trust::trusting(Path::new(WHERE), trusts, CaCluster::One, bundle)?;
        Ok(text.map(|text| {
            let mut object = self.object.clone();
            let data = object.data.get_or_insert_with(Default::default);
            data.insert(KUBECONFIG.into(), text);
            object
        }))
    }
}

pub(super) fn judge(trusted: &[Vec<u8>], in_place: &[u8], now: i64) -> Option<(bool, String)> {
    super::trust::stale_trust(
        "ConfigMap kube-public/cluster-info",
        trusted,
        in_place,
        now,
        "`kubeadm join` cannot verify the API server",
        "run `certsync kubeadm adopt` again (it puts the CA's certificates there)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn object(kubeconfig: &str) -> ConfigMap {
        ConfigMap {
            data: Some([(KUBECONFIG.to_owned(), kubeconfig.to_owned())].into()),
            ..Default::default()
        }
    }

    fn kubeadms(ca_pem: &[u8]) -> String {
        format!(
            "apiVersion: v1\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    \
             server: https://10.0.0.1:6443\n  name: \"\"\ncontexts: null\ncurrent-context: \"\"\n\
             kind: Config\npreferences: {{}}\nusers: null\n",
            base64::engine::general_purpose::STANDARD.encode(ca_pem)
        )
    }

    fn ca(cn: &str) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut p = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        p.self_signed(&key).expect("cert").pem().into_bytes()
    }

    #[test]
    fn only_the_ca_data_changes_and_only_when_a_certificate_is_missing() {
        let b64 = base64::engine::general_purpose::STANDARD;
        let old = ca("kubernetes");
        let renewed = ca("kubernetes");
        let info = parse(object(&kubeadms(&old))).expect("kubeadm's shape");
        assert!(info.with_ca(&old).expect("same").is_none());
        let bundle = [old.clone(), renewed.clone()].concat();
        let new = info.with_ca(&bundle).expect("ok").expect("changed");
        let want = kubeadms(&old).replace(&b64.encode(&old), &b64.encode(&bundle));
        assert_eq!(kubeconfig(&new).expect("kubeconfig"), want);
        let again = parse(new).expect("still kubeadm's shape");
        assert_eq!(again.trusted.len(), 2);
        assert!(again.with_ca(&bundle).expect("same").is_none());
    }

    #[test]
    fn a_shape_kubeadm_does_not_write_is_refused() {
        let old = ca("kubernetes");
        let two = kubeadms(&old).replace(
            "  name: \"\"\n",
            "  name: \"\"\n- cluster:\n    server: https://evil:6443\n  name: other\n",
        );
        let no_data = kubeadms(&old).replace("certificate-authority-data", "certificate-authority");
        let not_pem = kubeadms(b"not a certificate");
        let problem = |o| match parse(o) {
            Err(KubeadmError::File { path, problem }) if path == Path::new(WHERE) => *problem,
            other => panic!("not refused as cluster-info's: {other:?}"),
        };
        let edit = |text: &str| match problem(object(text)) {
            FileProblem::Writer(e) => e,
            other => panic!("{other}"),
        };
        assert!(matches!(edit(&two), WriterError::Clusters(2)));
        assert!(matches!(edit(&no_data), WriterError::NoCaData));
        assert!(matches!(edit("clusters: 3"), WriterError::NotList(_)));
        assert!(matches!(
            problem(object(&not_pem)),
            FileProblem::NotOnlyCertificates
        ));
        assert!(matches!(
            problem(ConfigMap::default()),
            FileProblem::Missing
        ));
    }

    #[test]
    fn status_warns_while_the_ca_in_place_is_missing_and_calls_it_a_problem_once_all_ended() {
        let der = |pem: &[u8]| {
            super::super::node::certificates(Path::new("t"), pem)
                .expect("pem")
                .remove(0)
        };
        let old = der(&ca("kubernetes"));
        let renewed = der(&ca("kubernetes"));
        let end = super::super::node::Cert::parse(old.clone())
            .expect("cert")
            .not_after;
        assert_eq!(
            judge(&[old.clone(), renewed.clone()], &renewed, end + 1),
            None
        );
        assert!(matches!(
            judge(std::slice::from_ref(&old), &renewed, end - 1),
            Some((false, _))
        ));
        assert!(matches!(
            judge(std::slice::from_ref(&old), &renewed, end + 1),
            Some((true, _))
        ));
    }
}
