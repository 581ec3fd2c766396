//! Applying the plan, in the order that never leaves a component pointed
//! at a file that does not exist: backups, certsync's configuration and
//! kubeconfigs, an initial issuance (`run --once` on that configuration),
//! the ClusterConfiguration, certsync's static pod, then the component
//! manifests (whose change restarts the API server the ClusterConfiguration
//! is written through). Every write is atomic (`writer::replace_file`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::Path;

use super::plan::{self, BACKUPS, CONFIG, POD, Plan, STATE, backup_path};
use super::{KUBEADM_DIR, KubeadmError, Options, cluster, digest, host};
use crate::writer::replace_file;

/// adopt's record on the node (`/etc/kubernetes/certsync/adopted.json`):
/// for each manifest it changed, kubeadm's copy in a backup and the
/// digest of what adopt wrote (revert restores the copy only if the
/// manifest is still adopt's, else takes adopt's changes out of it).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct State {
    /// manifest (node path) -> (backup dir, SHA-256 of adopt's version).
    pub manifests: BTreeMap<String, (String, String)>,
    /// Backups made, oldest first.
    pub backups: Vec<String>,
    /// admin.conf and super-admin.conf (node path) -> the backup holding
    /// kubeadm's own, from the first adoption: certsync rewrites them in
    /// place, so revert puts them back.
    #[serde(default)]
    pub kubeconfigs: BTreeMap<String, String>,
    /// kubeadm's pairs certsync keeps in step (prefix, node path without
    /// `.crt`/`.key`) -> the backup holding kubeadm's own, from the first
    /// adoption that kept them: revert hands back whichever lasts longer.
    #[serde(default)]
    pub pairs: BTreeMap<String, String>,
    /// The ClusterConfiguration is known to hold none of adopt's fields
    /// (adopt read it and found none or took them out, or revert took them
    /// out): revert then needs no API server (a revert that stopped after
    /// that step finishes while this node's restarts on kubeadm's manifest).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cluster_config_reverted: bool,
    /// The directories adopt made (or found empty: an earlier revert's
    /// leftovers), node paths: revert removes each once it is empty again.
    /// A record written before this field: all of [`plan::MADE_DIRS`]
    /// (that adopt made every one; kubeadm makes none of them).
    #[serde(default = "made_dirs")]
    pub made_dirs: Vec<String>,
}

fn made_dirs() -> Vec<String> {
    plan::MADE_DIRS.map(str::to_owned).to_vec()
}

impl State {
    pub fn read(dir: &Path) -> Result<Option<Self>, KubeadmError> {
        let Some(bytes) = super::node::read_optional(dir, STATE)? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| KubeadmError::file(&host(dir, STATE), e))
    }

    pub(super) fn write(&self, dir: &Path) -> Result<(), KubeadmError> {
        let bytes = serde_json::to_vec_pretty(self)
            .map_err(|e| KubeadmError::file(&host(dir, STATE), e))?;
        Ok(replace_file(&host(dir, STATE), 0o600, &bytes)?)
    }
}

/// A directory made (with its parents) only root may enter.
pub fn mkdir(path: &Path) -> Result<(), KubeadmError> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(|e| KubeadmError::file(path, e))
}

/// Writes `bytes` to `node_path` atomically, mode 0600, its directory made.
pub fn put(dir: &Path, node_path: &str, bytes: &[u8]) -> Result<(), KubeadmError> {
    let path = host(dir, node_path);
    if let Some(parent) = path.parent() {
        mkdir(parent)?;
    }
    Ok(replace_file(&path, 0o600, bytes)?)
}

/// `certsync kubeadm adopt`: the plan, and unless `--dry-run`, applied.
/// Returns what to print.
pub async fn adopt(opts: &Options) -> Result<String, KubeadmError> {
    let plan = plan::plan(opts).await?;
    // What a container could have left from an earlier adoption, said
    // before anything changes (a warning: adopt goes on).
    let warnings = super::audit::warnings(&opts.dir);
    let mut out = if opts.json {
        for w in warnings.lines() {
            tracing::warn!(warning = %w.trim_start_matches("warning: "));
        }
        serde_json::to_string_pretty(&plan).unwrap_or_default() + "\n"
    } else {
        warnings + &plan.text()
    };
    if opts.dry_run || plan.is_empty() {
        if opts.dry_run && !opts.json {
            out.push_str("dry run: nothing was changed\n");
        }
        return Ok(out);
    }
    apply(opts, &plan, &mut out).await?;
    Ok(out)
}

