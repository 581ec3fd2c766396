//! `kube-public/cluster-info`: the kubeconfig `kubeadm join` discovery fetches, whose CA data a
//! joining node trusts. kubeadm writes it once, at init, so once adopt has renewed the CA a join
//! after the old certificate's end cannot verify the API server. adopt puts there the CA data its
//! kubeconfigs get (old and renewed side by side); the bootstrap signer re-signs it. Only that CA
//! data changes; a shape kubeadm does not write is reported and left alone, never guessed at.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;

use super::error::{FileProblem, KubeadmError};
use crate::writer::{CaCluster, WriterError};

pub const MAP: super::api::Map = super::api::Map {
    namespace: "kube-public",
    name: "cluster-info",
};
const KEY: &str = "kubeconfig";
/// What its refusals are said of.
const WHERE: &str = "ConfigMap kube-public/cluster-info: its kubeconfig";

#[derive(Debug, Clone)]
pub struct ClusterInfo {
    object: ConfigMap,
    pub trusted: Vec<Vec<u8>>,
}

pub async fn read(config: &kube::Config, timeout: Duration) -> Result<ClusterInfo, KubeadmError> {
    parse(MAP.existing(config, timeout).await?)
}

fn kubeconfig(object: &ConfigMap) -> Result<&str, KubeadmError> {
    let text = object.data.as_ref().and_then(|d| d.get(KEY));
    text.map(String::as_str)
        .ok_or_else(|| KubeadmError::file(Path::new(WHERE), FileProblem::Missing))
}

fn parse(object: ConfigMap) -> Result<ClusterInfo, KubeadmError> {
    let bad = |e: WriterError| KubeadmError::file(Path::new(WHERE), e);
    let text = kubeconfig(&object)?;
    let pem = crate::writer::ca_data(text, CaCluster::One)
        .and_then(|pem| pem.ok_or(WriterError::NoCaData))
        .map_err(bad)?;
    let trusted = super::node::certificates(Path::new(WHERE), &pem)?;
    if trusted.is_empty() {
        let none = FileProblem::NotOnlyCertificates;
        return Err(KubeadmError::file(Path::new(WHERE), none));
    }
    Ok(ClusterInfo { object, trusted })
}

impl ClusterInfo {
    /// The ConfigMap with `bundle` (PEM) as its cluster's CA data, unless
    /// it already trusts each of those certificates.
    pub fn with_ca(&self, bundle: &[u8]) -> Result<Option<ConfigMap>, KubeadmError> {
        let certs = super::node::certificates(Path::new("the CA bundle"), bundle)?;
        if certs.iter().all(|c| self.trusted.contains(c)) {
            return Ok(None);
        }
        let text = crate::writer::with_ca_data(kubeconfig(&self.object)?, CaCluster::One, bundle)
            .map_err(|e| KubeadmError::file(Path::new(WHERE), e))?;
        let Some(text) = text else {
            return Ok(None);
        };
        let mut object = self.object.clone();
        let data = object.data.get_or_insert_with(Default::default);
        data.insert(KEY.into(), text);
        Ok(Some(object))
    }
}

/// [`super::trust::stale_trust`] of cluster-info and `pki/ca.crt` on the
/// node at `dir`; once adopt has `renewed` the CA, a warning when it
/// could not be read.
pub async fn status(dir: &Path, now: i64, renewed: bool) -> Option<(bool, String)> {
    let (in_place, _) = super::node::ca_file(dir, "/etc/kubernetes/pki/ca.crt").ok()?;
    let read = async {
        let admin = super::paths::host(dir, "/etc/kubernetes/admin.conf");
        let config = super::admin::config(&admin)
            .await
            .map_err(|e| e.to_string())?;
        read(&config, super::api::TIMEOUT / 3)
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
    judge(&info.trusted, &in_place.der, now)
}

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
    use base64::Engine as _;

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
            FileProblem::KubeconfigCa(e) => e,
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
