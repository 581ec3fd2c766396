//! Applying the plan, in the order that never leaves a component pointed at a file no
//! running certsync renews: backups, certsync's files, its pod, then the gate (that pod,
//! of this configuration and image, ready and every target holding a live pair: it issues
//! every target at start), the ConfigMaps, then the component manifests (whose change
//! restarts the API server the ConfigMaps are written through). A pod not ready in time is
//! taken out (the previous one put back) with everything this run changed.

use std::fmt::Write as _;
use std::path::Path;

use k8s_openapi::api::core::v1::ConfigMap;

use super::api::Map;
use super::error::KubeadmError;
use super::options::Options;
use super::out::Out;
use super::paths::{digest, host};
use super::plan::{self, POD, Plan};
use super::record::{State, backup_path, mkdir, put};
use super::seen::{NotReady, Seen};
use super::wait;

/// How long a failed wait asks the API server for certsync's pod.
const POD_STATE_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// `certsync kubeadm adopt`: the plan, and unless `--dry-run`, applied; told to `out`.
pub async fn adopt(opts: &Options, out: &mut Out) -> Result<(), KubeadmError> {
    let plan = plan::plan(opts).await?;
    let warnings = super::audit::warnings(&opts.dir);
    if opts.json {
        for w in warnings.lines() {
            tracing::warn!(warning = %w.trim_start_matches("warning: "));
        }
        out.push_str(&(serde_json::to_string_pretty(&plan).unwrap_or_default() + "\n"));
    } else {
        out.push_str(&warnings);
        out.push_str(&plan.text());
    }
    if opts.dry_run {
        if !opts.json {
            out.push_str("dry run: nothing was changed\n");
        }
        return Ok(());
    }
    apply(opts, &plan, out).await
}

/// Exactly `plan`, on the node: nothing at all when it is empty but one look at the pod.
pub(super) async fn apply(opts: &Options, plan: &Plan, out: &mut Out) -> Result<(), KubeadmError> {
    let dir = &opts.dir;
    let within = (opts.ready_timeout, &plan.admin, plan.mirror.as_deref());
    if plan.is_empty() {
        // "adopted" holds only while certsync's pod runs: one look says it as it is, never
        // assumed; an empty plan writes and waits for nothing.
        if let Err(seen) = wait::ready_now((dir, &plan.cas), plan.probe, &plan.generation).await {
            let when = "when adopt looked (it waits only when it changes something)";
            let nothing = async { "Nothing was changed (the node is adopted)".to_owned() };
            return Err(not_ready(plan, within, seen, when.into(), nothing).await);
        }
        if !opts.json {
            out.push_str(&ready_line(plan, 0));
        }
        return Ok(());
    }
    let (absent, state) = back_up(dir, plan)?;
    let _ = writeln!(out, "backed up into {}/", plan.backup);
    let ended = wait::dead_targets(dir, &plan.cas).len();
    // Until the gate, nothing a component reads has changed: a failure puts back what was.
    let started = async {
        stop_previous(dir, plan, out).await?;
        files(dir, plan, out)?;
        // certsync's pod written (when it changes), then waited for.
        write(dir, plan, true, out)?;
        wait::ready((dir, &plan.cas), plan.probe, &plan.generation, within, out).await?;
        // Every file certsync's pod mounts read-only, as this run wrote it: else something
        // wrote it after adopt did, and the components must not restart on it.
        let mounted =
            (plan.files.iter()).filter(|f| f.path != POD && plan::read_only_in_pod(&f.path));
        let written = mounted.map(|f| (f.path.as_str(), &f.bytes[..]));
        wait::first_changed(dir, written)?.map_or(Ok(()), |path| Err(Seen::Changed { path }))
    };
    if let Err(seen) = started.await {
        let when = format!("within {}", humantime::format_duration(opts.ready_timeout));
        let undone = super::undo::undo(dir, plan, &absent, within);
        return Err(not_ready(plan, within, seen, when, undone).await);
    }
    out.push_str(&ready_line(plan, ended));

    // From here on a failure leaves the node part-adopted; a re-run finishes it.
    let part = |e| KubeadmError::PartAdopted(Box::new(e));
    changes(dir, plan, out).await.map_err(part)?;
    let apiserver = super::manifest::manifest_path("kube-apiserver");
    let manifest = plan.manifests.iter().find(|m| m.path == apiserver);
    let manifest = manifest.map(|m| (m.path.as_str(), m.after.as_slice()));
    let did = "adopted (every component now reads certsync's files; `certsync kubeadm revert` \
               hands them back)";
    let timeout = opts.api_server_timeout;
    let back = wait::api_server_back(dir, &plan.admin, manifest, timeout, ("certsync's", did));
    out.push_str(&back.await?);
    prune_backups(opts, state, out)?;
    out.push_str("adopted\n");
    Ok(())
}

