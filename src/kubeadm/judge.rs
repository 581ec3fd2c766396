//! The configuration adopt would write, judged before anything is written: by `certsync
//! run`'s own loader, so no value reaches the node that certsync's pod would refuse (and
//! crash-loop on while every certificate expires); and for the components that re-read
//! their client certificate on a timer, which must never be left holding an expired one.

use std::path::Path;
use std::time::Duration;

use super::error::{KubeadmError, Refusal};
use super::manifest::{BY_FILE, CONFIG, KUBECONFIGS};
use super::options::Options;
use super::paths::{KUBEADM_DIR, host};
use crate::config::{Config, ConfigError, Mapping, Source};

/// How often client-go re-reads a kubeconfig's client certificate and key files
/// (`transport.CertCallbackRefreshDuration`).
pub const CLIENT_GO_REREAD: Duration = Duration::from_secs(300);

/// What a renewal must leave beyond [`CLIENT_GO_REREAD`]: issuing and writing the pair,
/// notAfter's whole seconds, and a renewal timer firing late on a loaded node.
pub const REREAD_MARGIN: Duration = Duration::from_secs(60);

/// `text` loaded by the code `certsync run` runs on the node (not read: not written yet),
/// its paths moved below `dir` when that is elsewhere.
pub(super) fn load(dir: &Path, text: &str) -> Result<Config, ConfigError> {
    let local = match dir == Path::new(KUBEADM_DIR) {
        true => text.to_owned(),
        false => text.replace(&format!("{KUBEADM_DIR}/"), &format!("{}/", dir.display())),
    };
    crate::config::load_once(&host(dir, CONFIG), &local)
}

pub(super) fn judge(opts: &Options, text: &str) -> Result<(), KubeadmError> {
    let set = opts.set.iter().map(|(k, v)| format!(" --set {k}={v}"));
    let with = set.collect::<String>().replacen(" --set", " with --set", 1);
    let what = format!("the configuration it would write ({CONFIG}{with})");
    let refused = |r| KubeadmError::refused(&opts.dir, r);
    let config = load(&opts.dir, text).map_err(|source| {
        let config = what.clone();
        refused(Refusal::Config { config, source })
    })?;
    let late = config.mappings.iter().find_map(|m| renewed_late(m, &what));
    late.map_or(Ok(()), |r| Err(refused(r)))
}

/// A mapping [`BY_FILE`] names must be renewed with [`CLIENT_GO_REREAD`] and
/// [`REREAD_MARGIN`] left at the latest point of its window; else the refusal.
fn renewed_late(m: &Mapping, written: &str) -> Option<Refusal> {
    let &(file, _, _, component) = BY_FILE.iter().find(|(_, _, name, _)| *name == m.name)?;
    let (config, name) = (written.to_owned(), m.name.clone());
    let Source::Ca(spec) = &m.source else {
        return Some(Refusal::NotCa {
            config,
            name,
            component,
        });
    };
    let Some(lifetime) = spec.issue.lifetime else {
        return Some(Refusal::NoLifetime { config, name });
    };
    let latest = spec.issue.renew.1;
    let (reread, margin) = (CLIENT_GO_REREAD, REREAD_MARGIN);
    let (left, minimum) = leaves(lifetime, latest, reread + margin).err()?;
    let kubeconfig = format!("{KUBECONFIGS}/{file}");
    Some(Refusal::TooLate {
        config,
        name,
        component,
        kubeconfig,
        lifetime,
        latest,
        left,
        reread,
        margin,
        minimum,
    })
}

/// `Err((left, shortest lifetime in whole minutes))` when `lifetime` renewed at `latest`
/// leaves less than `need`. Whole milliseconds: 8m at 25 % leaves exactly 6m.
fn leaves(lifetime: Duration, latest: f64, need: Duration) -> Result<(), (Duration, Duration)> {
    let share = 1.0 - latest;
    let left = Duration::from_millis((lifetime.as_millis() as f64 * share).round() as u64);
    if left >= need {
        return Ok(());
    }
    let minutes = (need.as_secs_f64() / share / 60.0 - 1e-9).ceil() as u64;
    Err((left, Duration::from_secs(minutes * 60)))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEED: Duration = Duration::from_secs(360);

    fn min(m: u64) -> Duration {
        Duration::from_secs(m * 60)
    }

    #[test]
    fn the_latest_renewal_point_leaves_client_go_six_minutes() {
        // The guide's pilot and certsync's defaults, exactly or well above.
        assert_eq!(leaves(min(8), 0.25, NEED), Ok(()));
        assert_eq!(leaves(min(60), 0.9, NEED), Ok(()));
        assert_eq!(leaves(min(365 * 24 * 60), 0.9, NEED), Ok(()));
        assert_eq!(leaves(min(10), 0.4, NEED), Ok(()));
        // A hair under, and the issue's 4m: the shortest lifetime named is
        // one accepted at that renew=.
        for (lifetime, latest, left, shortest) in [
            (min(8), 0.26, Duration::from_millis(355_200), min(9)),
            (min(4), 0.9, Duration::from_secs(24), min(60)),
            (min(59), 0.9, Duration::from_secs(354), min(60)),
            (min(30), 0.9, Duration::from_secs(180), min(60)),
        ] {
            assert_eq!(leaves(lifetime, latest, NEED), Err((left, shortest)));
            assert_eq!(leaves(shortest, latest, NEED), Ok(()));
        }
    }
}
