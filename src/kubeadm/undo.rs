//! What adopt puts back when certsync's pod is not ready in time: the pod out (the
//! previous one back), certsync's files, kubeadm's files the pod rewrote, the directories
//! this run made, and adopt's record. No component manifest has changed at that point.

use std::path::Path;

use super::error::KubeadmError;
use super::paths::host;
use super::plan::{self, POD, Plan, STATE};
use super::record::put;
use super::{node, wait};

/// Puts back what `plan`'s run changed, `absent` the directories of [`plan::MADE_DIRS`] it
/// made; what it did and did not, in words.
pub async fn undo(dir: &Path, plan: &Plan, absent: &[&str], within: wait::Within<'_>) -> String {
    let (mut done, mut failed) = (Vec::new(), Vec::new());
    let mut fail = |e: &dyn std::fmt::Display| failed.push(e.to_string());
    // This run's pod out, and gone, first; the previous pod last, so that it mounts the
    // files as they were (see `apply::stop_previous`).
    let pod = plan.files.iter().find(|f| f.path == POD);
    if pod.is_some() {
        let take = || {
            match std::fs::remove_file(host(dir, POD)) {
                Ok(()) => done.push("took certsync's pod out".to_owned()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => fail(&KubeadmError::file(&host(dir, POD), e)),
            }
            Ok::<_, std::convert::Infallible>(())
        };
        let this = format!("certsync's pod of generation {}", plan.generation);
        let asked = (plan.probe, Some(plan.generation.as_str()));
        let Ok(stopped) = wait::take_out(take, asked, &this).await;
        if let Err(seen) = stopped {
            fail(&seen);
        }
    }
    done.extend(put_back_files(dir, plan, absent, &mut fail));
    // The previous pod's manifest back, when this run replaced it.
    let previous = pod.and_then(|f| f.before.as_ref()).and_then(|old| {
        match put(&host(dir, POD), old, 0o600) {
            Ok(()) => done.push("put the previous certsync pod back".to_owned()),
            Err(e) => fail(&e),
        }
        let (addr, generation) = plan.pod.as_ref()?.asked();
        generation.map(|g| (g.to_owned(), addr))
    });
    let backup = &plan.backup;
    let mut text = format!(
        "No component manifest was changed; {} (kubeadm's files are in {backup}/)",
        done.join(", ")
    );
    if let Some((g, addr)) = previous {
        let mut kept = super::out::Out::to(std::io::sink());
        let state = match wait::ready((dir, &plan.cas), addr, &g, within, &mut kept).await {
            Ok(()) => "is running and ready".to_owned(),
            Err(seen) => format!("is NOT ready: {seen}"),
        };
        text.push_str(&format!(
            "; the previous certsync pod (generation {g}) {state}"
        ));
    }
    if !failed.is_empty() {
        text.push_str(&format!(
            "; NOT put back: {} (put these back by hand from {backup}/)",
            failed.join("; ")
        ));
    }
    text
}

/// certsync's files as they were, kubeadm's files the pod rewrote, the directories of
/// [`plan::MADE_DIRS`] this run made (`absent`) and adopt's record; what was done.
fn put_back_files(
    dir: &Path,
    plan: &Plan,
    absent: &[&str],
    fail: &mut impl FnMut(&dyn std::fmt::Display),
) -> Option<String> {
    for f in plan.files.iter().filter(|f| f.path != POD) {
        if let Err(e) = put_back(dir, &f.path, f.before.as_ref(), f.mode) {
            fail(&e);
        }
    }
    let mut restored = 0;
    for (f, old, mode) in &plan.kubeadms {
        match put_back(dir, f, Some(old), *mode) {
            Ok(put) => restored += usize::from(put),
            Err(e) => fail(&format!("{f}: {e}")),
        }
    }
    // certsync's own directory holds the backups: it stays.
    for d in absent.iter().filter(|d| **d != plan::MADE_DIRS[0]) {
        let path = host(dir, d);
        if let Err(e) = super::moves::remove(dir, &path) {
            fail(&format!("{}: {e}", path.display()));
        }
    }
    if let Err(e) = put_back(dir, STATE, plan.record.as_ref().map(|(b, _)| b), 0o600) {
        fail(&e);
    }
    (restored > 0).then(|| format!("put back {restored} of kubeadm's files the pod had rewritten"))
}

/// `node_path` as it was (`None`: absent), unless it already is (renaming a copy over it
/// would take it from under a running pod's read-only mount); whether it was written.
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
        Some(old) => put(&path, old, mode)?,
        None => std::fs::remove_file(&path).map_err(|e| KubeadmError::file(&path, e))?,
    }
    Ok(true)
}
