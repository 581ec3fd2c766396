//! `certsync approve` and `certsync csr review`: the kubelet-serving
//! policy ([`policy`]) applied by a controller, or shown to a human.
//!
//! The controller watches the CSRs of its signer (field selector
//! `spec.signerName`) and every Node, and after any change re-evaluates
//! the pending CSRs: approve or deny through the `/approval` subresource
//! (a `True` condition with a reason and message, as `kubectl certificate
//! approve` writes), or wait. Only the holder of a `coordination.k8s.io`
//! Lease writes, and only after reading that its Lease is unexpired, so
//! two replicas are safe; every write carries the CSR's
//! resourceVersion, so a CSR changed meanwhile (decided by someone else)
//! is never decided twice: the conflict is dropped and the CSR looked at
//! again as it now is. A verdict is logged once per CSR and counted in
//! `certsync_csr_decisions_total{decision,reason}` when it is made.
//!
//! Invariants: nothing is approved that [`policy::decide`] did not
//! approve; a CSR that already carries Approved, Denied or Failed is
//! never written; `--dry-run` writes nothing and takes no Lease; nothing
//! is decided without the cluster's own names and addresses
//! ([`cluster::read`]).

pub mod cluster;
pub mod policy;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest as Csr, CertificateSigningRequestCondition as Condition,
    CertificateSigningRequestStatus as Status,
};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ListParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use serde::Serialize;
use tokio::sync::watch;

use crate::metrics::Metrics;
use crate::source::Listed;
use crate::source::client::ClientSettings;
use crate::source::watch::Watch;
pub use policy::{Check, Policy, Verdict};

/// The name under which the approver's readiness is reported.
const READINESS: &str = "approver";
/// How long the cluster's Service ranges and API server endpoints are
/// used before they are read again (they change when the control plane
/// does, and only the cluster's administrators change them).
const CLUSTER_FACTS_TTL: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ApproveError {
    #[error("API client: {0}")]
    Client(String),
    #[error("{verb} {object}: {message}")]
    Api {
        verb: &'static str,
        object: String,
        message: String,
    },
    #[error("leader election (lease {lease}): {message}")]
    Lease { lease: String, message: String },
}

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
        .map_err(|e| ApproveError::Api {
            verb: "update approval of",
            object: format!("certificatesigningrequest {name}"),
            message: crate::error_chain(&e),
        })
}

/// The controller: runs until `shutdown`.
pub async fn run(
    config: ApproverConfig,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), ApproveError> {
    metrics.add_readiness(READINESS);
    let mut config = config;
    // Not ready, but alive, until the API server answers: a Deployment's
    // pod waits for it instead of crash-looping.
    let Some((client, server, implied)) =
        until_ok(&mut shutdown, "load the client configuration", || {
            connect(&config.client)
        })
        .await
    else {
        return Ok(());
    };
    if let Some(lease) = config.lease.as_mut()
        && lease.namespace.is_none()
    {
        lease.namespace = implied;
    }
    if config.policy.any_node_address {
        tracing::warn!(
            "--allow-any-node-address: any IP address a node lists in its own Node status is approved \
             (except reserved ones and other nodes'); a compromised node can obtain a certificate for any free address"
        );
    }
    // A dry run takes no Lease: it must never keep a real replica from
    // deciding.
    let leader = if config.dry_run {
        watch::channel(false).1
    } else {
        match until_ok(&mut shutdown, "start leader election", || {
            leadership(&config, &client)
        })
        .await
        {
            Some(leader) => leader,
            None => return Ok(()),
        }
    };
    let csrs: Api<Csr> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let selector = format!("spec.signerName={}", config.signer);
    // The one list/watch loop every Kubernetes source uses (resume,
    // bookmarks, re-list on 410, back off, the short-watch rule); each
    // watch call ends server-side after --watch-timeout.
    let timeout = u32::try_from(config.client.watch_timeout.as_secs())
        .unwrap_or(290)
        .clamp(1, 290);
    let watching = watcher::Config::default().timeout(timeout);
    let mut csr_watch = watching.clone().fields(&selector);
    if let Some(labels) = &config.selector {
        csr_watch = csr_watch.labels(labels);
    }
    let mut csr_events = std::pin::pin!(
        Watch::new(csrs.clone(), csr_watch)
            .named("certificatesigningrequests")
            .stream()
    );
    let mut node_events = std::pin::pin!(Watch::new(nodes, watching).named("nodes").stream());
    let mut state = State {
        csrs: Listed::default(),
        nodes: Listed::default(),
        told: HashMap::new(),
        cluster: None,
        server,
    };

    tracing::info!(signer = %config.signer, dry_run = config.dry_run, leader_election = config.lease.is_some() && !config.dry_run, selector = config.selector.as_deref().unwrap_or(""), "approver started");
    let mut leader_rx = leader.clone();
    loop {
        let changed = tokio::select! {
            () = crate::shutdown::stopped(&mut shutdown) => return Ok(()),
            Some(e) = csr_events.next() => match e {
                Ok(e) => state.csrs.apply(e),
                Err(e) => {
                    tracing::warn!(error = %crate::error_chain(&e), "CSR watch failed; retrying");
                    false
                }
            },
            Some(e) = node_events.next() => match e {
                Ok(e) => state.nodes.apply(e),
                Err(e) => {
                    tracing::warn!(error = %crate::error_chain(&e), "Node watch failed; retrying");
                    false
                }
            },
            Ok(()) = leader_rx.changed() => {
                let leading = *leader_rx.borrow_and_update();
                tracing::info!(leading, "leadership changed");
                true
            }
        };
        if changed && state.csrs.synced() && state.nodes.synced() {
            metrics.ready(READINESS, None);
            let leading = *leader.borrow();
            state
                .evaluate(&config, &csrs, &metrics, leading, &client)
                .await;
        }
    }
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
    let err = |e: &dyn std::fmt::Display| ApproveError::Lease {
        lease: format!("{}/{}", lease.namespace(), lease.name),
        message: e.to_string(),
    };
    let secs = lease.duration.as_secs().max(2);
    let manager = kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &lease.name)
        .with_namespace(lease.namespace())
        .with_identity(&lease.identity)
        .with_duration(secs)
        .with_grace(secs / 3)
        .build()
        .await
        .map_err(|e| err(&e))?;
    let (rx, task) = manager.watch().await;
    tokio::spawn(async move {
        if let Ok(Err(e)) = task.await {
            tracing::error!(error = %e, "leader election ended");
        }
    });
    Ok(rx)
}

