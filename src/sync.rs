//! The per-target loop: take the newest update from the source, validate it,
//! publish it through the writer, and keep the target repaired.
//!
//! One task owns each target directory; nothing else writes there. The last
//! good bundle (from this run, or found intact on disk at start) is what
//! drift repair restores; a rejected or unreadable update never replaces it.
//! Errors are logged once per distinct problem (then at debug level on each
//! retry) so a broken source does not flood the log.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use crate::bundle::{Bundle, ContentHash};
use crate::config::{Config, Mapping, Source};
use crate::dirwatch::{DirWatch, Identity};
use crate::events::{CsrRef, EventSink};
use crate::metrics::Metrics;
use crate::reload::{self, ReloadHandle};
use crate::source::Update;
use crate::source::ca::{CaSource, CaSpec};
use crate::source::csr::{CsrSource, CsrSpec};
use crate::source::hostdir::HostDir;
use crate::source::secret::{KubeObject, ObjectRef};
use crate::source::trust_bundle::{Selection, TrustBundles};
use crate::validate::{self, Policy, ValidationError};
use crate::writer::{DATA, Outcome, Writer, WriterError};
use kube::Client;

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("mapping {mapping}: {source}")]
    Writer {
        mapping: String,
        #[source]
        source: WriterError,
    },
    #[error("mapping {mapping}: source: {message}")]
    Source {
        mapping: String,
        message: String,
        /// Metric label, e.g. `too_large` or `source_unavailable`.
        reason: &'static str,
    },
    #[error("mapping {mapping}: rejected: {source}")]
    Rejected {
        mapping: String,
        #[source]
        source: ValidationError,
    },
    #[error("mapping {mapping}: internal task failed: {message}")]
    Task { mapping: String, message: String },
    /// The target is published; its `update-kubeconfig=` file is not.
    #[error("mapping {mapping}: {message}")]
    Kubeconfig { mapping: String, message: String },
}

/// The directory source of a mapping.
fn host_dir(m: &Mapping, dir: &std::path::Path) -> HostDir {
    HostDir {
        dir: dir.to_owned(),
        layout: m.layout.clone(),
        items: m.items.clone(),
    }
}

/// The API-server source of a mapping.
fn kube_object(m: &Mapping, object: &ObjectRef, metrics: &Arc<Metrics>) -> KubeObject {
    KubeObject {
        object: object.clone(),
        items: m.items.clone(),
        all: m.layout == crate::bundle::Layout::All,
        optional: m.optional,
        mapping: m.name.clone(),
        metrics: Arc::clone(metrics),
        uid: Arc::default(),
    }
}

