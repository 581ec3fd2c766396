//! `csr:` mappings' metrics (their requests, renewals and rotations) and
//! `certsync approve`'s (its decisions and backlog).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Unit;

use super::registrar::{Labels, MappingLabel, ReasonLabels, Registrar};

/// Per `csr:` mapping: whether a request waits, why requests failed, how
/// long certificates lived; for the approver: its verdicts and backlog.
pub(super) struct CsrMetrics {
    pub(super) pending: Family<MappingLabel, Gauge>,
    pub(super) errors: Family<ReasonLabels, Counter>,
    pub(super) rotation: Family<MappingLabel, Histogram>,
    pub(super) decisions: Family<Labels<2>, Counter>,
    pub(super) backlog: Gauge,
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
