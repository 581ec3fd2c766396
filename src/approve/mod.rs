//! `certsync approve` and `certsync csr review`: the kubelet-serving
//! policy ([`policy`]) applied by a controller ([`controller`]), or shown
//! to a human.
//!
//! A decision is written through `/approval` (a `True` condition, as
//! `kubectl certificate approve` writes) by the holder of an unexpired
//! Lease only, with the CSR's resourceVersion: a CSR changed meanwhile is
//! never decided twice (the conflict is dropped, the CSR looked at again).
//!
//! Invariants: nothing is approved that [`policy::decide_with`] did not
//! approve; a CSR already Approved, Denied or Failed is never written;
//! `--dry-run` writes nothing and takes no Lease; nothing is decided
//! without the cluster's own names and addresses ([`cluster::read`]).

mod api;
pub mod cluster;
pub mod controller;
pub mod error;
pub mod policy;
mod settings;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest as Csr;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use kube::api::ListParams;
use serde::Serialize;

use crate::inspect::Column;
use crate::source::client::ClientSettings;
use api::{api_err, connect, name_of, pending, write_decision};
pub use controller::run;
pub use error::ApproveError;
pub use policy::{Check, Policy, Verdict};
pub use settings::{ApproverConfig, LEASE_NAMESPACE, LeaseSettings};

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
    /// `approve`, `deny`, `wait`, `unchecked` (no node network given),
    /// `not-checked` (another signer) or `decided`.
    pub verdict: String,
    /// The failed check and why; empty when approved.
    pub reason: String,
    #[serde(skip)]
    decision: Option<Verdict>,
}

/// The table's columns (the table escapes everything a requester
/// controls, so no escape sequence or carriage return reaches the
/// operator's terminal).
pub const REVIEW_COLUMNS: &[Column<ReviewRow>] = &[
    ("NAME", |r| r.name.clone()),
    ("SIGNER", |r| r.signer.clone()),
    ("REQUESTER", |r| r.requester.clone()),
    ("NODE", |r| r.node.clone().unwrap_or_else(|| "-".into())),
    ("SANS", |r| {
        if r.sans.is_empty() {
            "-".into()
        } else {
            r.sans.join(",")
        }
    }),
    ("USAGES", |r| r.usages.join(",")),
    ("KEY", |r| r.key.clone()),
    ("AGE", |r| {
        let age = humantime::format_duration(Duration::from_secs(r.age_seconds.max(0) as u64));
        age.to_string().split(' ').next().unwrap_or_default().into()
    }),
    ("VERDICT", |r| {
        if r.reason.is_empty() {
            r.verdict.clone()
        } else {
            format!("{}: {}", r.verdict, r.reason)
        }
    }),
];

/// `csr review`: the verdict on every pending CSR (or those named), and
/// with `approve`/`deny` the writes; returns the rows and what was done.
/// No node network given (`policy`): every other check runs, and a request
/// passing them is `unchecked`, never approved (`--approve` needs them).
pub async fn review(
    settings: &ClientSettings,
    names: &[String],
    selector: Option<&str>,
    policy: &Policy,
    approve: bool,
    deny: bool,
) -> Result<(Vec<ReviewRow>, Vec<String>), ApproveError> {
    let addresses_unchecked = policy.node_cidrs.is_empty() && !policy.any_node_address;
    let policy = &Policy {
        any_node_address: policy.any_node_address || addresses_unchecked,
        ..policy.clone()
    };
    let (client, server, _) = connect(settings).await?;
    let api: Api<Csr> = Api::all(client.clone());
    let params = selector.map_or_else(ListParams::default, |l| ListParams::default().labels(l));
    let all = api
        .list(&params)
        .await
        .map_err(|e| api_err("list", "certificatesigningrequests", e))?
        .items;
    let facts_of_cluster = cluster::read(&client, &server, policy).await?;
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
        let asked = |v: &&Verdict| match v {
            Verdict::Approve => approve,
            Verdict::Deny { .. } => deny,
            Verdict::Wait { .. } => false,
        };
        if let Some(verdict) = row.decision.as_ref().filter(asked) {
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

/// The row of `csr` as `csr review` shows it: a decided CSR, another
/// signer's, or an unchecked approval carry no decision to write.
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
