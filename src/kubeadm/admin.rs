//! How adopt and revert reach the API server: through admin.conf, which a
//! compromised certsync container may replace. A kubeconfig can make a root
//! process read host files, send them to a server of its choosing or run a
//! command; kubeadm writes only an embedded client pair, an embedded CA and a
//! server, and anything else is refused, naming the field. Once adopt has
//! backed admin.conf up, the server and CA are the backup's; the live file
//! gives only its client pair, and only one the node's CA issued.

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

pub(super) const ADMIN: &str = "/etc/kubernetes/admin.conf";
pub(super) const CA: &str = "/etc/kubernetes/pki/ca.crt";

fn kubeadm_shape(kc: &Kubeconfig) -> Result<(&Cluster, &AuthInfo), FileProblem> {
    let missing = |of, name: &str| FileProblem::NoNamed {
        of,
        name: crate::escape(name).into_owned(),
    };
    let context = (kc.current_context.as_ref())
        .and_then(|name| kc.contexts.iter().find(|c| &c.name == name))
        .and_then(|c| c.context.as_ref())
        .ok_or(FileProblem::NoContext)?;
    let cluster = (kc.clusters.iter()).find(|c| c.name == context.cluster);
    let cluster = cluster.ok_or_else(|| missing("cluster", &context.cluster))?;
    let user_name = context.user.clone().unwrap_or_default();
    let user = (kc.auth_infos.iter()).find(|u| u.name == user_name);
    let user = user.ok_or_else(|| missing("user", &user_name))?;
    let c = (cluster.cluster.as_ref()).ok_or(FileProblem::Empty("cluster"))?;
    let u = (user.auth_info.as_ref()).ok_or(FileProblem::Empty("user"))?;
    let cluster_fields = [
        ("certificate-authority", c.certificate_authority.is_some()),
        (
            "insecure-skip-tls-verify",
            c.insecure_skip_tls_verify.is_some(),
        ),
        ("proxy-url", c.proxy_url.is_some()),
        ("disable-compression", c.disable_compression.is_some()),
        ("tls-server-name", c.tls_server_name.is_some()),
        ("extensions", c.extensions.is_some()),
    ];
    let user_fields = [
        ("token", u.token.is_some()),
        ("tokenFile", u.token_file.is_some()),
        ("username", u.username.is_some()),
        ("password", u.password.is_some()),
        ("client-certificate", u.client_certificate.is_some()),
        ("client-key", u.client_key.is_some()),
        ("exec (a credential plugin)", u.exec.is_some()),
        (
            "auth-provider (a credential plugin)",
            u.auth_provider.is_some(),
        ),
        ("as (impersonation)", u.impersonate.is_some()),
        ("as-uid (impersonation)", u.impersonate_uid.is_some()),
        ("as-groups (impersonation)", u.impersonate_groups.is_some()),
        (
            "as-user-extra (impersonation)",
            u.impersonate_user_extra.is_some(),
        ),
        ("extensions", u.extensions.is_some()),
    ];
    only_kubeadms("cluster", &cluster.name, &cluster_fields, &c.other)?;
    only_kubeadms("user", &user.name, &user_fields, &u.other)?;
    Ok((c, u))
}

/// Refuses `of` `name` for its first field set of `fields`, else for its
/// first unknown field.
fn only_kubeadms(
    of: &'static str,
    name: &str,
    fields: &[(&'static str, bool)],
    other: &std::collections::BTreeMap<String, serde_json::Value>,
) -> Result<(), FileProblem> {
    let set = (fields.iter().find(|(_, set)| *set)).map(|(f, _)| f.to_string());
    let unknown = (other.keys().next()).map(|f| format!("an unknown field {:?}", crate::escape(f)));
    match set.or(unknown) {
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
        let other = [("\u{1b}[2Jx".to_owned(), serde_json::Value::Null)].into();
        let said = |set| {
            let fields = [("token", false), ("tokenFile", set)];
            only_kubeadms("user", "admin", &fields, &other).map_err(|e| e.to_string())
        };
        assert_eq!(
            said(true),
            Err(format!("user \"admin\" has tokenFile; {ACCEPTED}"))
        );
        let unknown = said(false).expect_err("refused");
        assert!(unknown.starts_with("user \"admin\" has an unknown field \""));
        assert!(!unknown.contains('\u{1b}'), "{unknown}");
        assert!(only_kubeadms("user", "admin", &[("token", false)], &Default::default()).is_ok());
    }
}
