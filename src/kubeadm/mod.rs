//! `certsync kubeadm adopt` and `revert`: a kubeadm control-plane node's
//! certificates handed to certsync's `ca:` mappings, and back; `status`:
//! whether a node is adopted and healthy.
//!
//! The layout is the one `docs/guides/kubeadm-control-plane.md` found on
//! kubeadm v1.36's own manifests: etcd's targets under `pki/etcd/certsync`
//! (the only part of `pki` its pod mounts), the API server's under
//! `pki/certsync`, the controller-manager and scheduler given kubeconfigs of
//! certsync's that reference their client targets by file. Manifests change
//! only in what kubeadm writes for a ClusterConfiguration's `extraArgs` and
//! `extraVolumes`; the ClusterConfiguration in the `kubeadm-config`
//! ConfigMap stays kubeadm's (see `cluster`).
//!
//! Every path is the node's (`/etc/kubernetes/...`), read and written below
//! `--kubeadm-dir` (the same directory on a real node; a node's directory
//! seen from elsewhere in tests).

mod admin;
mod api;
mod apply;
mod audit;
mod choices;
mod cluster;
mod cluster_info;
mod error;
mod handback;
mod judge;
mod keys;
mod manifest;
mod moves;
mod node;
mod options;
mod out;
mod paths;
mod plan;
mod pod;
pub(crate) mod preflight;
mod published;
mod record;
mod revert;
mod revert_apply;
mod seen;
mod status;
mod trust;
mod undo;
mod wait;
mod warning;

pub use apply::adopt;
pub use error::{FileProblem, KubeadmError, Refusal, RevertError};
pub use handback::REVERT_MARGIN_SECS;
pub use options::{Options, RevertOptions};
pub use out::Out;
pub use paths::KUBEADM_DIR;
pub use plan::{Plan, plan};
pub use revert_apply::revert;
pub use seen::NotReady;
pub use status::{Cause, Status, status};
pub use warning::{Warning, WarningKind};

#[cfg(test)]
mod tests;