struct State {
    csrs: Listed<Csr>,
    nodes: Listed<Node>,
    /// Per CSR uid: the verdict last logged, so each is said once.
    told: HashMap<String, String>,
    /// The cluster's own names and addresses, and when they were read.
    cluster: Option<(tokio::time::Instant, policy::Cluster)>,
    /// The API server's URL as this process reaches it.
    server: http::Uri,
}

/// A client, the API server's URL it talks to, and the namespace its
/// configuration implies.
async fn connect(
    settings: &ClientSettings,
) -> Result<(Client, http::Uri, Option<String>), ApproveError> {
    let err = |e: crate::source::client::ClientError| ApproveError::Client(e.to_string());
    let loaded = settings.load().await.map_err(err)?;
    let client = settings.client_for(&loaded.config).map_err(err)?;
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

impl State {
    /// Decides every pending CSR; writes approvals and denials when
    /// `leading` and not a dry run.
    async fn evaluate(
        &mut self,
        config: &ApproverConfig,
        api: &Api<Csr>,
        metrics: &Metrics,
        leading: bool,
        client: &Client,
    ) {
        let fresh = self
            .cluster
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < CLUSTER_FACTS_TTL);
        if !fresh {
            match cluster::read(client, &self.server)
                .await
                .and_then(|c| cluster::check_service_range(&c, &config.policy).map(|()| c))
            {
                Ok(c) => self.cluster = Some((tokio::time::Instant::now(), c)),
                Err(e) => {
                    // Fail closed: without them nothing is decided.
                    tracing::warn!(error = %e, "cannot read the cluster's Service ranges and API server endpoints; deciding nothing until they can be read");
                    self.cluster = None;
                    return;
                }
            }
        }
        let Some((_, facts_of_cluster)) = &self.cluster else {
            return;
        };
        let facts_of_cluster = facts_of_cluster.clone();
        let pending: Vec<Csr> = self
            .csrs
            .items()
            .values()
            .filter(|c| pending(c))
            .cloned()
            .collect();
        for csr in pending {
            let name = name_of(&csr);
            let uid = csr.metadata.uid.clone().unwrap_or_default();
            let (verdict, facts) =
                policy::decide(&csr, self.nodes.items(), &facts_of_cluster, &config.policy);
            let described = verdict.describe();
            let decided = !matches!(verdict, Verdict::Wait { .. });
            if decided && !config.dry_run && !leading {
                continue; // the leader decides
            }
            let new = self.told.get(&uid) != Some(&described);
            if new {
                let node = crate::escape(facts.node.as_deref().unwrap_or("-"));
                let node = node.as_ref();
                let check = verdict.check().map_or("-", Check::label);
                match &verdict {
                    Verdict::Approve => {
                        tracing::info!(csr = %name, node, dry_run = config.dry_run, "approve: every check passed")
                    }
                    Verdict::Deny { message, .. } => {
                        tracing::warn!(csr = %name, node, check, dry_run = config.dry_run, "deny: {message}")
                    }
                    Verdict::Wait { message, .. } => {
                        tracing::info!(csr = %name, node, check, "wait: {message}")
                    }
                }
                self.told.insert(uid.clone(), described.clone());
            }
            if !decided || config.dry_run {
                if new {
                    metrics
                        .csr_decision(verdict.label(), verdict.check().map_or("ok", Check::label));
                }
                continue;
            }
            let node = facts.node.clone().unwrap_or_default();
            if let Some(lease) = &config.lease {
                match cluster::holds_lease(client, lease.namespace(), &lease.name, &lease.identity)
                    .await
                {
                    Ok(true) => {}
                    Ok(false) => {
                        tracing::info!(csr = %name, "the Lease is no longer held or has expired; not writing");
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(csr = %name, error = %e, "cannot confirm the Lease; not writing");
                        return;
                    }
                }
            }
            match write_decision(api, &csr, &verdict, &node).await {
                Ok(written) => {
                    // Decided now, whatever the watch has not yet said.
                    self.csrs.insert(name.clone(), written);
                    metrics
                        .csr_decision(verdict.label(), verdict.check().map_or("ok", Check::label));
                    if config.events {
                        let (ty, reason) = match verdict {
                            Verdict::Approve => (
                                kube::runtime::events::EventType::Normal,
                                "CertificateApproved",
                            ),
                            _ => (
                                kube::runtime::events::EventType::Warning,
                                "CertificateDenied",
                            ),
                        };
                        crate::events::on_csr(client.clone(), &name, &uid, ty, reason, described);
                    }
                }
                // Changed meanwhile (a 409: perhaps decided by another
                // replica): the watch brings the new state, and the CSR is
                // looked at again then.
                Err(e) => {
                    tracing::info!(csr = %name, error = %e, "decision not written; will look again");
                }
            }
        }
        let live: std::collections::HashSet<String> = self
            .csrs
            .items()
            .values()
            .filter_map(|c| c.metadata.uid.clone())
            .collect();
        self.told.retain(|uid, _| live.contains(uid));
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
    let cells = vec![
        r.name.clone(),
        r.signer.clone(),
        r.requester.clone(),
        r.node.clone().unwrap_or_else(|| "-".into()),
        if r.sans.is_empty() {
            "-".into()
        } else {
            r.sans.join(",")
        },
        r.usages.join(","),
        r.key.clone(),
        humantime::format_duration(Duration::from_secs(r.age_seconds.max(0) as u64))
            .to_string()
            .split(' ')
            .next()
            .unwrap_or_default()
            .to_owned(),
        verdict,
    ];
    cells
        .into_iter()
        .map(|c| crate::escape(&c).into_owned())
        .collect()
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
    let api_err = |verb: &'static str, object: &str, e: kube::Error| ApproveError::Api {
        verb,
        object: object.to_owned(),
        message: crate::error_chain(&e),
    };
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
    for n in names {
        if !all.iter().any(|c| &name_of(c) == n) {
            return Err(ApproveError::Api {
                verb: "get",
                object: format!("certificatesigningrequest {n}"),
                message: "not found".into(),
            });
        }
    }
    let now = crate::validate::unix_seconds(std::time::SystemTime::now());
    let mut rows = Vec::new();
    for csr in &all {
        let name = name_of(csr);
        if names.is_empty() && !pending(csr) || !names.is_empty() && !names.contains(&name) {
            continue;
        }
        let (verdict, facts) = policy::decide(csr, &nodes, &facts_of_cluster, policy);

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
        rows.push(ReviewRow {
            name,
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
        });
    }
    let mut done = Vec::new();
    for row in &rows {
        let Some(verdict) = &row.decision else {
            continue;
        };
        let write = match verdict {
            Verdict::Approve => approve,
            Verdict::Deny { .. } => deny,
            Verdict::Wait { .. } => false,
        };
        if !write {
            continue;
        }
        let Some(csr) = all.iter().find(|c| name_of(c) == row.name) else {
            continue;
        };
        write_decision(&api, csr, verdict, row.node.as_deref().unwrap_or_default()).await?;
        done.push(match verdict {
            Verdict::Approve => format!("approved {}", row.name),
            _ => format!("denied {}: {}", row.name, row.reason),
        });
    }
    Ok((rows, done))
}
