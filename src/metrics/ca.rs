//! `ca:` mappings' metrics: the CA certificate they issue from.

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::registrar::{FloatGauge, MappingLabel, Registrar};

/// Per `ca:` mapping: when its CA expires, and whether the last
/// certificate issued was cut short by that.
pub(super) struct CaMetrics {
    pub(super) not_after: Mutex<BTreeMap<String, i64>>,
    pub(super) ttl: Family<MappingLabel, FloatGauge>,
    pub(super) capped: Family<MappingLabel, Gauge>,
    pub(super) template_not_after: Mutex<BTreeMap<String, i64>>,
    pub(super) template_ttl: Family<MappingLabel, FloatGauge>,
}

impl CaMetrics {
    pub(super) fn new(r: &mut Registrar<'_>) -> Self {
        Self {
            not_after: Mutex::default(),
            ttl: r.seconds(
                "ca_certificate_ttl",
                "ca: mappings: seconds until the CA certificate they issue from expires",
            ),
            capped: r.add(
                "ca_lifetime_capped",
                "ca: mappings: 1 when the last certificate issued ends at the CA's expiry, short of its lifetime",
            ),
            template_not_after: Mutex::default(),
            template_ttl: r.seconds(
                "ca_template_ttl",
                "ca: mappings with a template: seconds until the template certificate expires (negative once it has; still a fine template, but kubeadm revert refuses one within 24 h of its end)",
            ),
        }
    }
}
