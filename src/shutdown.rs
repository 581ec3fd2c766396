//! The shutdown signal and the timers every task shares (a leaf: it
//! imports nothing of certsync's).

use std::time::{Duration, Instant};

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

/// `check` (given the time since the first call) every `every` until `Ok`;
/// once `limit` has passed, its last `Err`.
pub async fn poll<T, E>(
    limit: Duration,
    every: Duration,
    mut check: impl AsyncFnMut(Duration) -> Result<T, E>,
) -> Result<T, E> {
    let start = Instant::now();
    loop {
        match check(start.elapsed()).await {
            Ok(t) => return Ok(t),
            Err(e) if start.elapsed() >= limit => return Err(e),
            Err(_) => tokio::time::sleep(every).await,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn poll_answers_the_first_ok_or_the_last_err_once_past_its_deadline() {
        let mut calls = 0;
        let got: Result<u32, u32> = poll(Duration::from_secs(60), Duration::ZERO, async |_| {
            calls += 1;
            if calls == 3 { Ok(calls) } else { Err(calls) }
        })
        .await;
        assert_eq!(got, Ok(3));
        let mut calls = 0;
        let got: Result<(), u32> = poll(
            Duration::from_millis(30),
            Duration::from_millis(5),
            async |_| {
                calls += 1;
                Err(calls)
            },
        )
        .await;
        assert_eq!(got, Err(calls), "the last answer");
        assert!(calls > 1, "asked again before its deadline");
    }
}
