//! When to request the next certificate: at the renewal deadline
//! (kubelet's rule). A certificate already past it on arrival (a signer's
//! clock behind, a CA clipping notAfter) would loop as fast as the signer
//! answers, so it waits a [`floor`] after issuance, doubled each time in a
//! row (jittered, up to an hour or the floor). A deadline still ahead is
//! kept: the floor never carries a valid schedule past expiry. Pure.

use std::time::{Duration, SystemTime};

use super::spec::Window;
use crate::validate;

/// Repeated hold-backs double the wait up to this (or the floor, if longer).
const HELD_CAP: Duration = Duration::from_secs(3600);

/// The lifetime's share of the floor is at most this: a signer that
/// backdates notBefore (by years) would otherwise hold renewal back for a
/// tenth of that, long past notAfter.
const LIFE_FLOOR_CAP: Duration = Duration::from_secs(86_400);

#[derive(Debug, Clone, PartialEq)]
pub struct Next {
    pub at: SystemTime,
    /// Set when the floor held the renewal back: a warning, for the log.
    pub held: Option<String>,
}

/// When to renew the certificate `w`, issued (or adopted) at `since`;
/// `held_before`: schedules in a row the floor held back; `draw` and
/// `jitter` in [0, 1).
pub fn next(
    w: Window,
    renew: (f64, f64),
    draw: f64,
    since: SystemTime,
    floor: Duration,
    held_before: u32,
    jitter: f64,
) -> Next {
    let deadline = w.deadline(renew, draw);
    let floor = self::floor(w, floor);
    if deadline > since {
        return Next {
            at: deadline,
            held: None,
        };
    }
    let cap = HELD_CAP.max(floor);
    let base = floor.saturating_mul(1 << held_before.min(16)).min(cap);
    let at = since + base + base.mul_f64(jitter.clamp(0.0, 1.0) / 4.0);
    let held = format!(
        "the issued certificate's renewal point {} is already past (notBefore {}, notAfter {}); \
         renewing no sooner than {} after it was issued, at {}, and keeping it while it is valid; \
         check the signer's clock, its CA's expiry and the lifetime it issues",
        validate::rfc3339(validate::unix_seconds(deadline)),
        validate::rfc3339(w.not_before),
        validate::rfc3339(w.not_after),
        humantime::format_duration(Duration::from_secs(base.as_secs())),
        validate::rfc3339(validate::unix_seconds(at)),
    );
    Next {
        at,
        held: Some(held),
    }
}

/// The least time between two issuances for a certificate `w`:
/// `--csr-renew-floor` or a tenth of the lifetime up to a day, if longer.
pub fn floor(w: Window, floor: Duration) -> Duration {
    let life = Duration::from_secs(u64::try_from(w.not_after - w.not_before).unwrap_or(0));
    floor.max((life / 10).min(LIFE_FLOOR_CAP))
}

/// When to ask again after a new certificate (ending `issued_not_after`)
/// was refused because the live one outlasts it: when one of the same
/// lifetime would outlast the live one, never after the live end (the
/// floor's schedule would carry the live pair past it), and at least
/// `MIN_RETRY` apart (a CA cutting every certificate short drives no loop).
pub fn outlasting(now: i64, issued_not_after: i64, live_not_after: i64) -> SystemTime {
    let lifetime = issued_not_after.saturating_sub(now);
    let at = live_not_after
        .saturating_sub(lifetime)
        .saturating_add(1)
        .max(now.saturating_add(MIN_RETRY))
        .min(live_not_after);
    SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(at).unwrap_or(0))
}

