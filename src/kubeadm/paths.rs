//! Where the node's files are, and the digest their bytes are known by. A leaf.

use std::path::{Path, PathBuf};

pub const KUBEADM_DIR: &str = "/etc/kubernetes";

/// `/etc/kubernetes/REL` as seen through `dir`.
pub(super) fn host(dir: &Path, node_path: &str) -> PathBuf {
    match node_path.strip_prefix(KUBEADM_DIR) {
        Some(rel) => dir.join(rel.trim_start_matches('/')),
        None => PathBuf::from(node_path),
    }
}

pub(super) fn digest(bytes: &[u8]) -> String {
    hex::encode(ring::digest::digest(&ring::digest::SHA256, bytes))
}

/// A file adopt writes whole.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FileWrite {
    pub path: String,
    /// The bytes the plan found there (`None`: a create).
    #[serde(rename = "action", serialize_with = "action_json")]
    pub before: Option<Vec<u8>>,
    #[serde(serialize_with = "octal")]
    pub mode: u32,
    pub what: String,
    #[serde(skip)]
    pub bytes: Vec<u8>,
}

impl FileWrite {
    pub fn action(&self) -> &'static str {
        action(&self.before)
    }
}

fn action(before: &Option<Vec<u8>>) -> &'static str {
    before.as_ref().map_or("create", |_| "replace")
}

fn action_json<S: serde::Serializer>(before: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(action(before))
}

fn octal<S: serde::Serializer>(mode: &u32, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format!("{mode:04o}"))
}
