//! `csr:` mappings' metrics (their requests, renewals and rotations) and
//! `certsync approve`'s (its decisions and backlog).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Unit;

use super::{Labels, MappingLabel, Metrics, ReasonLabels, Registrar};

/// Per `csr:` mapping: whether a request waits, why requests failed, how
/// long certificates lived; for the approver: its verdicts and backlog.
pub(super) struct CsrMetrics {
    pending: Family<MappingLabel, Gauge>,
    errors: Family<ReasonLabels, Counter>,
    rotation: Family<MappingLabel, Histogram>,
    decisions: Family<Labels<2>, Counter>,
    backlog: Gauge,
}

impl CsrMetrics {
    pub(super) fn new(r: &mut Registrar<'_>) -> Self {
        Self {
            pending: r.add(
                "csr_pending",
                "1 while a certificate request of the mapping waits for approval or issuance",
            ),
            errors: r.add(
                "csr_renewal_errors",
                "Failed certificate requests by reason (denied, failed, timeout, mismatch, api, ca, request, deleted), and renewals held back by the floor (renewal_floor)",
            ),
            // One hour to about two years: certificate lifetimes.
            rotation: r.with(
                "csr_rotation",
                "How long the previous certificate had lived when a new one replaced it (kubelet's rotation_seconds)",
                Some(Unit::Seconds),
                Family::new_with_constructor(|| {
                    Histogram::new(exponential_buckets(600.0, 2.0, 17))
                }),
            ),
            decisions: r.add(
                "csr_decisions",
                "certsync approve: verdicts on kubelet serving CSRs (approve, deny, wait) by check (ok when approved)",
            ),
            backlog: r.add(
                "csr_backlog",
                "certsync approve: pending CSRs waiting to be decided (again)",
            ),
        }
    }
}

impl Metrics {
    /// `certsync approve`: how many pending CSRs wait for a decision.
    pub fn csr_backlog(&self, backlog: usize) {
        self.csr
            .backlog
            .set(i64::try_from(backlog).unwrap_or(i64::MAX));
    }

    /// `certsync approve` made a decision (or, for wait, first saw it).
    pub fn csr_decision(&self, decision: &'static str, reason: &'static str) {
        self.csr
            .decisions
            .get_or_create(&[("decision", decision), ("reason", reason)])
            .inc();
    }

    /// A `csr:` mapping's request is waiting (or no longer is).
    pub fn csr_pending(&self, mapping: &str, pending: bool) {
        self.csr
            .pending
            .get_or_create(&self.label(mapping))
            .set(i64::from(pending));
    }

    /// A `csr:` mapping's request failed.
    pub fn csr_error(&self, mapping: &str, reason: &'static str) {
        self.csr
            .errors
            .get_or_create(&self.reason(mapping, reason))
            .inc();
    }

    /// A `csr:` mapping's certificate was replaced after `lived` seconds.
    pub fn csr_rotated(&self, mapping: &str, lived: f64) {
        self.csr
            .rotation
            .get_or_create(&self.label(mapping))
            .observe(lived);
    }

    /// Declares a `csr:` mapping's own series (after `add_mapping`).
    pub fn add_csr_mapping(&self, mapping: &str) {
        let l = self.label(mapping);
        self.csr.pending.get_or_create(&l).set(0);
        drop(self.csr.rotation.get_or_create(&l));
    }
}
