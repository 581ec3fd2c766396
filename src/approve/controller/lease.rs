//! Who may write: leader election through a Lease, and the Lease read
//! again before each write, so a replica that lost it while it was busy
//! writes nothing.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use tokio::sync::watch;

use super::Round;
use crate::approve::{ApproveError, ApproverConfig, api_err, until_ok};

/// Whether this replica may write, as it changes; `None` when shutdown
/// comes first. A dry run takes no Lease: it must never keep a real
/// replica from deciding.
pub(super) async fn leader(
    config: &ApproverConfig,
    client: &Client,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<watch::Receiver<bool>> {
    if config.dry_run {
        return Some(watch::channel(false).1);
    }
    until_ok(shutdown, "start leader election", || {
        leadership(config, client)
    })
    .await
}

/// `true` while this replica may write: always without a Lease, else
/// while it holds it.
async fn leadership(
    config: &ApproverConfig,
    client: &Client,
) -> Result<watch::Receiver<bool>, ApproveError> {
    let Some(lease) = &config.lease else {
        return Ok(watch::channel(true).1);
    };
    let secs = lease.duration.as_secs().max(2);
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &lease.name)
        .with_namespace(lease.namespace())
        .with_identity(&lease.identity)
        .with_duration(secs)
        .with_grace(secs / 3)
        .build()
        .await
        .map_err(|source| ApproveError::Lease {
            lease: format!("{}/{}", lease.namespace(), lease.name),
            source,
        })?;
    let (rx, task) = manager.watch().await;
    tokio::spawn(async move {
        if let Ok(Err(e)) = task.await {
            tracing::error!(error = %e, "leader election ended");
        }
    });
    Ok(rx)
}

/// Whether this replica may write now: no Lease, or the Lease read from
/// the API server is held by it and unexpired.
pub(super) async fn confirmed(with: Round<'_>, name: &str) -> bool {
    let Some(lease) = &with.config.lease else {
        return true;
    };
    match holds_lease(with.client, lease.namespace(), &lease.name, &lease.identity).await {
        Ok(true) => true,
        Ok(false) => {
            // Until the next refresh or event: no busy loop on the Lease.
            tracing::info!(csr = %name, "the Lease is no longer held or has expired; not writing");
            false
        }
        Err(e) => {
            tracing::warn!(csr = %name, error = %e, "cannot confirm the Lease; not writing");
            false
        }
    }
}

/// Whether `identity` holds Lease `namespace/name` and it has not expired
/// by this process's clock (the holder, this process, wrote renewTime with
/// the same clock). Read from the API server before each write, so a
/// replica that lost the Lease while it was busy writes nothing.
async fn holds_lease(
    client: &Client,
    namespace: &str,
    name: &str,
    identity: &str,
) -> Result<bool, ApproveError> {
    let lease = Api::<Lease>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .map_err(|e| api_err("get", &format!("lease {namespace}/{name}"), e))?;
    let Some(spec) = lease.spec else {
        return Ok(false);
    };
    if spec.holder_identity.as_deref() != Some(identity) {
        return Ok(false);
    }
    let (Some(renewed), Some(secs)) = (spec.renew_time, spec.lease_duration_seconds) else {
        return Ok(false);
    };
    let renewed = SystemTime::UNIX_EPOCH
        + Duration::from_millis(u64::try_from(renewed.0.as_millisecond()).unwrap_or(0));
    let until = renewed + Duration::from_secs(u64::try_from(secs).unwrap_or(0));
    Ok(SystemTime::now() < until)
}