async fn apply(opts: &Options, plan: &Plan, out: &mut String) -> Result<(), KubeadmError> {
    let dir = &opts.dir;
    let mut state = State::read(dir)?.unwrap_or_default();
    // Backups of every file replaced or changed.
    let backup = &plan.backup;
    for d in plan::MADE_DIRS {
        let absent_or_empty = match std::fs::read_dir(host(dir, d)) {
            Err(e) => e.kind() == std::io::ErrorKind::NotFound,
            Ok(mut entries) => entries.next().is_none(),
        };
        if absent_or_empty && !state.made_dirs.iter().any(|m| m == d) {
            state.made_dirs.push(d.to_owned());
        }
    }
    mkdir(&host(dir, BACKUPS))?;
    mkdir(&host(dir, backup))?;
    for m in &plan.manifests {
        put(dir, &node_rel(dir, backup, &m.path), &m.before)?;
    }
    for f in plan.files.iter().filter(|f| f.action == "replace") {
        if let Some(old) = super::node::read_optional(dir, &f.path)? {
            put(dir, &node_rel(dir, backup, &f.path), &old)?;
        }
    }
    if let Some(s) = &plan.stored {
        put(
            dir,
            &format!("{backup}/cluster-configuration.yaml"),
            s.text.as_bytes(),
        )?;
    }
    for k in plan::EMBEDDED {
        if state.kubeconfigs.contains_key(k) {
            continue;
        }
        if let Some(old) = super::node::read_optional(dir, k)? {
            put(dir, &node_rel(dir, backup, k), &old)?;
            state.kubeconfigs.insert(k.to_owned(), backup.clone());
        }
    }
    for p in plan::pairs(dir) {
        if state.pairs.contains_key(&p) {
            continue;
        }
        for ext in ["crt", "key"] {
            let f = format!("{p}.{ext}");
            let old = super::node::read_optional(dir, &f)?
                .ok_or_else(|| KubeadmError::file(&host(dir, &f), "kubeadm's file is missing"))?;
            put(dir, &node_rel(dir, backup, &f), &old)?;
        }
        state.pairs.insert(p, backup.clone());
    }
    state.backups.push(backup.clone());
    // Whether the ClusterConfiguration is known to hold none of adopt's
    // fields (read, and nothing found); set once adopt took them out. A
    // later revert then needs no API server.
    if plan.cluster_configuration_reachable {
        state.cluster_config_reverted = plan.cluster_configuration.is_empty();
    }
    for m in &plan.manifests {
        state
            .manifests
            .insert(m.path.clone(), (backup.clone(), digest(&m.after)));
    }
    state.write(dir)?;
    let _ = writeln!(out, "backed up into {backup}/");

    // From here on the node is part-adopted: any failure says so, and
    // that a re-run finishes it (each step finds its work done or does it).
    changes(dir, plan, out)
        .await
        .map_err(|e| KubeadmError::PartAdopted(e.to_string()))?;
    out.push_str("adopted\n");
    Ok(())
}

/// adopt's changes after its backups and record: certsync's files, the
/// initial issuance, the ClusterConfiguration, certsync's pod, then the
/// component manifests.
async fn changes(dir: &Path, plan: &Plan, out: &mut String) -> Result<(), KubeadmError> {
    // certsync's files, then every target issued before anything uses it.
    for f in plan.files.iter().filter(|f| f.path != POD) {
        put(dir, &f.path, &f.bytes)?;
        let _ = writeln!(out, "wrote {}", f.path);
    }
    let said = issue(dir).await?;
    let _ = writeln!(out, "{said}");
    // Fields an earlier certsync adopt left in the ClusterConfiguration,
    // taken out before the manifests change: changing the API server's
    // manifest restarts it, and a write racing that restart fails
    // (`apiserver is shutting down`) with the manifests already changed.
    if let (Some(stored), Some(new)) = (&plan.stored, &plan.cluster_configuration_new) {
        cluster::write(stored, new).await?;
        let mut state = State::read(dir)?.unwrap_or_default();
        state.cluster_config_reverted = true;
        state.write(dir)?;
        let _ = writeln!(
            out,
            "took an earlier adopt's fields out of the ClusterConfiguration in kubeadm-config"
        );
    }
    for f in plan.files.iter().filter(|f| f.path == POD) {
        put(dir, &f.path, &f.bytes)?;
        let _ = writeln!(out, "wrote {}", f.path);
    }
    for m in &plan.manifests {
        replace_file(&host(dir, &m.path), 0o600, &m.after)?;
        let _ = writeln!(out, "changed {}", m.path);
    }
    Ok(())
}

/// `node_path` below `backup`, as a node path.
fn node_rel(dir: &Path, backup: &str, node_path: &str) -> String {
    let p = backup_path(dir, backup, node_path);
    let rel = p.strip_prefix(dir).unwrap_or(&p);
    format!("{KUBEADM_DIR}/{}", rel.display())
}

/// The initial issuance: the same code as `certsync run --once --config`
/// on adopt's configuration (its paths made this process's when the node's
/// directory is elsewhere). Skipped when every target already has a live
/// revision (a second adopt: the running certsync owns them, and its pod,
/// restarted for the new configuration, issues again what that changes).
/// What to print.
pub(super) async fn issue(dir: &Path) -> Result<String, KubeadmError> {
    if plan::targets(dir)
        .iter()
        .all(|t| host(dir, t).join("..data").exists())
    {
        return Ok(
            "every target has a live pair: not issued by adopt; certsync's pod restarts for the \
             new configuration and issues again each pair it no longer satisfies (a changed \
             lifetime= or key-alg=)"
                .into(),
        );
    }
    // On the node, the file as written, where it is (`run` judges where it
    // lives too); elsewhere, its text with the paths moved below `dir`.
    let config = if dir == Path::new(KUBEADM_DIR) {
        crate::config::load_once(&host(dir, CONFIG), None)
    } else {
        super::judge::load(dir, &super::node::read(dir, CONFIG)?)
    }
    .map_err(|e| KubeadmError::Issue(e.to_string()))?;
    let failures = Box::pin(crate::sync::once(&config)).await;
    if failures.is_empty() {
        Ok(format!("issued every target once (run --once on {CONFIG})"))
    } else {
        Err(KubeadmError::Issue(
            failures
                .iter()
                .map(|e| crate::error_chain(e))
                .collect::<Vec<_>>()
                .join("; "),
        ))
    }
}
