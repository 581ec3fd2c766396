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