/// certsync's pod ready, with how many of the plan's targets it issued at start (`ended`).
fn ready_line(plan: &Plan, ended: usize) -> String {
    let (g, targets) = (&plan.generation, plan.mappings.len());
    match ended {
        0 => format!("certsync's pod is ready (generation {g}): every target holds a live pair\n"),
        n => format!(
            "certsync's pod is ready (generation {g}): it issued every target whose pair had ended \
             or was missing ({n} of {targets}); every target now holds a live pair\n"
        ),
    }
}

/// certsync's pod not ready in time: what was seen, the pod's state (asked before
/// `undone` takes the pod out) and what `undone` said.
async fn not_ready(
    plan: &Plan,
    (_, admin, mirror): wait::Within<'_>,
    seen: Seen,
    when: String,
    undone: impl Future<Output = String>,
) -> KubeadmError {
    let pod = wait::pod_state(mirror, admin, POD_STATE_WITHIN).await;
    KubeadmError::NotReady(Box::new(NotReady {
        image: plan.image.clone(),
        generation: plan.generation.clone(),
        when,
        seen,
        pod,
        undone: undone.await,
    }))
}

/// Once adopted: the backups older than the newest `--keep-backups` that revert needs none
/// of, removed (they hold private keys; a link is removed as a link), and the record
/// written without them.
pub(super) fn prune_backups(
    opts: &Options,
    mut state: State,
    out: &mut Out,
) -> Result<(), KubeadmError> {
    let dir = &opts.dir;
    let gone = state.prunable(opts.keep_backups);
    if gone.is_empty() {
        return Ok(());
    }
    for b in &gone {
        let path = host(dir, b);
        super::moves::remove(dir, &path).map_err(|e| KubeadmError::file(&path, e))?;
        let _ = writeln!(
            out,
            "removed the backup {b}/ (older than the newest {}; revert needs none of it)",
            opts.keep_backups
        );
    }
    state.backups.retain(|b| !gone.contains(b));
    state.write(dir)
}

/// Backups of every file adopt replaces or certsync's pod rewrites, and adopt's record as
/// written; the directories this run makes, taken out if certsync's pod is not ready.
fn back_up(dir: &Path, plan: &Plan) -> Result<(Vec<&'static str>, State), KubeadmError> {
    let mut state = plan.record.clone().map(|(_, s)| s).unwrap_or_default();
    let backup = &plan.backup;
    let absent = made_dirs(dir, &mut state);
    mkdir(&host(dir, backup))?;
    let keep = |node_path: &str, bytes| put(&backup_path(dir, backup, node_path), bytes, 0o600);
    for f in &plan.files {
        if let Some(old) = &f.before {
            keep(&f.path, old)?;
        }
    }
    for (f, old, _) in &plan.kubeadms {
        keep(f, old)?;
        let _ = match f.strip_suffix(".crt").or_else(|| f.strip_suffix(".key")) {
            Some(pair) => state.pairs.insert(pair.to_owned(), backup.clone()),
            None => state.kubeconfigs.insert(f.clone(), backup.clone()),
        };
    }
    state.backups.push(backup.clone());
    state.trust.clone_from(&plan.trust_record);
    state.admin_addr = Some(plan.admin_addr);
    state.image = Some(plan.image.clone());
    for m in &plan.manifests {
        keep(&m.path, &m.before)?;
        // A manifest that already names certsync's files (only its trust annotation
        // changes) is adopt's own: revert keeps restoring kubeadm's copy from the earlier
        // backup. One without them (kubeadm's, or regenerated by `kubeadm upgrade`) is
        // kubeadm's copy from now on.
        let kubeadms_backup = match state.manifests.get(&m.path) {
            Some((earlier, _)) if m.flags.is_empty() && m.volumes_added.is_empty() => {
                earlier.clone()
            }
            _ => backup.clone(),
        };
        state
            .manifests
            .insert(m.path.clone(), (kubeadms_backup, digest(&m.after)));
    }
    state.write(dir)?;
    Ok((absent, state))
}

/// The directories adopt makes (absent, or found empty: an older revert's leftovers),
/// added to the record; those absent. Each reached with no link followed: a link there is
/// neither absent nor empty, never taken for a directory adopt made.
fn made_dirs(dir: &Path, state: &mut State) -> Vec<&'static str> {
    let mut absent = Vec::new();
    for d in plan::MADE_DIRS {
        let opened = super::moves::open_beneath(dir, d);
        let gone = matches!(&opened, Err(super::error::FileProblem::Missing));
        if gone {
            absent.push(d);
        }
        let empty = opened.is_ok_and(|d| d.entries().is_ok_and(|mut e| e.next().is_none()));
        if (gone || empty) && !state.made_dirs.iter().any(|m| m == d) {
            state.made_dirs.push(d.to_owned());
        }
    }
    absent
}

