//! Who may write: leader election through a Lease, read again before
//! each write, so a replica that lost it while busy writes nothing.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use kube::{Api, Client};
use tokio::sync::watch;

use crate::approve::api::{api_err, until_ok};
use crate::approve::error::ApproveError;
use crate::approve::settings::ApproverConfig;

/// Whether this replica may write, as it changes: always without a Lease,
/// else while it holds it; `None` at shutdown. A dry run takes no Lease:
/// it must never keep a real replica from deciding.
pub(super) async fn leader(
    config: &ApproverConfig,
    client: &Client,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<watch::Receiver<bool>> {
    let lease = match &config.lease {
        _ if config.dry_run => return Some(watch::channel(false).1),
        None => return Some(watch::channel(true).1),
        Some(lease) => lease,
    };
    let secs = lease.duration.as_secs().max(2);
    until_ok(shutdown, "start leader election", || async move {
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
        Ok::<_, ApproveError>(rx)
    })
    .await
}

/// Whether this replica may write now: no Lease, or the Lease as the API
/// server has it is held by it and unexpired by this process's clock (the
/// one it wrote renewTime with).
pub(super) async fn confirmed(config: &ApproverConfig, client: &Client, name: &str) -> bool {
    let Some(lease) = &config.lease else {
        return true;
    };
    let (ns, lease_name) = (lease.namespace(), &lease.name);
    let held = Api::<Lease>::namespaced(client.clone(), ns)
        .get(lease_name)
        .await
        .map(|l| {
            let spec = l.spec.unwrap_or_default();
            let (Some(renewed), Some(secs)) = (spec.renew_time, spec.lease_duration_seconds) else {
                return false;
            };
            let until = SystemTime::UNIX_EPOCH
                + Duration::from_millis(u64::try_from(renewed.0.as_millisecond()).unwrap_or(0))
                + Duration::from_secs(u64::try_from(secs).unwrap_or(0));
            spec.holder_identity.as_deref() == Some(lease.identity.as_str())
                && SystemTime::now() < until
        });
    match held {
        Ok(true) => true,
        Ok(false) => {
            // Until the next refresh or event: no busy loop on the Lease.
            tracing::info!(csr = %name, "the Lease is no longer held or has expired; not writing");
            false
        }
        Err(e) => {
            let e = api_err("get", &format!("lease {ns}/{lease_name}"), e);
            tracing::warn!(csr = %name, error = %e, "cannot confirm the Lease; not writing");
            false
        }
    }
}
