//! What the approver reads from the cluster besides CSRs and Nodes: the
//! names and addresses that are the cluster's own (never a node's), and
//! whether this replica still holds its Lease.

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::ServiceCIDR;
use kube::api::ListParams;
use kube::{Api, Client};

use super::ApproveError;
use super::policy::{Cidr, Cluster};

fn api_err(verb: &'static str, object: &str, e: &kube::Error) -> ApproveError {
    ApproveError::Api {
        verb,
        object: object.to_owned(),
        message: crate::error_chain(e),
    }
}

fn not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

/// The Service ranges (ServiceCIDR objects of networking.k8s.io/v1; absent
/// before Kubernetes 1.33 or with the API off), the `default/kubernetes`
/// Service's IPs and the API server's endpoints (its EndpointSlices).
/// Any error but the ServiceCIDR API being absent is an error: the
/// approver decides nothing without these.
pub async fn read(client: &Client) -> Result<Cluster, ApproveError> {
    let mut cluster = Cluster::default();
    match Api::<ServiceCIDR>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => {
            for sc in list.items {
                let name = sc.metadata.name.clone().unwrap_or_default();
                for c in sc.spec.and_then(|s| s.cidrs).unwrap_or_default() {
                    let cidr: Cidr = c.parse().map_err(|e: String| ApproveError::Api {
                        verb: "read",
                        object: format!("servicecidr {name}"),
                        message: e,
                    })?;
                    cluster.ranges.push((cidr, format!("ServiceCIDR {name}")));
                }
            }
        }
        Err(e) if not_found(&e) => {}
        Err(e) => return Err(api_err("list", "servicecidrs.networking.k8s.io", &e)),
    }
    match Api::<Service>::namespaced(client.clone(), "default")
        .get("kubernetes")
        .await
    {
        Ok(svc) => {
            let spec = svc.spec.unwrap_or_default();
            let ips = spec
                .cluster_ips
                .unwrap_or_default()
                .into_iter()
                .chain(spec.cluster_ip);
            for ip in ips.filter_map(|ip| ip.parse::<IpAddr>().ok()) {
                cluster
                    .addresses
                    .push((ip, "the kubernetes Service's IP".into()));
            }
        }
        Err(e) if not_found(&e) => {}
        Err(e) => return Err(api_err("get", "service default/kubernetes", &e)),
    }
    let slices = Api::<EndpointSlice>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels("kubernetes.io/service-name=kubernetes"))
        .await
        .map_err(|e| api_err("list", "endpointslices default/kubernetes", &e))?;
    for slice in slices.items {
        for ep in slice.endpoints {
            for ip in ep.addresses.iter().filter_map(|a| a.parse::<IpAddr>().ok()) {
                cluster
                    .addresses
                    .push((ip, "an API server endpoint".into()));
            }
        }
    }
    Ok(cluster)
}

/// Whether `identity` holds Lease `namespace/name` and it has not expired
/// by this process's clock (the holder, this process, wrote renewTime with
/// the same clock). Read from the API server before each write, so a
/// replica that lost the Lease while it was busy writes nothing.
pub async fn holds_lease(
    client: &Client,
    namespace: &str,
    name: &str,
    identity: &str,
) -> Result<bool, ApproveError> {
    let lease = Api::<Lease>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .map_err(|e| api_err("get", &format!("lease {namespace}/{name}"), &e))?;
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
