//! The one wait of adopt and revert: a check repeated at a fixed pace until
//! it answers `Ok`, or until its deadline, when its last answer is what was
//! seen.

use std::time::{Duration, Instant};

/// Calls `check` (given the time since the first call) every `every`
/// until it answers `Ok`; once `limit` has passed, its last `Err`.
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
