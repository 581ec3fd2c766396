//! Telling the main container to use the new pair, and checking it does.
//!
//! One reloader serves every mapping of the process: the serving certificate,
//! client certificate and CA bundle of one main container usually rotate
//! together, and a burst of flips must become one reload. Sync tasks only
//! [`ReloadHandle::request`]; the reloader waits for a short quiet window
//! (bounded by a maximum delay), reloads once, then verifies each mapping
//! that names a TLS address, re-reloading a bounded number of times before
//! reporting loudly that the old certificate is still served.
//!
//! With no reload method configured (Kubernetes components, which reload on
//! the inotify event every flip produces), only verification runs.

pub mod error;
pub mod http;
pub mod pid;
pub mod verify;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tokio::sync::watch;

pub use self::error::ReloadError;
use self::http::HttpHook;
use self::pid::Target;
use self::verify::ServingCheck;
use crate::dirwatch::Events;
use crate::events::EventSink;
use crate::metrics::Metrics;

/// How the main container is told.
#[derive(Debug, Clone)]
pub enum Method {
    Signal { target: Target, signal: Signal },
    Http(Box<HttpHook>),
}

impl Method {
    fn name(&self) -> &'static str {
        match self {
            Self::Signal { .. } => "signal",
            Self::Http(_) => "http",
        }
    }
}

/// Reloader settings.
#[derive(Debug, Clone)]
pub struct ReloadConfig {
    pub method: Option<Method>,
    /// Flips closer together than this become one reload.
    pub quiet: Duration,
    /// A reload is never deferred longer than this after the first flip.
    pub max_delay: Duration,
    /// Signal mode: how long to keep looking for the process (it may still
    /// be starting); retried every 250 ms, doubling up to 2 s.
    pub find_timeout: Duration,
    /// How long a verification waits for the new certificate to be served.
    pub verify_timeout: Duration,
    /// Reloads repeated after a failed verification before giving up.
    pub verify_retries: u32,
}

/// What a mapping asks for after a flip: a reload, and optionally proof;
/// where its Events go, if anywhere (a refused reload is recorded there).
#[derive(Debug, Clone)]
struct Request {
    verify: Option<(ServingCheck, [u8; 32])>,
    events: Option<EventSink>,
}

/// Given to sync tasks. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct ReloadHandle {
    pending: Arc<Mutex<BTreeMap<String, Request>>>,
    wake: Events,
}

impl ReloadHandle {
    /// Asks for a reload for `mapping` (the newest request per mapping wins),
    /// to be verified against `fingerprint` at `check` if given; a refused
    /// reload becomes a Warning Event in `events`.
    pub fn request(
        &self,
        mapping: &str,
        verify: Option<(ServingCheck, [u8; 32])>,
        events: Option<EventSink>,
    ) {
        crate::lock(&self.pending).insert(mapping.to_owned(), Request { verify, events });
        self.wake.wake();
    }
}

/// Runs the reloader until shutdown.
pub async fn run(
    config: ReloadConfig,
    handle: ReloadHandle,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    if let Some(method) = &config.method {
        metrics.add_reload_method(method.name());
    }
    loop {
        tokio::select! {
            () = crate::shutdown::stopped(&mut shutdown) => return,
            () = handle.wake.changed() => {}
        }
        let batch = gather(&handle, config.quiet, config.max_delay).await;
        if batch.is_empty() {
            continue;
        }
        // A hook that hangs (or retries for long) must not delay shutdown.
        tokio::select! {
            () = crate::shutdown::stopped(&mut shutdown) => {
                tracing::info!("shutting down: abandoning the reload in progress");
                return;
            }
            () = reload_and_verify(&config, &metrics, batch) => {}
        }
    }
}

/// After a first request: waits until no request came for `quiet`, or
/// `max_delay` passed ([`crate::dirwatch::quiet`]), and takes everything
/// requested so far.
async fn gather(
    handle: &ReloadHandle,
    quiet: Duration,
    max_delay: Duration,
) -> BTreeMap<String, Request> {
    crate::dirwatch::quiet(&handle.wake, quiet, max_delay).await;
    std::mem::take(&mut *crate::lock(&handle.pending))
}

