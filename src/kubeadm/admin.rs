//! How adopt and revert reach the API server: through admin.conf, which a
//! compromised certsync container may replace. A kubeconfig can make a root
//! process read host files, send them to a server of its choosing or run a
//! command; kubeadm writes only an embedded client pair, an embedded CA and a
//! server, and anything else is refused, naming the field. Once adopt has
//! backed admin.conf up, the server and CA are the backup's; the live file
//! gives only its client pair, and only one the node's CA issued.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kube::config::{AuthInfo, Cluster, Kubeconfig};
use secrecy::ExposeSecret as _;

use super::error::{FileProblem, KubeadmError};
use super::node;
use super::node::Cert;
use super::paths::host;
use super::record::State;
use super::seen::Problem;
use crate::source::client::ClientError;
use crate::writer::WriterError;

pub(super) const ADMIN: &str = "/etc/kubernetes/admin.conf";
pub(super) const CA: &str = "/etc/kubernetes/pki/ca.crt";

fn kubeadm_shape(kc: &Kubeconfig) -> Result<(&Cluster, &AuthInfo), FileProblem> {
    // As writer's kubeconfig reading says it; names escaped: the file may be the container's.
    let missing = |list: &str, name: &str| WriterError::NoEntry {
        list: list.to_owned(),
        name: crate::escape(name).into_owned(),
    };
    let context = (kc.current_context.as_ref())
        .and_then(|name| kc.contexts.iter().find(|c| &c.name == name))
        .and_then(|c| c.context.as_ref())
        .ok_or(WriterError::NoCurrentContext)?;
    let cluster = (kc.clusters.iter()).find(|c| c.name == context.cluster);
    let cluster = cluster.ok_or_else(|| missing("clusters", &context.cluster))?;
    let user_name = context.user.clone().unwrap_or_default();
    let user = (kc.auth_infos.iter()).find(|u| u.name == user_name);
    let user = user.ok_or_else(|| missing("users", &user_name))?;
    let c = (cluster.cluster.as_ref()).ok_or(FileProblem::Empty("cluster"))?;
    let u = (user.auth_info.as_ref()).ok_or(FileProblem::Empty("user"))?;
    // kubeadm's own fields taken out (the key stays a SecretString), anything else set is
    // refused.
    let (mut cb, mut ub) = (c.clone(), u.clone());
    (cb.server, cb.certificate_authority_data) = (None, None);
    (ub.client_certificate_data, ub.client_key_data) = (None, None);
    only_kubeadms("cluster", &cluster.name, cb, &c.other)?;
    only_kubeadms("user", &user.name, ub, &u.other)?;
    Ok((c, u))
}

/// Refuses `of` `name` for the first field `beyond` (what it holds but kubeadm's own
/// fields) sets, else for its first unknown field (of `other`).
fn only_kubeadms(
    of: &'static str,
    name: &str,
    beyond: impl serde::Serialize,
    other: &BTreeMap<String, serde_json::Value>,
) -> Result<(), FileProblem> {
    let set: BTreeMap<String, serde_json::Value> =
        serde_json::from_value(serde_json::to_value(beyond)?)?;
    let known = set.into_keys().find(|f| !other.contains_key(f)).map(|f| {
        let what = match f.as_str() {
            "exec" | "auth-provider" => " (a credential plugin)",
            "as" | "as-uid" | "as-groups" | "as-user-extra" => " (impersonation)",
            _ => "",
        };
        f + what
    });
    let unknown = (other.keys().next()).map(|f| format!("an unknown field {:?}", crate::escape(f)));
    match known.or(unknown) {
        Some(field) => Err(FileProblem::Field {
            of,
            name: crate::escape(name).into_owned(),
            field,
        }),
        None => Ok(()),
    }
}

/// admin.conf as one command read it: its checked server, CA data and client pair, ready to
/// make clients of; neither admin.conf nor adopt's record is read again for one.
pub struct Access {
    admin: PathBuf,
    config: kube::Config,
}

/// [`Access`] as read, or why admin.conf cannot be used (said wherever a client is asked for).
pub type Admin = Result<Access, KubeadmError>;

