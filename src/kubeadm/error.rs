//! The folder's errors: why adopt, revert or status stopped (`KubeadmError`), what
//! is wrong with a node file (`FileProblem`), why adopt refuses (`Refusal`), why revert
//! refused or stopped (`RevertError`). Kept here: each module returning them would
//! import this one and be imported by it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::seen::{NotReady, Seen};

/// Why adopt, revert or status stopped.
#[derive(Debug, thiserror::Error)]
pub enum KubeadmError {
    #[error("refusing to adopt {}: {reason}", .dir.display())]
    Refused {
        dir: PathBuf,
        #[source]
        reason: Box<Refusal>,
    },
    #[error("{}: {problem}", .path.display())]
    File {
        path: PathBuf,
        #[source]
        problem: Box<FileProblem>,
    },
    #[error(transparent)]
    Write(#[from] crate::writer::WriterError),
    /// A ConfigMap read or written through admin.conf ([`super::api::Map`]).
    #[error("ConfigMap {namespace}/{name}: {action}: {}", crate::error_chain(.source))]
    Api {
        namespace: &'static str,
        name: &'static str,
        action: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("ConfigMap {namespace}/{name}: no answer within {} s", .timeout.as_secs())]
    ApiTimeout {
        namespace: &'static str,
        name: &'static str,
        timeout: Duration,
    },
    #[error("ConfigMap {namespace}/{name}: not found")]
    NoMap {
        namespace: &'static str,
        name: &'static str,
    },
    #[error("initial issuance failed ({0}); no manifest was changed")]
    Issue(#[source] serde_yaml_ng::Error),
    #[error(
        "adopt stopped partway, the node is part-adopted: {0}; run `certsync kubeadm adopt` \
         again to finish it (or `certsync kubeadm revert` to undo it)"
    )]
    PartAdopted(#[source] Box<KubeadmError>),
    #[error("revert: {0}")]
    Revert(Box<RevertError>),
    #[error("{0}")]
    NotReady(Box<NotReady>),
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

/// What is wrong with one of the node's files, said after its path ([`KubeadmError::File`]).
#[derive(Debug, thiserror::Error)]
pub enum FileProblem {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Way(#[from] crate::beneath::PathError),
    /// Said without its path, which `File` names.
    #[error("{}", .0.problem())]
    Read(crate::beneath::PathError),
    #[error("{0}")]
    Pem(#[from] crate::pem::PemError),
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    #[error("{0}")]
    Kubeconfig(#[from] crate::source::client::ClientError),
    /// A kubeconfig refused by writer's code, or for a failure writer's code names (one
    /// variant for each, wherever it is found).
    #[error("{0}")]
    Writer(#[from] crate::writer::WriterError),
    #[error("{0}")]
    Ca(#[from] crate::source::ca::CaError),
    #[error("missing")]
    Missing,
    #[error("{0} is a symlink, not followed")]
    Link(String),
    #[error("{0} is not a directory")]
    NotDir(String),
    #[error("not UTF-8 text")]
    NotUtf8,
    #[error("not a certificate ({0})")]
    NotCertificate(#[from] crate::x509::X509Error),
    #[error("its cluster has no server")]
    NoServer,
    #[error("{0} embedded client certificates; kubeadm writes one")]
    ClientCerts(usize),
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
    NotAsGoReads(#[source] Box<crate::x509::X509Error>),
    #[error(
        "exists and adopt did not write it (the node is not adopted): move it away, adopt \
         writes it from the CA certificates"
    )]
    NotAdopts,
    /// Another subject or key, not signed by that key, or outlasting the certificate in place
    /// (one made with the key the container reads, ending in 2100).
    #[error(
        "holds a certificate that is not this node's CA's own ({0}): if the CA was replaced, \
         delete the ConfigMap (`kubectl -n kube-system delete configmap \
         certsync-kubeadm-cas`) and adopt again"
    )]
    NotTheCas(&'static str),
    // admin.conf not as kubeadm writes it. Names are escaped: the file may be the container's.
    #[error("its {0} is empty")]
    Empty(&'static str),
    /// `field`: the one kubeadm never writes, or `an unknown field "NAME"` (escaped).
    #[error("{of} {name:?} has {field}; {ACCEPTED}")]
    Field {
        of: &'static str,
        name: String,
        field: String,
    },
    #[error("{0}")]
    Unreadable(Box<KubeadmError>),
    #[error("{what}: {source}")]
    Named {
        what: String,
        source: Box<FileProblem>,
    },
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
    #[error("its key is not the certificate's")]
    KeyMismatch,
    #[error("its key: {0}")]
    Key(#[source] Box<crate::validate::ValidationError>),
    // A static pod manifest adopt cannot read or write, or with a value of someone else's
    // where adopt sets one (as found: a caller printing it to a terminal escapes it).
    #[error("refused as YAML: {0}")]
    NotYaml(#[source] crate::files::YamlError),
    #[error("not a Pod whose first container has a command, its volumes and mounts lists")]
    NotAPod,
    // A walk below a directory (audit, keys), said after the entry's path: an entry that
    // could not be listed, inspected or opened is `Named` "could not be {step}".
    #[error("holds more than {0} entries below it, the rest not inspected")]
    TooMany(usize),
    #[error("is deeper than {0} directories, not inspected")]
    TooDeep(usize),
    #[error("cannot be written as YAML: {0}")]
    Render(serde_yaml_ng::Error),
    #[error(
        "--{flag}={found} is neither kubeadm's default ({kubeadm}) nor certsync's ({ours}): a \
         custom path adopt does not know how to keep"
    )]
    FlagValue {
        flag: &'static str,
        found: String,
        kubeadm: String,
        ours: String,
    },
    #[error("no --{flag} (kubeadm always sets it)")]
    NoFlag { flag: &'static str },
    #[error("a volume {name} already exists ({path}, {kind}), not certsync's")]
    Volume {
        name: String,
        path: String,
        kind: String,
    },
    // What status could not read of certsync's configuration or of a live
    // certificate: said as a problem of its class, never skipped.
    /// certsync's configuration, refused as `run` would refuse it.
    #[error("{0}")]
    Config(#[source] Box<crate::config::ConfigError>),
    /// A mapping of certsync's configuration, said after its path.
    #[error("a mapping without a name")]
    Unnamed,
    /// A mapping whose source issues no certificate (not `ca:` or
    /// `csr:`): it has no renewal window.
    #[error("not a ca: or csr: mapping, so no renewal window")]
    NotIssued,
    /// Its target, or the live revision in it, cannot be opened or read.
    #[error("the live certificate cannot be read ({0})")]
    LiveUnreadable(#[source] crate::writer::WriterError),
    /// No live revision, or one that holds no certificate.
    #[error("no live certificate")]
    NoLive,
    #[error("the live revision is damaged ({0})")]
    Damaged(String),
}

impl FileProblem {
    pub(super) fn of(self, what: &str) -> Self {
        Self::Named {
            what: what.to_owned(),
            source: Box::new(self),
        }
    }

    /// A value of someone else's where adopt sets one: a refusal, not an unreadable file.
    pub(super) fn is_conflict(&self) -> bool {
        matches!(
            self,
            Self::FlagValue { .. } | Self::NoFlag { .. } | Self::Volume { .. }
        )
    }
}

/// Why adopt refused a node before changing anything. Node paths are `/etc/kubernetes/...`.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error("{path} exists and adopt did not write it (an unknown certsync setup?)")]
    Unowned { path: String },
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
    /// A certificate adopt refuses; or a manifest holding a value of someone else's where
    /// adopt sets one ([`FileProblem::is_conflict`]), named by its path with `of`.
    #[error(transparent)]
    Cert(FileProblem),
    #[error("no {file}: kubeadm makes each pair it renews; adopt keeps them in step")]
    NoPair { file: String },
    #[error("encryptionAlgorithm {found:?} is not one adopt knows")]
    EncryptionAlgorithm { found: String },
    #[error("{cert}: a key of a size or curve kubeadm does not make")]
    KeySize { cert: &'static str },
    /// adopt would back it up, and revert hand it back, as kubeadm's, as root's.
    #[error(
        "{} not in adopt's first backup: each appeared on this node after it was adopted (or \
         an earlier certsync did not back it up), where certsync's container can write, so it \
         is not taken for kubeadm's; nothing was changed. Check each; move it out of \
         /etc/kubernetes (kubeadm writes it again: `kubeadm init phase kubeconfig NAME`, \
         `kubeadm init phase certs NAME`)",
        .missing.join(", ")
    )]
    Unrecorded { missing: Vec<String> },
    // Options certsync's pod would fail on after adopt waited its --ready-timeout. An image
    // reference is judged by distribution's grammar, as containerd and CRI-O parse it (escaped).
    #[error("--image {image:?} is not an image reference ({why}){IMAGE_FORM}")]
    Image { image: String, why: &'static str },
    #[error(
        "{path} is in adopt's record but gone (certsync's container may have deleted it): put \
         kubeadm's copy back from {backup}/ (cp -p), or revert the node"
    )]
    RecordedGone { path: String, backup: String },
    /// A target certsync's pod would mount read-write, or a path revert moves or purges as
    /// root: either would follow the link to the host directory it names.
    #[error(
        "{path} is reached through the symlink {link}, not followed: remove the link \
         (certsync's container may have made it)"
    )]
    Link { path: String, link: String },
    #[error(
        "no --image, and the node has no certsync pod or record of adopt's naming one: give \
         --image{IMAGE_FORM}"
    )]
    NoImage,
    #[error(
        "--admin-addr {addr}: this node cannot listen there ({source}): certsync's pod would \
         exit at start; give an address the node has (ip -brief address), or 127.0.0.1"
    )]
    NoSuchAddress {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error(
        "--admin-addr {addr}: another process listens on that port, not certsync's pod: \
         certsync's pod would exit at start; choose another port (ss -ltnp shows who holds it)"
    )]
    PortTaken { addr: std::net::SocketAddr },
    // `config`: "the configuration it would write (/etc/kubernetes/certsync.yaml with
    // --set K=V...)", naming the `--set` options given.
    #[error("{config} is one `certsync run` refuses: {source}; nothing was changed")]
    Config {
        config: String,
        source: crate::config::ConfigError,
    },
    #[error(
        "{config} mapping {name:?} is not a ca: mapping: adopt issues {component}'s client \
         certificate; nothing was changed"
    )]
    NotCa {
        config: String,
        name: String,
        component: &'static str,
    },
    #[error("{config} mapping {name:?} has no lifetime; nothing was changed")]
    NoLifetime { config: String, name: String },
    /// `latest`: the share of `lifetime` by which it is renewed; `left`:
    /// what that leaves; `reread`: how often `component` re-reads its
    /// `kubeconfig`'s client certificate file, `margin` what must be left
    /// beyond that (issuing, writing, a late timer); `minimum`: the shortest
    /// lifetime that leaves enough.
    #[error(
        "{config} renews {component}'s client certificate too late: mapping {name:?} (lifetime={}, renewed at \
         the latest at {}% of it) leaves {} of a certificate, and {component} reads it through \
         {kubeconfig} with client-go, which re-reads a client certificate file only every {}; \
         at least {} must be left: give lifetime={} or longer with this renew=, or a renew= \
         that ends earlier; nothing was changed",
        show(*.lifetime),
        (.latest * 1000.0).round() / 10.0,
        show(*.left),
        show(*.reread),
        show(*.reread + *.margin),
        show(*.minimum),
    )]
    TooLate {
        config: String,
        name: String,
        component: &'static str,
        kubeconfig: String,
        lifetime: Duration,
        latest: f64,
        left: Duration,
        reread: Duration,
        margin: Duration,
        minimum: Duration,
    },
    #[error(
        "{path} is on this adopted node, where certsync's pod could have written it: a kubelet \
         whose client certificate fails would bootstrap against the server it names, trusting \
         the CA it embeds. Nothing was changed: check it and delete it"
    )]
    KubeletBootstrap { path: &'static str },
    // A private key others may read (or not root's): adopt does not hand a node's CAs to
    // certsync while any local user may mint certificates with them.
    #[error(
        "{path} (mode {mode:04o}, owner uid {uid}) may be read or replaced by another user than \
         root: chown root:root and chmod 0600 it"
    )]
    KeyExposed { path: String, mode: u32, uid: u32 },
    #[error("{path} {problem}: its keys cannot be judged")]
    KeysUnreadable { path: String, problem: FileProblem },
    #[error(
        "{}; nothing was changed: fix each (chmod 0600, chown root:root), then adopt again",
        .exposed.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    KeysExposed { exposed: Vec<Refusal> },
}

