//! The approver's controller: watches the CSRs of its signer and every
//! Node, and decides a CSR when something it depends on changed.
//!
//! What is decided when, so that no requester can delay another's
//! decision or the admin port:
//! - a CSR event decides that CSR; a Node event the pending CSRs of that
//!   node; a new leader, a re-list and each refresh of the cluster facts
//!   ([`CLUSTER_FACTS_TTL`]) all pending;
//! - each watch is read by a task of its own ([`seen`]), also during a
//!   round; a burst of events becomes one set of CSRs to decide;
//! - a round takes the oldest CSR to decide of each requester: a thousand
//!   pending CSRs get one decision per round like any other requester's;
//! - a requester's CSRs beyond its oldest [`MAX_PENDING`] are denied
//!   unread, an oversized request unparsed ([`policy::MAX_REQUEST_BYTES`]);
//! - parsing and the policy run on a blocking thread.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest as Csr;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::watch;

use super::api::{connect, name_of, unless_stopped, until_ok, write_decision};
use super::error::ApproveError;
use super::policy::{self, Check, Verdict};
use super::{cluster, settings::ApproverConfig};
use crate::metrics::Metrics;
use crate::source::watch::Watch;
use policy::Facts;

mod lease;
mod seen;
pub use seen::MAX_PENDING;
use seen::{Watches, requester};

/// The name under which the approver's readiness is reported.
const READINESS: &str = "approver";
/// How long the cluster facts are used before they are read again. They
/// hold every Service's addresses, which any namespace's user writes, so
/// approvals are decided again on facts read then (`confirm_approvals`).
const CLUSTER_FACTS_TTL: Duration = Duration::from_secs(30);

/// The controller: runs until `shutdown`.
pub async fn run(
    mut config: ApproverConfig,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<(), ApproveError> {
    metrics.add_readiness(READINESS);
    metrics.started();
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
    if let Some(lease) = config.lease.as_mut() {
        lease.imply(implied)?;
    }
    if config.policy.any_node_address {
        tracing::warn!(
            "--allow-any-node-address: any IP address a node lists in its own Node status is approved \
             (except reserved ones and other nodes'); a compromised node can obtain a certificate for any free address"
        );
    }
    let Some(leader) = lease::leader(&config, &client, &mut shutdown).await else {
        return Ok(());
    };
    let api: Api<Csr> = Api::all(client.clone());
    let watching = watcher::Config::default().timeout(crate::source::watch::watch_seconds(
        config.client.watch_timeout,
    ));
    let mut csr_watch = watching
        .clone()
        .fields(&format!("spec.signerName={}", policy::SIGNER));
    if let Some(labels) = &config.selector {
        csr_watch = csr_watch.labels(labels);
    }
    let watches = Watches::start(
        Watch::new(api.clone(), csr_watch, "certificatesigningrequests").stream(),
        Watch::new(Api::<Node>::all(client.clone()), watching, "nodes").stream(),
        &metrics,
    );
    tracing::info!(signer = %policy::SIGNER, dry_run = config.dry_run, leader_election = config.lease.is_some() && !config.dry_run, selector = config.selector.as_deref().unwrap_or(""), "approver started");
    let mut approver = Approver {
        config,
        api,
        metrics,
        leader,
        client,
        watches,
        server,
        told: HashMap::new(),
        cluster: None,
        facts_read: false,
    };
    approver.serve(&mut shutdown).await;
    Ok(())
}

enum Work {
    Nothing,
    /// Read the cluster facts (when older than [`CLUSTER_FACTS_TTL`]).
    Facts,
    Round,
}

/// A CSR with its verdict and what it asks for.
type Decided = (Csr, Verdict, Facts);

struct Approver {
    config: ApproverConfig,
    api: Api<Csr>,
    metrics: Arc<Metrics>,
    /// Whether this replica may write, as it changes.
    leader: watch::Receiver<bool>,
    client: Client,
    watches: Watches,
    /// Per CSR uid: the verdict last logged, so each is said once.
    told: HashMap<String, String>,
    /// The cluster's own names and addresses, and when they were read.
    cluster: Option<(tokio::time::Instant, Arc<policy::Cluster>)>,
    /// The API server's URL as this process reaches it.
    server: http::Uri,
    /// Whether the facts were read (or tried) once: not ready before, then
    /// ready only while they can be read (else nothing is decided).
    facts_read: bool,
}

/// `decide` on each of `items` off the runtime, with the Nodes of `nodes`
/// (indexed there if not yet, and kept); `None` when the policy panicked.
async fn off_runtime<T: Send + 'static>(
    watches: &Watches,
    nodes: impl FnOnce() -> (u64, Arc<policy::Nodes>) + Send + 'static,
    items: Vec<T>,
    decide: impl Fn(T, &policy::Nodes) -> Decided + Send + 'static,
) -> Option<Vec<Decided>> {
    let decided = crate::blocking(move || {
        let (generation, nodes) = nodes();
        let decided: Vec<Decided> = items.into_iter().map(|i| decide(i, &nodes)).collect();
        (decided, generation, nodes)
    })
    .await;
    match decided {
        Ok((decided, generation, nodes)) => {
            watches.lock().keep_index(generation, nodes);
            Some(decided)
        }
        Err(e) => {
            tracing::error!(error = %e, "deciding CSRs failed");
            None
        }
    }
}

