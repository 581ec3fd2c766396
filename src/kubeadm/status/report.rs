//! The status report, as a person reads it, as JSON (serde) and as
//! Prometheus text for node_exporter's textfile collector.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::super::trust::CaStatus;
use super::super::warning::{Warning, WarningKind, name_of};

/// Why a node is not healthy: one exit code per class, its discriminant
/// (docs/reference/exit-codes.md); of several, the first in this order's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
#[repr(u8)]
pub enum Cause {
    NotAdopted = 2,
    CertsyncDown,
    CertsyncNotReady,
    AdoptionLost,
    Certificate,
}

impl Cause {
    pub const ALL: [Self; 5] = [
        Self::NotAdopted,
        Self::CertsyncDown,
        Self::CertsyncNotReady,
        Self::AdoptionLost,
        Self::Certificate,
    ];
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Problem {
    pub cause: Cause,
    pub message: String,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct PodStatus {
    pub manifest: bool,
    pub image: Option<String>,
    pub admin_addr: Option<String>,
    /// Where its readiness probe asks: `http://HOST:PORT/readyz`.
    pub readyz: Option<String>,
    /// `ready`, `not-ready`, `not-running` or `no-manifest`.
    pub state: &'static str,
}

/// Times as RFC 3339 and as Unix `*_seconds` (0 when unknown).
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CertStatus {
    pub mapping: String,
    pub target: String,
    /// The mapping's renewal options as written, or certsync's defaults.
    pub options: String,
    pub not_before: Option<String>,
    pub not_after: Option<String>,
    pub not_after_seconds: i64,
    pub renew_from: Option<String>,
    pub renew_by: Option<String>,
    pub renew_by_seconds: i64,
    /// How long certsync may be down once the renewal window has ended.
    pub outage_tolerance_seconds: i64,
    pub problem: Option<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ManifestStatus {
    pub manifest: String,
    /// Every flag and volume adopt sets is there.
    pub adopted: bool,
    /// Byte for byte what adopt wrote (its digest in adopted.json).
    pub as_adopt_wrote: bool,
    pub problem: Option<String>,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Status {
    pub kubeadm_dir: PathBuf,
    pub adopted: bool,
    pub adopted_since: Option<String>,
    pub backups: Vec<String>,
    pub pod: PodStatus,
    /// certsync's `/readyz` lines, or `unknown: certsync not running`.
    pub last_renewal_error: String,
    pub certificates: Vec<CertStatus>,
    pub manifests: Vec<ManifestStatus>,
    pub cas: Vec<CaStatus>,
    pub problems: Vec<Problem>,
    pub warnings: Vec<Warning>,
    pub checked_at_seconds: i64,
}

/// A gauge family: its name, help and samples (labels, value).
type Family = (&'static str, &'static str, Vec<(String, f64)>);

fn families_text(families: impl IntoIterator<Item = Family>) -> String {
    let mut s = String::new();
    for (name, help, samples) in families {
        let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (labels, v) in samples {
            let _ = writeln!(s, "{name}{labels} {v}");
        }
    }
    s
}

/// The two series a failed status writes too: whether it completed, and when.
fn run_families(done: bool, at: i64) -> [Family; 2] {
    [
        (
            "certsync_kubeadm_status_complete",
            "1 when status read the node and wrote every series; 0 when it failed before (adopt's record unreadable: run it on the node).",
            vec![(String::new(), flag(done))],
        ),
        (
            "certsync_kubeadm_status_timestamp_seconds",
            "When status ran (Unix time): alert when it stops running.",
            vec![(String::new(), at as f64)],
        ),
    ]
}

fn flag(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

fn or_unknown(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("unknown")
}

impl Status {
    /// 0 when healthy, else the exit code of the first cause.
    pub fn exit_code(&self) -> u8 {
        let first = self.problems.iter().map(|p| p.cause).min();
        first.map_or(0, |c| c as u8)
    }

    pub(super) fn problem(&mut self, cause: Cause, message: impl Into<String>) {
        let message = message.into();
        self.problems.push(Problem { cause, message });
    }

    pub fn text(&self) -> String {
        let mut s = format!("node: {}\n", self.kubeadm_dir.display());
        match self.adopted {
            true => self.adopted_text(&mut s),
            false => s.push_str("adopted: no\n"),
        }
        for w in &self.warnings {
            let _ = writeln!(s, "warning: {}", w.message);
        }
        if self.problems.is_empty() {
            s.push_str("healthy\n");
        }
        for p in &self.problems {
            let _ = writeln!(s, "problem ({}): {}", name_of(&p.cause), p.message);
        }
        s
    }

    fn adopted_text(&self, s: &mut String) {
        let since = or_unknown(&self.adopted_since);
        let backups = self.backups.join(", ");
        let _ = writeln!(s, "adopted: yes, since {since} (backups: {backups})");
        let p = &self.pod;
        let _ = match p.manifest {
            false => writeln!(s, "certsync pod: {}", p.state),
            true => writeln!(
                s,
                "certsync pod: {} (image {}, admin address {}, readiness {})",
                p.state,
                or_unknown(&p.image),
                p.admin_addr.as_deref().unwrap_or("not in its arguments"),
                or_unknown(&p.readyz),
            ),
        };
        let _ = writeln!(s, "last renewal error: {}", self.last_renewal_error);
        s.push_str("certificates:\n");
        for c in &self.certificates {
            let problem = c.problem.as_ref().map(|p| format!(": {p}"));
            let _ = writeln!(
                s,
                "  {} {}: ends {}, renewed between {} and {} ({}){}",
                c.mapping,
                c.target,
                or_unknown(&c.not_after),
                or_unknown(&c.renew_from),
                or_unknown(&c.renew_by),
                c.options,
                problem.unwrap_or_default()
            );
        }
        s.push_str("CAs:\n");
        for c in &self.cas {
            let bundle = match c.in_bundle {
                Some(true) => ", in the trust bundle components load at start",
                Some(false) => ", NOT in the trust bundle components load at start",
                None => "",
            };
            let earlier = match &c.previous_not_after {
                Some(d) if c.previous_not_after_seconds > self.checked_at_seconds => format!(
                    "; the earlier certificate beside it ends {d}: trust this one off the node by then"
                ),
                Some(d) => {
                    format!("; the earlier certificate beside it ended {d} (adopt leaves it out)")
                }
                None => String::new(),
            };
            let due = ["", "; renewal due (adopt renews it)"][usize::from(c.renewal_due)];
            let ends = or_unknown(&c.not_after);
            let (name, path) = (c.name, c.path);
            let _ = writeln!(s, "  {name} {path}: ends {ends}{bundle}{earlier}{due}");
        }
        s.push_str("manifests:\n");
        for m in &self.manifests {
            let state = match (&m.problem, m.as_adopt_wrote) {
                (Some(p), _) => p.as_str(),
                (None, true) => "adopted (as adopt wrote it)",
                (None, false) => "adopted (changed since adopt wrote it)",
            };
            let _ = writeln!(s, "  {}: {state}", m.manifest);
        }
    }

    /// The report as Prometheus text (docs/reference/metrics.md): every
    /// series present whatever the state, so an alert never waits for one.
    pub fn prometheus(&self) -> String {
        let node = |v: f64| vec![(String::new(), v)];
        let per_cert = |value: fn(&CertStatus) -> i64| {
            let label = |c: &CertStatus| labels(&[("mapping", &c.mapping), ("target", &c.target)]);
            let certs = self.certificates.iter();
            certs.map(|c| (label(c), value(c) as f64)).collect()
        };
        let per_ca = |all: bool, value: fn(&CaStatus) -> i64| {
            let cas = self.cas.iter().filter(|c| all || c.in_bundle.is_some());
            cas.map(|c| (labels(&[("ca", c.name)]), value(c) as f64))
                .collect()
        };
        let causes = Cause::ALL.iter().map(|c| {
            let found = self.problems.iter().any(|p| p.cause == *c);
            (labels(&[("cause", &name_of(c))]), flag(found))
        });
        let kinds = WarningKind::ALL.iter().map(|k| {
            let found = self.warnings.iter().any(|w| w.kind == *k);
            (labels(&[("kind", &name_of(k))]), flag(found))
        });
        let manifests = self.manifests.iter();
        let manifests = manifests.map(|m| (labels(&[("manifest", &m.manifest)]), flag(m.adopted)));
        let [complete, timestamp] = run_families(true, self.checked_at_seconds);
        families_text([
            (
                "certsync_kubeadm_adopted",
                "1 when the node is adopted (adopted.json exists).",
                node(flag(self.adopted)),
            ),
            (
                "certsync_kubeadm_certsync_ready",
                "1 when certsync's /readyz answered 200.",
                node(flag(self.pod.state == "ready")),
            ),
            (
                "certsync_kubeadm_status_problem",
                "1 when status found a problem of this cause (its exit code's class).",
                causes.collect(),
            ),
            (
                "certsync_kubeadm_status_warning",
                "1 when status warned of this kind: healthy now, but a date ahead or an outage \
                 of certsync stops the node unless someone acts.",
                kinds.collect(),
            ),
            complete,
            timestamp,
            (
                "certsync_kubeadm_manifest_adopted",
                "1 when the component manifest still names certsync's files.",
                manifests.collect(),
            ),
            (
                "certsync_kubeadm_certificate_not_after_seconds",
                "The live certificate's notAfter (Unix time); 0 when it cannot be read.",
                per_cert(|c| c.not_after_seconds),
            ),
            (
                "certsync_kubeadm_certificate_renew_by_seconds",
                "The end of the live certificate's renewal window (Unix time); 0 when unknown.",
                per_cert(|c| c.renew_by_seconds),
            ),
            (
                "certsync_kubeadm_ca_not_after_seconds",
                "The CA certificate's notAfter (Unix time); 0 when it cannot be read.",
                per_ca(true, |c| c.not_after_seconds),
            ),
            (
                "certsync_kubeadm_ca_previous_not_after_seconds",
                "The end of the CA's earliest earlier certificate still trusted beside the \
                 renewal (Unix time), ended or not: by then everything off the node must trust \
                 the renewal; 0 when there is none.",
                per_ca(false, |c| c.previous_not_after_seconds),
            ),
        ])
    }

    /// The textfile of a status that failed before it could report (adopt's
    /// record unreadable): an alert on a node's missing series cannot tell a
    /// node gone from a report gone.
    pub fn failed_prometheus(checked_at_seconds: i64) -> String {
        families_text(run_families(false, checked_at_seconds))
    }
}

/// `{k="v",...}`, values escaped as the exposition format requires.
fn labels(pairs: &[(&str, &str)]) -> String {
    let escape = |v: &str| {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    };
    let body: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    format!("{{{}}}", body.join(","))
}