const IMAGE_FORM: &str = ": NAME[:TAG][@DIGEST], e.g. registry.example.com/platform/certsync:0.1.0";

fn show(d: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(d)
}

/// Why revert refused, or stopped: each names the file or step, what is left and what to do.
#[derive(Debug, thiserror::Error)]
pub enum RevertError {
    /// Each step finds its work done or does it, so a re-run finishes.
    #[error(
        "stopped partway, the node is part-reverted: {source}; run `certsync kubeadm revert` \
         again: it finishes what is left"
    )]
    PartReverted { source: Box<KubeadmError> },
    /// revert hands back only kubeadm's copy in the backup, or its certificate issued again,
    /// never a file certsync's container could have written or a path it could have linked.
    #[error("{0}, then run revert again")]
    Planted(Box<Refusal>),
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
        source: Box<crate::source::ca::CaError>,
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
    #[error("purge {node_path}: {source}")]
    Purge {
        node_path: String,
        source: std::io::Error,
    },
    #[error("move {} to {}: {step}{source}", from.display(), to.display())]
    Move {
        from: PathBuf,
        to: PathBuf,
        /// Said before the cause: empty for the rename or a check or fsync around it.
        step: &'static str,
        source: std::io::Error,
    },
    #[error(
        "move {} to {}: both exist and differ; move one of them away by hand",
        from.display(),
        to.display()
    )]
    Differ { from: PathBuf, to: PathBuf },
    #[error("{node_path}: not below /etc/kubernetes")]
    NotBelow { node_path: String },
    /// Its container could still write what revert hands back.
    #[error("{seen}; nothing of kubeadm's was handed back yet")]
    PodRunning { seen: Seen },
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
}

impl From<KubeadmError> for Seen {
    fn from(e: KubeadmError) -> Self {
        Seen::Failed(Box::new(e))
    }
}

pub(super) const ACCEPTED: &str = "certsync kubeadm accepts admin.conf as kubeadm writes it: a server, \
     certificate-authority-data and an embedded client-certificate-data/client-key-data, nothing \
     that makes it read another file, trust another server or run a command";
