//! What adopt puts back when certsync's pod is not ready in time: the pod out (the
//! previous one back), certsync's files, kubeadm's files the pod rewrote, the directories
//! this run made, and adopt's record. No component manifest has changed at that point.

use std::net::SocketAddr;
use std::path::Path;

use super::error::KubeadmError;
use super::options::Options;
use super::paths::host;
use super::plan::{self, POD, Plan, STATE};
use super::record::put;
use super::{node, wait};

/// What this run changed that its plan does not hold: kubeadm's files it was the first to
/// back up, and the directories of [`plan::MADE_DIRS`] that did not exist.
pub struct Undo {
    pub kubeadms: Vec<(String, Vec<u8>)>,
    pub absent: Vec<&'static str>,
}

#[derive(Default)]
struct Said {
    done: Vec<String>,
    failed: Vec<String>,
}

impl Undo {
    pub async fn run(self, opts: &Options, plan: &Plan) -> String {
        let dir = &opts.dir;
        let mut said = Said::default();
        // This run's pod out, and gone, first; the previous pod last, so that it mounts the
        // files as they were (see `apply::stop_previous`).
        pod_out(dir, plan, &mut said).await;
        files_back(dir, plan, &mut said);
        self.kubeadms_back(dir, &mut said);
        self.record_back(dir, plan, &mut said);
        let previous = previous_pod_back(dir, plan, &mut said);
        let backup = &plan.backup;
        let mut text = format!(
            "No component manifest was changed; {} (kubeadm's files are in {backup}/)",
            said.done.join(", ")
        );
        if let Some((g, addr)) = previous {
            text.push_str(&match wait::ready(
                dir,
                addr,
                &g,
                opts.ready_timeout,
                &mut super::out::Out::kept(),
            )
            .await
            {
                Ok(()) => {
                    format!("; the previous certsync pod (generation {g}) is running and ready")
                }
                Err(seen) => {
                    format!("; the previous certsync pod (generation {g}) is NOT ready: {seen}")
                }
            });
        }
        if !said.failed.is_empty() {
            text.push_str(&format!(
                "; NOT put back: {} (put these back by hand from {backup}/)",
                said.failed.join("; ")
            ));
        }
        text
    }

    fn kubeadms_back(&self, dir: &Path, said: &mut Said) {
        let mut restored = 0;
        for (f, old) in &self.kubeadms {
            match put_back(dir, f, Some(old), super::handback::kubeadm_mode(f)) {
                Ok(put) => restored += usize::from(put),
                Err(e) => said.failed.push(format!("{f}: {e}")),
            }
        }
        if restored > 0 {
            said.done.push(format!(
                "put back {restored} of kubeadm's files the pod had rewritten"
            ));
        }
    }

    fn record_back(&self, dir: &Path, plan: &Plan, said: &mut Said) {
        for d in &self.absent {
            let path = host(dir, d);
            // certsync's own directory holds the backups: it stays.
            if *d != plan::MADE_DIRS[0]
                && let Err(e) = std::fs::remove_dir_all(&path)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                said.failed.push(format!("{}: {e}", path.display()));
            }
        }
        if let Err(e) = put_back(dir, STATE, plan.record.as_ref().map(|(b, _)| b), 0o600) {
            said.failed.push(e.to_string());
        }
    }
}

/// This run's certsync pod out, when it wrote one; then waits until it no longer answers.
async fn pod_out(dir: &Path, plan: &Plan, said: &mut Said) {
    if !plan.files.iter().any(|f| f.path == POD) {
        return;
    }
    let take = || {
        match std::fs::remove_file(host(dir, POD)) {
            Ok(()) => said.done.push("took certsync's pod out".to_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => said
                .failed
                .push(KubeadmError::file(&host(dir, POD), e).to_string()),
        }
        Ok::<_, std::convert::Infallible>(())
    };
    let pod = format!("certsync's pod of generation {}", plan.generation);
    let asked = (plan.probe, Some(plan.generation.as_str()));
    let Ok(stopped) = wait::take_out(take, asked, &pod).await;
    if let Err(seen) = stopped {
        said.failed.push(seen.to_string());
    }
}

/// The previous certsync pod's manifest back, when this run replaced it; its generation
/// and where it answers.
fn previous_pod_back(dir: &Path, plan: &Plan, said: &mut Said) -> Option<(String, SocketAddr)> {
    let f = plan.files.iter().find(|f| f.path == POD)?;
    let old = f.before.as_ref()?;
    match put(dir, POD, old, 0o600) {
        Ok(()) => said
            .done
            .push("put the previous certsync pod back".to_owned()),
        Err(e) => said.failed.push(e.to_string()),
    }
    let (addr, generation) = plan.pod.as_ref()?.asked();
    generation.map(|g| (g.to_owned(), addr))
}

/// certsync's files as they were. One that already is is left alone: renaming a copy over
/// it would take it from under a running pod's read-only mount.
fn files_back(dir: &Path, plan: &Plan, said: &mut Said) {
    for f in plan.files.iter().filter(|f| f.path != POD) {
        if let Err(e) = put_back(dir, &f.path, f.before.as_ref(), f.mode) {
            said.failed.push(e.to_string());
        }
    }
}

/// `node_path` as it was (`None`: absent), unless it already is; whether it was written.
fn put_back(
    dir: &Path,
    node_path: &str,
    before: Option<&Vec<u8>>,
    mode: u32,
) -> Result<bool, KubeadmError> {
    if node::read_optional(dir, node_path).ok().flatten().as_ref() == before {
        return Ok(false);
    }
    let path = host(dir, node_path);
    match before {
        Some(old) => put(dir, node_path, old, mode)?,
        None => std::fs::remove_file(&path).map_err(|e| KubeadmError::file(&path, e))?,
    }
    Ok(true)
}
