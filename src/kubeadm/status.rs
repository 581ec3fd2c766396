//! `certsync kubeadm status`: whether the node is adopted and healthy,
//! read from the node's files and certsync's `/readyz`, so it answers with
//! certsync down too. Every certificate is judged from its live target,
//! each component manifest by whether adopt would still change it (a
//! `kubeadm upgrade` regenerates them), certsync by its pod's `/readyz`.
//! Anything status cannot read is a problem of its class, never skipped:
//! an unknown is not healthy.

use std::path::Path;
use std::time::SystemTime;

use super::error::{FileProblem, KubeadmError};
use super::manifest;
use super::node;
use super::paths::{digest, host};
use super::plan::{CONFIG, POD, STATE};
use super::pod::Current;
use super::record::State;
use super::seen::Seen;
use super::trust::CaStatus;
use super::warning::{Warning, WarningKind};
use crate::validate::{rfc3339, unix_seconds};

mod report;

pub use report::{Cause, CertStatus, ManifestStatus, Status};
#[cfg(test)]
pub use report::{PodStatus, Problem};

/// How far past the end of its renewal window a certificate may be before
/// status calls it late: issuing takes a moment.
pub const LATE_AFTER_SECS: i64 = 60;

/// `Err` only when adopt's record exists but cannot be read.
pub async fn status(dir: &Path) -> Result<Status, KubeadmError> {
    let now = unix_seconds(SystemTime::now());
    let state = State::read(dir)?;
    let mut s = Status {
        kubeadm_dir: dir.to_owned(),
        adopted: state.is_some(),
        last_renewal_error: "unknown: certsync not running".into(),
        checked_at_seconds: now,
        ..Status::default()
    };
    let Some(state) = state else {
        s.pod.state = "no-manifest";
        s.problem(
            Cause::NotAdopted,
            format!("not adopted: no {STATE} (`certsync kubeadm adopt` adopts the node)"),
        );
        return Ok(s);
    };
    s.adopted_since = state.backups.first().and_then(|b| since(b));
    s.backups.clone_from(&state.backups);
    let manifest = node::read_optional(dir, POD).map(|m| m.map(|p| Current::parse(&p)));
    pod(manifest.as_ref().map(Option::as_ref), &mut s).await;
    certificates(dir, now, &mut s);
    for e in super::keys::exposed(dir) {
        s.problem(Cause::Certificate, format!("private key: {e}"));
    }
    let manifest = manifest.ok().flatten();
    if let Err(planted) = super::audit::kubelet_bootstrap(dir, true, manifest.as_ref()) {
        s.problem(Cause::Certificate, planted.to_string());
    }
    manifests(dir, &state, &mut s);
    let (cas, warnings) = super::trust::status(dir, now, &state.trust);
    for c in &cas {
        if let Some(p) = &c.problem {
            let why = format!("CA {} ({}): {p}", c.name, c.path);
            s.problem(Cause::Certificate, why);
        }
    }
    let ends = |c: &CaStatus| {
        c.earlier_ends
            .clone()
            .into_iter()
            .chain([c.not_after_seconds])
    };
    let ca_ends: Vec<i64> = cas.iter().flat_map(ends).filter(|&end| end > 0).collect();
    let short = short_lifetimes(&s.certificates, &ca_ends);
    s.warnings
        .extend(short.map(|w| Warning::new(WarningKind::ShortLifetime, w)));
    s.cas = cas;
    s.warnings.extend(warnings);
    let renewed = (state.trust.get(manifest::CA_BUNDLE)).is_some_and(|b| b.len() > 1);
    match super::cluster_info::status(dir, now, renewed).await {
        Some((true, p)) => s.problem(Cause::Certificate, p),
        Some((false, w)) => s.warnings.push(Warning::new(WarningKind::ClusterInfo, w)),
        None => {}
    }
    Ok(s)
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

/// certsync's pod: its manifest as read, and what its `/readyz` says.
async fn pod(manifest: Result<Option<&Current>, &KubeadmError>, s: &mut Status) {
    s.pod.state = "no-manifest";
    let current = match manifest {
        Ok(Some(current)) => current,
        Ok(None) => {
            let why = format!(
                "certsync's pod manifest {POD} is missing: nothing renews the node's certificates \
                 (`certsync kubeadm adopt` writes it again)"
            );
            return s.problem(Cause::CertsyncDown, why);
        }
        Err(e) => return s.problem(Cause::CertsyncDown, e.to_string()),
    };
    s.pod.manifest = true;
    s.pod.state = "not-running";
    let p = match &current.probe {
        Ok(p) => p,
        Err(why) => {
            let why = format!("{POD}: {why}: cannot tell whether certsync runs");
            return s.problem(Cause::CertsyncDown, why);
        }
    };
    s.pod.image.clone_from(&p.image);
    s.pod.admin_addr.clone_from(&p.admin);
    s.pod.readyz = Some(format!("http://{}/readyz", p.addr));
    match super::wait::get_readyz(p.addr).await {
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
            s.problem(Cause::CertsyncDown, why);
        }
        Ok(answer) if answer.status == 200 => {
            s.pod.state = "ready";
            s.last_renewal_error = "none".into();
        }
        Ok(answer) => {
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
    }
}

pub(super) struct Mapping {
    pub(super) name: String,
    pub(super) target: String,
    pub(super) options: String,
    pub(super) renew: Result<(f64, f64), FileProblem>,
}

/// The mappings of certsync's configuration as `run` would start with
/// them: read as `run` reads it (one another user may change steers no
/// root process) and built by `run`'s loader, so a file `run` refuses at
/// its next start is a problem here, not renewal windows read from it
/// while the running pod still holds the old configuration.
pub(super) fn mappings(dir: &Path) -> Result<Vec<Mapping>, FileProblem> {
    let refused = |e| FileProblem::Config(Box::new(e));
    let text = crate::config::read_config_text(&host(dir, CONFIG)).map_err(refused)?;
    let config = super::judge::load(dir, &text).map_err(refused)?;
    // As written, for the options shown.
    let settings = crate::config::Settings::once(Path::new(CONFIG), &text).map_err(refused)?;
    settings
        .file_mappings()
        .iter()
        .map(|spec| {
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
            Ok(Mapping {
                name: crate::escape(&name).into_owned(),
                target: crate::escape(&spec.target.to_string_lossy()).into_owned(),
                options: if options.is_empty() {
                    "certsync's defaults (lifetime=365d, renew=70%-90%)".into()
                } else {
                    crate::escape(&options.join(", ")).into_owned()
                },
                renew,
            })
        })
        .collect()
}

fn certificates(dir: &Path, now: i64, s: &mut Status) {
    let list = match mappings(dir) {
        Ok(l) => l,
        Err(why) => {
            return s.problem(
                Cause::Certificate,
                format!("cannot tell the certificates: {why}"),
            );
        }
    };
    for m in list {
        let c = certificate(dir, now, m);
        if let Some(p) = &c.problem {
            s.problem(
                Cause::Certificate,
                format!("{} ({}): {p}", c.mapping, c.target),
            );
        }
        s.certificates.push(c);
    }
}

const SHORT_TOLERANCE_SECS: i64 = 24 * 3600;

/// The warning for the certificate that ends soonest after its renewal
/// window closes, when under a day: a trial lifetime left in place looks
/// healthy until the first outage. One that ends with a CA (`ca_ends`: cut
/// at its end) is short because of the CA, whose renewal status says then.
pub(super) fn short_lifetimes(certs: &[CertStatus], ca_ends: &[i64]) -> Option<String> {
    const WITH_THE_CA: i64 = 60;
    let c = certs
        .iter()
        .filter(|c| c.outage_tolerance_seconds > 0)
        .filter(|c| {
            !ca_ends
                .iter()
                .any(|end| (c.not_after_seconds - end).abs() <= WITH_THE_CA)
        })
        .min_by_key(|c| c.outage_tolerance_seconds)
        .filter(|c| c.outage_tolerance_seconds < SHORT_TOLERANCE_SECS)?;
    Some(format!(
        "short lifetimes: {} ({}) ends {} after its renewal window closes, so the node stops if \
         certsync is down that long (the scheduler and controller-manager about 5 minutes \
         sooner); adopt again with the defaults (a year) once the trial is over",
        c.mapping,
        c.options,
        humantime::format_duration(std::time::Duration::from_secs(
            c.outage_tolerance_seconds.unsigned_abs()
        ))
    ))
}

fn certificate(dir: &Path, now: i64, m: Mapping) -> CertStatus {
    let mut c = CertStatus {
        mapping: m.name,
        target: m.target.clone(),
        options: m.options,
        ..CertStatus::default()
    };
    let leaf = match live_leaf(&host(dir, &m.target)) {
        Ok(l) => l,
        Err(why) => {
            c.problem = Some(why.to_string());
            return c;
        }
    };
    c.not_before = Some(rfc3339(leaf.not_before));
    c.not_after = Some(rfc3339(leaf.not_after));
    c.not_after_seconds = leaf.not_after;
    let lifetime = (leaf.not_after - leaf.not_before) as f64;
    let (lo, hi) = match m.renew {
        Ok(w) => w,
        Err(why) => {
            c.problem = Some(why.to_string());
            return c;
        }
    };
    let from = leaf.not_before + (lifetime * lo) as i64;
    let by = leaf.not_before + (lifetime * hi) as i64;
    c.renew_from = Some(rfc3339(from));
    c.renew_by = Some(rfc3339(by));
    c.renew_by_seconds = by;
    c.outage_tolerance_seconds = leaf.not_after - by;
    let end = rfc3339(leaf.not_after);
    c.problem = if leaf.not_after <= now {
        Some(format!("the live certificate expired at {end}"))
    } else if now > by + LATE_AFTER_SECS {
        let by = rfc3339(by);
        Some(format!(
            "not renewed although its renewal window ended at {by} (it expires at {end})"
        ))
    } else {
        None
    };
    c
}

/// The leaf of the live revision at `target`, read as certsync reads its
/// own targets (nothing followed out of them).
fn live_leaf(target: &Path) -> Result<crate::validate::Leaf, FileProblem> {
    let writer =
        crate::writer::Writer::existing(target.to_owned()).map_err(FileProblem::NoTarget)?;
    let live = writer
        .live()
        .map_err(FileProblem::LiveUnreadable)?
        .ok_or(FileProblem::NoLive)?;
    if let Some(p) = live.problem {
        return Err(FileProblem::Damaged(p));
    }
    crate::validate::leaf_of_bundle(&live.bundle).ok_or(FileProblem::NoCertificate)
}

fn manifests(dir: &Path, state: &State, s: &mut Status) {
    for c in manifest::components() {
        let path = super::manifest::manifest_path(c.name);
        let recorded = state.manifests.get(&path).map(|(_, d)| d.as_str());
        let mut m = ManifestStatus {
            manifest: path.clone(),
            adopted: false,
            as_adopt_wrote: false,
            problem: None,
        };
        let judged = node::read_optional(dir, &path)
            .map_err(|e| e.to_string())
            .and_then(|b| b.ok_or_else(|| "missing".to_owned()))
            .and_then(|bytes| {
                m.as_adopt_wrote = recorded == Some(digest(&bytes).as_str());
                let mut parsed = manifest::read(&c, bytes).map_err(|e| e.to_string())?;
                let (flags, volumes) = manifest::adopt(&c, &mut parsed);
                Ok(flags
                    .iter()
                    .map(|(f, old, _)| format!("--{f}={}", crate::escape(old)))
                    .chain(volumes.iter().map(|v| format!("no volume {v}")))
                    .collect::<Vec<_>>())
            });
        match judged {
            Ok(missing) if missing.is_empty() => m.adopted = true,
            Ok(missing) => {
                m.problem = Some(format!(
                    "regenerated without adoption (a `kubeadm upgrade`?): {}; the component \
                     no longer uses certsync's certificates. `certsync kubeadm adopt` puts \
                     adoption back",
                    missing.join(", ")
                ));
            }
            // A manifest's values, as a Conflict quotes them: escaped.
            Err(why) => m.problem = Some(crate::escape(&why).into_owned()),
        }
        if let Some(p) = &m.problem {
            s.problem(Cause::AdoptionLost, format!("{path}: {p}"));
        }
        s.manifests.push(m);
    }
}
