//! `certsync kubeadm status`: whether the node is adopted and healthy, read from the node's
//! files and certsync's `/readyz`, so it answers with certsync down too. Anything status
//! cannot read is a problem of its class, never skipped: an unknown is not healthy.

use std::path::Path;
use std::time::SystemTime;

use super::api;
use super::error::{FileProblem, KubeadmError};
use super::manifest;
use super::paths::host;
use super::plan::{CONFIG, POD, STATE};
use super::pod::Current;
use super::record::State;
use super::seen::Seen;
use super::trust::Cas;
use super::warning::{Warning, WarningKind};
use crate::validate::{rfc3339, unix_seconds};

mod report;

pub use report::{Cause, CertStatus, ManifestStatus, Status};
#[cfg(test)]
pub use report::{PodStatus, Problem};

/// How far past the end of its renewal window a certificate may be before status calls it
/// late: issuing takes a moment.
pub const LATE_AFTER_SECS: i64 = 60;

/// `Err` only when adopt's record exists but cannot be read.
pub async fn status(dir: &Path) -> Result<Status, KubeadmError> {
    let now = unix_seconds(SystemTime::now());
    let state = State::read(dir)?.map(|(_, s)| s);
    let mut s = Status {
        kubeadm_dir: dir.to_owned(),
        adopted: state.is_some(),
        last_renewal_error: "unknown: certsync not running".into(),
        checked_at_seconds: now,
        ..Status::default()
    };
    s.pod.state = "no-manifest";
    let Some(state) = state else {
        let why = format!("not adopted: no {STATE} (`certsync kubeadm adopt` adopts the node)");
        s.problem(Cause::NotAdopted, why);
        return Ok(s);
    };
    s.adopted_since = state.backups.first().and_then(|b| since(b));
    s.backups.clone_from(&state.backups);
    let manifest = Current::read(dir);
    pod(&manifest, &mut s).await;
    let cert = Cause::Certificate;
    match mappings(dir) {
        Ok(list) => {
            for (mut c, renew) in list {
                let problem = window(dir, now, renew, &mut c);
                c.problem = problem.unwrap_or_else(|why| Some(why.to_string()));
                if let Some(p) = &c.problem {
                    s.problem(cert, format!("{} ({}): {p}", c.mapping, c.target));
                }
                s.certificates.push(c);
            }
        }
        Err(why) => s.problem(cert, format!("cannot tell the certificates: {why}")),
    }
    for e in super::audit::exposed(dir) {
        s.problem(cert, format!("private key: {e}"));
    }
    let manifest = manifest.ok().flatten();
    if let Err(planted) = super::audit::kubelet_bootstrap(dir, true, manifest.as_ref()) {
        s.problem(cert, planted.to_string());
    }
    manifests(dir, &state, &mut s);
    // Each CA read once: its report and admin.conf's pair check both judge by it.
    let read = Cas::read(dir);
    let (cas, warnings) = super::trust::status(&read, now, &state.trust);
    for c in &cas {
        if let Some(p) = &c.problem {
            s.problem(cert, format!("CA {} ({}): {p}", c.name, c.path));
        }
    }
    let ends = (cas.iter()).flat_map(|c| c.earlier_ends.iter().chain([&c.not_after_seconds]));
    let ca_ends: Vec<i64> = ends.copied().filter(|&end| end > 0).collect();
    let short = short_lifetimes(&s.certificates, &ca_ends);
    let short = short.map(|w| Warning::new(WarningKind::ShortLifetime, w));
    s.warnings.extend(short.into_iter().chain(warnings));
    s.cas = cas;
    match cluster_info(&state, &read, now).await {
        Some((true, p)) => s.problem(cert, p),
        Some((false, w)) => s.warnings.push(Warning::new(WarningKind::ClusterInfo, w)),
        None => {}
    }
    Ok(s)
}

/// [`super::trust::stale_trust`] of cluster-info and `pki/ca.crt` as `cas` read it for the
/// report (unreadable: not judged) at `now`, through admin.conf as adopt's record `state`
/// says; once adopt has renewed the CA, a warning when it could not be read.
async fn cluster_info(state: &State, cas: &Cas<'_>, now: i64) -> Option<(bool, String)> {
    let ca = cas.ca()?;
    let renewed = (state.trust.get(manifest::CA_BUNDLE)).is_some_and(|b| b.len() > 1);
    let access = super::admin::Access::read(cas.dir, Some((state, ca)));
    let read = async { api::cluster_info(&access.await?.client(None)?, api::TIMEOUT / 3).await };
    match read.await {
        Ok(info) => api::judge(&info.trusted, &ca.der, now),
        Err(e) => renewed.then(|| {
            let said = format!("ConfigMap kube-public/cluster-info not checked: {e}");
            (false, said)
        }),
    }
}

