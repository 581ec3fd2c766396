//! Whether the live certificate was issued with the `lifetime=` asked for
//! now (a pair kept from a shorter one left kubeconfigs with expired client
//! certificates between client-go's polls). Issued at `t`: notAfter =
//! min(t + lifetime, CA's), notBefore = max(t - min(5 min, lifetime / 10),
//! CA's); so `t = notAfter - lifetime` must give back its notBefore. A pair
//! ending with the CA differs only if one issued now would end sooner
//! (else it would be issued again at every check).

use std::time::{Duration, SystemTime};

use super::material::Wanted;
use super::spec::BACKDATE;
use crate::source::csr::Window;
use crate::source::error::ca::CaError;
use crate::validate::unix_seconds;

/// notBefore and notAfter are whole seconds, computed from one clock read.
const SLACK: i64 = 2;

/// What certsync backdates a certificate of `lifetime` by, in seconds.
pub(super) fn backdate(lifetime: Duration) -> i64 {
    secs(BACKDATE.min(lifetime / 10))
}

fn secs(d: Duration) -> i64 {
    i64::try_from(d.as_secs()).unwrap_or(i64::MAX)
}

/// `Err(reason)` when `live` was not issued with the lifetime `w` asks for
/// from its CA, at `now`; `skew`: how far in the future the CA's notBefore
/// may be when it issues.
pub(super) fn same_lifetime(
    live: Window,
    w: &Wanted,
    now: SystemTime,
    skew: Duration,
) -> Result<(), CaError> {
    let (ca_not_before, ca_not_after) = (w.ca.not_before, w.ca.not_after);
    let (lifetime, now) = (w.want.lifetime.unwrap_or_default(), unix_seconds(now));
    let life = secs(lifetime);
    if live.not_after >= ca_not_after {
        if now.saturating_add(life) >= ca_not_after - SLACK {
            return Ok(());
        }
        return Err(CaError::LifetimeCutByCa {
            ends: live.not_after,
            wanted: lifetime,
        });
    }
    let issued_at = live.not_after.saturating_sub(life);
    let not_before = issued_at.saturating_sub(backdate(lifetime));
    let fits = if not_before >= ca_not_before - SLACK {
        (live.not_before - not_before).abs() <= SLACK
    } else {
        // Clamped to the CA's notBefore: issued after the CA began (or
        // before, by no more than the clock skew allowed to the CA).
        (live.not_before - ca_not_before).abs() <= SLACK
            && issued_at >= ca_not_before.saturating_sub(secs(skew)) - SLACK
    };
    if fits {
        return Ok(());
    }
    Err(CaError::LifetimeOther {
        live: issued_lifetime(live),
        wanted: lifetime,
    })
}

/// The lifetime `live` was issued with, if by certsync's backdate: its
/// span less min(5 min, a tenth of the lifetime); for a message.
fn issued_lifetime(live: Window) -> Duration {
    let span = u64::try_from(live.not_after - live.not_before).unwrap_or(0);
    let backdate = BACKDATE.as_secs();
    Duration::from_secs(if span >= 11 * backdate {
        span - backdate
    } else {
        span * 10 / 11
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::error::ca::show;

    #[test]
    fn durations_are_shown_as_go_writes_them() {
        for (secs, shown) in [
            (365 * 86_400, "8760h"),
            (480, "8m"),
            (5400, "1h30m"),
            (45, "45s"),
            (0, "0s"),
        ] {
            assert_eq!(show(Duration::from_secs(secs)), shown);
        }
    }
}
