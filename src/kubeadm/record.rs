//! adopt's record on the node (`/etc/kubernetes/certsync/adopted.json`) and
//! its backups: where each is, read and written. A leaf: adopt, revert,
//! status and the admin.conf reader all read the record, and nothing here
//! knows how a plan is made or applied.

use std::collections::BTreeMap;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};

use super::error::{FileProblem, KubeadmError, RevertError};
use super::manifest::{KUBECONFIGS, P, PE};
use super::paths::{KUBEADM_DIR, host};
use crate::writer::replace_file;

pub const STATE: &str = "/etc/kubernetes/certsync/adopted.json";
pub const BACKUPS: &str = "/etc/kubernetes/certsync/backup";

/// The directories of certsync's layout that adopt makes: its own under
/// `/etc/kubernetes` (the backups live there, so it stays) and the parents
/// of its targets, which revert removes once their targets have moved.
pub const MADE_DIRS: [&str; 3] = [KUBECONFIGS, P, PE];

/// adopt's record on the node (`/etc/kubernetes/certsync/adopted.json`):
/// for each manifest it changed, kubeadm's copy in a backup and the
/// digest of what adopt wrote (revert restores the copy only if the
/// manifest is still adopt's, else takes adopt's changes out of it).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
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
    /// The directories adopt made (or found empty: an earlier revert's
    /// leftovers), node paths: revert removes each once it is empty again.
    pub made_dirs: Vec<String>,
    /// Each trust bundle adopt wrote (node path) -> the CA certificates
    /// (PEM) it put in it: the next adopt makes the bundle from these and
    /// the CA in place, never from the bundle file (`trust.rs`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub trust: BTreeMap<String, Vec<String>>,
    /// certsync's `--admin-addr` as adopt last wrote it: kept by the next
    /// adopt even when certsync's pod manifest is gone (a Prometheus
    /// target never moves by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_addr: Option<std::net::SocketAddr>,
}

impl State {
    pub fn read(dir: &Path) -> Result<Option<Self>, KubeadmError> {
        Ok(Self::read_with_bytes(dir)?.map(|(_, s)| s))
    }

    /// The record with its bytes as read: what adopt puts back when
    /// certsync's pod is not ready.
    pub fn read_with_bytes(dir: &Path) -> Result<Option<(Vec<u8>, Self)>, KubeadmError> {
        let Some(bytes) = super::node::read_optional(dir, STATE)? else {
            return Ok(None);
        };
        let state =
            serde_json::from_slice(&bytes).map_err(|e| KubeadmError::file(&host(dir, STATE), e))?;
        Ok(Some((bytes, state)))
    }

    pub(super) fn write(&self, dir: &Path) -> Result<(), KubeadmError> {
        let bytes = serde_json::to_vec_pretty(self)
            .map_err(|e| KubeadmError::file(&host(dir, STATE), e))?;
        Ok(replace_file(&host(dir, STATE), 0o600, &bytes)?)
    }

    /// The backups (node paths, oldest first) adopt may remove keeping the
    /// newest `keep`: never one the record names as holding kubeadm's copy
    /// of a manifest, kubeconfig or pair (revert hands those back), never
    /// the first (kubeadm's own files as adopt found them). Backups hold
    /// private keys: kept without end they are keys nobody needs.
    pub fn prunable(&self, keep: usize) -> Vec<String> {
        let needed: std::collections::BTreeSet<&str> = self
            .manifests
            .values()
            .map(|(backup, _)| backup.as_str())
            .chain(self.kubeconfigs.values().map(String::as_str))
            .chain(self.pairs.values().map(String::as_str))
            .chain(self.backups.first().map(String::as_str))
            .collect();
        let newest = self.backups.len().saturating_sub(keep);
        self.backups[..newest]
            .iter()
            .filter(|b| !needed.contains(b.as_str()))
            .cloned()
            .collect()
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
    put_mode(dir, node_path, bytes, 0o600)
}

/// [`put`] with `mode` (a certificate: 0644, as kubeadm writes them).
pub fn put_mode(dir: &Path, node_path: &str, bytes: &[u8], mode: u32) -> Result<(), KubeadmError> {
    let path = host(dir, node_path);
    if let Some(parent) = path.parent() {
        mkdir(parent)?;
    }
    Ok(replace_file(&path, mode, bytes)?)
}

/// Where `node_path` is in the backup `backup`.
pub fn backup_path(dir: &Path, backup: &str, node_path: &str) -> PathBuf {
    let rel = node_path
        .strip_prefix("/etc/kubernetes/")
        .unwrap_or(node_path);
    host(dir, backup).join(rel)
}

/// `node_path` below `backup`, as a node path.
pub fn node_rel(dir: &Path, backup: &str, node_path: &str) -> String {
    let p = backup_path(dir, backup, node_path);
    let rel = p.strip_prefix(dir).unwrap_or(&p);
    format!("{KUBEADM_DIR}/{}", rel.display())
}

/// The backup's copy of `node_path`, read beneath the backup's directory
/// handle, never through a link.
pub(super) fn read_backup(
    dir: &Path,
    backup: &str,
    node_path: &str,
) -> Result<Vec<u8>, KubeadmError> {
    let at = backup_path(dir, backup, node_path);
    let backup_of = |problem: FileProblem| RevertError::Backup {
        node_path: node_path.to_owned(),
        at: at.clone(),
        problem: Box::new(problem),
    };
    let not_a_file = || RevertError::NotAFile {
        node_path: node_path.to_owned(),
    };
    let rel = node_path
        .strip_prefix("/etc/kubernetes/")
        .ok_or_else(not_a_file)?;
    let in_backup = format!("{backup}/{rel}");
    let (parent, name) = in_backup.rsplit_once('/').ok_or_else(not_a_file)?;
    let d = super::moves::open_beneath(dir, parent).map_err(backup_of)?;
    Ok(crate::writer::read_beneath(&d, name, &at).map_err(|e| backup_of(FileProblem::Way(e)))?)
}

#[cfg(test)]
mod tests {
    use super::State;

    #[test]
    fn backups_revert_needs_and_the_newest_are_never_prunable() {
        let b = |i: u32| format!("/etc/kubernetes/certsync/backup/2026112{i}T000000Z");
        let mut s = State {
            backups: (0..6).map(b).collect(),
            ..State::default()
        };
        s.manifests.insert("etcd.yaml".into(), (b(0), "d".into()));
        s.manifests
            .insert("kube-apiserver.yaml".into(), (b(2), "d".into()));
        s.kubeconfigs.insert("admin.conf".into(), b(0));
        s.pairs.insert("apiserver".into(), b(1));
        // The first, those revert needs (1, 2) and the newest two stay.
        assert_eq!(s.prunable(2), vec![b(3)]);
        assert_eq!(s.prunable(1), vec![b(3), b(4)]);
        assert_eq!(s.prunable(6), Vec::<String>::new());
        assert_eq!(s.prunable(0), vec![b(3), b(4), b(5)]);
        assert_eq!(State::default().prunable(0), Vec::<String>::new());
    }
}
