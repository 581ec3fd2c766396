//! `certsync approve` and `certsync csr review`: the kubelet-serving
//! policy ([`policy`]) applied by a controller ([`controller`]), or shown
//! to a human.
//!
//! A decision is written through the `/approval` subresource (a `True`
//! condition with a reason and message, as `kubectl certificate approve`
//! writes). Only the holder of a `coordination.k8s.io` Lease writes, and
//! only after reading that its Lease is unexpired, so two replicas are
//! safe; every write carries the CSR's resourceVersion, so a CSR changed
//! meanwhile (decided by someone else) is never decided twice: the
//! conflict is dropped and the CSR looked at again as it now is. A verdict
//! is logged once per CSR and counted in
//! `certsync_csr_decisions_total{decision,reason}` when it is made.
//!
//! Invariants: nothing is approved that [`policy::decide`] did not
//! approve; a CSR that already carries Approved, Denied or Failed is
//! never written; `--dry-run` writes nothing and takes no Lease; nothing
//! is decided without the cluster's own names and addresses
//! ([`cluster::read`]).

pub mod cluster;
pub mod controller;
pub mod error;
pub mod policy;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest as Csr, CertificateSigningRequestCondition as Condition,
    CertificateSigningRequestStatus as Status,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client};
use serde::Serialize;
use tokio::sync::watch;

use crate::source::client::ClientSettings;
pub use controller::run;
pub use error::ApproveError;
pub use policy::{Check, Policy, Verdict};

/// The name under which the approver's readiness is reported.
const READINESS: &str = "approver";
/// How long the cluster's Service ranges and API server endpoints are
/// used before they are read again (they change when the control plane
/// does, and only the cluster's administrators change them).
const CLUSTER_FACTS_TTL: Duration = Duration::from_secs(30);

/// Leader election through a Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSettings {
    pub name: String,
    /// `None`: the namespace the client configuration implies (the
    /// kubeconfig context's, or the pod's), else [`LEASE_NAMESPACE`].
    pub namespace: Option<String>,
    /// This replica's identity (the pod name).
    pub identity: String,
    pub duration: Duration,
}

/// The Lease's namespace when nothing names one.
pub const LEASE_NAMESPACE: &str = "kube-system";

impl LeaseSettings {
    fn namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or(LEASE_NAMESPACE)
    }
}

/// Everything `certsync approve` needs.
#[derive(Debug, Clone)]
pub struct ApproverConfig {
    pub client: ClientSettings,
    pub policy: Policy,
    pub signer: String,
    pub dry_run: bool,
    /// `None`: this is the only replica and always writes.
    pub lease: Option<LeaseSettings>,
    pub events: bool,
    pub admin_addr: std::net::SocketAddr,
    /// Decide only CSRs with these labels.
    pub selector: Option<String>,
}

/// A CSR still waiting for a decision.
fn pending(csr: &Csr) -> bool {
    !csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or(&[])
        .iter()
        .any(|c| matches!(c.type_.as_str(), "Approved" | "Denied" | "Failed"))
}

/// A failed API call on `object`.
fn api_err(verb: &'static str, object: &str, source: kube::Error) -> ApproveError {
    ApproveError::Api(crate::source::client::ApiError {
        verb,
        object: object.to_owned(),
        source,
    })
}

fn name_of(csr: &Csr) -> String {
    csr.metadata.name.clone().unwrap_or_default()
}

/// Writes the verdict to `csr` through `/approval`, with its
/// resourceVersion (a stale one is a 409: someone else decided); returns
/// the CSR as the server stored it.
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

/// A client, the API server's URL it talks to, and the namespace its
/// configuration implies.
async fn connect(
    settings: &ClientSettings,
) -> Result<(Client, http::Uri, Option<String>), ApproveError> {
    let loaded = settings.load().await.map_err(ApproveError::Client)?;
    let client = settings
        .client_for(&loaded.config)
        .map_err(ApproveError::Client)?;
    Ok((client, loaded.config.cluster_url, loaded.namespace))
}

/// `step` until it succeeds, retried with jittered backoff (1 s doubling,
/// capped at 16-32 s) while it fails; `None` when shutdown comes first.
async fn until_ok<T, F, Fut>(
    shutdown: &mut watch::Receiver<bool>,
    what: &str,
    mut step: F,
) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ApproveError>>,
{
    let mut attempt = 0;
    loop {
        let result = tokio::select! {
            () = crate::shutdown::stopped(shutdown) => return None,
            r = step() => r,
        };
        match result {
            Ok(t) => return Some(t),
            Err(e) => {
                attempt += 1;
                // 1 s doubling to 16 s, plus up to as much again at random.
                let retry_in = crate::backoff(Duration::from_secs(1), attempt.min(5));
                tracing::warn!(error = %crate::error_chain(&e), retry_in = ?retry_in, "cannot {what} yet; not ready, retrying");
                tokio::select! {
                    () = crate::shutdown::stopped(shutdown) => return None,
                    () = tokio::time::sleep(retry_in) => {}
                }
            }
        }
    }
}

/// One row of `csr review`.
#[derive(Debug, Clone, Serialize)]
pub struct ReviewRow {
    pub name: String,
    pub signer: String,
    pub requester: String,
    pub node: Option<String>,
    pub sans: Vec<String>,
    pub usages: Vec<String>,
    pub key: String,
    pub age_seconds: i64,
    /// `approve`, `deny`, `wait`, `unchecked` (no node network given: the
    /// addresses were not checked), or `not-checked` (another signer) or the
    /// state of a decided CSR.
    pub verdict: String,
    /// The failed check and why; empty when approved.
    pub reason: String,
    #[serde(skip)]
    decision: Option<Verdict>,
}

