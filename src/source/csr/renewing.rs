//! What `csr:` and `ca:` keep between issuances, and the steps both take,
//! so they cannot drift apart on retries or held-back renewals.

use std::time::{Duration, SystemTime};

use super::renewal;
use super::spec::Window;
use crate::metrics::Metrics;
use crate::validate;

pub(crate) const RETRY_CAP: Duration = Duration::from_secs(300);

pub struct Renewing<'a> {
    mapping: &'a str,
    metrics: &'a Metrics,
    /// The renewal point's shares, and `--csr-renew-floor`.
    renew: ((f64, f64), Duration),
    /// When to issue next, once scheduled (or the retry of a certificate
    /// refused for ending before the live one).
    pub deadline: Option<SystemTime>,
    /// The live certificate's window; `None`: none fits, issue at once.
    pub current: Option<Window>,
    /// When this process was last issued one; `None` while the live one
    /// is adopted (its notBefore counts: a restart loop is no faster).
    pub issued_at: Option<SystemTime>,
    /// Schedules in a row the renewal floor held back.
    held: u32,
    /// Failures in a row (the attempt).
    pub failures: u32,
    /// The last failure logged at error level: each distinct one once.
    last_error: Option<String>,
}

impl<'a> Renewing<'a> {
    pub fn new(
        mapping: &'a str,
        metrics: &'a Metrics,
        renew: ((f64, f64), Duration),
        current: Option<Window>,
    ) -> Self {
        Self {
            mapping,
            metrics,
            renew,
            deadline: None,
            current,
            issued_at: None,
            held: 0,
            failures: 0,
            last_error: None,
        }
    }

    /// How long to wait before the next attempt: the backoff after a
    /// failure, else until the deadline (scheduled once per certificate),
    /// none when no certificate fits.
    pub fn wait(&mut self) -> Duration {
        if self.failures > 0 {
            return crate::backoff(Duration::from_secs(2), self.failures).min(RETRY_CAP);
        }
        if self.deadline.is_none() {
            self.deadline = self.schedule();
        }
        self.deadline.map_or(Duration::ZERO, |at| {
            at.duration_since(SystemTime::now()).unwrap_or_default()
        })
    }

    /// When to renew ([`renewal::next`]), logged; `None`: issue at once.
    fn schedule(&mut self) -> Option<SystemTime> {
        let ((renew, floor), w) = (self.renew, self.current?);
        let since = self.issued_at.unwrap_or_else(|| {
            SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(w.not_before).unwrap_or(0))
        });
        let next = renewal::next(
            w,
            renew,
            crate::random_fraction(),
            since,
            floor,
            self.held,
            crate::random_fraction(),
        );
        let renew_at = validate::rfc3339(validate::unix_seconds(next.at));
        match next.held {
            Some(why) => {
                self.held = self.held.saturating_add(1);
                self.metrics.csr_error(self.mapping, "renewal_floor");
                tracing::warn!(mapping = %self.mapping, %renew_at, "renewal held back: {why}");
            }
            None => {
                self.held = 0;
                tracing::info!(mapping = %self.mapping, %renew_at, "certificate is current; renewal scheduled");
            }
        }
        Some(next.at)
    }

    /// A certificate issued with `window`: `true` when it replaces the
    /// live one; `false` (logged) when the live one, still valid, outlasts
    /// it: the next is asked for once one would outlast it.
    pub fn issued(&mut self, window: Window) -> bool {
        self.failures = 0;
        self.deadline = None;
        self.last_error = None;
        self.metrics.renewal_failing(self.mapping, None);
        self.issued_at = Some(SystemTime::now());
        let now = validate::unix_seconds(SystemTime::now());
        match self.current {
            Some(live) if live.not_after > now && live.not_after > window.not_after => {
                let retry = *self.deadline.insert(renewal::outlasting(
                    now,
                    window.not_after,
                    live.not_after,
                ));
                let not_after = validate::rfc3339(window.not_after);
                let live_not_after = validate::rfc3339(live.not_after);
                let retry_at = validate::rfc3339(validate::unix_seconds(retry));
                tracing::warn!(mapping = %self.mapping, %not_after, %live_not_after, %retry_at, "the issued certificate expires before the live one; keeping the live pair, issuing again when one would outlast it");
                false
            }
            prev => {
                if let Some(prev) = prev {
                    let lived = now - prev.not_before;
                    self.metrics.csr_rotated(self.mapping, lived.max(0) as f64);
                }
                self.current = Some(window);
                true
            }
        }
    }

    /// A failure counted and logged: at error level when it differs from
    /// the last (`true`: report it too), else at debug.
    pub fn failed(&mut self, reason: &'static str, e: &dyn std::fmt::Display) -> bool {
        self.failures = self.failures.saturating_add(1);
        self.metrics.csr_error(self.mapping, reason);
        let (message, attempt) = (e.to_string(), self.failures);
        (self.metrics).renewal_failing(self.mapping, Some(message.clone()));
        if self.last_error.as_deref() == Some(&message) {
            tracing::debug!(mapping = %self.mapping, error = %message, attempt, "issuing a certificate still fails");
            return false;
        }
        tracing::error!(mapping = %self.mapping, error = %message, attempt, "issuing a certificate failed; the live files stay; retrying with backoff");
        self.last_error = Some(message);
        true
    }
}
