//! `certsync run`: the reload task, the API clients, and a source task and
//! a sync task per mapping until shutdown; the plan logged as it starts.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::error::{LOG, SyncError};
use super::sources::{Running, describe, needs_client};
use super::syncer::Syncer;
use super::task::{Watched, sync_loop};
use crate::config::{Config, EventsOn};
use crate::dirwatch::DirWatch;
use crate::metrics::Metrics;
use crate::reload::{self, ReloadHandle};

/// `certsync run`: one source task and one sync task per mapping, until
/// `shutdown` turns true. A write in progress is finished before returning.
pub async fn run(
    mut config: Config,
    metrics: Arc<Metrics>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), SyncError> {
    let watcher = DirWatch::new().map_err(SyncError::Watcher)?;
    // Every mapping is waited for by /readyz from the start, before any
    // of them has opened its target.
    for m in &config.mappings {
        metrics.add_readiness(&m.name);
    }
    metrics.started();
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
    warn_events_unrecorded(&config);
    let mappings = std::mem::take(&mut config.mappings);
    let running = Running {
        config: &config,
        metrics: &metrics,
        watcher: &watcher,
        clients: &clients,
        shutdown: &shutdown,
    };
    // Each mapping moves into its tasks; the rest of the configuration
    // stays for the sources that read it (a copy of every mapping kept
    // here was ~0.5 KiB per mapping for the process's life).
    for m in mappings {
        let (syncer, claim) = Syncer::open(
            m.clone(),
            config.run.clock_skew,
            reload.clone(),
            Arc::clone(&metrics),
        )
        .await?;
        let (tx, rx) = watch::channel(None);
        let (syncer, source) = running.start(&m, syncer, tx);
        tasks.spawn(source);
        tasks.spawn(sync_loop(
            Box::new(syncer),
            claim,
            Watched::new(&watcher, &m.target),
            rx,
            config.run.debounce,
            config.run.resync,
            shutdown.clone(),
        ));
    }
    join(tasks, shutdown).await;
    Ok(())
}

/// Warns when `--events` is on and a mapping's Events belong on this Pod,
/// which is not known.
fn warn_events_unrecorded(config: &Config) {
    if config.run.events
        && config.events_pod.is_none()
        && config
            .mappings
            .iter()
            .any(|m| m.source.events_on() == EventsOn::Pod)
    {
        tracing::warn!(
            target: LOG,
            "--events: dir: mappings have no object to record Events on (nor have clustertrustbundle: mappings); set POD_NAME and POD_NAMESPACE (downward API) to record them on this Pod"
        );
    }
}

/// Waits for `tasks`. Every task ends on shutdown; one stuck in a hook or
/// an API call is not waited for past the grace period (kubelet kills at
/// 30 s).
async fn join<T: 'static>(mut tasks: tokio::task::JoinSet<T>, mut stopping: watch::Receiver<bool>) {
    let grace = async {
        crate::shutdown::stopped(&mut stopping).await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    tokio::select! {
        () = async { while tasks.join_next().await.is_some() {} } => {}
        () = grace => {
            tracing::warn!(target: LOG, grace = ?SHUTDOWN_GRACE, "tasks still running after shutdown began; exiting anyway");
        }
    }
}

/// How long `run` waits for its tasks after shutdown begins.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Logs what `run` is about to do, at info: each mapping's source and
/// target directory, then the version, the reload method, the API server
/// (scheme, host and port only: never credentials) and the admin address.
pub async fn log_plan(config: &Config) {
    for m in &config.mappings {
        let source = describe(&m.source);
        tracing::info!(target: LOG, mapping = %m.name, source = %crate::escape(&source), target_dir = %m.target.display(), "mapping");
    }
    let reload = match &config.reload.method {
        Some(reload::Method::Signal { target, signal }) => format!("signal {signal} to {target}"),
        Some(reload::Method::Http(hook)) => format!("http {}", hook.describe()),
        None => "none (the consumer watches its files)".to_owned(),
    };
    let api_server = if needs_client(config) {
        match config.client.load().await {
            Ok(l) => server_origin(&l.config.cluster_url),
            Err(e) => format!("unknown yet ({e})"),
        }
    } else {
        "none needed".to_owned()
    };
    let admin_addr = config
        .run
        .admin_addr
        .map_or_else(|| "none (no --admin-addr)".to_owned(), |a| a.to_string());
    tracing::info!(
        target: LOG,
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