pub const REVIEW_HEADER: &[&str] = &[
    "NAME",
    "SIGNER",
    "REQUESTER",
    "NODE",
    "SANS",
    "USAGES",
    "KEY",
    "AGE",
    "VERDICT",
];

/// The table's cells; everything a requester controls is escaped, so no
/// escape sequence or carriage return reaches the operator's terminal.
pub fn review_cells(r: &ReviewRow) -> Vec<String> {
    let verdict = if r.reason.is_empty() {
        r.verdict.clone()
    } else {
        format!("{}: {}", r.verdict, r.reason)
    };
    let age = humantime::format_duration(Duration::from_secs(r.age_seconds.max(0) as u64));
    let sans = if r.sans.is_empty() {
        "-".into()
    } else {
        r.sans.join(",")
    };
    [
        &r.name,
        &r.signer,
        &r.requester,
        r.node.as_deref().unwrap_or("-"),
        &sans,
        &r.usages.join(","),
        &r.key,
        age.to_string().split(' ').next().unwrap_or_default(),
        &verdict,
    ]
    .map(|c| crate::escape(c).into_owned())
    .into()
}

/// `csr review`: the verdict on every pending CSR (or those named), and
/// with `approve`/`deny` the writes; returns the rows and what was done.
/// `addresses_unchecked`: no node network was given, so a request that
/// passes every other check is shown as `unchecked` (its IP addresses not
/// checked against node networks) and never approved.
#[allow(clippy::too_many_arguments)]
pub async fn review(
    settings: &ClientSettings,
    names: &[String],
    selector: Option<&str>,
    policy: &Policy,
    addresses_unchecked: bool,
    approve: bool,
    deny: bool,
) -> Result<(Vec<ReviewRow>, Vec<String>), ApproveError> {
    let (client, server, _) = connect(settings).await?;
    let api: Api<Csr> = Api::all(client.clone());
    let mut params = ListParams::default();
    if let Some(labels) = selector {
        params = params.labels(labels);
    }
    let all = api
        .list(&params)
        .await
        .map_err(|e| api_err("list", "certificatesigningrequests", e))?
        .items;
    let facts_of_cluster = cluster::read(&client, &server).await?;
    cluster::check_service_range(&facts_of_cluster, policy)?;
    let nodes: BTreeMap<String, Node> = Api::<Node>::all(client)
        .list(&ListParams::default())
        .await
        .map_err(|e| api_err("list", "nodes", e))?
        .items
        .into_iter()
        .map(|n| (n.metadata.name.clone().unwrap_or_default(), n))
        .collect();
    let nodes = policy::Nodes::new(&nodes);
    if let Some(n) = names
        .iter()
        .find(|n| !all.iter().any(|c| name_of(c) == **n))
    {
        return Err(ApproveError::NoSuchCsr {
            name: n.to_string(),
        });
    }
    let now = crate::validate::unix_seconds(std::time::SystemTime::now());
    let (mut rows, mut done) = (Vec::new(), Vec::new());
    let chosen = all.iter().filter(|csr| {
        if names.is_empty() {
            pending(csr)
        } else {
            names.contains(&name_of(csr))
        }
    });
    for csr in chosen {
        let (verdict, facts) = policy::decide_with(csr, &nodes, &facts_of_cluster, policy);
        let row = review_row(csr, verdict, facts, addresses_unchecked, now);
        // The decisions `approve` / `deny` ask for.
        let write = match &row.decision {
            Some(Verdict::Approve) => approve,
            Some(Verdict::Deny { .. }) => deny,
            _ => false,
        };
        if let (true, Some(verdict)) = (write, &row.decision) {
            write_decision(&api, csr, verdict, row.node.as_deref().unwrap_or_default()).await?;
            done.push(match verdict {
                Verdict::Approve => format!("approved {}", row.name),
                _ => format!("denied {}: {}", row.name, row.reason),
            });
        }
        rows.push(row);
    }
    Ok((rows, done))
}

/// The row of `csr` with the policy's verdict on it, as `csr review`
/// shows it: a decided CSR, another signer's, or an approval whose
/// addresses were not checked carry no decision to write.
fn review_row(
    csr: &Csr,
    verdict: Verdict,
    facts: policy::Facts,
    addresses_unchecked: bool,
    now: i64,
) -> ReviewRow {
    let signer = csr.spec.signer_name.clone();
    let mut sans: Vec<String> = facts.dns.clone();
    sans.extend(facts.ips.iter().map(ToString::to_string));
    let (label, reason, decision) = if !pending(csr) {
        ("decided".to_owned(), String::new(), None)
    } else if signer != policy::SIGNER {
        (
            "not-checked".to_owned(),
            format!("signer {signer} (the policy is for {})", policy::SIGNER),
            None,
        )
    } else if addresses_unchecked && matches!(verdict, Verdict::Approve) {
        (
            "unchecked".to_owned(),
            "passes every other check; IP addresses not checked against the node \
             networks (give --node-cidr, or --allow-any-node-address)"
                .to_owned(),
            None,
        )
    } else {
        let reason = match &verdict {
            Verdict::Approve => String::new(),
            Verdict::Deny { check, message } | Verdict::Wait { check, message } => {
                format!("{} {message}", check.label())
            }
        };
        (verdict.label().to_owned(), reason, Some(verdict))
    };
    ReviewRow {
        name: name_of(csr),
        signer,
        requester: csr.spec.username.clone().unwrap_or_default(),
        node: facts.node,
        sans,
        usages: facts.usages,
        key: facts.key,
        age_seconds: csr
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| now - t.0.as_second()),
        verdict: label,
        reason,
        decision,
    }
}