/// A source failure as (metric reason, message).
type Failure = (&'static str, String);

fn failure(e: &crate::source::SourceError) -> Failure {
    (e.reason(), e.to_string())
}

/// Reads a mapping's source once (`--once`). `client` is the API client,
/// or why there is none.
async fn read_once(
    m: &Mapping,
    client: &Result<Client, String>,
    metrics: &Arc<Metrics>,
    live: Option<Bundle>,
    config: &Config,
) -> Result<Bundle, Failure> {
    let unavailable = |e: String| ("source_unavailable", e);
    match &m.source {
        Source::Dir(dir) => {
            let src = host_dir(m, dir);
            match crate::blocking(move || src.read()).await {
                Ok(r) => r.map_err(|e| failure(&e.into())),
                Err(e) => Err(unavailable(e)),
            }
        }
        Source::Kube(object) => {
            let client = client.clone().map_err(unavailable)?;
            kube_object(m, object, metrics)
                .get(client)
                .await
                .map_err(|e| failure(&e.into()))
        }
        Source::TrustBundle(selection) => {
            let client = client.clone().map_err(unavailable)?;
            trust_bundles(m, selection, metrics)
                .get(client)
                .await
                .map_err(|e| failure(&e))
        }
        Source::Csr(spec) => {
            let source = csr_source(m, spec, metrics, config);
            if spec.bootstrap.is_none() {
                client.clone().map_err(unavailable)?;
            }
            let (_clients_tx, mut clients) = watch::channel(client.clone().ok());
            let (_stop, mut never) = watch::channel(false);
            let Some(client) = source
                .client(&mut clients, &mut never, live.is_some())
                .await
            else {
                return Err(unavailable("no API client".into()));
            };
            match source.once(&client, live.as_ref()).await {
                Ok(Some(issued)) => Ok(issued),
                // The live pair satisfies the mapping: publishing it again
                // changes nothing.
                Ok(None) => live.ok_or_else(|| unavailable("no live pair".into())),
                Err(e) => Err((e.reason(), e.to_string())),
            }
        }
        Source::Ca(spec) => match ca_source(m, spec, metrics, config)
            .once(live.as_ref())
            .await
        {
            Ok(Some(issued)) => Ok(issued),
            Ok(None) => live.ok_or_else(|| unavailable("no live pair".into())),
            Err(e) => Err((e.reason(), e.to_string())),
        },
    }
}

/// The ClusterTrustBundle source of a mapping.
fn trust_bundles(m: &Mapping, selection: &Selection, metrics: &Arc<Metrics>) -> TrustBundles {
    TrustBundles {
        selection: selection.clone(),
        mapping: m.name.clone(),
        metrics: Arc::clone(metrics),
    }
}

/// Whether `run` needs the process's API client: a mapping's source uses
/// it, or Events go on the Pod (`ca:`, `dir:` with `--events`).
fn needs_client(config: &Config) -> bool {
    config.events_pod.is_some()
        || config
            .mappings
            .iter()
            .any(|m| needs_process_client(&m.source))
}

/// Whether a source uses the process's API client (`--kubeconfig` or the
/// pod's): a `csr:` mapping with a bootstrap kubeconfig makes its own.
fn needs_process_client(source: &Source) -> bool {
    match source {
        Source::Dir(_) | Source::Ca(_) => false,
        Source::Kube(_) | Source::TrustBundle(_) => true,
        Source::Csr(spec) => spec.bootstrap.is_none(),
    }
}

/// The CSR source of a mapping.
fn csr_source(m: &Mapping, spec: &CsrSpec, metrics: &Arc<Metrics>, config: &Config) -> CsrSource {
    CsrSource {
        spec: Arc::new(spec.clone()),
        mapping: m.name.clone(),
        metrics: Arc::clone(metrics),
        clock_skew: config.clock_skew,
        target: m.target.clone(),
        settings: config.client.clone(),
        current: CsrRef::default(),
        events: None,
        renew_floor: config.csr_renew_floor,
    }
}

/// The local-CA source of a mapping.
fn ca_source(m: &Mapping, spec: &CaSpec, metrics: &Arc<Metrics>, config: &Config) -> CaSource {
    CaSource {
        spec: Arc::new(spec.clone()),
        mapping: m.name.clone(),
        metrics: Arc::clone(metrics),
        clock_skew: config.clock_skew,
        renew_floor: config.csr_renew_floor,
        recheck: config.resync,
        events: None,
        template_due: Arc::default(),
    }
}

/// One mapping's sync state.
pub struct Syncer {
    mapping: Mapping,
    writer: Writer,
    clock_skew: Duration,
    /// What drift repair restores.
    last_good: Option<Bundle>,
    /// The newest update not (yet) published, retried on every resync:
    /// a not-yet-valid certificate becomes valid with time.
    pending: Option<Bundle>,
    /// The last problem logged at error level, to log each one once.
    last_problem: Option<(Option<ContentHash>, String)>,
    /// Told after every flip; `None` with `--once` or nothing to reload.
    reload: Option<ReloadHandle>,
    metrics: Arc<Metrics>,
    /// The live revision, once known.
    revision: Option<u64>,
    /// The revision for which the stale-certificate warning was logged.
    stale_warned: Option<u64>,
    /// Kubernetes Events on the source object (`--events`, API sources).
    events: Option<EventSink>,
    /// Why the last `update-kubeconfig=` attempt failed (said once, at
    /// error level), while it does.
    kubeconfig_failing: Option<String>,
}

impl Syncer {
    /// Opens the target (cleaning crash leftovers) and adopts an intact live
    /// revision as the last good pair, so it is served and repaired even
    /// before the source answers.
    ///
    /// With `claim`, the target is also claimed for this daemon (a second
    /// daemon on the same target is refused instead of fighting the
    /// first), in the same trip to the blocking pool: `run` opens every
    /// target in turn before its source starts.
    pub async fn open(
        mapping: Mapping,
        clock_skew: Duration,
        reload: Option<ReloadHandle>,
        metrics: Arc<Metrics>,
        claim: bool,
    ) -> Result<(Self, Option<crate::writer::Claim>), SyncError> {
        let (target, opts, name) = (
            mapping.target.clone(),
            mapping.writer.clone(),
            mapping.name.clone(),
        );
        let (writer, live, claim, pinned) = blocking(&name, move || {
            let w = Writer::open(target, opts)?;
            let live = w.live()?;
            let claim = if claim { Some(w.claim()?) } else { None };
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
            kubeconfig_failing: None,
        };
        if let Some(l) = live.filter(|l| l.problem.is_none()) {
            tracing::info!(mapping = %name, revision = l.revision, hash = %l.hash.short(), "found current revision on disk");
            // Served and repaired as it is; ready only if it is still valid.
            let problem = validate::validate(&l.bundle, &s.policy())
                .err()
                .map(|e| format!("current revision {} is not valid: {e}", l.revision));
            s.record_current(l.revision, leaf_of_bundle(&l.bundle).as_ref());
            s.metrics.ready(&name, problem);
            s.last_good = Some(l.bundle);
        }
        Ok((s, claim))
    }

    /// The last good bundle: the live revision adopted at open, or the
    /// newest one published.
    pub fn live(&self) -> Option<Bundle> {
        self.last_good.clone()
    }

    /// Records Events on the source object from now on.
    pub fn with_events(mut self, sink: EventSink) -> Self {
        self.events = Some(sink);
        self
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
            _ => false,
        };
        Policy {
            expect: self.mapping.expect,
            now: SystemTime::now(),
            clock_skew: self.clock_skew,
            max_size: if trust_bundles {
                validate::MAX_PUBLISHED_SIZE
            } else {
                validate::MAX_BUNDLE_SIZE
            },
        }
    }

    /// Metrics for the live revision, whose leaf is `leaf`.
    fn record_current(&mut self, revision: u64, leaf: Option<&validate::Leaf>) {
        self.metrics.current(
            &self.mapping.name,
            revision,
            leaf.map(|l| (l.not_before, l.not_after)),
        );
        self.revision = Some(revision);
    }

    /// Warns once per revision when its certificate passed the stale
    /// fraction of its lifetime and nothing newer has arrived.
    fn check_stale(&mut self) {
        let name = &self.mapping.name;
        if self.revision.is_some()
            && self.stale_warned != self.revision
            && self.metrics.is_stale(name)
        {
            tracing::warn!(mapping = %name, revision = self.revision, "certificate is past its renewal point and no newer one has arrived; check the issuer");
            self.stale_warned = self.revision;
        }
    }

    /// Records that the source delivered something (good or bad content).
    pub fn source_ok(&self) {
        self.metrics.source_up(&self.mapping.name, true);
    }

    /// Validates and publishes `bundle`. `Ok(true)` when a new revision was
    /// flipped in.
    pub async fn apply(&mut self, bundle: Bundle) -> Result<bool, SyncError> {
        let hash = bundle.hash();
        let policy = self.policy();
        // The last good bundle passed already; anything else is checked.
        let known_good = self.last_good.as_ref().is_some_and(|g| g.hash() == hash);
        if !known_good && let Err(source) = self.validate(&bundle, policy).await? {
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
                if self.kubeconfig_failing.is_none() {
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

    /// [`validate::validate`] on a blocking thread: parsing outside bytes
    /// must not hold a runtime thread, which the admin port and every other
    /// mapping share.
    async fn validate(
        &self,
        bundle: &Bundle,
        policy: Policy,
    ) -> Result<Result<validate::Validated, ValidationError>, SyncError> {
        let b = bundle.clone();
        crate::blocking(move || validate::validate(&b, &policy))
            .await
            .map_err(|message| SyncError::Task {
                mapping: self.mapping.name.clone(),
                message,
            })
    }

    /// Records that the source could not be read; the target is untouched.
    pub fn source_failed(&mut self, (reason, message): Failure) -> SyncError {
        let err = SyncError::Source {
            mapping: self.mapping.name.clone(),
            message,
            reason,
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
        self.check_stale();
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

    async fn publish(&mut self, bundle: &Bundle) -> Result<Outcome, SyncError> {
        let (writer, b) = (self.writer.clone(), bundle.clone());
        let parsed = bundle.clone();
        let leaf = crate::blocking(move || leaf_of_bundle(&parsed))
            .await
            .map_err(|message| SyncError::Task {
                mapping: self.mapping.name.clone(),
                message,
            })?;
        // Every flip is followed by a reload (drift rewrites too: the
        // consumer may have read the damaged files), requested as soon as
        // the new revision is live.
        let reload = self.reload_request(leaf.as_ref());
        let flipped = move || reload.into_iter().for_each(|request| request());
        let outcome =
            match blocking(&self.mapping.name, move || writer.publish_then(&b, flipped)).await {
                Ok(o) => o,
                Err(e) => {
                    self.unready_if_broken(&e).await;
                    return Err(e);
                }
            };
        let revision = outcome.revision();
        if let Outcome::Pinned { revision } = outcome {
            self.metrics.pinned(&self.mapping.name, true);
            self.pinned(revision).await;
            return Ok(outcome);
        }
        if matches!(outcome, Outcome::Written { .. }) {
            // A flip releases any pin (the writer removed it).
            self.metrics.pinned(&self.mapping.name, false);
        }
        // The content is ours but its revision is not the one we last saw:
        // someone else flipped `..data` (a `certsync rollback` back to the
        // source's content). The consumer may hold the files of the
        // revision in between: reload it.
        if matches!(outcome, Outcome::Unchanged { .. })
            && self.revision.is_some_and(|r| r != revision)
        {
            tracing::warn!(mapping = %self.mapping.name, revision, "the live revision was changed by another writer (a rollback?); reloading the consumer");
            self.reload_now(leaf.as_ref());
        }
        let written = matches!(outcome, Outcome::Written { .. });
        self.record_current(revision, leaf.as_ref());
        let name = self.mapping.name.clone();
        self.metrics
            .sync(&name, if written { "written" } else { "unchanged" });
        let kubeconfig = self.update_kubeconfig(bundle).await;
        self.metrics.ready(&name, kubeconfig);
        let (name, hash) = (&name, bundle.hash());
        match &outcome {
            Outcome::Written { revision, drift } => {
                let not_after = leaf
                    .as_ref()
                    .map(|l| validate::rfc3339(l.not_after))
                    .unwrap_or_default();
                let subject = leaf.as_ref().map_or("", |l| l.subject.as_str());
                match drift {
                    Some(why) => {
                        tracing::warn!(mapping = %name, revision, hash = %hash.short(), drift = %why, "target drifted; restored the current pair in a new revision")
                    }
                    None => {
                        if leaf.is_some() {
                            tracing::info!(mapping = %name, revision, hash = %hash.short(), subject, %not_after, target_dir = %self.mapping.target.display(), "published new revision");
                        } else {
                            // A CA bundle (ca.crt only) has no leaf: no
                            // empty subject and date in the log.
                            tracing::info!(mapping = %name, revision, hash = %hash.short(), content = "CA certificates only", target_dir = %self.mapping.target.display(), "published new revision");
                        }
                        if let Some(events) = &self.events {
                            let serial = leaf.as_ref().map_or("-", |l| l.serial.as_str());
                            events.updated(format!(
                                "revision {revision} written to {}: {subject}, serial {serial}, not after {not_after}",
                                self.mapping.target.display()
                            ));
                        }
                    }
                }
            }
            Outcome::Unchanged {
                revision,
                repaired_links,
            } if *repaired_links > 0 => {
                tracing::warn!(mapping = %name, revision, repaired_links, "restored missing or altered links in the target");
            }
            Outcome::Unchanged { revision, .. } => {
                tracing::debug!(mapping = %name, revision, "target already current");
            }
            Outcome::Pinned { .. } => {} // returned above
        }
        Ok(outcome)
    }

    /// After a failed write: not ready while the target holds no intact
    /// revision (deleted, unwritable), since the consumer has nothing to read.
    async fn unready_if_broken(&self, err: &SyncError) {
        let writer = self.writer.clone();
        let live = blocking(&self.mapping.name, move || writer.live()).await;
        if !matches!(live, Ok(Some(ref l)) if l.problem.is_none()) {
            self.metrics.ready(
                &self.mapping.name,
                Some(format!("the target holds no valid files: {err}")),
            );
        }
    }

    /// An operator's rollback is in place (`certsync rollback`): the source
    /// still offers the content rolled back from, so it is not published.
    /// When the live revision changed under us, the consumer is reloaded
    /// with the restored pair.
    async fn pinned(&mut self, revision: u64) {
        let name = self.mapping.name.clone();
        self.metrics.sync(&name, "pinned");
        if self.revision == Some(revision) {
            return;
        }
        let writer = self.writer.clone();
        let live = blocking(&name, move || writer.live()).await.ok().flatten();
        let Some(live) = live else { return };
        tracing::warn!(mapping = %name, revision, "rollback in place: keeping it until the source content changes");
        let leaf = leaf_of_bundle(&live.bundle);
        self.record_current(revision, leaf.as_ref());
        let kubeconfig = self.update_kubeconfig(&live.bundle).await;
        self.metrics.ready(&name, kubeconfig);
        self.reload_now(leaf.as_ref());
    }

    /// Makes the mapping's `update-kubeconfig=` file hold the pair of
    /// `live` (the live revision's content), if it does not. `Some`
    /// problem (for readiness) when it failed: the target stays published,
    /// the failure is logged and counted, and the next repair or resync
    /// tries again.
    async fn update_kubeconfig(&mut self, live: &Bundle) -> Option<String> {
        use crate::bundle::{CERT_FILE, KEY_FILE};
        let path = self.mapping.update_kubeconfig.clone()?;
        let (Some(cert), Some(key)) = (live.get(CERT_FILE), live.get(KEY_FILE)) else {
            return None;
        };
        let (cert, key, p) = (cert.to_vec(), key.to_vec(), path.clone());
        let name = self.mapping.name.clone();
        let result = blocking(&name, move || {
            crate::writer::update_kubeconfig(&p, &cert, &key)
        })
        .await;
        let err = match result {
            Ok(updated) => {
                if updated {
                    tracing::info!(mapping = %name, kubeconfig = %path.display(), "kubeconfig now embeds the live pair");
                }
                if self.kubeconfig_failing.take().is_some() {
                    self.last_problem = None;
                }
                return None;
            }
            Err(SyncError::Writer { source, .. }) => source.to_string(),
            Err(other) => other.to_string(),
        };
        self.kubeconfig_failing = Some(err.clone());
        let err = SyncError::Kubeconfig {
            mapping: name,
            message: err,
        };
        // Keyed without the pair's hash: the same file problem with each
        // renewed pair is one problem.
        self.report(None, &err);
        Some(err.to_string())
    }

    fn reload_now(&self, leaf: Option<&validate::Leaf>) {
        if let Some(request) = self.reload_request(leaf) {
            request();
        }
    }

    /// The reload to ask for once a revision whose leaf is `leaf` is live,
    /// verified at the mapping's `verify=` address if it has one. `None`
    /// when nothing is to be reloaded (`--once`, no method, no check).
    fn reload_request(
        &self,
        leaf: Option<&validate::Leaf>,
    ) -> Option<impl FnOnce() + Send + 'static> {
        let handle = self.reload.clone()?;
        let name = self.mapping.name.clone();
        let verify = self.mapping.verify.clone().zip(leaf.map(|l| l.sha256));
        let events = self.events.clone();
        Some(move || handle.request(&name, verify, events))
    }

    fn report(&mut self, hash: Option<ContentHash>, err: &SyncError) {
        let key = (hash, err.to_string());
        let name = &self.mapping.name;
        let reason = match err {
            SyncError::Rejected { source, .. } => {
                self.metrics.rejected(name, source.reason());
                self.metrics.sync(name, "rejected");
                source.reason()
            }
            SyncError::Source { reason, .. } => {
                // Content the source refused itself (too large, a file
                // that is not PEM) is counted as validation would count it.
                if matches!(*reason, "too_large" | "bad_pem") {
                    self.metrics.rejected(name, reason);
                }
                self.metrics.source_up(name, false);
                self.metrics.sync(name, "source_error");
                reason
            }
            SyncError::Writer { .. } | SyncError::Task { .. } => {
                self.metrics.sync(name, "error");
                "write_failed"
            }
            SyncError::Kubeconfig { .. } => {
                self.metrics.sync(name, "kubeconfig_error");
                "kubeconfig_failed"
            }
        };
        if self.last_problem.as_ref() == Some(&key) {
            tracing::debug!(mapping = %self.mapping.name, reason, error = %err, "still failing");
        } else {
            if self.last_good.is_some() {
                tracing::error!(mapping = %self.mapping.name, reason, error = %err, "keeping the last good files");
            } else {
                tracing::error!(mapping = %self.mapping.name, reason, error = %err, "nothing published yet; the target is left as it is");
            }
            let refused = match err {
                SyncError::Rejected { source, .. } => {
                    Some(format!("{}: {source}", source.reason()))
                }
                SyncError::Source {
                    reason: reason @ ("too_large" | "bad_pem"),
                    message,
                    ..
                } => Some(format!("{reason}: {message}")),
                _ => None,
            };
            if let (Some(events), Some(refused)) = (&self.events, refused) {
                events.rejected(format!("{refused}; the last good files stay in place"));
            }
            self.last_problem = Some(key);
        }
    }
}

/// The leaf certificate of a bundle, if it has one.
fn leaf_of_bundle(bundle: &Bundle) -> Option<validate::Leaf> {
    bundle
        .get(crate::bundle::CERT_FILE)
        .and_then(validate::leaf_of)
}

/// Writer work off the runtime ([`crate::blocking`]), its errors named
/// after the mapping.
async fn blocking<T: Send + 'static>(
    mapping: &str,
    f: impl FnOnce() -> Result<T, WriterError> + Send + 'static,
) -> Result<T, SyncError> {
    crate::blocking(f)
        .await
        .map_err(|message| SyncError::Task {
            mapping: mapping.to_owned(),
            message,
        })?
        .map_err(|source| SyncError::Writer {
            mapping: mapping.to_owned(),
            source,
        })
}

/// `certsync run --once`: every mapping read, validated and published once.
/// Returns the failures.
pub async fn once(config: &Config) -> Vec<SyncError> {
    let mut failures = Vec::new();
    let metrics = Arc::new(Metrics::new(config.stale_fraction));
    let client = if config
        .mappings
        .iter()
        .any(|m| needs_process_client(&m.source))
    {
        match config.client.config().await {
            Ok(c) => match config.client.client_for(&c) {
                Ok(client) => reachable(&client, &c.cluster_url, config.once_timeout)
                    .await
                    .map(|()| client),
                Err(e) => Err(e.to_string()),
            },
            Err(e) => Err(e.to_string()),
        }
    } else {
        Err("no API client needed".to_owned())
    };
    // Claims held until every mapping is done: one owner per target, so a
    // run beside the daemon that owns a target is refused (exit 1, naming
    // it) instead of flipping under it.
    let mut claims = Vec::new();
    for m in &config.mappings {
        // `apply` and `source_failed` log their failures; an open failure
        // is logged here, so every failure is said exactly once.
        // A write lock another process holds is waited for no longer than
        // the run itself may take.
        let mut m = m.clone();
        m.writer.lock_timeout = Some(config.once_timeout);
        let mut s = match Syncer::open(
            m.clone(),
            config.clock_skew,
            None,
            Arc::clone(&metrics),
            true,
        )
        .await
        {
            Ok((s, claim)) => {
                claims.push(claim);
                s
            }
            Err(e) => {
                tracing::error!(mapping = %m.name, error = %e, "cannot open the target");
                failures.push(e);
                continue;
            }
        };
        if m.writer.issuing && target_pinned(&m.target).await {
            tracing::warn!(mapping = %m.name, target_dir = %m.target.display(), "the target is pinned by a rollback; not issuing while the pin holds (remove {}/..pin to renew again)", m.target.display());
            continue;
        }
        let result = match read_once(&m, &client, &metrics, s.live(), config).await {
            Ok(bundle) => s.apply(bundle).await.map(|_| ()),
            Err(f) => Err(s.source_failed(f)),
        };
        // Published, but its kubeconfig was not brought to the pair: a
        // failure of the run (exit 1), already logged.
        let result = match (result, s.kubeconfig_failing.take()) {
            (Ok(()), Some(message)) => Err(SyncError::Kubeconfig {
                mapping: m.name.clone(),
                message,
            }),
            (result, _) => result,
        };
        if let Err(e) = result {
            failures.push(e);
        }
    }
    failures
}

/// Logs what `run` is about to do, at info: each mapping's source and
/// target directory, then the version, the reload method, the API server
/// (scheme, host and port only: never credentials) and the admin address.
pub async fn log_plan(config: &Config) {
    for m in &config.mappings {
        let source = match &m.source {
            Source::Dir(dir) => format!("dir {}", dir.display()),
            Source::Kube(object) => object.to_string(),
            Source::TrustBundle(selection) => selection.to_string(),
            Source::Csr(spec) => format!("csr {}", spec.signer),
            Source::Ca(spec) => format!("ca {}", spec.ca_cert.display()),
        };
        tracing::info!(mapping = %m.name, source = %crate::escape(&source), target_dir = %m.target.display(), "mapping");
    }
    let reload = match &config.reload.method {
        Some(reload::Method::Signal { target, signal }) => format!("signal {signal} to {target}"),
        Some(reload::Method::Http(hook)) => format!("http {}", hook.describe()),
        None => "none (the consumer watches its files)".to_owned(),
    };
    let api_server = if needs_client(config) {
        match config.client.config().await {
            Ok(c) => server_origin(&c.cluster_url),
            Err(e) => format!("unknown yet ({e})"),
        }
    } else {
        "none needed".to_owned()
    };
    let admin_addr = config
        .admin_addr
        .map_or_else(|| "none (no --admin-addr)".to_owned(), |a| a.to_string());
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        mappings = config.mappings.len(),
        %reload,
        %api_server,
        %admin_addr,
        "certsync started"
    );
}

/// `scheme://host:port` of a URL: no userinfo, path or query.
fn server_origin(uri: &http::Uri) -> String {
    let scheme = uri.scheme_str().unwrap_or("https");
    let host = uri.host().unwrap_or("");
    match uri.port_u16() {
        Some(port) => format!("{scheme}://{host}:{port}"),
        None => format!("{scheme}://{host}"),
    }
}

/// Waits until the API server answers (`GET /version`; any answer but a
/// 5xx counts: it is up, whatever it thinks of us), retrying with jittered
/// backoff, for at most `within`: an init container may start beside the
/// API server it reads from.
async fn reachable(client: &Client, server: &http::Uri, within: Duration) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + within;
    let mut attempt = 0;
    loop {
        let problem = match client.apiserver_version().await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code < 500 => return Ok(()),
            Err(e) => crate::error_chain(&e),
        };
        attempt += 1;
        let now = tokio::time::Instant::now();
        if now >= deadline {
            let message = format!(
                "the API server {server} did not answer within {}: {problem}",
                humantime::format_duration(within)
            );
            tracing::error!(%server, error = %problem, "API server {server} did not answer within {}; giving up (--once-timeout)", humantime::format_duration(within));
            return Err(message);
        }
        if attempt == 1 {
            tracing::info!(%server, error = %problem, timeout = %humantime::format_duration(within), "waiting for the API server");
        }
        // 200 ms doubling to 3.2 s, plus up to as much again at random.
        let pause = crate::backoff(Duration::from_millis(200), attempt.min(5));
        tokio::time::sleep(pause.min(deadline - now)).await;
    }
}

/// `certsync run`: one source task and one sync task per mapping, until
/// `shutdown` turns true. A write in progress is finished before returning.
pub async fn run(
    mut config: Config,
    metrics: Arc<Metrics>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), SyncError> {
    let watcher = DirWatch::new().map_err(|e| SyncError::Task {
        mapping: "*".into(),
        message: e.to_string(),
    })?;
    let mut tasks = tokio::task::JoinSet::new();
    let wants_reload =
        config.reload.method.is_some() || config.mappings.iter().any(|m| m.verify.is_some());
    let reload = wants_reload.then(ReloadHandle::default);
    if let Some(handle) = &reload {
        tasks.spawn(reload::run(
            config.reload.clone(),
            handle.clone(),
            Arc::clone(&metrics),
            shutdown.clone(),
        ));
    }
    let (clients_tx, clients) = watch::channel(None);
    if needs_client(&config) {
        let settings = config.client.clone();
        tasks.spawn(settings.run_clients(watcher.clone(), clients_tx, shutdown.clone()));
    }
    if config.events
        && config.events_pod.is_none()
        && config
            .mappings
            .iter()
            .any(|m| matches!(m.source, Source::Dir(_)))
    {
        tracing::warn!(
            "--events: dir: mappings have no object to record Events on; set POD_NAME and POD_NAMESPACE (downward API) to record them on this Pod"
        );
    }
    // Each mapping moves into its tasks; the rest of the configuration
    // stays for the sources that read it (a copy of every mapping kept
    // here was ~0.5 KiB per mapping for the process's life).
    for m in std::mem::take(&mut config.mappings) {
        let (mut syncer, claim) = Syncer::open(
            m.clone(),
            config.clock_skew,
            reload.clone(),
            Arc::clone(&metrics),
            true,
        )
        .await?;
        let (tx, rx) = watch::channel(None);
        match &m.source {
            Source::Dir(dir) => {
                if let Some(pod) = config.events_pod.clone() {
                    syncer = syncer.with_events(EventSink::for_pod(clients.clone(), pod));
                }
                tasks.spawn(host_dir(&m, dir).run(
                    watcher.clone(),
                    config.debounce,
                    config.resync,
                    tx,
                    shutdown.clone(),
                ))
            }
            Source::Kube(object) => {
                let source = kube_object(&m, object, &metrics);
                if config.events {
                    let uid = Arc::clone(&source.uid);
                    syncer =
                        syncer.with_events(EventSink::new(clients.clone(), object.clone(), uid));
                }
                tasks.spawn(Box::new(source).run(
                    clients.clone(),
                    config.client.watch_timeout,
                    tx,
                    shutdown.clone(),
                ))
            }
            Source::TrustBundle(selection) => {
                // A selection across the cluster: Events on certsync's Pod.
                if let Some(pod) = config.events_pod.clone() {
                    syncer = syncer.with_events(EventSink::for_pod(clients.clone(), pod));
                }
                tasks.spawn(trust_bundles(&m, selection, &metrics).run(
                    clients.clone(),
                    tx,
                    shutdown.clone(),
                ))
            }
            Source::Csr(spec) => {
                let mut source = csr_source(&m, spec, &metrics, &config);
                if config.events {
                    let sink = EventSink::for_csr(clients.clone(), Arc::clone(&source.current));
                    source.events = Some(sink.clone());
                    syncer = syncer.with_events(sink);
                }
                let (clients, stop) = (clients.clone(), shutdown.clone());
                tasks.spawn(
                    PinHold::new(&m, &metrics, &config, &shutdown).run(move |live| {
                        source
                            .clone()
                            .run(clients.clone(), live, tx.clone(), stop.clone())
                    }),
                )
            }
            Source::Ca(spec) => {
                let mut source = ca_source(&m, spec, &metrics, &config);
                // `Config` refuses --events with a ca: mapping and no Pod.
                if let Some(pod) = config.events_pod.clone() {
                    let sink = EventSink::for_pod(clients.clone(), pod);
                    source.events = Some(sink.clone());
                    syncer = syncer.with_events(sink);
                }
                let stop = shutdown.clone();
                tasks.spawn(
                    PinHold::new(&m, &metrics, &config, &shutdown)
                        .run(move |live| source.clone().run(live, tx.clone(), stop.clone())),
                )
            }
        };
        tasks.spawn(sync_loop(
            Box::new(syncer),
            claim,
            Watched::new(&watcher, &m.target),
            rx,
            config.debounce,
            config.resync,
            shutdown.clone(),
        ));
    }
    // Every task ends on shutdown; one stuck in a hook or an API call is
    // not waited for past the grace period (kubelet kills at 30 s).
    let mut stopping = shutdown.clone();
    let grace = async {
        crate::shutdown::stopped(&mut stopping).await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        () = async { while tasks.join_next().await.is_some() {} } => {}
        () = grace => {
            tracing::warn!(grace = ?SHUTDOWN_GRACE, "tasks still running after shutdown began; exiting anyway");
        }
    }
    Ok(())
}

/// Whether `target` holds a rollback pin (`certsync rollback`).
async fn target_pinned(target: &std::path::Path) -> bool {
    let target = target.to_owned();
    crate::blocking(move || Writer::existing(target).ok().and_then(|w| w.pin()))
        .await
        .ok()
        .flatten()
        .is_some()
}

/// The live pair on disk, if intact.
async fn live_on_disk(target: &std::path::Path) -> Option<Bundle> {
    let target = target.to_owned();
    crate::blocking(move || Writer::existing(target).ok()?.live().ok()?)
        .await
        .ok()
        .flatten()
        .filter(|l| l.problem.is_none())
        .map(|l| l.bundle)
}

/// Runs an issuing source (`ca:`, `csr:`) only while its target holds no
/// rollback pin: each pair it makes is new, so none can stand for "the
/// source changed" (what releases the pin of other sources), and issuing
/// over the pin would undo the operator's rollback at the next start or
/// renewal. While pinned nothing is issued or requested; once the pin is
/// removed the source starts again from the live pair on disk. Checked every
/// `every` (`--resync`); the writer refuses issued pairs over a pin in
/// between.
struct PinHold {
    target: std::path::PathBuf,
    mapping: String,
    metrics: Arc<Metrics>,
    every: Duration,
    shutdown: watch::Receiver<bool>,
}

impl PinHold {
    fn new(
        m: &Mapping,
        metrics: &Arc<Metrics>,
        config: &Config,
        shutdown: &watch::Receiver<bool>,
    ) -> Self {
        Self {
            target: m.target.clone(),
            mapping: m.name.clone(),
            metrics: Arc::clone(metrics),
            every: config.resync,
            shutdown: shutdown.clone(),
        }
    }

    /// Runs the source `start` makes from the live pair, whenever unpinned.
    async fn run<F, Fut>(mut self, start: F)
    where
        F: Fn(Option<Bundle>) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let (target, mapping) = (&self.target, &self.mapping);
        loop {
            let mut said = false;
            while target_pinned(target).await {
                if !said {
                    self.metrics.pinned(mapping, true);
                    tracing::warn!(%mapping, target_dir = %target.display(), "the target is pinned by a rollback; not issuing while the pin holds (remove {}/..pin to renew again)", target.display());
                    said = true;
                }
                tokio::select! {
                    () = crate::shutdown::stopped(&mut self.shutdown) => return,
                    () = tokio::time::sleep(self.every) => {}
                }
            }
            if said {
                self.metrics.pinned(mapping, false);
                tracing::info!(%mapping, "the rollback pin was removed; the mapping issues again");
            }
            let run = start(live_on_disk(target).await);
            tokio::pin!(run);
            loop {
                tokio::select! {
                    () = &mut run => return,
                    () = tokio::time::sleep(self.every) => {
                        if target_pinned(target).await {
                            break;
                        }
                    }
                }
            }
        }
    }
}

