//! `kube-public/cluster-info`: the kubeconfig `kubeadm join` discovery
//! fetches (the controller-manager's bootstrap signer signs it for each
//! bootstrap token) and whose CA data a joining node then trusts, for its
//! TLS to the API server and in the kubelet.conf it writes. kubeadm writes
//! it once, at init, with that day's CA certificate, so once adopt has
//! renewed the CA a join after the old certificate's end cannot verify the
//! API server (Go refuses a chain ending at an ended root). adopt puts
//! there the CA data its kubeconfigs get (old and renewed certificates side
//! by side), through admin.conf as it reads kubeadm-config; the bootstrap
//! signer re-signs the new content.
//!
//! Only the CA data of its one cluster changes; everything else is kept as
//! read. A shape kubeadm does not write is reported and left alone, never
//! guessed at.

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::api::core::v1::ConfigMap;
use serde_yaml_ng::Value;

use super::error::KubeadmError;

pub const MAP: super::api::Map = super::api::Map {
    namespace: "kube-public",
    name: "cluster-info",
};
const KEY: &str = "kubeconfig";
const CA_DATA: &str = "certificate-authority-data";

/// The ConfigMap as read, and the certificates (DER) its cluster trusts.
#[derive(Debug, Clone)]
pub struct ClusterInfo {
    object: ConfigMap,
    kubeconfig: Value,
    pub trusted: Vec<Vec<u8>>,
}

fn shape(problem: impl Into<String>) -> KubeadmError {
    KubeadmError::ClusterInfo {
        problem: problem.into(),
    }
}

/// Reads it through `config` (admin.conf as adopt judges it).
pub async fn read(config: &kube::Config) -> Result<ClusterInfo, KubeadmError> {
    read_within(config, super::api::TIMEOUT).await
}

async fn read_within(
    config: &kube::Config,
    timeout: Duration,
) -> Result<ClusterInfo, KubeadmError> {
    parse(MAP.existing(config, timeout).await?)
}

fn parse(object: ConfigMap) -> Result<ClusterInfo, KubeadmError> {
    let text = object
        .data
        .as_ref()
        .and_then(|d| d.get(KEY))
        .ok_or_else(|| shape("no `kubeconfig` key"))?;
    let kubeconfig: Value = crate::files::parse_yaml(text).map_err(|e| shape(e.to_string()))?;
    let pem = ca_data(&kubeconfig)?;
    let trusted = super::trust::certificates(Path::new("kube-public/cluster-info"), &pem)
        .map_err(|e| shape(format!("its {CA_DATA}: {e}")))?;
    if trusted.is_empty() {
        return Err(shape(format!("no certificate in its {CA_DATA}")));
    }
    Ok(ClusterInfo {
        object,
        kubeconfig,
        trusted,
    })
}

/// The PEM of the one cluster's CA data.
fn ca_data(kubeconfig: &Value) -> Result<Vec<u8>, KubeadmError> {
    let clusters = kubeconfig["clusters"]
        .as_sequence()
        .ok_or_else(|| shape("no clusters"))?;
    let [cluster] = clusters.as_slice() else {
        return Err(shape(format!("{} clusters, not one", clusters.len())));
    };
    let data = cluster["cluster"][CA_DATA]
        .as_str()
        .ok_or_else(|| shape(format!("no {CA_DATA}")))?;
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| shape(format!("its {CA_DATA} is not base64 ({e})")))
}

impl ClusterInfo {
    /// Whether its cluster trusts every certificate of `bundle` (DER).
    pub fn holds(&self, bundle: &[Vec<u8>]) -> bool {
        bundle.iter().all(|c| self.trusted.contains(c))
    }

    /// The ConfigMap with `bundle` (PEM) as its cluster's CA data, unless
    /// it already trusts each of those certificates.
    pub fn with_ca(&self, bundle: &[u8]) -> Result<Option<ConfigMap>, KubeadmError> {
        let wanted = super::trust::certificates(Path::new("the CA bundle"), bundle)
            .map_err(|e| shape(e.to_string()))?;
        if self.holds(&wanted) {
            return Ok(None);
        }
        let mut kubeconfig = self.kubeconfig.clone();
        kubeconfig["clusters"][0]["cluster"][CA_DATA] =
            Value::String(base64::engine::general_purpose::STANDARD.encode(bundle));
        let text = serde_yaml_ng::to_string(&kubeconfig).map_err(|e| shape(e.to_string()))?;
        let mut object = self.object.clone();
        object
            .data
            .get_or_insert_with(Default::default)
            .insert(KEY.into(), text);
        Ok(Some(object))
    }
}

/// On an adopted node at `dir`: when `kube-public/cluster-info` does not
/// trust the CA certificate in place (`pki/ca.crt`), whether what it
/// trusts has ended (a problem: a join cannot verify the API server) and
/// what to do; also, once adopt has `renewed` the CA, when it could not be
/// read (a warning: the check needs the API server).
pub async fn status(dir: &Path, now: i64, renewed: bool) -> Option<(bool, String)> {
    let (in_place, ..) = super::trust::in_place(dir, "/etc/kubernetes/pki/ca.crt").ok()?;
    let read = async {
        let admin = super::paths::host(dir, "/etc/kubernetes/admin.conf");
        let config = super::admin::config(&admin)
            .await
            .map_err(|e| e.to_string())?;
        read_within(&config, super::api::TIMEOUT / 3)
            .await
            .map_err(|e| e.to_string())
    };
    let info = match read.await {
        Ok(info) => info,
        Err(e) => {
            return renewed.then(|| {
                (
                    false,
                    format!("ConfigMap kube-public/cluster-info not checked: {e}"),
                )
            });
        }
    };
    judge(&info.trusted, &in_place, now)
}

/// [`super::trust::stale_trust`] for cluster-info's certificates.
fn judge(trusted: &[Vec<u8>], in_place: &[u8], now: i64) -> Option<(bool, String)> {
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

    fn object(kubeconfig: &str) -> ConfigMap {
        ConfigMap {
            data: Some([(KEY.to_owned(), kubeconfig.to_owned())].into()),
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
        let old = ca("kubernetes");
        let renewed = ca("kubernetes");
        let info = parse(object(&kubeadms(&old))).expect("kubeadm's shape");
        assert!(info.with_ca(&old).expect("same").is_none());
        let bundle = [old.clone(), renewed.clone()].concat();
        let new = info.with_ca(&bundle).expect("ok").expect("changed");
        let again = parse(new).expect("still kubeadm's shape");
        assert_eq!(again.trusted.len(), 2);
        assert_eq!(
            again.kubeconfig["clusters"][0]["cluster"]["server"],
            "https://10.0.0.1:6443"
        );
        assert_eq!(again.kubeconfig["kind"], "Config");
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
        for text in [two, no_data, not_pem, "clusters: 3".to_owned()] {
            assert!(
                matches!(parse(object(&text)), Err(KubeadmError::ClusterInfo { .. })),
                "{text}"
            );
        }
        assert!(matches!(
            parse(ConfigMap::default()),
            Err(KubeadmError::ClusterInfo { .. })
        ));
    }

    #[test]
    fn status_warns_while_the_ca_in_place_is_missing_and_calls_it_a_problem_once_all_ended() {
        let der = |pem: &[u8]| {
            super::super::trust::certificates(Path::new("t"), pem)
                .expect("pem")
                .remove(0)
        };
        let old = der(&ca("kubernetes"));
        let renewed = der(&ca("kubernetes"));
        let end = super::super::trust::identity(&old).expect("cert").3;
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
