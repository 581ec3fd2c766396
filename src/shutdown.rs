//! The shutdown signal and the timers every task shares (a leaf: it
//! imports nothing of certsync's).

use std::time::Duration;

use tokio::sync::watch;

/// Resolves once shutdown has begun (the guard `wait_for` returns is not
/// `Send`, so it is dropped here rather than held in a `select!`).
pub async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// A resync timer whose first tick is `period` from now, and which does not
/// fire in a burst to catch up after a slow write.
pub async fn resync_interval(period: Duration) -> tokio::time::Interval {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await; // the first tick is immediate
    tick
}

/// Resolves on the first SIGTERM or SIGINT; `Err` when they cannot be
/// listened for.
pub async fn signalled() -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