impl Approver {
    /// Decides until `shutdown`: a round when there is a backlog, the
    /// cluster facts as soon as the watches have listed and at each
    /// refresh, everything again when leadership changes.
    async fn serve(&mut self, shutdown: &mut watch::Receiver<bool>) {
        let mut refresh = tokio::time::interval(CLUSTER_FACTS_TTL);
        refresh.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut leader_rx = self.leader.clone();
        loop {
            let (synced, backlog) = {
                let seen = self.watches.lock();
                (seen.synced(), seen.dirty.len())
            };
            self.metrics.csr_backlog(backlog);
            let work = tokio::select! {
                biased;
                () = crate::shutdown::stopped(shutdown) => return,
                Ok(()) = leader_rx.changed() => {
                    let leading = *leader_rx.borrow_and_update();
                    tracing::info!(leading, "leadership changed");
                    self.watches.lock().all_dirty();
                    Work::Nothing
                }
                _ = refresh.tick() => {
                    let idle = {
                        let mut seen = self.watches.lock();
                        seen.all_dirty();
                        seen.dirty.is_empty()
                    };
                    // Read even with nothing to decide: /readyz shows a
                    // missing RBAC rule before the first CSR waits on it.
                    if synced && idle { Work::Facts } else { Work::Nothing }
                }
                // As soon as the watches have listed, for /readyz.
                () = std::future::ready(()), if synced && !self.facts_read => Work::Facts,
                () = std::future::ready(()), if synced && backlog > 0 => Work::Round,
                () = self.watches.changed() => Work::Nothing,
            };
            let done = match work {
                Work::Nothing => Some(()),
                Work::Facts => unless_stopped(shutdown, self.cluster_facts())
                    .await
                    .map(drop),
                // SIGTERM is answered during a round (a write cut short
                // is made or not: the next leader looks again).
                Work::Round => unless_stopped(shutdown, self.round()).await,
            };
            if done.is_none() {
                return;
            }
        }
    }

    /// The cluster facts, read again once older than
    /// [`CLUSTER_FACTS_TTL`]; `None` (decide nothing, not ready) when they
    /// cannot be. Called only once the watches have listed.
    async fn cluster_facts(&mut self) -> Option<Arc<policy::Cluster>> {
        if let Some((at, facts)) = &self.cluster
            && at.elapsed() < CLUSTER_FACTS_TTL
        {
            return Some(facts.clone());
        }
        self.facts_read = true;
        match cluster::read(&self.client, &self.server, &self.config.policy).await {
            Ok(c) => {
                let c = Arc::new(c);
                self.cluster = Some((tokio::time::Instant::now(), c.clone()));
                self.metrics.ready(READINESS, None);
                Some(c)
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the cluster's Service ranges, Services and API server endpoints; deciding nothing until they can be read");
                self.cluster = None;
                self.metrics.ready(READINESS, Some(format!(
                    "cannot read the cluster's Service ranges, Services and API server endpoints: {e}"
                )));
                None
            }
        }
    }

    /// One round: decides the next CSR of each requester, off the runtime,
    /// and writes the verdicts when this replica leads as it starts.
    async fn round(&mut self) {
        let leading = *self.leader.borrow();
        let Some(facts_of_cluster) = self.cluster_facts().await else {
            // Fail closed; the next refresh tries again.
            self.watches.lock().dirty.clear();
            return;
        };
        let (round, nodes) = {
            let mut seen = self.watches.lock();
            (seen.next_round(), seen.node_index())
        };
        let policy = self.config.policy.clone();
        let decide = move |(csr, over): (Csr, Option<usize>), nodes: &policy::Nodes| {
            let (verdict, facts) = match over {
                Some(count) => {
                    let user = requester(&csr);
                    let facts = Facts {
                        node: user.strip_prefix(policy::NODE_PREFIX).map(str::to_owned),
                        ..Facts::unread(&csr)
                    };
                    (policy::too_many_pending(user, count, MAX_PENDING), facts)
                }
                None => policy::decide_with(&csr, nodes, &facts_of_cluster, &policy),
            };
            (csr, verdict, facts)
        };
        let Some(decided) = off_runtime(&self.watches, nodes, round, decide).await else {
            return;
        };
        let Some(decided) = self.confirm_approvals(decided).await else {
            self.watches.lock().dirty.clear();
            return;
        };
        for (csr, verdict, facts) in decided {
            if !self.write(leading, &csr, verdict, facts).await {
                return;
            }
        }
        let seen = self.watches.lock();
        let uids = seen
            .csrs
            .items()
            .values()
            .filter_map(|c| c.metadata.uid.as_ref());
        let live: HashSet<&String> = uids.collect();
        self.told.retain(|uid, _| live.contains(uid));
    }

