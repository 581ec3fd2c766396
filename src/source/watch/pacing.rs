//! How the loops are paced ([`Pacing`]), and what one process's loops
//! share as one flow: the [`Gate`] and the [`Recovery`] news.

use std::time::Duration;

/// The wait before retrying after `failures` failures in a row: from 0.8 s
/// (client-go's and kube-runtime's start), doubling, jittered so that many
/// sidecars restarted together do not retry in lockstep, at most 30 s.
pub fn retry_delay(failures: u32) -> Duration {
    crate::backoff(Duration::from_millis(800), failures).min(Duration::from_secs(30))
}

/// Requests (list pages, watches until their headers: APF holds a seat
/// until a WATCH is set up) one process has in flight at most. One
/// identity is one APF flow (6 queues of 50, then 429) in 49 or 245 seats:
/// 32 lets nine processes of one ServiceAccount start together, and sends
/// a thousand mappings' 2,000 requests in about 63 rounds.
pub const IN_FLIGHT: usize = 32;

/// How long after a watch's own timeout the server has to end it before it
/// is taken for stalled (the "plus 5 s" of `--watch-timeout`).
pub(super) const WATCH_MARGIN: Duration = Duration::from_secs(5);

/// `timeoutSeconds` for a watch meant to last `timeout`: 1 s to an hour.
pub fn watch_seconds(timeout: Duration) -> u32 {
    u32::try_from(timeout.as_secs())
        .unwrap_or(u32::MAX)
        .clamp(1, 3600)
}

/// How long a request holding a [`Gate`] permit waits for its answer:
/// kube-apiserver's `--request-timeout` (1 minute) and [`WATCH_MARGIN`];
/// then the permit goes on and the loop backs off.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(60).saturating_add(WATCH_MARGIN);

/// The permits of [`IN_FLIGHT`], shared by the loops of one process. The
/// semaphore is fair: waiting loops are served in order, none starves.
#[derive(Clone)]
pub struct Gate(std::sync::Arc<tokio::sync::Semaphore>);

impl Gate {
    pub fn new(permits: usize) -> Self {
        Self(std::sync::Arc::new(tokio::sync::Semaphore::new(
            permits.max(1),
        )))
    }

    pub fn process() -> Self {
        static PROCESS: std::sync::LazyLock<Gate> =
            std::sync::LazyLock::new(|| Gate::new(IN_FLIGHT));
        PROCESS.clone()
    }

    /// A permit, once one is free (`None` never: it is never closed).
    pub(super) async fn enter(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.0.acquire().await.ok()
    }
}

/// News, shared by a process's loops, that the server answers again.
#[derive(Clone, Default)]
pub struct Recovery(std::sync::Arc<tokio::sync::watch::Sender<u64>>);

impl Recovery {
    pub fn process() -> Self {
        static PROCESS: std::sync::LazyLock<Recovery> = std::sync::LazyLock::new(Recovery::default);
        PROCESS.clone()
    }

    pub(super) fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.0.subscribe()
    }

    pub(super) fn answered(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }
}

/// How failures are paced; the default is client-go's.
#[derive(Debug, Clone, Copy)]
pub struct Pacing {
    /// The wait after `n` failures in a row (`n` ≥ 1).
    pub backoff: fn(u32) -> Duration,
    /// A watch that ends sooner than this without a single event is a
    /// failure (client-go: one second).
    pub short: Duration,
    /// Requests (list pages and watches) a second, on average, at most
    /// (client-go's client default: 5).
    pub qps: f64,
    /// Requests made at once, at most, before `qps` applies (client-go: 10).
    pub burst: f64,
}

impl Default for Pacing {
    fn default() -> Self {
        Self {
            backoff: retry_delay,
            short: Duration::from_secs(1),
            qps: 5.0,
            burst: 10.0,
        }
    }
}
