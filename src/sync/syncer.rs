//! One mapping's sync state: its target opened and the live revision
//! adopted, updates validated and applied, a rejected one retried on
//! resync, drift repaired with the last good pair, each problem reported
//! once.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::error::{Copy, LOG, SyncError, blocking, off_runtime};
use crate::bundle::{Bundle, ContentHash};
use crate::config::{Mapping, Source};
use crate::events::EventSink;
use crate::metrics::Metrics;
use crate::reload::ReloadHandle;
use crate::validate::{self, Policy};
use crate::writer::{Outcome, Writer};

/// Why a source could not be read, shared with the channel it came from.
pub(super) type Failure = Arc<crate::source::SourceError>;

/// One mapping's sync state.
pub struct Syncer {
    pub(super) mapping: Mapping,
    pub(super) writer: Writer,
    clock_skew: Duration,
    /// What drift repair restores: the live revision adopted at open, or
    /// the newest one published.
    pub(super) last_good: Option<Bundle>,
    /// The newest update not (yet) published, retried on every resync:
    /// a not-yet-valid certificate becomes valid with time.
    pending: Option<Bundle>,
    /// The last problem logged at error level, to log each one once.
    pub(super) last_problem: Option<(Option<ContentHash>, String)>,
    /// Told after every flip; `None` with `--once` or nothing to reload.
    pub(super) reload: Option<ReloadHandle>,
    pub(super) metrics: Arc<Metrics>,
    /// The live revision, once known.
    pub(super) revision: Option<u64>,
    /// The revision for which the stale-certificate warning was logged.
    stale_warned: Option<u64>,
    /// Kubernetes Events on the source object (`--events`, API sources).
    pub(super) events: Option<EventSink>,
    /// Why the last `update-kubeconfig=` or `update-pair=` attempt failed
    /// (said once, at error level), while it does.
    pub(super) copy_failing: Option<(Copy, Arc<SyncError>)>,
    /// The certificate (PEM) each copy held after certsync's last update
    /// of it (the live one at start): a copy found holding another was
    /// written by someone else, which is said at warning level.
    pub(super) copied: std::collections::HashMap<Copy, Vec<u8>>,
    /// The live certificate's notAfter, once known.
    live_not_after: Option<i64>,
    /// The revision for which the expired-certificate warning was logged.
    expired_warned: Option<u64>,
}

impl Syncer {
    /// Opens the target (cleaning crash leftovers) and adopts an intact live
    /// revision as the last good pair, so it is served and repaired even
    /// before the source answers.
    ///
    /// The target is also claimed for this process (a second daemon, or a
    /// `run --once`, on the same target is refused instead of fighting the
    /// first), in the same trip to the blocking pool: `run` opens every
    /// target in turn before its source starts.
    pub async fn open(
        mapping: Mapping,
        clock_skew: Duration,
        reload: Option<ReloadHandle>,
        metrics: Arc<Metrics>,
    ) -> Result<(Self, crate::writer::Claim), SyncError> {
        let (target, opts, name) = (
            mapping.target.clone(),
            mapping.writer.clone(),
            mapping.name.clone(),
        );
        let (writer, live, claim, pinned) = blocking(&name, move || {
            let w = Writer::open(target, opts)?;
            let live = w.live()?;
            let claim = w.claim()?;
            let pinned = w.pin().is_some();
            Ok((w, live, claim, pinned))
        })
        .await?;
        metrics.add_mapping(&name);
        metrics.pinned(&name, pinned);
        if matches!(mapping.source, Source::Csr(_)) {
            metrics.add_csr_mapping(&name);
        }
        let mut s = Self {
            mapping,
            writer,
            clock_skew,
            last_good: None,
            pending: None,
            last_problem: None,
            reload,
            metrics,
            revision: None,
            stale_warned: None,
            events: None,
            copy_failing: None,
            copied: std::collections::HashMap::new(),
            live_not_after: None,
            expired_warned: None,
        };
        if let Some(l) = live.filter(|l| l.problem.is_none()) {
            tracing::info!(target: LOG, mapping = %name, revision = l.revision, hash = %l.hash.short(), "found current revision on disk");
            // Served and repaired as it is; ready only if it is still valid.
            let problem = validate::validate(&l.bundle, &s.policy())
                .err()
                .map(|e| format!("current revision {} is not valid: {e}", l.revision));
            s.record_current(l.revision, validate::leaf_of_bundle(&l.bundle).as_ref());
            s.check_expired();
            s.metrics.ready(&name, problem);
            // The previous run left the copies holding this pair.
            if let Some(cert) = l.bundle.get(crate::bundle::CERT_FILE) {
                for copy in [Copy::Kubeconfig, Copy::Pair] {
                    s.copied.insert(copy, cert.to_vec());
                }
            }
            s.last_good = Some(l.bundle);
        }
        Ok((s, claim))
    }

