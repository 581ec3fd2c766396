//! `certsync kubeadm revert`: its [`RevertPlan`] printed or carried out, in an order a
//! re-run completes from wherever it stopped.

use std::path::Path;
use std::time::Duration;

use super::error::{KubeadmError, RevertError};
use super::moves;
use super::options::RevertOptions;
use super::paths::host;
use super::plan::{POD, STATE, backup_path};
use super::revert::{self, RevertPlan};
use crate::writer::{Claim, Writer, WriterError, replace_file};

pub async fn revert(opts: &RevertOptions) -> Result<String, KubeadmError> {
    let Some(mut plan) = revert::plan(opts)? else {
        return Ok(
            "not adopted (no /etc/kubernetes/certsync/adopted.json): nothing to do\n".to_owned(),
        );
    };
    if opts.dry_run {
        return Ok(plan.report(None));
    }
    let part = |e| RevertError::PartReverted {
        source: Box::new(e),
    };
    apply(&opts.dir, &mut plan).await.map_err(part)?;
    let api_server = plan
        .api_server()
        .map(|m| (m.node_path.as_str(), m.bytes.as_slice()));
    let did = ("kubeadm's", "reverted (every file is kubeadm's again)");
    // Read now: kubeadm's admin.conf handed back, adopt's record moved away.
    let admin = super::admin::Access::read(&opts.dir, None).await;
    let timeout = opts.api_server_timeout;
    let back = super::wait::api_server_back(&opts.dir, &admin, api_server, timeout, did).await?;
    // kubelet.conf lacking the CA in place, as the plan read it (revert never writes it;
    // none: unreadable), as nothing watches it once the node is kubeadm's.
    let now = crate::validate::unix_seconds(std::time::SystemTime::now());
    let fix = "add /etc/kubernetes/pki/ca.crt (the renewed CA certificate) to its \
               certificate-authority-data and restart the kubelet, on this node and every node \
               whose kubelet.conf was made before the renewal";
    let kubelet = (plan.ca.as_ref())
        .and_then(|ca| super::trust::kubelet_trust(&opts.dir, &ca.der, now, fix))
        .map_or(String::new(), |(_, w)| format!("warning: {w}\n"));
    Ok(plan.report(Some((&back, &kubelet))))
}

/// Carries `plan` out; the directories adopt made are left in `plan` as found.
async fn apply(dir: &Path, plan: &mut RevertPlan) -> Result<(), KubeadmError> {
    let newest = &plan.newest;
    // certsync's pod first, and its daemon gone (its claims taken) before kubeadm's files
    // are handed back: a running daemon would bring them to its pair again, and its
    // container could write over what is handed back (kubeadm's kubeconfigs, which root's
    // tools run). It is waited for, not judged by whether it still holds its locks.
    if let Some(pod) = &plan.pod {
        let take = || move_away(dir, newest, POD);
        super::wait::take_out(take, pod.asked(), "certsync's pod")
            .await?
            .map_err(|seen| RevertError::PodRunning { seen })?;
    }
    // Held until every target has moved: no certsync publishes into one.
    let _claims = claim_targets(dir, &plan.own[..plan.targets], CLAIM_WAIT).await?;
    for h in &plan.handbacks {
        super::handback::write(dir, &h.node_path, &h.bytes)?;
    }
    let written = (plan.handbacks.iter()).map(|h| (h.node_path.as_str(), &h.bytes[..]));
    if let Some(path) = super::wait::first_changed(dir, written)? {
        return Err(RevertError::Changed { path }.into());
    }
    for m in &plan.manifests {
        replace_file(&host(dir, &m.node_path), 0o600, &m.bytes)?;
    }
    for t in &plan.own {
        put_away(dir, newest, t, plan.opts.purge)?;
    }
    let made: Vec<String> = plan.dirs.drain(..).map(|(d, _)| d).collect();
    plan.dirs = revert::tidy(dir, &made, &[STATE.to_owned()], false);
    // Last: while the record is in place, revert is not done.
    let to = backup_path(dir, &plan.newest, "/etc/kubernetes/reverted.json");
    moves::move_path(dir, &host(dir, STATE), &to)?;
    Ok(())
}

fn put_away(dir: &Path, newest: &str, t: &str, purge: bool) -> Result<(), KubeadmError> {
    // Checked again: the container may have made a symlink after the plan's check.
    if moves::reach_again(dir, t)?.is_none() {
        return Ok(());
    } else if !purge {
        return move_away(dir, newest, t);
    }
    let node_path = t.to_owned();
    let gone = moves::remove(dir, &host(dir, t));
    Ok(gone.map_err(|source| RevertError::Purge { node_path, source })?)
}

/// How long revert waits for certsync's daemon to let go of its targets: the pod's grace
/// period (30 s) after a kubelet's manifest poll.
const CLAIM_WAIT: Duration = Duration::from_secs(90);

/// certsync's claim on each of its `targets`, taken before they move: a daemon still
/// stopping that published after its target moved would create it again in place, a
/// target nothing renews. Waits up to `wait` for it to exit.
pub(super) async fn claim_targets(
    dir: &Path,
    targets: &[String],
    wait: Duration,
) -> Result<Vec<Claim>, KubeadmError> {
    let mut claims = Vec::new();
    for t in targets {
        // Looked at again now that certsync's pod is gone: a link the container made since
        // the plan's look would lead root's claim into the host directory it names. A
        // directory as reached (not by its name again, which follows a link), else none.
        let reached = moves::reach_again(dir, t)?;
        if reached.is_none_or(|w| w.st.st_mode & nix::libc::S_IFMT != nix::libc::S_IFDIR) {
            continue;
        }
        let writer = Writer::existing(host(dir, t))?;
        let claim = async |_| match writer.claim() {
            Err(WriterError::Owned { pid, .. }) => Err(pid),
            other => Ok(other),
        };
        let claimed = crate::shutdown::poll(wait, Duration::from_millis(250), claim).await;
        let (target, secs) = (t.clone(), wait.as_secs());
        claims.push(claimed.map_err(|pid| RevertError::StillHeld { pid, target, secs })??);
    }
    Ok(claims)
}

fn move_away(dir: &Path, backup: &str, node_path: &str) -> Result<(), KubeadmError> {
    let from = host(dir, node_path);
    let base = backup_path(dir, backup, node_path);
    if let Some(parent) = base.parent() {
        super::record::mkdir(parent)?;
    }
    // An earlier copy under this name is kept beside as NAME.reverted-N, never overwritten
    // (the move refuses one that differs); a move that stopped after its copy is found again.
    let name = base.file_name().unwrap_or_default().to_string_lossy();
    let names = (1..).map(|n| base.with_file_name(format!("{name}.reverted-{n}")));
    for kept in std::iter::once(base.clone()).chain(names) {
        match moves::move_path(dir, &from, &kept) {
            Err(RevertError::Differ { .. }) => {}
            done => return Ok(done?),
        }
    }
    Ok(())
}
