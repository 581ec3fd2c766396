//! Prometheus metrics and readiness, shared by every task of the process.
//!
//! Every per-mapping metric carries a `mapping` label (the mapping's name).
//! Labels are fixed, short values (results, reasons, methods), never Debug
//! strings. Values that depend on "now" (seconds left, staleness) are
//! computed when scraped, so they are right without a timer.
//!
//! Every series of a mapping exists from the moment the mapping is added,
//! at 0, so `rate()` and `increase()` see the first event and an absent
//! series never hides a broken mapping. A mapping without a live
//! certificate has a time to live of 0, not `+Inf`: "unknown" must fire an
//! expiry alert, not silence it.

mod process;
mod ready;
mod registrar;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

pub use ready::NotReady;
use ready::{Live, Readiness, Validity, unattended};
use registrar::{FloatGauge, Labels, MappingAnd, MappingLabel, Name, Registrar};

/// Every `result` of `certsync_syncs_total` (see `Metrics::sync`), each
/// series created at 0 when a mapping is added.
const SYNC_RESULTS: [&str; 8] = [
    "written",
    "unchanged",
    "pinned",
    "rejected",
    "source_error",
    "error",
    "kubeconfig_error",
    "pair_error",
];

/// All metrics and the readiness of every mapping.
pub struct Metrics {
    registry: Registry,
    not_after: Family<MappingLabel, FloatGauge>,
    ttl: Family<MappingLabel, FloatGauge>,
    revision: Family<MappingLabel, Gauge>,
    syncs: Family<MappingAnd, Counter>,
    validation_failures: Family<MappingAnd, Counter>,
    reloads: Family<Labels<2>, Counter>,
    reload_duration: Family<Labels<1>, Histogram>,
    reload_refusals: Family<Labels<1>, Counter>,
    source_up: Family<MappingLabel, Gauge>,
    watch_restarts: Family<MappingLabel, Counter>,
    last_success: Family<MappingLabel, FloatGauge>,
    stale: Family<MappingLabel, Gauge>,
    pinned: Family<MappingLabel, Gauge>,
    file_watch_polling: Gauge,
    // `csr:` mappings' requests and renewals; `certsync approve`'s verdicts.
    csr_pending: Family<MappingLabel, Gauge>,
    csr_errors: Family<MappingAnd, Counter>,
    csr_rotation: Family<MappingLabel, Histogram>,
    csr_decisions: Family<Labels<2>, Counter>,
    csr_backlog: Gauge,
    admin_closed: Family<Labels<1>, Counter>,
    // `ca:` mappings' CA and template: expiries kept (by whether of the
    // template, and mapping), TTLs computed when scraped.
    ca_not_after: Mutex<BTreeMap<(bool, String), i64>>,
    ca_ttl: Family<MappingLabel, FloatGauge>,
    ca_capped: Family<MappingLabel, Gauge>,
    ca_template_ttl: Family<MappingLabel, FloatGauge>,
    /// Per mapping: the current certificate's window (for TTL and staleness).
    validity: Mutex<BTreeMap<String, Live>>,
    /// Every mapping's name, allocated once: with 1,000 mappings, a copy
    /// per series was a quarter of a MiB.
    names: Mutex<std::collections::HashMap<String, Name>>,
    /// What `/readyz` answers (see [`ready`]).
    ready: Readiness,
    stale_fraction: f64,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Metrics {
    /// Whether directories are polled because inotify is exhausted.
    pub fn file_watch_polling(&self, polling: bool) {
        self.file_watch_polling.set(i64::from(polling));
    }

    /// `stale_fraction`: share of a certificate's lifetime after which it
    /// counts as stale if nothing newer arrived (kubelet rotates at 70–90%).
    pub fn new(stale_fraction: f64) -> Self {
        let mut root = Registry::default();
        let mut r = Registrar(root.sub_registry_with_prefix("certsync"));
        let build_info: Family<Labels<1>, Gauge> = r.add(
            "build_info",
            "Always 1; the version of the running certsync in its label",
        );
        build_info
            .get_or_create(&[("version", env!("CARGO_PKG_VERSION"))])
            .set(1);
        let m = Self {
            not_after: r.seconds(
                "certificate_not_after",
                "Leaf certificate's not-after as a Unix timestamp (0 until a certificate is live)",
            ),
            ttl: r.seconds(
                "certificate_ttl",
                "Seconds until the current leaf certificate expires (0 until a certificate is live; absent for a CA bundle)",
            ),
            revision: r.add("revision", "Current revision number of the target"),
            syncs: r.add("syncs", "Syncs by result"),
            file_watch_polling: r.add(
                "file_watch_polling",
                "1 when inotify is exhausted (fs.inotify.max_user_instances or max_user_watches) and directories are polled instead",
            ),
            validation_failures: r.add("validation_failures", "Rejected updates by reason"),
            reloads: r.add("reloads", "Reload attempts by method and result"),
            reload_refusals: r.add(
                "reload_refusals",
                "Signals not sent because the pidfile did not prove the process is the consumer, by reason",
            ),
            reload_duration: r.seconds_of(
                "reload_duration",
                "Time to deliver a reload",
                Family::new_with_constructor(|| {
                    Histogram::new(exponential_buckets(0.001, 2.0, 16))
                }),
            ),
            source_up: r.add(
                "source_up",
                "1 when the source answered last time, refused content included; 0 when it could not be read",
            ),
            watch_restarts: r.add(
                "watch_restarts",
                "API watch errors after which the watch restarted",
            ),
            last_success: r.seconds(
                "last_success_timestamp",
                "Unix time of the last successful sync",
            ),
            stale: r.add(
                "certificate_stale",
                "1 when the current certificate passed the stale fraction of its lifetime with nothing newer",
            ),
            pinned: r.add(
                "rollback_pinned",
                "1 while a rollback pin holds the target's live revision (certsync rollback); ca: and csr: mappings issue nothing over it",
            ),
            csr_pending: r.add(
                "csr_pending",
                "1 while a certificate request of the mapping waits for approval or issuance",
            ),
            csr_errors: r.add(
                "csr_renewal_errors",
                "Failed certificate requests by reason (denied, failed, timeout, mismatch, api, ca, request, deleted), and renewals held back by the floor (renewal_floor)",
            ),
            // One hour to about two years: certificate lifetimes.
            csr_rotation: r.seconds_of(
                "csr_rotation",
                "How long the previous certificate had lived when a new one replaced it (kubelet's rotation_seconds)",
                Family::new_with_constructor(|| {
                    Histogram::new(exponential_buckets(600.0, 2.0, 17))
                }),
            ),
            csr_decisions: r.add(
                "csr_decisions",
                "certsync approve: verdicts on kubelet serving CSRs (approve, deny, wait) by check (ok when approved)",
            ),
            csr_backlog: r.add(
                "csr_backlog",
                "certsync approve: pending CSRs waiting to be decided (again)",
            ),
            admin_closed: r.add(
                "admin_connections_closed",
                "Admin-port connections certsync closed: over the connection limit (limit), or no request in time (timeout)",
            ),
            ca_not_after: Mutex::default(),
            ca_ttl: r.seconds(
                "ca_certificate_ttl",
                "ca: mappings: seconds until the CA certificate they issue from expires",
            ),
            ca_capped: r.add(
                "ca_lifetime_capped",
                "ca: mappings: 1 when the last certificate issued ends at the CA's expiry, short of its lifetime",
            ),
            ca_template_ttl: r.seconds(
                "ca_template_ttl",
                "ca: mappings with a template: seconds until the template certificate expires (negative once it has; still a fine template, but kubeadm revert refuses one within 24 h of its end)",
            ),
            // Once every family is in: Prometheus' standard names, unprefixed.
            registry: {
                root.register_collector(Box::new(process::ProcessCollector));
                root
            },
            validity: Mutex::default(),
            names: Mutex::default(),
            ready: Readiness::default(),
            stale_fraction,
        };
        // Both reasons from 0, so the first refusal shows in increase().
        for reason in ["limit", "timeout"] {
            drop(m.admin_closed.get_or_create(&[("reason", reason)]));
        }
        m
    }

    /// The admin port closed a connection: `limit` (over the connection
    /// cap) or `timeout` (no request head in time, or too long open).
    pub fn admin_connection_closed(&self, reason: &'static str) {
        self.admin_closed.get_or_create(&[("reason", reason)]).inc();
    }

    /// `mapping="..."`, its value shared by every series of the mapping.
    fn label(&self, mapping: &str) -> MappingLabel {
        let mut names = crate::lock(&self.names);
        if !names.contains_key(mapping) {
            names.insert(mapping.to_owned(), Arc::new(mapping.to_owned()));
        }
        [("mapping", Arc::clone(&names[mapping]))]
    }

    /// Declares a mapping: not ready until it has a valid revision, and
    /// every series it will ever have created now at 0 (the TTL too: see
    /// the module's comment). Reasons of rejections are left to their
    /// first occurrence: 18 reasons per mapping would be most of the
    /// series of a large configuration, and `certsync_syncs_total`'s
    /// `rejected` already counts every one from 0.
    pub fn add_mapping(&self, mapping: &str) {
        self.add_readiness(mapping);
        crate::lock(&self.validity).insert(mapping.to_owned(), Live::Nothing);
        let l = self.label(mapping);
        for gauge in [&self.not_after, &self.ttl, &self.last_success] {
            gauge.get_or_create(&l).set(0.0);
        }
        for gauge in [&self.stale, &self.pinned, &self.revision, &self.source_up] {
            gauge.get_or_create(&l).set(0);
        }
        // Creating the series is the point; the guard goes at once.
        drop(self.watch_restarts.get_or_create(&l));
        for result in SYNC_RESULTS {
            drop(self.syncs.get_or_create(&(l.clone(), [("result", result)])));
        }
    }

    /// Whether a rollback pin holds the mapping's target.
    pub fn pinned(&self, mapping: &str, pinned: bool) {
        self.flag(&self.pinned, mapping, pinned);
    }

    fn flag(&self, gauge: &Family<MappingLabel, Gauge>, mapping: &str, on: bool) {
        gauge.get_or_create(&self.label(mapping)).set(i64::from(on));
    }

    /// Declares the reload method in use, so its counters start at 0.
    pub fn add_reload_method(&self, method: &'static str) {
        for result in ["ok", "failed"] {
            drop(
                self.reloads
                    .get_or_create(&[("method", method), ("result", result)]),
            );
        }
        drop(self.reload_duration.get_or_create(&[("method", method)]));
    }

    /// Records the live revision and its leaf (`None` for a CA bundle).
    pub fn current(&self, mapping: &str, revision: u64, leaf: Option<(i64, i64)>) {
        let l = self.label(mapping);
        self.revision.get_or_create(&l).set(revision as i64);
        let live = match leaf {
            Some((not_before, not_after)) => {
                self.not_after.get_or_create(&l).set(not_after as f64);
                Live::Leaf(Validity {
                    not_before,
                    not_after,
                })
            }
            // A CA bundle has no leaf to expire: no expiry series rather
            // than a made-up value (`certsync check` reads CA bundles).
            None => {
                self.not_after.remove(&l);
                self.ttl.remove(&l);
                Live::NoLeaf
            }
        };
        crate::lock(&self.validity).insert(mapping.to_owned(), live);
    }

    pub fn sync(&self, mapping: &str, result: &'static str) {
        let labels = (self.label(mapping), [("result", result)]);
        self.syncs.get_or_create(&labels).inc();
        if matches!(result, "written" | "unchanged") {
            self.last_success
                .get_or_create(&self.label(mapping))
                .set(unix_now());
        }
    }

    pub fn rejected(&self, mapping: &str, reason: &'static str) {
        let labels = (self.label(mapping), [("reason", reason)]);
        self.validation_failures.get_or_create(&labels).inc();
    }

    pub fn source_up(&self, mapping: &str, up: bool) {
        self.flag(&self.source_up, mapping, up);
    }

    pub fn watch_restarted(&self, mapping: &str) {
        self.watch_restarts
            .get_or_create(&self.label(mapping))
            .inc();
    }

    pub fn reload(&self, method: &'static str, ok: bool, seconds: f64) {
        let result = if ok { "ok" } else { "failed" };
        self.reloads
            .get_or_create(&[("method", method), ("result", result)])
            .inc();
        self.reload_duration
            .get_or_create(&[("method", method)])
            .observe(seconds);
    }

    /// A signal not sent: the pidfile named a process it does not prove is
    /// the consumer (`reason`: `pidfile`, `user`, `name`, `pid`).
    pub fn reload_refused(&self, reason: &'static str) {
        self.reload_refusals
            .get_or_create(&[("reason", reason)])
            .inc();
    }

    /// Whether `mapping`'s certificate is past the stale fraction now.
    pub fn is_stale(&self, mapping: &str) -> bool {
        let validity = crate::lock(&self.validity);
        matches!(validity.get(mapping), Some(Live::Leaf(v)) if stale(*v, unix_now(), self.stale_fraction))
    }

    /// The OpenMetrics text exposition, with time-dependent values updated.
    pub fn encode(&self) -> String {
        let now = unix_now();
        for (mapping, v) in crate::lock(&self.validity).iter() {
            let l = self.label(mapping);
            let (ttl, is_stale) = match v {
                Live::Nothing => (Some(0.0), false),
                Live::NoLeaf => (None, false),
                Live::Leaf(v) => (
                    Some(v.not_after as f64 - now),
                    stale(*v, now, self.stale_fraction),
                ),
            };
            if let Some(ttl) = ttl {
                self.ttl.get_or_create(&l).set(ttl);
            }
            self.stale.get_or_create(&l).set(i64::from(is_stale));
        }
        for ((template, mapping), t) in crate::lock(&self.ca_not_after).iter() {
            let ttl = if *template {
                &self.ca_template_ttl
            } else {
                &self.ca_ttl
            };
            ttl.get_or_create(&self.label(mapping)).set(*t as f64 - now);
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        // prometheus-client prints an infinite gauge as Rust's `inf`;
        // OpenMetrics spells it `+Inf`, and strict parsers insist.
        out.replace(" inf\n", " +Inf\n")
            .replace(" -inf\n", " -Inf\n")
    }

    /// A `ca:` mapping's CA certificate expires at `not_after`.
    pub fn ca_expiry(&self, mapping: &str, not_after: i64) {
        crate::lock(&self.ca_not_after).insert((false, mapping.to_owned()), not_after);
    }

    /// A `ca:` mapping issued a certificate, cut short at the CA's expiry
    /// (`capped`) or not.
    pub fn ca_capped(&self, mapping: &str, capped: bool) {
        self.flag(&self.ca_capped, mapping, capped);
    }

    /// A `ca:` mapping's template certificate expires at `not_after`.
    pub fn ca_template_expiry(&self, mapping: &str, not_after: i64) {
        crate::lock(&self.ca_not_after).insert((true, mapping.to_owned()), not_after);
    }

    /// `certsync approve`: how many pending CSRs wait for a decision.
    pub fn csr_backlog(&self, backlog: usize) {
        self.csr_backlog
            .set(i64::try_from(backlog).unwrap_or(i64::MAX));
    }

    /// `certsync approve` made a decision (or, for wait, first saw it).
    pub fn csr_decision(&self, decision: &'static str, reason: &'static str) {
        self.csr_decisions
            .get_or_create(&[("decision", decision), ("reason", reason)])
            .inc();
    }

    /// A `csr:` mapping's request is waiting (or no longer is).
    pub fn csr_pending(&self, mapping: &str, pending: bool) {
        self.flag(&self.csr_pending, mapping, pending);
    }

    /// A `csr:` mapping's request failed.
    pub fn csr_error(&self, mapping: &str, reason: &'static str) {
        let labels = (self.label(mapping), [("reason", reason)]);
        self.csr_errors.get_or_create(&labels).inc();
    }

    /// A `csr:` mapping's certificate was replaced after `lived` seconds.
    pub fn csr_rotated(&self, mapping: &str, lived: f64) {
        self.csr_rotation
            .get_or_create(&self.label(mapping))
            .observe(lived);
    }

    /// Declares a `csr:` mapping's own series (after `add_mapping`).
    pub fn add_csr_mapping(&self, mapping: &str) {
        let l = self.label(mapping);
        self.csr_pending.get_or_create(&l).set(0);
        drop(self.csr_rotation.get_or_create(&l));
    }

    /// The token `/readyz` answers with (`run --generation`); set once.
    pub fn set_generation(&self, generation: String) {
        let _ = self.ready.generation.set(generation);
    }

    pub fn generation(&self) -> Option<&str> {
        self.ready.generation.get().map(String::as_str)
    }

    /// Everything `/readyz` waits for is declared: from now on an empty
    /// list of problems is ready.
    pub fn started(&self) {
        self.ready.started.store(true, Ordering::SeqCst);
    }

    /// Declares something `/readyz` waits for (not ready until told).
    pub fn add_readiness(&self, name: &str) {
        self.ready(name, Some("no valid revision yet".into()));
    }

    pub fn ready(&self, mapping: &str, problem: Option<String>) {
        crate::lock(&self.ready.reported).insert(mapping.to_owned(), problem);
    }

    pub fn begin_shutdown(&self) {
        self.ready.shutting_down.store(true, Ordering::SeqCst);
    }

    /// A `ca:` or `csr:` mapping's renewal failed with `error` (`None`:
    /// it succeeded).
    pub fn renewal_failing(&self, mapping: &str, error: Option<String>) {
        let mut failing = crate::lock(&self.ready.renewal_failing);
        match error {
            Some(e) => failing.insert(mapping.to_owned(), e),
            None => failing.remove(mapping),
        };
    }

    /// `Ok` when every mapping is ready, else why not: a mapping is not
    /// ready with a problem reported, with its live certificate expired,
    /// or with its renewal failing.
    pub fn readiness(&self) -> Result<(), NotReady> {
        if self.ready.shutting_down.load(Ordering::SeqCst) {
            return Err(NotReady::ShuttingDown);
        }
        if !self.ready.started.load(Ordering::SeqCst) {
            return Err(NotReady::Starting);
        }
        // Each lock taken alone, never nested.
        let reported = crate::lock(&self.ready.reported).clone();
        let failing = crate::lock(&self.ready.renewal_failing).clone();
        let validity = crate::lock(&self.validity).clone();
        let now = unix_now();
        let problems: Vec<(String, String)> = reported
            .into_iter()
            .filter_map(|(m, reported)| {
                let problem = reported
                    .or_else(|| unattended(validity.get(&m).copied(), failing.get(&m), now))?;
                Some((m, problem))
            })
            .collect();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(NotReady::Mappings(problems))
        }
    }
}

fn stale(v: Validity, now: f64, fraction: f64) -> bool {
    let life = (v.not_after - v.not_before) as f64;
    life > 0.0 && (now - v.not_before as f64) >= fraction * life
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_values_and_readiness() {
        let m = Metrics::new(0.8);
        // Nothing declared yet: starting, not ready.
        assert_eq!(m.readiness(), Err(NotReady::Starting));
        m.add_mapping("web");
        m.add_mapping("ca");
        assert_eq!(m.readiness(), Err(NotReady::Starting));
        m.started();
        let not_ready = m.readiness().unwrap_err();
        let why = "no valid revision yet".to_owned();
        assert_eq!(
            not_ready,
            NotReady::Mappings(vec![("ca".into(), why.clone()), ("web".into(), why)])
        );
        // The body /readyz answers with: one line per mapping.
        assert_eq!(
            not_ready.to_string(),
            "mapping ca: no valid revision yet\nmapping web: no valid revision yet\n"
        );
        let now = unix_now() as i64;
        m.current("web", 7, Some((now - 100, now + 900)));
        m.current("ca", 1, None);
        m.ready("web", None);
        m.ready("ca", None);
        assert_eq!(m.readiness(), Ok(()));
        m.sync("web", "written");
        m.rejected("web", "key_mismatch");
        m.reload("signal", true, 0.002);
        let text = m.encode();
        for want in [
            "certsync_revision{mapping=\"web\"} 7",
            "certsync_syncs_total{mapping=\"web\",result=\"written\"} 1",
            "certsync_validation_failures_total{mapping=\"web\",reason=\"key_mismatch\"} 1",
            "certsync_reloads_total{method=\"signal\",result=\"ok\"} 1",
            "certsync_reload_duration_seconds_count{method=\"signal\"} 1",
            "certsync_certificate_stale{mapping=\"web\"} 0",
            "# EOF",
        ] {
            assert!(text.contains(want), "{want} missing from:\n{text}");
        }
        // A CA bundle has no leaf: no expiry series, rather than +Inf.
        assert!(!text.contains("mapping=\"ca\"} +Inf"), "{text}");
        assert!(
            !text.contains("certsync_certificate_ttl_seconds{mapping=\"ca\"}"),
            "{text}"
        );
        m.begin_shutdown();
        assert_eq!(m.readiness(), Err(NotReady::ShuttingDown));
    }

    #[test]
    fn a_new_mapping_has_every_series_at_zero_and_expires_now() {
        let m = Metrics::new(0.8);
        m.add_mapping("web");
        m.add_csr_mapping("web");
        m.add_reload_method("signal");
        let text = m.encode();
        for want in [
            "certsync_certificate_ttl_seconds{mapping=\"web\"} 0.0\n",
            "certsync_certificate_not_after_seconds{mapping=\"web\"} 0.0\n",
            "certsync_revision{mapping=\"web\"} 0\n",
            "certsync_source_up{mapping=\"web\"} 0\n",
            "certsync_watch_restarts_total{mapping=\"web\"} 0\n",
            "certsync_syncs_total{mapping=\"web\",result=\"rejected\"} 0\n",
            "certsync_csr_pending{mapping=\"web\"} 0\n",
            "certsync_csr_rotation_seconds_count{mapping=\"web\"} 0\n",
            "certsync_reloads_total{method=\"signal\",result=\"failed\"} 0\n",
            "certsync_build_info{version=\"",
            "process_open_fds ",
        ] {
            assert!(text.contains(want), "{want} missing from:\n{text}");
        }
        // The readiness of something that is not a mapping has no series.
        m.add_readiness("approver");
        m.started();
        assert!(!m.encode().contains("approver"));
        assert!(
            matches!(m.readiness(), Err(NotReady::Mappings(p)) if p.iter().any(|(m, _)| m == "approver"))
        );
    }

    #[test]
    fn staleness_follows_the_fraction_of_lifetime() {
        let v = Validity {
            not_before: 0,
            not_after: 1000,
        };
        assert!(!stale(v, 799.0, 0.8));
        assert!(stale(v, 800.0, 0.8));
        let m = Metrics::new(0.8);
        let now = unix_now() as i64;
        m.current("old", 1, Some((now - 900, now + 100)));
        assert!(m.is_stale("old"));
        assert!(
            m.encode()
                .contains("certsync_certificate_stale{mapping=\"old\"} 1")
        );
    }
}

#[cfg(test)]
mod docs_tests;