    fn policy(&self) -> Policy {
        // A CA from ClusterTrustBundles is bounded by its source
        // (`validate::MAX_TRUST_BUNDLES_SIZE`), not by one object's 1 MiB.
        let trust_bundles = match &self.mapping.source {
            Source::TrustBundle(_) => true,
            Source::Csr(spec) => matches!(
                spec.ca,
                Some(crate::source::csr::CaSource::TrustBundles { .. })
            ),
            Source::Dir(_) | Source::Kube(_) | Source::Ca(_) => false,
        };
        Policy {
            expect: self.mapping.expect,
            now: SystemTime::now(),
            clock_skew: self.clock_skew,
            max_size: if trust_bundles {
                crate::validate::MAX_PUBLISHED_SIZE
            } else {
                crate::validate::MAX_BUNDLE_SIZE
            },
        }
    }

    /// Metrics for the live revision, whose leaf is `leaf`.
    pub(super) fn record_current(&mut self, revision: u64, leaf: Option<&validate::Leaf>) {
        self.metrics.current(
            &self.mapping.name,
            revision,
            leaf.map(|l| (l.not_before, l.not_after)),
        );
        self.revision = Some(revision);
        self.live_not_after = leaf.map(|l| l.not_after);
    }

    /// Warns once per revision when the live certificate has ended: its
    /// consumer's peers refuse it from now on, whatever else is logged.
    fn check_expired(&mut self) {
        let Some(not_after) = self.live_not_after else {
            return;
        };
        let now = validate::unix_seconds(SystemTime::now());
        if now >= not_after && self.expired_warned != self.revision {
            let file = self.mapping.target.join(crate::bundle::CERT_FILE);
            tracing::warn!(target: LOG, mapping = %self.mapping.name, file = %file.display(), not_after = %validate::rfc3339(not_after), "the live certificate has expired; it stays in place until a new one is issued");
            self.expired_warned = self.revision;
        }
    }

    /// Validates and publishes `bundle`. `Ok(true)` when a new revision was
    /// flipped in.
    pub async fn apply(&mut self, bundle: Bundle) -> Result<bool, SyncError> {
        let hash = bundle.hash();
        let policy = self.policy();
        // The last good bundle passed already; anything else is checked,
        // on a blocking thread: parsing outside bytes must not hold a
        // runtime thread, which the admin port and every other mapping share.
        let known_good = self.last_good.as_ref().is_some_and(|g| g.hash() == hash);
        let b = bundle.clone();
        let check = move || validate::validate(&b, &policy);
        if !known_good && let Err(source) = off_runtime(&self.mapping.name, check).await? {
            self.pending = Some(bundle);
            let err = SyncError::Rejected {
                mapping: self.mapping.name.clone(),
                source,
            };
            self.report(Some(hash), &err);
            return Err(err);
        }
        match self.publish(&bundle).await {
            Ok(outcome) => {
                self.pending = None;
                self.last_good = Some(bundle);
                // A kubeconfig still failing is the same problem with the
                // new pair: said once, not again at every renewal.
                if self.copy_failing.is_none() {
                    self.last_problem = None;
                }
                Ok(matches!(outcome, Outcome::Written { .. }))
            }
            Err(e) => {
                self.pending = Some(bundle);
                self.report(Some(hash), &e);
                Err(e)
            }
        }
    }

    /// Records that the source could not be read; the target is untouched.
    pub fn source_failed(&mut self, source: Failure) -> SyncError {
        let err = SyncError::Source {
            mapping: self.mapping.name.clone(),
            source,
        };
        self.report(None, &err);
        err
    }

    /// Retries a pending update (it may have become valid), then re-checks
    /// the target against the last good bundle.
    pub async fn resync(&mut self) {
        if let Some(pending) = self.pending.clone()
            && self.apply(pending).await.is_ok()
        {
            return;
        }
        self.repair().await;
        // Warned once per revision when its certificate passed the stale
        // fraction of its lifetime and nothing newer has arrived.
        let name = &self.mapping.name;
        if self.revision.is_some()
            && self.stale_warned != self.revision
            && self.metrics.is_stale(name)
        {
            tracing::warn!(target: LOG, mapping = %name, revision = self.revision, "certificate is past its renewal point and no newer one has arrived; check the issuer");
            self.stale_warned = self.revision;
        }
        self.check_expired();
    }

