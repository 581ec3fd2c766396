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

use std::path::{Path, PathBuf};

mod admin;
mod api_server;
mod apply;
mod audit;
mod cluster;
mod cluster_info;
mod handback;
mod judge;
mod manifest;
mod moves;
mod node;
mod options;
mod paths;
mod plan;
mod pod;
mod ready;
mod record;
mod revert;
mod revert_apply;
mod status;
mod trust;
mod undo;
mod warning;

pub use apply::adopt;
pub use handback::REVERT_MARGIN_SECS;
pub use options::{Options, RevertOptions};
pub use paths::KUBEADM_DIR;
pub use plan::{Plan, plan};
pub use revert_apply::revert;
pub use status::{Cause, Status, status};
pub use warning::{Warning, WarningKind};

#[derive(Debug, thiserror::Error)]
pub enum KubeadmError {
    /// Something on the node adopt does not recognise: it refuses rather
    /// than guess.
    #[error("refusing to adopt {}: {reason}", .dir.display())]
    Refused {
        dir: PathBuf,
        #[source]
        reason: Box<Refusal>,
    },
    /// The configuration adopt would write is one `certsync run` refuses,
    /// or one that renews a component's certificate too late: refused
    /// before anything is written. `with`: the `--set` options given.
    #[error(
        "refusing to adopt {dir}: the configuration it would write \
         (/etc/kubernetes/certsync.yaml{with}) {problem}; nothing was changed"
    )]
    Configuration {
        dir: PathBuf,
        with: String,
        #[source]
        problem: Box<judge::ConfigProblem>,
    },
    #[error("{}: {problem}", .path.display())]
    File {
        path: PathBuf,
        #[source]
        problem: Box<FileProblem>,
    },
    #[error(transparent)]
    Write(#[from] crate::writer::WriterError),
    #[error("ConfigMap kube-system/kubeadm-config: {0}")]
    ClusterConfig(#[source] Box<cluster::ClusterConfigError>),
    /// Rendering one of certsync's files (its configuration, a kubeconfig,
    /// its pod) failed.
    #[error("initial issuance failed ({0}); no manifest was changed")]
    Issue(#[source] serde_yaml_ng::Error),
    /// adopt failed after its first change (the backups and its record).
    #[error(
        "adopt stopped partway, the node is part-adopted: {0}; run `certsync kubeadm adopt` \
         again to finish it (or `certsync kubeadm revert` to undo it)"
    )]
    PartAdopted(#[source] Box<KubeadmError>),
    #[error("revert: {0}")]
    Revert(Box<RevertError>),
    /// certsync's pod did not become ready: adopt put back what it had
    /// changed, and no component manifest names certsync's files.
    #[error("{0}")]
    NotReady(Box<NotReady>),
    /// Done (`did`: `adopted`, `reverted`), but the API server was not seen
    /// back on the files its new manifest names: not in time, or admin.conf
    /// cannot ask it.
    #[error(
        "{did}, but the API server was not seen back on the files its manifest names (waited \
         {}): {seen}. Look at it on the node (`crictl ps -a --name kube-apiserver`, `crictl \
         logs`); `certsync kubeadm status` and `kubectl get --raw /readyz` once it is up",
        humantime::format_duration(*.waited)
    )]
    NotBack {
        did: &'static str,
        waited: std::time::Duration,
        seen: Box<api_server::NotBack>,
    },
}