/// `/etc/kubernetes/certsync/backup/20261124T221933Z` -> RFC 3339; `None`
/// unless the name is such a time.
pub(super) fn since(backup: &str) -> Option<String> {
    let s = backup.rsplit('/').next()?;
    let b = s.as_bytes();
    // ASCII: every index below is a character boundary.
    (s.is_ascii() && b.len() == 16 && b[8] == b'T' && b[15] == b'Z').then_some(())?;
    let (y, m, dh, min, sz) = (&s[..4], &s[4..6], &s[6..11], &s[11..13], &s[13..]);
    let text = format!("{y}-{m}-{dh}:{min}:{sz}");
    humantime::parse_rfc3339(&text).ok().map(|_| text)
}

async fn pod(manifest: &Result<Option<Current>, KubeadmError>, s: &mut Status) {
    let down = Cause::CertsyncDown;
    let current = match manifest {
        Ok(Some(current)) => current,
        Ok(None) => {
            let why = format!(
                "certsync's pod manifest {POD} is missing: nothing renews the node's certificates \
                 (`certsync kubeadm adopt` writes it again)"
            );
            return s.problem(down, why);
        }
        Err(e) => return s.problem(down, e.to_string()),
    };
    s.pod.manifest = true;
    s.pod.state = "not-running";
    let p = match &current.probe {
        Ok(p) => p,
        Err(why) => {
            let why = format!("{POD}: {why}: cannot tell whether certsync runs");
            return s.problem(down, why);
        }
    };
    s.pod.image.clone_from(&p.image);
    s.pod.admin_addr.clone_from(&p.admin);
    s.pod.readyz = Some(format!("http://{}/readyz", p.addr));
    let answer = match super::wait::get_readyz(p.addr).await {
        Ok(answer) => answer,
        Err(seen) => {
            // The cause alone: the line names the address.
            let why = match seen {
                Seen::Nothing { problem, .. } => problem.to_string(),
                _ => "no answer within 3s".to_owned(),
            };
            let why = format!(
                "certsync does not answer at http://{}/readyz ({why}): not running, \
                 crash-looping or still starting; nothing renews the node's certificates",
                p.addr
            );
            return s.problem(down, why);
        }
    };
    if answer.status == 200 {
        s.pod.state = "ready";
        s.last_renewal_error = "none".into();
        return;
    }
    s.pod.state = "not-ready";
    let lines: Vec<String> = (answer.body.lines())
        .filter(|l| !l.trim().is_empty())
        .map(|l| crate::escape(l).into_owned())
        .collect();
    s.last_renewal_error = match lines.is_empty() {
        true => format!("/readyz answered {}", answer.status),
        false => lines.join("; "),
    };
    let why = format!(
        "certsync is not ready (/readyz {}): {}",
        answer.status, s.last_renewal_error
    );
    s.problem(Cause::CertsyncNotReady, why);
}

/// certsync's mappings and renewal windows as `run` would start with them: a file `run`
/// refuses at its next start is a problem here, whatever the running pod still holds.
pub(super) fn mappings(dir: &Path) -> Result<Vec<(CertStatus, Renew)>, FileProblem> {
    let refused = |e| FileProblem::Config(Box::new(e));
    let text = crate::config::read_config_text(&host(dir, CONFIG)).map_err(refused)?;
    let config = super::judge::load(dir, &text).map_err(refused)?;
    // As written, for the options shown.
    let settings = crate::config::Settings::once(Path::new(CONFIG), &text).map_err(refused)?;
    let mapping = |spec: &crate::config::MappingSpec| {
        let name = (spec.name.clone()).ok_or_else(|| FileProblem::Unnamed.of(CONFIG))?;
        let built = config.mappings.iter().find(|m| m.name == name);
        let renew = match built.map(|m| &m.source) {
            Some(crate::config::Source::Ca(ca)) => Ok(ca.issue.renew),
            Some(crate::config::Source::Csr(csr)) => Ok(csr.renew),
            _ => Err(FileProblem::NotIssued),
        };
        let options: Vec<String> = (super::choices::set_options(spec).iter())
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let c = CertStatus {
            mapping: crate::escape(&name).into_owned(),
            target: crate::escape(&spec.target.to_string_lossy()).into_owned(),
            options: match options.is_empty() {
                true => "certsync's defaults (lifetime=365d, renew=70%-90%)".into(),
                false => crate::escape(&options.join(", ")).into_owned(),
            },
            ..CertStatus::default()
        };
        Ok((c, renew))
    };
    settings.file_mappings().iter().map(mapping).collect()
}

pub(super) type Renew = Result<(f64, f64), FileProblem>;