    /// Restores the last good bundle if the target drifted from it.
    pub async fn repair(&mut self) {
        let Some(good) = self.last_good.clone() else {
            return;
        };
        if let Err(e) = self.publish(&good).await {
            self.report(Some(good.hash()), &e);
        }
    }

    pub(super) fn report(&mut self, hash: Option<ContentHash>, err: &SyncError) {
        let key = (hash, err.to_string());
        let name = &self.mapping.name;
        // What the source sent, refused: an Event says so.
        let (result, reason, refused) = match err {
            SyncError::Rejected { source, .. } => {
                self.metrics.rejected(name, source.reason());
                ("rejected", source.reason(), Some(source.to_string()))
            }
            SyncError::Source { source, .. } => {
                let reason = source.reason();
                // Content the source refused itself (too large, a file
                // that is not PEM) is counted as validation would count it,
                // and the source is up: it answered, as when validation
                // refuses what it sent. `source_up` 0 means no answer, what
                // a "source down" alert is about.
                let refused = matches!(reason, "too_large" | "bad_pem");
                if refused {
                    self.metrics.rejected(name, reason);
                }
                self.metrics.source_up(name, refused);
                ("source_error", reason, refused.then(|| source.to_string()))
            }
            SyncError::Writer { .. } | SyncError::Task { .. } | SyncError::Watcher(_) => {
                ("error", "write_failed", None)
            }
            SyncError::Copy { copy, .. } => match copy {
                Copy::Kubeconfig => ("kubeconfig_error", "kubeconfig_failed", None),
                Copy::Pair => ("pair_error", "pair_failed", None),
            },
        };
        self.metrics.sync(name, result);
        if self.last_problem.as_ref() == Some(&key) {
            tracing::debug!(target: LOG, mapping = %self.mapping.name, reason, error = %err, "still failing");
        } else {
            let kept = match self.last_good {
                Some(_) => "keeping the last good files",
                None => "nothing published yet; the target is left as it is",
            };
            tracing::error!(target: LOG, mapping = %self.mapping.name, reason, error = %err, "{kept}");
            if let (Some(events), Some(refused)) = (&self.events, refused) {
                events.send(
                    crate::events::REJECTED,
                    format!("{reason}: {refused}; the last good files stay in place"),
                );
            }
            self.last_problem = Some(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::{CERT_FILE, KEY_FILE};
    use crate::cli::Command;
    use crate::config::Config;
    use crate::test_certs as certs;

    fn mapping(src: &std::path::Path, target: &std::path::Path) -> Mapping {
        let parsed = crate::config::parse(vec![
            "certsync".into(),
            "run".into(),
            "--sync".into(),
            format!("dir:{}={}", src.display(), target.display()).into(),
        ])
        .unwrap();
        let Command::Run(args) = parsed.cli.command else {
            panic!("not run")
        };
        let settings = crate::config::Settings::load(*args, &parsed.flags).unwrap();
        Config::build(&settings).unwrap().mappings.remove(0)
    }

    async fn open(m: Mapping) -> Syncer {
        let metrics = Arc::new(Metrics::new(0.8));
        let opened = Syncer::open(m, Duration::from_secs(300), None, metrics).await;
        opened.unwrap().0
    }

    fn bundle(p: &certs::Pair) -> Bundle {
        let mut b = Bundle::default();
        b.insert(CERT_FILE, p.cert.clone(), "t").unwrap();
        b.insert(KEY_FILE, p.key.clone(), "t").unwrap();
        b
    }

    #[tokio::test]
    async fn bad_material_keeps_the_last_good_pair() {
        let d = tempfile::tempdir().unwrap();
        let m = mapping(&d.path().join("src"), &d.path().join("t"));
        let mut s = open(m.clone()).await;
        let good = certs::Pair::new("good");
        assert!(s.apply(bundle(&good)).await.unwrap());
        let other = certs::Pair::new("other");
        let mut bad = bundle(&good);
        bad.insert(KEY_FILE, other.key.clone(), "t").unwrap();
        let err = s.apply(bad).await.unwrap_err();
        assert!(
            matches!(
                err,
                SyncError::Rejected {
                    source: validate::ValidationError::KeyMismatch { .. },
                    ..
                }
            ),
            "{err}"
        );
        assert_eq!(
            std::fs::read(d.path().join("t/tls.crt")).unwrap(),
            good.cert
        );
        assert_eq!(std::fs::read(d.path().join("t/tls.key")).unwrap(), good.key);

        // A fresh syncer adopts what is on disk and repairs drift with it.
        std::fs::remove_file(d.path().join("t/tls.key")).unwrap();
        let mut again = open(m).await;
        again.repair().await;
        assert_eq!(std::fs::read(d.path().join("t/tls.key")).unwrap(), good.key);
    }
}
