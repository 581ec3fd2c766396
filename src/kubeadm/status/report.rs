//! The status report as a person reads it, and as Prometheus text for
//! node_exporter's textfile collector.

use std::fmt::Write as _;

use super::super::WarningKind;
use super::{Cause, Status};

impl Status {
    /// The report as a person reads it.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "node: {}", self.kubeadm_dir.display());
        if !self.adopted {
            s.push_str("adopted: no\n");
        } else {
            let _ = writeln!(
                s,
                "adopted: yes, since {} (backups: {})",
                self.adopted_since.as_deref().unwrap_or("unknown"),
                self.backups.join(", ")
            );
            let p = &self.pod;
            if p.manifest {
                let _ = writeln!(
                    s,
                    "certsync pod: {} (image {}, admin address {}, readiness {})",
                    p.state,
                    p.image.as_deref().unwrap_or("unknown"),
                    p.admin_addr.as_deref().unwrap_or("not in its arguments"),
                    p.readyz.as_deref().unwrap_or("unknown"),
                );
            } else {
                let _ = writeln!(s, "certsync pod: {}", p.state);
            }
            let _ = writeln!(s, "last renewal error: {}", self.last_renewal_error);
            s.push_str("certificates:\n");
            for c in &self.certificates {
                let _ = writeln!(
                    s,
                    "  {} {}: ends {}, renewed between {} and {} ({}){}",
                    c.mapping,
                    c.target,
                    c.not_after.as_deref().unwrap_or("unknown"),
                    c.renew_from.as_deref().unwrap_or("unknown"),
                    c.renew_by.as_deref().unwrap_or("unknown"),
                    c.options,
                    c.problem
                        .as_ref()
                        .map(|p| format!(": {p}"))
                        .unwrap_or_default()
                );
            }
            s.push_str("CAs:\n");
            for c in &self.cas {
                let _ = writeln!(
                    s,
                    "  {} {}: ends {}{}{}{}",
                    c.name,
                    c.path,
                    c.not_after.as_deref().unwrap_or("unknown"),
                    match c.in_bundle {
                        Some(true) => ", in the trust bundle components load at start",
                        Some(false) => ", NOT in the trust bundle components load at start",
                        None => "",
                    },
                    match &c.previous_not_after {
                        Some(d) if c.previous_not_after_seconds > self.checked_at_seconds =>
                            format!(
                                "; the earlier certificate beside it ends {d}: trust this one \
                                 off the node by then"
                            ),
                        Some(d) => format!(
                            "; the earlier certificate beside it ended {d} (adopt leaves it out)"
                        ),
                        None => String::new(),
                    },
                    if c.renewal_due {
                        "; renewal due (adopt renews it)"
                    } else {
                        ""
                    }
                );
            }
            s.push_str("manifests:\n");
            for m in &self.manifests {
                let _ = writeln!(
                    s,
                    "  {}: {}",
                    m.manifest,
                    match (&m.problem, m.as_adopt_wrote) {
                        (Some(p), _) => p.clone(),
                        (None, true) => "adopted (as adopt wrote it)".into(),
                        (None, false) => "adopted (changed since adopt wrote it)".into(),
                    }
                );
            }
        }
        for w in &self.warnings {
            let _ = writeln!(s, "warning: {}", w.message);
        }
        if self.problems.is_empty() {
            s.push_str("healthy\n");
        }
        for p in &self.problems {
            let _ = writeln!(s, "problem ({}): {}", p.cause.name(), p.message);
        }
        s
    }

    /// The report as Prometheus text, for node_exporter's textfile
    /// collector (docs/reference/metrics.md): every series present whatever
    /// the state, so an alert never waits for one to appear.
    pub fn prometheus(&self) -> String {
        let mut s = String::new();
        let mut family = |name: &str, help: &str, samples: Vec<(String, f64)>| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} gauge");
            for (labels, v) in samples {
                let _ = writeln!(s, "{name}{labels} {v}");
            }
        };
        let flag = |b: bool| if b { 1.0 } else { 0.0 };
        family(
            "certsync_kubeadm_adopted",
            "1 when the node is adopted (adopted.json exists).",
            vec![(String::new(), flag(self.adopted))],
        );
        family(
            "certsync_kubeadm_certsync_ready",
            "1 when certsync's /readyz answered 200.",
            vec![(String::new(), flag(self.pod.state == "ready"))],
        );
        family(
            "certsync_kubeadm_manifest_adopted",
            "1 when the component manifest still names certsync's files.",
            self.manifests
                .iter()
                .map(|m| (labels(&[("manifest", &m.manifest)]), flag(m.adopted)))
                .collect(),
        );
        family(
            "certsync_kubeadm_certificate_not_after_seconds",
            "The live certificate's notAfter (Unix time); 0 when it cannot be read.",
            self.certificates
                .iter()
                .map(|c| {
                    (
                        labels(&[("mapping", &c.mapping), ("target", &c.target)]),
                        c.not_after_seconds as f64,
                    )
                })
                .collect(),
        );
        family(
            "certsync_kubeadm_certificate_renew_by_seconds",
            "The end of the live certificate's renewal window (Unix time); 0 when unknown.",
            self.certificates
                .iter()
                .map(|c| {
                    (
                        labels(&[("mapping", &c.mapping), ("target", &c.target)]),
                        c.renew_by_seconds as f64,
                    )
                })
                .collect(),
        );
        family(
            "certsync_kubeadm_ca_not_after_seconds",
            "The CA certificate's notAfter (Unix time); 0 when it cannot be read.",
            self.cas
                .iter()
                .map(|c| (labels(&[("ca", c.name)]), c.not_after_seconds as f64))
                .collect(),
        );
        family(
            "certsync_kubeadm_ca_previous_not_after_seconds",
            "The end of the CA's earliest earlier certificate still trusted beside the renewal \
             (Unix time), ended or not: by then everything off the node must trust the renewal; \
             0 when there is none.",
            self.cas
                .iter()
                .filter(|c| c.in_bundle.is_some())
                .map(|c| {
                    (
                        labels(&[("ca", c.name)]),
                        c.previous_not_after_seconds as f64,
                    )
                })
                .collect(),
        );
        family(
            "certsync_kubeadm_status_problem",
            "1 when status found a problem of this cause (its exit code's class).",
            Cause::ALL
                .iter()
                .map(|c| {
                    (
                        labels(&[("cause", c.name())]),
                        flag(self.problems.iter().any(|p| p.cause == *c)),
                    )
                })
                .collect(),
        );
        family(
            "certsync_kubeadm_status_warning",
            "1 when status warned of this kind: healthy now, but a date ahead or an outage of \
             certsync stops the node unless someone acts.",
            WarningKind::ALL
                .iter()
                .map(|k| {
                    (
                        labels(&[("kind", k.name())]),
                        flag(self.warnings.iter().any(|w| w.kind == *k)),
                    )
                })
                .collect(),
        );
        family(
            "certsync_kubeadm_status_timestamp_seconds",
            "When status ran (Unix time): alert when it stops running.",
            vec![(String::new(), self.checked_at_seconds as f64)],
        );
        s
    }
}

/// `{k="v",...}`, values escaped as the exposition format requires.
fn labels(pairs: &[(&str, &str)]) -> String {
    let body: Vec<String> = pairs
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{k}=\"{v}\"")
        })
        .collect();
    format!("{{{}}}", body.join(","))
}