async fn reload_and_verify(
    config: &ReloadConfig,
    metrics: &Metrics,
    mut batch: BTreeMap<String, Request>,
) {
    for round in 0..=config.verify_retries {
        if let Some(method) = &config.method
            && reload(config, metrics, method, &batch).await.is_err()
        {
            return; // logged; the next flip tries again
        }
        let mut failed = BTreeMap::new();
        for (mapping, req) in &batch {
            let Some((check, fingerprint)) = &req.verify else {
                continue;
            };
            match check.wait_for(*fingerprint, config.verify_timeout).await {
                Ok(latency) => {
                    tracing::info!(mapping, addr = %check.addr, fingerprint = %verify::short(fingerprint), latency_ms = latency.as_millis() as u64, result = "served", "verified the new certificate is served")
                }
                Err(e) => {
                    tracing::warn!(mapping, addr = %check.addr, round = round + 1, result = "stale", error = %e, "new certificate not served yet");
                    failed.insert(mapping.clone(), req.clone());
                }
            }
        }
        if failed.is_empty() {
            return;
        }
        if round == config.verify_retries || config.method.is_none() {
            for (mapping, req) in &failed {
                let addr = req.verify.as_ref().map_or("", |(c, _)| c.addr.as_str());
                tracing::error!(
                    mapping,
                    addr,
                    reloads = round + 1,
                    result = "failed",
                    "the main container still serves the old certificate; it did not reload"
                );
            }
            return;
        }
        batch = failed;
    }
}

/// One reload, with a bounded search for the process in signal mode.
async fn reload(
    config: &ReloadConfig,
    metrics: &Metrics,
    method: &Method,
    batch: &BTreeMap<String, Request>,
) -> Result<(), ()> {
    let started = Instant::now();
    let mappings = batch
        .keys()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(",");
    let result: Result<String, ReloadError> = match method {
        Method::Signal { target, signal } => {
            let mut attempt = 1;
            let mut pause = Duration::from_millis(250);
            loop {
                let (t, s) = (target.clone(), *signal);
                let r = crate::blocking(move || pid::signal(&t, s)).await;
                match r {
                    Ok(Ok(pids)) => break Ok(format!("sent {signal} to pid {pids:?}")),
                    Ok(Err(ReloadError::NoMatch { what }))
                        if started.elapsed() + pause <= config.find_timeout =>
                    {
                        tracing::debug!(mappings, attempt, %what, "no process to signal yet; retrying");
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_secs(2));
                        attempt += 1;
                    }
                    Ok(Err(e @ ReloadError::Refused { reason, .. })) => {
                        // Not the consumer: said once here, counted, and
                        // recorded on every mapping that asked.
                        metrics.reload_refused(reason);
                        for events in batch.values().filter_map(|r| r.events.as_ref()) {
                            events.send(crate::events::RELOAD_REFUSED, e.to_string());
                        }
                        break Err(e);
                    }
                    Ok(Err(e)) => break Err(e),
                    Err(e) => break Err(ReloadError::Task(e)),
                }
            }
        }
        Method::Http(hook) => hook.call().await,
    };
    let latency_ms = started.elapsed().as_millis() as u64;
    metrics.reload(
        method.name(),
        result.is_ok(),
        started.elapsed().as_secs_f64(),
    );
    match result {
        Ok(detail) => {
            tracing::info!(mappings, method = method.name(), result = "ok", latency_ms, %detail, "reloaded");
            Ok(())
        }
        Err(error) => {
            tracing::error!(mappings, method = method.name(), result = "failed", latency_ms, %error, "reload failed; the next change will try again");
            Err(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn flips_close_together_become_one_batch() {
        let handle = ReloadHandle::default();
        let start = tokio::time::Instant::now();
        for m in ["serving", "client", "ca"] {
            handle.request(m, None, None);
        }
        handle.wake.changed().await;
        let batch = gather(&handle, Duration::from_millis(200), Duration::from_secs(2)).await;
        assert_eq!(
            batch.keys().collect::<Vec<_>>(),
            ["ca", "client", "serving"]
        );
        assert_eq!(
            start.elapsed(),
            Duration::from_millis(200),
            "one quiet window"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn max_delay_bounds_a_continuous_stream() {
        let handle = ReloadHandle::default();
        let h = handle.clone();
        let feeder = tokio::spawn(async move {
            for i in 0..40 {
                h.request(&format!("m{}", i % 3), None, None);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        handle.wake.changed().await;
        let start = tokio::time::Instant::now();
        let batch = gather(&handle, Duration::from_millis(200), Duration::from_secs(1)).await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        assert_eq!(batch.len(), 3);
        feeder.abort();
    }
}