    /// Approvals decided again on cluster facts read now: those a round
    /// starts with may be [`CLUSTER_FACTS_TTL`] old, and a node watching
    /// Services could list a new Service's address and ask for it inside
    /// that window. `None` (decide nothing) when they cannot be read.
    async fn confirm_approvals(&mut self, decided: Vec<Decided>) -> Option<Vec<Decided>> {
        if !decided
            .iter()
            .any(|(_, v, _)| matches!(v, Verdict::Approve))
        {
            return Some(decided);
        }
        self.cluster = None;
        let fresh = self.cluster_facts().await?;
        let nodes = self.watches.lock().node_index();
        let policy = self.config.policy.clone();
        let decide = move |(csr, verdict, facts): Decided, nodes: &policy::Nodes| match verdict {
            Verdict::Approve => {
                let (verdict, facts) = policy::decide_with(&csr, nodes, &fresh, &policy);
                (csr, verdict, facts)
            }
            other => (csr, other, facts),
        };
        off_runtime(&self.watches, nodes, decided, decide).await
    }

    /// Logs `verdict` on `csr` once and writes it when `leading`; `false`
    /// when this replica must stop writing (its Lease is not confirmed).
    async fn write(&mut self, leading: bool, csr: &Csr, verdict: Verdict, facts: Facts) -> bool {
        let dry_run = self.config.dry_run;
        let decided = !matches!(verdict, Verdict::Wait { .. });
        if decided && !dry_run && !leading {
            return true; // the leader decides
        }
        let new = self.tell(csr, &verdict, &facts, dry_run);
        if !decided || dry_run {
            if new {
                self.count(&verdict);
            }
            return true;
        }
        let name = name_of(csr);
        if !lease::confirmed(&self.config, &self.client, &name).await {
            return false;
        }
        let node = facts.node.unwrap_or_default();
        match write_decision(&self.api, csr, &verdict, &node).await {
            Ok(written) => {
                self.watches.lock().written(csr, written);
                self.count(&verdict);
                if self.config.events {
                    let (ty, reason) = match verdict {
                        Verdict::Approve => (EventType::Normal, "CertificateApproved"),
                        _ => (EventType::Warning, "CertificateDenied"),
                    };
                    let uid = csr.metadata.uid.clone().unwrap_or_default();
                    let (client, what) = (self.client.clone(), verdict.describe());
                    crate::events::on_csr(client, &name, &uid, ty, reason, what);
                }
            }
            // Changed meanwhile (a 409): looked at again when the watch brings it.
            Err(e) => {
                tracing::info!(csr = %name, error = %e, "decision not written; will look again");
            }
        }
        true
    }

    fn count(&self, verdict: &Verdict) {
        let check = verdict.check().map_or("ok", Check::label);
        self.metrics.csr_decision(verdict.label(), check);
    }

    /// Logs `verdict` on `csr` unless it was the last one logged for it;
    /// whether it was new.
    fn tell(&mut self, csr: &Csr, verdict: &Verdict, facts: &Facts, dry_run: bool) -> bool {
        let uid = csr.metadata.uid.clone().unwrap_or_default();
        let described = verdict.describe();
        if self.told.get(&uid) == Some(&described) {
            return false;
        }
        let name = name_of(csr);
        let node = crate::escape(facts.node.as_deref().unwrap_or("-"));
        let node = node.as_ref();
        let check = verdict.check().map_or("-", Check::label);
        match verdict {
            Verdict::Approve => {
                tracing::info!(csr = %name, node, dry_run, "approve: every check passed")
            }
            Verdict::Deny { message, .. } => {
                tracing::warn!(csr = %name, node, check, dry_run, "deny: {message}")
            }
            Verdict::Wait { message, .. } => {
                tracing::info!(csr = %name, node, check, "wait: {message}")
            }
        }
        self.told.insert(uid, described);
        true
    }
}
