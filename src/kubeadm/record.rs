//! adopt's record on the node and its backups: where each is, read and written.

use std::collections::BTreeMap;
use std::os::unix::fs::DirBuilderExt as _;
use std::path::{Path, PathBuf};

use super::error::{FileProblem, KubeadmError, RevertError};
use super::manifest::{KUBECONFIGS, P, PE};
use super::paths::{digest, host};
use crate::writer::replace_file;

pub const STATE: &str = "/etc/kubernetes/certsync/adopted.json";
pub const BACKUPS: &str = "/etc/kubernetes/certsync/backup";

/// The directories adopt makes: its own (holding the backups, so it stays) and the parents
/// of its targets.
pub const MADE_DIRS: [&str; 3] = [KUBECONFIGS, P, PE];

/// adopt's record. Each backup named is the one holding kubeadm's own copy, from the first
/// adoption that changed it.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct State {
    /// manifest -> (backup, SHA-256 of adopt's version): revert restores the backup's copy
    /// only while the manifest is adopt's, else takes adopt's changes out of it.
    pub manifests: BTreeMap<String, (String, String)>,
    pub backups: Vec<String>,
    #[serde(default)]
    pub kubeconfigs: BTreeMap<String, String>,
    /// pair prefix -> backup.
    #[serde(default)]
    pub pairs: BTreeMap<String, String>,
    pub made_dirs: Vec<String>,
    /// Each trust bundle -> the CA certificates (PEM) adopt put in it: the next adopt makes
    /// the bundle from these and the CA in place, never from the bundle file.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub trust: BTreeMap<String, Vec<String>>,
    /// `--admin-addr` as last written: kept even when certsync's pod manifest is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_addr: Option<std::net::SocketAddr>,
    /// `--image` as last written: kept even when certsync's pod manifest is gone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

impl State {
    /// The record and its bytes, if the node has one: the one place it is read.
    pub fn read(dir: &Path) -> Result<Option<(Vec<u8>, Self)>, KubeadmError> {
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
        put(&host(dir, STATE), &bytes, 0o600)
    }

    /// The backup of kubeadm's copy of the manifest at `path` when `bytes` are what adopt
    /// wrote there (by the digest recorded).
    pub fn wrote(&self, path: &str, bytes: &[u8]) -> Option<&String> {
        let (backup, adopts) = self.manifests.get(path)?;
        (digest(bytes) == *adopts).then_some(backup)
    }

    /// The backups adopt may remove keeping the newest `keep` (they hold private keys): never
    /// one the record names (revert hands those back), never the first.
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

/// Writes `bytes` to `path` atomically, its directory made.
pub fn put(path: &Path, bytes: &[u8], mode: u32) -> Result<(), KubeadmError> {
    if let Some(parent) = path.parent() {
        mkdir(parent)?;
    }
    Ok(replace_file(path, mode, bytes)?)
}

pub fn backup_path(dir: &Path, backup: &str, node_path: &str) -> PathBuf {
    let rel = node_path
        .strip_prefix("/etc/kubernetes/")
        .unwrap_or(node_path);
    host(dir, backup).join(rel)
}

/// The backup's copy of `node_path` and where it is, read as every node file is
/// ([`super::node::read_optional`]): reached beneath `dir`, never via a link, a regular file.
pub(super) fn read_backup(
    dir: &Path,
    backup: &str,
    node_path: &str,
) -> Result<(PathBuf, Vec<u8>), KubeadmError> {
    let at = backup_path(dir, backup, node_path);
    let node = || node_path.to_owned();
    let rel = (node_path.strip_prefix("/etc/kubernetes/"))
        .ok_or_else(|| RevertError::NotBelow { node_path: node() })?;
    let bytes = super::node::read_optional(dir, &format!("{backup}/{rel}"))?;
    let bytes = bytes.ok_or_else(|| KubeadmError::file(&at, FileProblem::Missing))?;
    Ok((at, bytes))
}

/// [`read_backup`] as text, as a kubeconfig is read.
pub(super) fn read_backup_text(
    dir: &Path,
    backup: &str,
    node_path: &str,
) -> Result<(PathBuf, String), KubeadmError> {
    let (at, bytes) = read_backup(dir, backup, node_path)?;
    let text = String::from_utf8(bytes).map_err(|_| KubeadmError::file(&at, FileProblem::NotUtf8));
    Ok((at, text?))
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