impl Access {
    /// admin.conf of the node at `dir` and, once adopt's record `state` (as the caller read
    /// it, with the node's CA certificate as read once) names its backup, that backup.
    pub async fn read(dir: &Path, state: Option<(&State, &Cert)>) -> Result<Self, KubeadmError> {
        let admin = host(dir, ADMIN);
        let live = node::kubeconfig(&admin, &node::read(dir, ADMIN)?)?;
        let (live_cluster, user) =
            kubeadm_shape(&live).map_err(|e| KubeadmError::file(&admin, e))?;
        let (Some(cert), Some(key)) = (&user.client_certificate_data, &user.client_key_data) else {
            return Err(KubeadmError::file(&admin, FileProblem::NoEmbeddedPair));
        };
        let kept;
        let cluster = match state.and_then(|(s, cas)| Some((s.kubeconfigs.get(ADMIN)?, cas))) {
            None => live_cluster,
            Some((backup, cas)) => {
                let (path, text) = super::record::read_backup_text(dir, backup, ADMIN)?;
                kept = node::kubeconfig(&path, &text)?;
                let (cluster, _) =
                    kubeadm_shape(&kept).map_err(|e| KubeadmError::file(&path, e))?;
                // The pair the container could have replaced: the node's CA's.
                let cert_pem = node::base64_field(&admin, "client-certificate-data", cert)?;
                let key_pem = node::base64_field(&admin, "client-key-data", key.expose_secret())?;
                node::sound_pair(&cert_pem, &key_pem, CA, cas)
                    .map_err(|e| KubeadmError::file(&admin, e.of("its client certificate")))?;
                cluster
            }
        };
        let server = (cluster.server.as_ref())
            .ok_or_else(|| KubeadmError::file(&admin, FileProblem::NoServer))?;
        let ca = &cluster.certificate_authority_data;
        let minimal = crate::source::client::one_context(
            ["kubernetes", "admin", "admin"],
            serde_json::json!({"server": server, "certificate-authority-data": ca}),
            serde_json::json!({"client-certificate-data": cert,
                "client-key-data": key.expose_secret()}),
        );
        let kc: Kubeconfig =
            serde_json::from_value(minimal).map_err(|e| KubeadmError::file(&admin, e))?;
        let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .map_err(|e| KubeadmError::file(&admin, ClientError::Kube(e)))?;
        Ok(Access { admin, config })
    }

    /// certsync's own client (kube's default logs each 500 of a restarting API server as an
    /// ERROR line), reaching `at` in place of admin.conf's server when given.
    pub fn client(&self, at: Option<http::Uri>) -> Result<kube::Client, KubeadmError> {
        let mut config = self.config.clone();
        config.cluster_url = at.unwrap_or(config.cluster_url);
        crate::source::client::ClientSettings::default()
            .client_for(&config)
            .map_err(|e| KubeadmError::file(&self.admin, e))
    }
}

/// [`Access::client`] of `admin`, or why there is none.
pub fn client(admin: &Admin, at: Option<http::Uri>) -> Result<kube::Client, Problem> {
    Ok(admin.as_ref().map_err(ToString::to_string)?.client(at)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubeadm::error::ACCEPTED;

    /// A field kubeadm never writes is named; else the first unknown one,
    /// escaped (the file may be the container's).
    #[test]
    fn a_field_kubeadm_never_writes_or_an_unknown_one_is_refused_by_name() {
        let other: BTreeMap<_, _> = [("\u{1b}[2Jx".to_owned(), serde_json::Value::Null)].into();
        let said = |set: bool| {
            let user = AuthInfo {
                token_file: set.then(|| "/secret".into()),
                other: other.clone(),
                ..Default::default()
            };
            only_kubeadms("user", "admin", user, &other).map_err(|e| e.to_string())
        };
        assert_eq!(
            said(true),
            Err(format!("user \"admin\" has tokenFile; {ACCEPTED}"))
        );
        let unknown = said(false).expect_err("refused");
        assert!(unknown.starts_with("user \"admin\" has an unknown field \""));
        assert!(!unknown.contains('\u{1b}'), "{unknown}");
        assert!(only_kubeadms("user", "admin", AuthInfo::default(), &Default::default()).is_ok());
    }
}