/// How long `run` waits for its tasks after shutdown begins.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Sleeps until `deadline`, or forever without one.
async fn until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// The directories a sync task watches for drift, re-armed after every
/// change: a deleted or replaced target (or a new live revision behind
/// `..data`) is a new inode, which the kernel's old watch does not follow.
struct Watched {
    watcher: DirWatch,
    /// What is watched of the target itself and, through `..data`, of the
    /// live revision (a chmod or edit of a live file happens there). The
    /// paths are the syncer's: not kept twice for every mapping.
    armed: [Option<Identity>; 2],
    events: crate::dirwatch::Events,
}

impl Watched {
    /// Subscribed, not yet armed: the sync task arms as it starts.
    fn new(watcher: &DirWatch, target: &std::path::Path) -> Self {
        Self {
            events: watcher.route(&[target, &target.join(DATA)]),
            watcher: watcher.clone(),
            armed: [None; 2],
        }
    }

    /// The target's watch result; `..data` may be missing for a moment (no
    /// flip yet, a deleted target): the next re-arm tries again.
    fn rearm(
        &mut self,
        target: &std::path::Path,
        metrics: &Metrics,
    ) -> Result<(), crate::dirwatch::DirWatchError> {
        let [t, d] = &mut self.armed;
        let watched = self.watcher.rearm(target, t);
        let _ = self.watcher.rearm(&target.join(DATA), d);
        metrics.file_watch_polling(self.watcher.polling());
        watched
    }
}