/// What is wrong with one of the node's files: another module's error,
/// kept whole, or what kubeadm's module found ([`Found`]).
#[derive(Debug, thiserror::Error)]
pub enum FileProblem {
    #[error("{0}")]
    Found(#[source] Found),
    #[error("{0}")]
    Io(#[source] std::io::Error),
    /// Read beneath a directory handle (its message names the path).
    #[error("{0}")]
    Way(#[source] crate::beneath::PathError),
    /// A read that refused the file; said without its path, which
    /// `File` names.
    #[error("{}", .0.problem())]
    Read(crate::files::FileError),
    #[error("{0}")]
    Blocked(#[source] moves::Blocked),
    #[error("{0}")]
    Pem(#[source] crate::pem::PemError),
    #[error("{0}")]
    Json(#[source] serde_json::Error),
    #[error("{0}")]
    Manifest(#[source] manifest::ManifestError),
    #[error("{0}")]
    Unfit(#[source] manifest::Unfit),
    #[error("{0}")]
    Kubeconfig(#[source] crate::source::client::KubeconfigError),
    /// admin.conf not as kubeadm writes it.
    #[error("{0}")]
    Shape(#[source] admin::ShapeError),
    /// The client pair of admin.conf, not one the node's CA issued.
    #[error("its client certificate: {0}")]
    ClientCert(#[source] node::CertError),
    /// A CA renewed from its certificate and key.
    #[error("{0}")]
    Ca(#[source] crate::source::ca::CaError),
    /// The client configuration made of admin.conf, refused by kube.
    #[error("{0}")]
    Client(#[source] kube::config::KubeconfigError),
}

/// What adopt, revert or status found wrong in a node file that kubeadm
/// wrote (or should have): each refusal its own variant, said once here,
/// the file's path said by [`KubeadmError::File`].
#[derive(Debug, thiserror::Error)]
pub enum Found {
    #[error("missing")]
    Missing,
    #[error("not UTF-8 text")]
    NotUtf8,
    /// A kubeconfig's base64 field (`client-certificate-data`, ...).
    #[error("{field}: not base64 ({source})")]
    NotBase64 {
        field: &'static str,
        #[source]
        source: base64::DecodeError,
    },
    /// A kubeconfig's PEM field, or a CA file, that the PEM reader refused.
    #[error("{field}: {source}")]
    Pem {
        field: &'static str,
        #[source]
        source: crate::pem::PemError,
    },
    #[error("not a certificate ({0})")]
    NotCertificate(#[source] x509_parser::nom::Err<x509_parser::error::X509Error>),
    #[error("its cluster has no server")]
    NoServer,
    #[error("{0} clusters; kubeadm writes one: not a kubeconfig adopt recognises")]
    Clusters(usize),
    #[error("{0} embedded client certificates; kubeadm writes one")]
    ClientCerts(usize),
    #[error("{0} embedded CAs; kubeadm writes one")]
    CaDatas(usize),
    /// The field a reissue or a CA renewal replaces in place is not one
    /// plain value written once (YAML anchors, quoting split across lines):
    /// replacing its text could change another field.
    #[error("its {0} is not written once as one plain value")]
    NotOnce(&'static str),
    #[error(
        "its user has no embedded client-certificate-data/client-key-data; {}",
        admin::ACCEPTED
    )]
    NoEmbeddedPair,
    #[error("holds something other than certificates")]
    NotOnlyCertificates,
    #[error("holds {0} certificates; a CA file holds exactly one")]
    NotOneCertificate(usize),
    #[error("Go would not read it ({0}); adopt trusts only what Go reads")]
    NotAsGoReads(#[source] Box<crate::x509::NotStrict>),
    #[error(
        "exists and adopt did not write it (the node is not adopted): move it away, adopt \
         writes it from the CA certificates"
    )]
    NotAdopts,
}

macro_rules! file_problem {
    ($($variant:ident($ty:ty)),*) => {$(
        impl From<$ty> for FileProblem {
            fn from(e: $ty) -> Self {
                Self::$variant(e)
            }
        }
    )*};
}

file_problem!(
    Found(Found),
    Io(std::io::Error),
    Way(crate::beneath::PathError),
    Read(crate::files::FileError),
    Blocked(moves::Blocked),
    Pem(crate::pem::PemError),
    Json(serde_json::Error),
    Manifest(manifest::ManifestError),
    Unfit(manifest::Unfit),
    Kubeconfig(crate::source::client::KubeconfigError),
    Shape(admin::ShapeError),
    Ca(crate::source::ca::CaError),
    Client(kube::config::KubeconfigError)
);

/// Why adopt refused a node before changing anything: what it found that
/// it does not recognise. Node paths are `/etc/kubernetes/...`.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// A file of certsync's that adopt would write, there with other
    /// bytes before any adoption.
    #[error("{path} exists and adopt did not write it (an unknown certsync setup?)")]
    Unowned { path: String },
    /// `found`: the apiVersion, empty when it is not a string.
    #[error(
        "ClusterConfiguration apiVersion {found:?}: adopt knows kubeadm.k8s.io/v1beta4 (kubeadm 1.31+)"
    )]
    ApiVersion { found: String },
    #[error("external etcd (etcd.external): its certificates are not this node's to renew")]
    ExternalEtcd,
    #[error(
        "certificatesDir is {dir}, not /etc/kubernetes/pki: adopt knows kubeadm's default layout only"
    )]
    CertificatesDir { dir: String },
    #[error(
        "no {path}: external etcd, not a control-plane node, or a `kubeadm join \
         --control-plane` that has not finished (adopt a new node once its join has completed)"
    )]
    NoEtcd { path: String },
    #[error("no {path}: not a kubeadm control-plane node")]
    NoManifest { path: String },
    /// A component manifest with a value of someone else's where adopt
    /// sets one.
    #[error("{path}: {problem}")]
    Conflict {
        path: String,
        problem: manifest::Conflict,
    },
    /// A template kubeadm made, unreadable or not issued by its mapping's CA.
    #[error(transparent)]
    Template(node::CertError),
    #[error("no {file}: kubeadm makes each pair it renews; adopt keeps them in step")]
    NoPair { file: String },
    #[error("encryptionAlgorithm {found:?} is not one adopt knows")]
    EncryptionAlgorithm { found: String },
    #[error("{cert}: a key of a size or curve kubeadm does not make")]
    KeySize { cert: &'static str },
    /// The key algorithm of kubeadm's API server certificate, unreadable.
    #[error(transparent)]
    KeyAlg(node::CertError),
    /// On an adopted node, kubeadm files the first adoption did not back up.
    #[error(
        "{} not in adopt's first backup: each appeared on this node after it was adopted (or \
         an earlier certsync did not back it up), where certsync's container can write, so \
         adopt cannot take it for kubeadm's; nothing was changed. Check each; move it out of \
         /etc/kubernetes (kubeadm writes it again: `kubeadm init phase kubeconfig NAME`, \
         `kubeadm init phase certs NAME`) and adopt again, or revert and adopt afresh",
        .missing.join(", ")
    )]
    Unrecorded { missing: Vec<String> },
}

/// Why revert refused, or stopped: every message names the file or step
/// and says what the node is left as and what to do.
#[derive(Debug, thiserror::Error)]
pub enum RevertError {
    /// A failure once revert has started changing the node: each step
    /// finds its work done or does it, so a re-run finishes.
    #[error(
        "stopped partway, the node is part-reverted: {source}; run `certsync kubeadm revert` \
         again: it finishes what is left"
    )]
    PartReverted { source: Box<KubeadmError> },
    /// A symlink where one of certsync's own files or directories should
    /// be, seen before anything changed.
    #[error(
        "{link} is a symlink, where certsync's {path} should be a directory or file of its \
         own; nothing was changed: remove it (and check who made it), then run revert again"
    )]
    Symlink { link: String, path: String },
    /// The same, seen when about to move or purge it.
    #[error("{link} is a symlink, where certsync's {path} should be; not following it")]
    SymlinkNow { link: String, path: String },
    #[error(
        "kubeadm's copy of {} is not in adopt's backup (an earlier certsync adopted this node \
         without backing it up, or it appeared since); nothing was changed. revert hands back only kubeadm's copy in \
         the backup, or its certificate issued again, never a file certsync's container could \
         have written. Check each; move it out of /etc/kubernetes (kubeadm writes it again: \
         `kubeadm init phase kubeconfig NAME`, `kubeadm init phase certs NAME`), then revert",
        .missing.join(", ")
    )]
    Unrecorded { missing: Vec<String> },
    #[error("{prefix}: not a pair adopt keeps")]
    NotAPair { prefix: String },
    #[error(
        "kubeadm's certificate in {} ends {ends}, within 24 h, and issuing it again from {ca} \
         failed: {source}; nothing was changed",
        .at.display()
    )]
    Reissue {
        at: PathBuf,
        ends: String,
        ca: String,
        source: crate::source::ca::CaError,
    },
    #[error(
        "the CA {ca} ends {ends}, within 24 h: nothing issued from it lasts a day (kubeadm's \
         certificate in {} ends {kubeadms}); nothing was changed. Renew the CA first",
        .at.display()
    )]
    CaEnds {
        ca: String,
        ends: String,
        at: PathBuf,
        kubeadms: String,
    },
    /// kubeadm's copy in the backup could not be read.
    #[error("backup of {node_path}: {problem}")]
    Backup { node_path: String, problem: String },
    /// A name on the way to `node_path` (below `/etc/kubernetes`) that
    /// revert does not go through.
    #[error("{node_path}: {blocked}")]
    Blocked {
        node_path: String,
        blocked: moves::Blocked,
    },
    #[error("{node_path}: not a file path below /etc/kubernetes")]
    NotAFile { node_path: String },
    #[error("purge {node_path}: {source}")]
    Purge {
        node_path: String,
        source: std::io::Error,
    },
    #[error("{}: {source}", .path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A move into the backup that failed (see [`moves::move_path`]).
    #[error("{problem}")]
    Move {
        #[source]
        problem: moves::MovesError,
    },
    /// certsync's pod, its manifest taken out, not seen to stop: its
    /// container could still write what revert hands back.
    #[error("{seen}; nothing of kubeadm's was handed back yet")]
    PodRunning { seen: ready::Seen },
    /// A file revert handed back, changed before any component was pointed
    /// at it.
    #[error(
        "{path} is not what revert wrote any more: something changed it after certsync's pod \
         stopped; no component was pointed at it"
    )]
    Changed { path: String },
    #[error(
        "certsync (pid {pid}) still holds {target} {secs} s after its static pod was \
         removed; stop it, then run revert again"
    )]
    StillHeld {
        pid: String,
        target: String,
        secs: u64,
    },
}

/// What adopt saw of a certsync pod that was not ready in time, and what
/// it put back.
#[derive(Debug)]
pub struct NotReady {
    pub image: String,
    pub generation: String,
    /// `--ready-timeout`, as given.
    pub timeout: String,
    /// What was last seen (see `ready::look`).
    pub seen: ready::Seen,
    /// The kubelet's view (the mirror pod), or where to look on the node.
    pub pod: String,
    /// What adopt put back, and how the node is.
    pub undone: String,
}

impl std::fmt::Display for NotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "certsync's pod (image {}, generation {}) was not ready within {}: {}; its state: {}. {}",
            self.image, self.generation, self.timeout, self.seen, self.pod, self.undone
        )
    }
}

impl From<RevertError> for KubeadmError {
    fn from(e: RevertError) -> Self {
        Self::Revert(Box::new(e))
    }
}

impl KubeadmError {
    fn file(path: &Path, problem: impl Into<FileProblem>) -> Self {
        Self::File {
            path: path.to_owned(),
            problem: Box::new(problem.into()),
        }
    }
}

#[cfg(test)]
mod tests;