/// `c`'s live certificate and renewal window, read from its target as certsync reads its
/// own (nothing followed out of it); what is wrong with them.
fn window(
    dir: &Path,
    now: i64,
    renew: Renew,
    c: &mut CertStatus,
) -> Result<Option<String>, FileProblem> {
    let writer = crate::writer::Writer::existing(host(dir, &c.target));
    let live = writer
        .and_then(|w| w.live())
        .map_err(FileProblem::LiveUnreadable)?;
    let live = live.ok_or(FileProblem::NoLive)?;
    if let Some(p) = live.problem {
        return Err(FileProblem::Damaged(p));
    }
    let leaf = crate::validate::leaf_of_bundle(&live.bundle).ok_or(FileProblem::NoLive)?;
    let (start, end) = (leaf.not_before, leaf.not_after);
    c.not_before = Some(rfc3339(start));
    c.not_after = Some(rfc3339(end));
    c.not_after_seconds = end;
    let (lo, hi) = renew?;
    let lifetime = (end - start) as f64;
    let by = start + (lifetime * hi) as i64;
    c.renew_from = Some(rfc3339(start + (lifetime * lo) as i64));
    c.renew_by = Some(rfc3339(by));
    c.renew_by_seconds = by;
    c.outage_tolerance_seconds = end - by;
    let (by, end) = (rfc3339(by), rfc3339(end));
    Ok(if leaf.not_after <= now {
        Some(format!("the live certificate expired at {end}"))
    } else if now > c.renew_by_seconds + LATE_AFTER_SECS {
        let late = "not renewed although its renewal window ended at";
        Some(format!("{late} {by} (it expires at {end})"))
    } else {
        None
    })
}

const SHORT_TOLERANCE_SECS: i64 = 24 * 3600;

/// The warning for the certificate that ends soonest after its renewal window closes, when
/// under a day: a trial lifetime left in place looks healthy until the first outage. One
/// that ends with a CA (`ca_ends`) is short because of the CA, whose status says so.
pub(super) fn short_lifetimes(certs: &[CertStatus], ca_ends: &[i64]) -> Option<String> {
    const WITH_THE_CA: i64 = 60;
    let c = (certs.iter())
        .filter(|c| c.outage_tolerance_seconds > 0)
        .filter(|c| !(ca_ends.iter()).any(|end| (c.not_after_seconds - end).abs() <= WITH_THE_CA))
        .min_by_key(|c| c.outage_tolerance_seconds)
        .filter(|c| c.outage_tolerance_seconds < SHORT_TOLERANCE_SECS)?;
    let tolerance = std::time::Duration::from_secs(c.outage_tolerance_seconds.unsigned_abs());
    Some(format!(
        "short lifetimes: {} ({}) ends {} after its renewal window closes, so the node stops if \
         certsync is down that long (the scheduler and controller-manager about 5 minutes \
         sooner); adopt again with the defaults (a year) once the trial is over",
        c.mapping,
        c.options,
        humantime::format_duration(tolerance)
    ))
}

/// Each component manifest, judged by whether adopt would still change it (a `kubeadm
/// upgrade` regenerates them).
fn manifests(dir: &Path, state: &State, s: &mut Status) {
    for (c, path, read) in manifest::on_node(dir) {
        let mut as_adopt_wrote = false;
        let judged = (read.map_err(|e| e.to_string()))
            .and_then(|b| b.ok_or_else(|| "missing".to_owned()))
            .and_then(|bytes| {
                as_adopt_wrote = state.wrote(&path, &bytes).is_some();
                let mut parsed = manifest::read(&c, &bytes).map_err(|e| e.to_string())?;
                let (flags, volumes) = manifest::adopt(&c, &mut parsed);
                let flags = flags.iter().map(|(f, old, _)| (f, crate::escape(old)));
                let flags = flags.map(|(f, old)| format!("--{f}={old}"));
                let volumes = volumes.iter().map(|v| format!("no volume {v}"));
                Ok(flags.chain(volumes).collect::<Vec<_>>())
            });
        let problem = match judged {
            Ok(missing) if missing.is_empty() => None,
            Ok(missing) => Some(format!(
                "regenerated without adoption (a `kubeadm upgrade`?): {}; the component no \
                 longer uses certsync's certificates. `certsync kubeadm adopt` puts adoption back",
                missing.join(", ")
            )),
            // A manifest's values, as adopt's refusal of a conflict quotes them: escaped.
            Err(why) => Some(crate::escape(&why).into_owned()),
        };
        if let Some(p) = &problem {
            s.problem(Cause::AdoptionLost, format!("{path}: {p}"));
        }
        s.manifests.push(ManifestStatus {
            manifest: path,
            adopted: problem.is_none(),
            as_adopt_wrote,
            problem,
        });
    }
}
