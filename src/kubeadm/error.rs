//! The folder's errors, one concern: `KubeadmError`, what adopt, revert
//! and status stop with, and every error it holds whose own module
//! returns a `KubeadmError` (a file's `FileProblem` and `Found`, adopt's
//! `Refusal`, revert's `RevertError`, a certificate's `CertError`,
//! admin.conf's `ShapeError`, the ClusterConfiguration's
//! `ClusterConfigError`): kept in their modules, each would import this
//! one and be imported by it. The errors of modules that never return a
//! `KubeadmError` stay theirs (`manifest`, `moves`, `judge`, `seen`).

use std::path::{Path, PathBuf};

use super::judge::ConfigProblem;
use super::options::Options;
use super::seen::{NotReady, Seen};
use super::{manifest, moves};

/// Why adopt, revert or status stopped.
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
        problem: Box<ConfigProblem>,
    },
    #[error("{}: {problem}", .path.display())]
    File {
        path: PathBuf,
        #[source]
        problem: Box<FileProblem>,
    },
    #[error(transparent)]
    Write(#[from] crate::writer::WriterError),
    #[error(transparent)]
    ClusterConfig(Box<ClusterConfigError>),
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
        seen: Box<Seen>,
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
    Read(crate::beneath::PathError),
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
    Shape(#[source] ShapeError),
    /// The client pair of admin.conf, not one the node's CA issued.
    #[error("its client certificate: {0}")]
    ClientCert(#[source] CertError),
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
        ACCEPTED
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
    /// A certificate published for the cluster that is not the CA's own:
    /// another subject or key, not signed by that key, or lasting longer
    /// than the certificate in place (one made with the key the container
    /// reads, ending in 2100).
    #[error(
        "holds a certificate that is not this node's CA's own ({0}): if the CA was replaced, \
         delete the ConfigMap (`kubectl -n kube-system delete configmap \
         certsync-kubeadm-cas`) and adopt again"
    )]
    NotTheCas(&'static str),
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
    Blocked(moves::Blocked),
    Pem(crate::pem::PemError),
    Json(serde_json::Error),
    Manifest(manifest::ManifestError),
    Unfit(manifest::Unfit),
    Kubeconfig(crate::source::client::KubeconfigError),
    Shape(ShapeError),
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
    Template(CertError),
    #[error("no {file}: kubeadm makes each pair it renews; adopt keeps them in step")]
    NoPair { file: String },
    #[error("encryptionAlgorithm {found:?} is not one adopt knows")]
    EncryptionAlgorithm { found: String },
    #[error("{cert}: a key of a size or curve kubeadm does not make")]
    KeySize { cert: &'static str },
    /// The key algorithm of kubeadm's API server certificate, unreadable.
    #[error(transparent)]
    KeyAlg(CertError),
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
    /// An option adopt can judge now: certsync's pod would fail on it
    /// after adopt had waited its whole --ready-timeout.
    #[error(transparent)]
    Unfit(super::preflight::Unfit),
    /// Private keys the group or other users may read (or not root's):
    /// adopt does not hand a node's CAs to certsync while any local user
    /// may mint certificates with them.
    #[error(
        "{}; nothing was changed: fix each (chmod 0600, chown root:root), then adopt again",
        .exposed.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    KeysExposed { exposed: Vec<super::keys::Exposed> },
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
    /// kubeadm's copy in the backup (`at`) could not be read.
    #[error("backup of {node_path}: {}: {problem}", .at.display())]
    Backup {
        node_path: String,
        at: PathBuf,
        #[source]
        problem: Box<FileProblem>,
    },
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
    PodRunning { seen: Seen },
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

impl From<RevertError> for KubeadmError {
    fn from(e: RevertError) -> Self {
        Self::Revert(Box::new(e))
    }
}

impl KubeadmError {
    /// adopt refusing the node at `dir` before it changed anything.
    pub(super) fn refused(dir: &Path, reason: Refusal) -> Self {
        Self::Refused {
            dir: dir.to_owned(),
            reason: Box::new(reason),
        }
    }

    pub(super) fn file(path: &Path, problem: impl Into<FileProblem>) -> Self {
        Self::File {
            path: path.to_owned(),
            problem: Box::new(problem.into()),
        }
    }

    /// The configuration adopt would write, refused, with the `--set`
    /// options given.
    pub(super) fn configuration(opts: &Options, problem: ConfigProblem) -> Self {
        Self::Configuration {
            problem: Box::new(problem),
            dir: opts.dir.clone(),
            with: match opts.set.as_slice() {
                [] => String::new(),
                set => set.iter().fold(" with".to_owned(), |s, (k, v)| {
                    s + &format!(" --set {k}={v}")
                }),
            },
        }
    }
}

impl From<KubeadmError> for Seen {
    fn from(e: KubeadmError) -> Self {
        Seen::Failed(Box::new(e))
    }
}

/// Why a certificate on the node is not one adopt takes (or a pair not
/// one its CA issued).
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    #[error("{0}")]
    Read(Box<KubeadmError>),
    #[error("{what}: {source}")]
    Named {
        what: String,
        source: Box<CertError>,
    },
    #[error("not a PEM certificate ({0})")]
    NotPem(String),
    #[error("not a certificate ({0})")]
    NotCertificate(String),
    #[error("its public key cannot be read ({0})")]
    PublicKey(String),
    #[error(
        "{template} was issued by {issuer:?}, not by {ca} ({subject:?}): not a certificate \
         kubeadm made"
    )]
    OtherIssuer {
        template: String,
        issuer: String,
        ca: String,
        subject: String,
    },
    #[error("{template} names {ca} as its issuer but {ca} did not sign it")]
    NotSigned { template: String, ca: String },
    #[error("not issued by the node's CA ({0})")]
    NotTheCas(Box<CertError>),
    #[error("its key is not the certificate's")]
    KeyMismatch,
    #[error("its key: {0}")]
    Key(String),
}