#[allow(clippy::too_many_arguments)]
async fn sync_loop(
    mut syncer: Box<Syncer>,
    _claim: Option<crate::writer::Claim>,
    mut watched: Watched,
    mut updates: watch::Receiver<Option<Update>>,
    debounce: Duration,
    resync: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = crate::shutdown::resync_interval(resync).await;
    let mut repair_at: Option<tokio::time::Instant> = None;
    if let Err(e) = watched.rearm(&syncer.mapping.target, &syncer.metrics) {
        tracing::warn!(mapping = %syncer.mapping.name, error = %e, "cannot watch the target; drift is caught on resync only");
    }
    // An issuing source keeps a good live pair without publishing it
    // again: the kubeconfig is brought to it now, not at the first resync.
    if syncer.mapping.update_kubeconfig.is_some() {
        Box::pin(syncer.repair()).await;
    }
    loop {
        tokio::select! {
            biased;
            () = crate::shutdown::stopped(&mut shutdown) => return,
            changed = updates.changed() => {
                if changed.is_err() {
                    return; // the source task ended (shutdown)
                }
                let update = match &*updates.borrow_and_update() {
                    Some(Ok(b)) => Ok(b.clone()),
                    Some(Err(e)) => Err(failure(e)),
                    None => continue,
                };
                // The write paths are boxed: a task's allocation is the
                // size of its largest await state, and it lives as long as
                // the mapping. Unboxed, the rare write made every idle task
                // 2.3 KiB; boxed, it costs an allocation per write instead.
                match update {
                    Ok(bundle) => {
                        syncer.source_ok();
                        let _ = Box::pin(syncer.apply(bundle)).await;
                    }
                    Err(f) => { syncer.source_failed(f); }
                }
            }
            // Target changes (our own flips included) are checked once the
            // target has been quiet for `debounce`. The wait is a deadline
            // kept beside the loop, never a wait inside it: new updates must
            // not queue behind a drift check.
            () = watched.events.changed() => {
                repair_at = Some(tokio::time::Instant::now() + debounce);
                continue;
            }
            () = until(repair_at) => {
                repair_at = None;
                Box::pin(syncer.repair()).await;
            }
            _ = tick.tick() => Box::pin(syncer.resync()).await,
        }
        let _ = watched.rearm(&syncer.mapping.target, &syncer.metrics);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::{CERT_FILE, KEY_FILE};
    use crate::cli::{Cli, Command};
    use crate::test_certs as certs;
    use clap::Parser;

    fn mapping(src: &std::path::Path, target: &std::path::Path) -> Mapping {
        let cli = Cli::try_parse_from([
            "certsync",
            "run",
            "--sync",
            &format!("dir:{}={}", src.display(), target.display()),
        ])
        .unwrap();
        let Command::Run(args) = cli.command else {
            panic!("not run")
        };
        Config::from_args(&args).unwrap().mappings.remove(0)
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
        let mut s = Syncer::open(
            m.clone(),
            Duration::from_secs(300),
            None,
            Arc::new(Metrics::new(0.8)),
            false,
        )
        .await
        .unwrap()
        .0;
        let good = certs::Pair::new("good");
        assert!(s.apply(bundle(&good)).await.unwrap());
        let other = certs::Pair::new("other");
        let mut bad = bundle(&good);
        bad.insert(KEY_FILE, other.key.clone(), "t").unwrap();
        let err = s.apply(bad).await.unwrap_err().to_string();
        assert!(err.contains("does not match"), "{err}");
        assert_eq!(
            std::fs::read(d.path().join("t/tls.crt")).unwrap(),
            good.cert
        );
        assert_eq!(std::fs::read(d.path().join("t/tls.key")).unwrap(), good.key);

        // A fresh syncer adopts what is on disk and repairs drift with it.
        std::fs::remove_file(d.path().join("t/tls.key")).unwrap();
        let mut again = Syncer::open(
            m,
            Duration::from_secs(300),
            None,
            Arc::new(Metrics::new(0.8)),
            false,
        )
        .await
        .unwrap()
        .0;
        again.repair().await;
        assert_eq!(std::fs::read(d.path().join("t/tls.key")).unwrap(), good.key);
    }
}
