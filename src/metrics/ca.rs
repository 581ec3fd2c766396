//! `ca:` mappings' metrics: the CA certificate they issue from.

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::{FloatGauge, MappingLabel, Metrics, Registrar, lock};

/// Per `ca:` mapping: when its CA expires, and whether the last
/// certificate issued was cut short by that.
pub(super) struct CaMetrics {
    not_after: Mutex<BTreeMap<String, i64>>,
    ttl: Family<MappingLabel, FloatGauge>,
    capped: Family<MappingLabel, Gauge>,
    template_not_after: Mutex<BTreeMap<String, i64>>,
    template_ttl: Family<MappingLabel, FloatGauge>,
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

impl Metrics {
    /// A `ca:` mapping's CA certificate expires at `not_after`.
    pub fn ca_expiry(&self, mapping: &str, not_after: i64) {
        lock(&self.ca.not_after).insert(mapping.to_owned(), not_after);
    }

    /// A `ca:` mapping issued a certificate, cut short at the CA's expiry
    /// (`capped`) or not.
    pub fn ca_capped(&self, mapping: &str, capped: bool) {
        self.ca
            .capped
            .get_or_create(&self.label(mapping))
            .set(i64::from(capped));
    }

    /// A `ca:` mapping's template certificate expires at `not_after`.
    pub fn ca_template_expiry(&self, mapping: &str, not_after: i64) {
        lock(&self.ca.template_not_after).insert(mapping.to_owned(), not_after);
    }

    /// Both TTLs as of `now`, from the expiries recorded.
    pub(super) fn encode_ca(&self, now: f64) {
        self.encode_ttls(&self.ca.not_after, &self.ca.ttl, now);
        self.encode_ttls(&self.ca.template_not_after, &self.ca.template_ttl, now);
    }

    fn encode_ttls(
        &self,
        not_after: &Mutex<BTreeMap<String, i64>>,
        ttl: &Family<MappingLabel, FloatGauge>,
        now: f64,
    ) {
        for (mapping, t) in lock(not_after).iter() {
            ttl.get_or_create(&self.label(mapping)).set(*t as f64 - now);
        }
    }
}
