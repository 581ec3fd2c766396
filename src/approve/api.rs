//! What the approver and `csr review` ask of the API server alike.

use std::time::Duration;

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest as Csr, CertificateSigningRequestCondition as Condition,
    CertificateSigningRequestStatus as Status,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::PostParams;
use kube::{Api, Client};
use tokio::sync::watch;

use super::error::ApproveError;
use super::policy::Verdict;
use crate::source::client::ClientSettings;

/// A CSR still waiting for a decision.
pub(super) fn pending(csr: &Csr) -> bool {
    !csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[])
        .iter()
        .any(|c| matches!(c.type_.as_str(), "Approved" | "Denied" | "Failed"))
}

pub(super) fn api_err(verb: &'static str, object: &str, source: kube::Error) -> ApproveError {
    ApproveError::Api(crate::source::client::ApiError {
        verb,
        object: object.to_owned(),
        source,
    })
}

pub(super) fn name_of(csr: &Csr) -> String {
    csr.metadata.name.clone().unwrap_or_default()
}

/// Writes the verdict to `csr` through `/approval` with its
/// resourceVersion (a stale one is a 409); returns what the server stored.
pub async fn write_decision(
    api: &Api<Csr>,
    csr: &Csr,
    verdict: &Verdict,
    node: &str,
) -> Result<Csr, ApproveError> {
    let name = name_of(csr);
    let (ty, reason, message) = match verdict {
        Verdict::Approve => (
            "Approved",
            "CertsyncApprove",
            format!(
                "approved by certsync: requester, subject, usages, key and SANs checked against node {node}"
            ),
        ),
        Verdict::Deny { check, message } => (
            "Denied",
            "CertsyncDeny",
            format!("{}: {message}", check.label()),
        ),
        Verdict::Wait { .. } => return Ok(csr.clone()),
    };
    let mut obj = csr.clone();
    let status = obj.status.get_or_insert_with(Status::default);
    status
        .conditions
        .get_or_insert_with(Vec::new)
        .push(Condition {
            type_: ty.into(),
            status: "True".into(),
            reason: Some(reason.into()),
            message: Some(message),
            last_update_time: Some(Time(k8s_openapi::jiff::Timestamp::now())),
            ..Default::default()
        });
    api.replace_subresource("approval", &name, &PostParams::default(), &obj)
        .await
        .map_err(|e| {
            api_err(
                "update approval of",
                &format!("certificatesigningrequest {name}"),
                e,
            )
        })
}

/// A client, the API server's URL and the namespace its configuration
/// implies.
pub(super) async fn connect(
    settings: &ClientSettings,
) -> Result<(Client, http::Uri, Option<String>), ApproveError> {
    let loaded = settings.load().await?;
    let client = settings.client_for(&loaded.config)?;
    Ok((client, loaded.config.cluster_url, loaded.namespace))
}

/// `step` until it succeeds, retried with jittered backoff while it
/// fails; `None` when shutdown comes first.
pub(super) async fn until_ok<T, F, Fut>(
    shutdown: &mut watch::Receiver<bool>,
    what: &str,
    mut step: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ApproveError>>,
{
    for attempt in 1.. {
        let e = match unless_stopped(shutdown, step()).await? {
            Ok(t) => return Some(t),
            Err(e) => e,
        };
        // 1 s doubling to 16 s, plus up to as much again at random.
        let retry_in = crate::backoff(Duration::from_secs(1), attempt.min(5));
        tracing::warn!(error = %crate::error_chain(&e), retry_in = ?retry_in, "cannot {what} yet; not ready, retrying");
        unless_stopped(shutdown, tokio::time::sleep(retry_in)).await?;
    }
    None
}

/// `work` to its end; `None` when shutdown comes first.
pub(super) async fn unless_stopped<T>(
    shutdown: &mut watch::Receiver<bool>,
    work: impl Future<Output = T>,
) -> Option<T> {
    tokio::select! {
        t = work => Some(t),
        () = crate::shutdown::stopped(shutdown) => None,
    }
}
