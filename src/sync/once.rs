//! `certsync run --once`: every mapping's source read once (after the API
//! server answers, within `--once-timeout`), validated and published.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;

use super::error::{LOG, SyncError};
use super::pin::{target_pinned, warn_pinned};
use super::sources::{needs_process_client, read_once};
use super::syncer::Syncer;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::source::SourceError;

/// `certsync run --once`: every mapping read, validated and published once.
/// Returns the failures.
pub async fn once(config: &Config) -> Vec<SyncError> {
    let mut failures = Vec::new();
    let metrics = Arc::new(Metrics::new(config.run.stale_fraction));
    let client = if config
        .mappings
        .iter()
        .any(|m| needs_process_client(&m.source))
    {
        let made = config.client.load().await.map(|l| l.config);
        match made.and_then(|c| Ok((config.client.client_for(&c)?, c))) {
            Ok((client, c)) => reachable(&client, &c.cluster_url, config.run.once_timeout)
                .await
                .map(|()| client),
            Err(e) => Err(Arc::new(SourceError::Client(Arc::new(e)))),
        }
    } else {
        Err(Arc::new(SourceError::NoClient))
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
        m.writer.lock_timeout = Some(config.run.once_timeout);
        let mut s = match Syncer::open(m.clone(), config.run.clock_skew, None, Arc::clone(&metrics))
            .await
        {
            Ok((s, claim)) => {
                claims.push(claim);
                s
            }
            Err(e) => {
                tracing::error!(target: LOG, mapping = %m.name, error = %e, "cannot open the target");
                failures.push(e);
                continue;
            }
        };
        if m.writer.issuing && target_pinned(&m.target).await {
            warn_pinned(&m.name, &m.target);
            continue;
        }
        let result = match read_once(&m, &client, &metrics, s.last_good.clone(), config).await {
            Ok(bundle) => s.apply(bundle).await.map(|_| ()),
            Err(f) => Err(s.source_failed(f)),
        };
        // Published, but its kubeconfig was not brought to the pair: a
        // failure of the run (exit 1), already logged.
        let result = match (result, s.copy_failing.take()) {
            (Ok(()), Some((copy, source))) => Err(SyncError::Copy { copy, source }),
            (result, _) => result,
        };
        if let Err(e) = result {
            failures.push(e);
        }
    }
    failures
}

/// Waits until the API server answers (`GET /version`; any answer but a
/// 5xx counts: it is up, whatever it thinks of us), retrying with jittered
/// backoff, for at most `within`: an init container may start beside the
/// API server it reads from.
async fn reachable(
    client: &Client,
    server: &http::Uri,
    within: Duration,
) -> Result<(), Arc<SourceError>> {
    let deadline = tokio::time::Instant::now() + within;
    let mut attempt = 0;
    loop {
        let source = match client.apiserver_version().await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(s)) if s.code < 500 => return Ok(()),
            Err(e) => e,
        };
        let problem = crate::error_chain(&source);
        attempt += 1;
        let now = tokio::time::Instant::now();
        if now >= deadline {
            tracing::error!(target: LOG, %server, error = %problem, "API server {server} did not answer within {}; giving up (--once-timeout)", humantime::format_duration(within));
            return Err(Arc::new(SourceError::Unanswered {
                server: server.to_string(),
                within,
                source,
            }));
        }
        if attempt == 1 {
            tracing::info!(target: LOG, %server, error = %problem, timeout = %humantime::format_duration(within), "waiting for the API server");
        }
        // 200 ms doubling to 3.2 s, plus up to as much again at random.
        let pause = crate::backoff(Duration::from_millis(200), attempt.min(5));
        tokio::time::sleep(pause.min(deadline - now)).await;
    }
}