impl CertError {
    pub(super) fn of(self, what: &str) -> Self {
        CertError::Named {
            what: what.to_owned(),
            source: Box::new(self),
        }
    }
}

/// What adopt and revert accept of admin.conf; the rest is refused.
pub(super) const ACCEPTED: &str = "certsync kubeadm accepts admin.conf as kubeadm writes it: a server, \
     certificate-authority-data and an embedded client-certificate-data/client-key-data, nothing \
     that makes it read another file, trust another server or run a command";

/// Why admin.conf is not kubeadm's shape. Names are escaped: the file
/// may be the container's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("no current context")]
    NoContext,
    #[error("no cluster {name:?}")]
    NoCluster { name: String },
    #[error("no user {name:?}")]
    NoUser { name: String },
    #[error("its cluster is empty")]
    EmptyCluster,
    #[error("its user is empty")]
    EmptyUser,
    /// `of`: `cluster` or `user`; `field` as the refusal names it.
    #[error("{of} {name:?} has {field}; {ACCEPTED}")]
    Field {
        of: &'static str,
        name: String,
        field: &'static str,
    },
    #[error("{of} {name:?} has an unknown field {field:?}; {ACCEPTED}")]
    Unknown {
        of: &'static str,
        name: String,
        field: String,
    },
}

/// The key of `kube-system/kubeadm-config` that holds the
/// ClusterConfiguration.
pub(super) const CLUSTER_CONFIGURATION_KEY: &str = "ClusterConfiguration";

/// Why the ConfigMap `kube-system/kubeadm-config` could not be read. The client's errors are said with
/// their causes, once.
#[derive(Debug, thiserror::Error)]
pub enum ClusterConfigError {
    #[error(transparent)]
    Api(super::api::ApiError),
    #[error("ConfigMap kube-system/kubeadm-config: not found")]
    Absent,
    #[error("ConfigMap kube-system/kubeadm-config: no {CLUSTER_CONFIGURATION_KEY} key")]
    NoKey,
    #[error("ConfigMap kube-system/kubeadm-config: {CLUSTER_CONFIGURATION_KEY}: {0}")]
    Yaml(#[source] serde_yaml_ng::Error),
}

impl From<ClusterConfigError> for KubeadmError {
    fn from(e: ClusterConfigError) -> Self {
        Self::ClusterConfig(Box::new(e))
    }
}
