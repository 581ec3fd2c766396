//! Where the node's files are: `/etc/kubernetes` as the node's components
//! name it, each node path as this process reads it below `--kubeadm-dir`,
//! and the digest their bytes are known by (adopt's record, the pod's
//! generation, the trust annotation). A leaf: every module of `kubeadm`
//! reads the node through these.

use std::path::{Path, PathBuf};

/// Where kubeadm keeps everything, as the node's components see it.
pub const KUBEADM_DIR: &str = "/etc/kubernetes";

/// `/etc/kubernetes/REL` as seen through `dir`.
pub(super) fn host(dir: &Path, node_path: &str) -> PathBuf {
    match node_path.strip_prefix(KUBEADM_DIR) {
        Some(rel) => dir.join(rel.trim_start_matches('/')),
        None => PathBuf::from(node_path),
    }
}

/// SHA-256 of `bytes`, hex.
pub(super) fn digest(bytes: &[u8]) -> String {
    hex::encode(ring::digest::digest(&ring::digest::SHA256, bytes))
}

/// A file adopt writes whole.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileWrite {
    pub path: String,
    /// The bytes the plan found there (`None`: none, a create): what adopt
    /// backs up first and puts back if certsync's pod is not ready.
    #[serde(rename = "action", serialize_with = "action_json")]
    pub before: Option<Vec<u8>>,
    #[serde(serialize_with = "octal")]
    pub mode: u32,
    pub what: String,
    #[serde(skip)]
    pub bytes: Vec<u8>,
}

impl FileWrite {
    /// What adopt does to the file, as the plan shows it.
    pub fn action(&self) -> &'static str {
        action(&self.before)
    }
}

fn action(before: &Option<Vec<u8>>) -> &'static str {
    match before {
        Some(_) => "replace",
        None => "create",
    }
}

fn action_json<S: serde::Serializer>(before: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(action(before))
}

/// A file mode as the plan shows it (`0600`).
fn octal<S: serde::Serializer>(mode: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{mode:04o}"))
}