const MIN_RETRY: i64 = 10;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_shorter_certificate_is_asked_again_when_one_would_outlast_the_live() {
        // Live until 1,000; a 180 s certificate issued at 400 (ends 580)
        // was refused: one issued at 821 ends at 1,001.
        assert_eq!(outlasting(400, 580, 1_000), at(821));
        // Never sooner than 10 s, never after the live end.
        assert_eq!(outlasting(400, 998, 1_000), at(410));
        assert_eq!(outlasting(995, 998, 1_000), at(1_000));
    }

    const MIN: Duration = Duration::from_secs(60);

    fn at(secs: i64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs as u64)
    }

    #[test]
    fn a_certificate_with_its_renewal_point_ahead_renews_there() {
        // A day-long certificate issued now: 70 % of it is well past the floor.
        let w = Window {
            not_before: 100_000,
            not_after: 100_000 + 86_400,
        };
        let n = next(w, (0.7, 0.9), 0.0, at(100_000), 5 * MIN, 0, 0.5);
        assert_eq!(n.at, at(100_000 + 60_480));
        assert!(n.held.is_none());
    }

    #[test]
    fn a_certificate_already_due_waits_for_the_floor_then_backs_off() {
        // Issued (notBefore) ten hours before it reached us, valid 10 more
        // minutes: the deadline is long past.
        let now = 1_000_000;
        let w = Window {
            not_before: now - 36_000,
            not_after: now + 600,
        };
        let floor = 10 * MIN;
        let life_tenth = Duration::from_secs(3_660);
        let n = next(w, (0.7, 0.9), 0.5, at(now), floor, 0, 0.0);
        assert_eq!(
            n.at,
            at(now) + life_tenth,
            "10 % of the lifetime is the larger floor"
        );
        let why = n.held.unwrap();
        assert!(why.contains("is already past"), "{why}");
        assert!(why.contains("notAfter 1970-01-12T13:56:40Z"), "{why}");
        // A tenth of this lifetime (61 min) is above the one-hour cap:
        // repeats stay there.
        let n = next(w, (0.7, 0.9), 0.5, at(now), floor, 5, 0.0);
        assert_eq!(n.at, at(now) + life_tenth);

        // Short certificates already due (renewal point 2 s ago): the
        // configured floor, doubled on repeats with jitter of at most a
        // quarter, up to an hour.
        let short = Window {
            not_before: now - 30,
            not_after: now + 5,
        };
        let mut bases = Vec::new();
        for held in 0..6 {
            for jitter in [0.0, 0.99] {
                let wait = next(short, (0.7, 0.9), 0.5, at(now), floor, held, jitter)
                    .at
                    .duration_since(at(now))
                    .unwrap();
                let base = (floor * (1 << held)).min(HELD_CAP);
                assert!(wait >= base && wait <= base + base / 4, "{held}: {wait:?}");
                if jitter == 0.0 {
                    bases.push(wait.as_secs() / 60);
                }
            }
        }
        assert_eq!(bases, [10, 20, 40, 60, 60, 60]);
    }

    /// Attack: a signer backdates notBefore (by ten years, or to the epoch
    /// as a buggy one does) on a certificate valid for 30 more days. Its
    /// renewal point is long past, so the floor holds it back, and 10 % of
    /// that "lifetime" is a year: renewal was scheduled eleven months after
    /// the certificate expired, and the mapping stayed expired until then.
    #[test]
    fn attack_a_backdated_certificate_is_renewed_before_it_expires() {
        const DAY: i64 = 86_400;
        let now = 2_000_000_000;
        for not_before in [now - 3_650 * DAY, 0] {
            let w = Window {
                not_before,
                not_after: now + 30 * DAY,
            };
            for held in [0, 3] {
                let n = next(w, (0.7, 0.9), 0.5, at(now), 5 * MIN, held, 0.99);
                assert!(
                    n.at < at(w.not_after),
                    "notBefore {not_before}: renewal at {:?}, {} days after notAfter",
                    n.at,
                    (validate::unix_seconds(n.at) - w.not_after) / DAY
                );
            }
        }
    }

    /// A floor exists to stop a loop on already-due certificates; it must
    /// never push a valid schedule past expiry. A 3-minute certificate
    /// (`--cluster-signing-duration=3m`, `lifetime=3m`) under the default
    /// 5-minute floor was renewed two minutes after it expired.
    #[test]
    fn a_deadline_ahead_is_kept_whatever_the_floor() {
        let w = Window {
            not_before: 1_000,
            not_after: 1_180,
        };
        for (renew, want) in [((0.7, 0.9), 1_144), ((0.1, 0.2), 1_027)] {
            let n = next(w, renew, 0.5, at(1_000), 5 * MIN, 0, 0.0);
            assert_eq!(n.at, at(want), "{renew:?}");
            assert!(n.held.is_none());
            assert!(n.at < at(w.not_after));
        }
        // Issued late but not yet due: still its own deadline.
        let n = next(w, (0.7, 0.9), 0.5, at(1_100), 5 * MIN, 2, 0.0);
        assert_eq!(n.at, at(1_144));
    }
}
