//! `certsync kubeadm adopt` and `revert`: a kubeadm control-plane node's
//! certificates handed to certsync's `ca:` mappings, and back; `status`:
//! whether a node is adopted and healthy. The layout is
//! `docs/guides/kubeadm-control-plane.md`'s: etcd's targets under
//! `pki/etcd/certsync` (the only part of `pki` its pod mounts), the rest under
//! `pki/certsync`; manifests change only as a ClusterConfiguration's
//! `extraArgs`/`extraVolumes` would change them, and the ClusterConfiguration
//! stays kubeadm's. Every path is the node's (`/etc/kubernetes/...`), read and
//! written below `--kubeadm-dir`.

mod admin;
mod api;
mod apply;
mod audit;
mod choices;
mod error;
mod handback;
mod judge;
mod manifest;
mod moves;
mod node;
mod options;
mod out;
mod paths;
mod plan;
mod pod;
pub(crate) mod preflight;
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
pub use error::{KubeadmError, Refusal};
pub use options::{Options, RevertOptions};
pub use out::Out;
pub use revert_apply::revert;
pub use status::{Status, status};

#[cfg(test)]
mod tests;