/// certsync's files but its pod, the kubeconfigs' CA data and the targets' directories.
fn files(dir: &Path, plan: &Plan, out: &mut Out) -> Result<(), KubeadmError> {
    write(dir, plan, false, out)?;
    for k in &plan.kubeconfigs_trusted {
        crate::writer::update_kubeconfig_ca(&host(dir, k), &plan.ca_bundle)?;
        let _ = writeln!(out, "set the CA data of {k}");
    }
    // Looked at again just before the mkdir: a link planted since the plan is refused, never
    // followed by the mkdir or by the new pod's read-write mount. (A running earlier pod
    // mounts each target it renews, so it cannot rename one away meanwhile.)
    plan::linked_targets(dir, plan.mappings.iter().map(|(_, t, _)| t))?;
    for (_, target, _) in &plan.mappings {
        mkdir(&host(dir, target))?;
    }
    Ok(())
}

/// The plan's files that are certsync's pod (`pod`), or all others.
fn write(dir: &Path, plan: &Plan, pod: bool, out: &mut Out) -> Result<(), KubeadmError> {
    for f in plan.files.iter().filter(|f| (f.path == POD) == pod) {
        put(&host(dir, &f.path), &f.bytes, f.mode)?;
        let _ = writeln!(out, "wrote {}", f.path);
    }
    Ok(())
}

/// A file a running certsync pod mounts read-only stays so only while the host leaves it
/// in place: renamed over, the bind mount stays on the old file and the new one shows
/// through the read-write directory beneath, where the container can replace it before the
/// components restart on it. So when this run replaces such a file, the previous pod is
/// stopped, and gone, first (put back if the new pod is not ready). `Err`: what was seen.
async fn stop_previous(dir: &Path, plan: &Plan, out: &mut Out) -> Result<(), Seen> {
    let replaces_mounted = plan
        .files
        .iter()
        .any(|f| f.before.is_some() && plan::read_only_in_pod(&f.path));
    let Some(old) = plan.pod.as_ref().filter(|_| replaces_mounted) else {
        return Ok(());
    };
    let take = || {
        std::fs::remove_file(host(dir, POD)).map_err(|e| KubeadmError::file(&host(dir, POD), e))?;
        let _ = writeln!(
            out,
            "stopped the previous certsync pod (it mounts files this run replaces read-only)"
        );
        Ok::<_, Seen>(())
    };
    wait::take_out(take, old.asked(), "the previous certsync pod").await?
}

/// Writes the ConfigMap to its map, saying `done`, or warning with what it `left` undone.
async fn write_map(
    plan: &Plan,
    (map, new): (Map, &Option<ConfigMap>),
    done: &str,
    left: &str,
    out: &mut Out,
) {
    if let (Ok(access), Some(new)) = (&plan.admin, new) {
        let put = async { map.put(&access.client(None)?, new).await };
        let _ = match put.await {
            Ok(()) => writeln!(out, "{done}"),
            Err(e) => writeln!(out, "warning: {e}; {left}"),
        };
    }
}

async fn changes(dir: &Path, plan: &Plan, out: &mut Out) -> Result<(), KubeadmError> {
    // Before the manifests: a write racing the API server's restart fails. The CAs are
    // written at the version read: of two nodes renewing at once one fails, says so and
    // goes on; its next adopt takes the other's renewal or writes its own.
    let done = "wrote ConfigMap kube-system/certsync-kubeadm-cas: this node's CA certificates, \
                which every other node's adopt takes";
    let left = "the other nodes keep the CA certificates they have until this node's next adopt \
                writes them (run adopt again)";
    let map = (super::api::PUBLISHED, &plan.cluster_cas_new);
    write_map(plan, map, done, left, out).await;
    // `kube-public/cluster-info` given the CA's certificates. A failure is said and adopt
    // goes on: it matters only to joins after the old certificate's end, and status names it.
    let map = (super::api::CLUSTER_INFO, &plan.cluster_info_new);
    let done = "updated ConfigMap kube-public/cluster-info: its CA data holds the CA's \
                certificates side by side";
    let left = "joins after the old CA certificate's end fail until it holds them (run adopt \
                again)";
    write_map(plan, map, done, left, out).await;
    for m in &plan.manifests {
        put(&host(dir, &m.path), &m.after, 0o600)?;
        let _ = writeln!(out, "changed {}", m.path);
    }
    Ok(())
}
