//! The parsed command line (`cli`) and config file → a validated [`Config`]
//! for `run`, an `ApproverConfig` for `approve`.
//!
//! Every flag is also a `CERTSYNC_*` environment variable. Mappings come from
//! repeatable `--sync` flags and from the optional YAML `--config` file; both
//! forms go through the same [`MappingSpec`], so they accept exactly the same
//! options and produce the same errors.
//!
//! Flag form: `KIND:SOURCE=TARGET[,OPTION=VALUE]...`
//!
//! ```text
//! dir:/var/lib/kubelet/pki=/etc/certs/kubelet,combined=kubelet-server-current.pem
//! dir:/etc/kubernetes/pki=/etc/certs/apiserver,cert=apiserver.crt,key=apiserver.key
//! secret:openshift-kube-scheduler/kube-scheduler-client-cert-key=/etc/certs/client
//! configmap:kube-system/ca-bundle=/etc/certs/ca,ca-only,ca=ca-bundle.crt
//! csr:kubernetes.io/kube-apiserver-client=/etc/certs/client,cn=system:kube-scheduler
//! ca:/etc/kubernetes/pki/ca=/etc/kubernetes/pki/certsync/apiserver,template=/etc/kubernetes/pki/apiserver.crt
//! ```
//!
//! Paths containing `=` or `,` need the config file.
//!
//! - [`mapping`]: a mapping as written → one validated [`Mapping`] per
//!   source kind;
//! - [`options`]: the `--sync` form read into the file's struct, and the
//!   options a mapping sets checked against the grammar
//!   ([`crate::config::grammar`]);
//! - [`issue`]: the options `csr:` and `ca:` share, and each one's own;
//! - [`file`]: the YAML config file as read;
//! - [`settings`]: `run`'s settings, one typed value (flags and
//!   environment over the config file over the defaults, unknown keys
//!   refused), and `--print-config`;
//! - [`overlap`]: canonical paths, so no two mappings and no source and
//!   target overlap.

mod file;
pub mod grammar;
#[cfg(test)]
mod grammar_tests;
mod guard;
mod issue;
mod mapping;
mod options;
mod overlap;
mod pod;
mod settings;
#[cfg(test)]
mod tests;
mod tree;

use crate::bundle::BundleError;
use crate::cli::{ApproveArgs, PolicyArgs, RunArgs, ValueError};
use crate::files::OwnedError;
use crate::source::csr::USAGES as CSR_USAGES;
pub(crate) use file::read_config_text;
pub use file::{ConfigFile, FileSetting};
use grammar::{MappingOption, SourceKind};
pub use mapping::{EventsOn, MappingSpec, Source};
pub(crate) use settings::as_written;
pub use settings::{Flag, Parsed, Settings, command, parse, print_config};

use guard::{
    ca_paths_guarded, csr_paths_guarded, pidfile_dir_guarded, source_guarded, target_guarded,
};
pub use overlap::resolve_path;
use overlap::{check_overlaps, copies_guarded};
use pod::HOW;
use std::path::PathBuf;
use std::time::Duration;

use crate::bundle::{Item, Layout};
use crate::reload::http::{HttpHook, HttpHookConfig};
use crate::reload::pid::Target;
use crate::reload::verify::ServingCheck;
use crate::reload::{Method, ReloadConfig};
use crate::source::client::ClientSettings;
use crate::validate::Expect;
use crate::writer::WriterOptions;

/// Why `run`'s or `approve`'s configuration is refused. The variants
/// first name where (a `--sync` flag, the file, a mapping), and carry one
/// of the reasons below as `problem`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--sync {spec:?}: {problem}")]
    Flag {
        spec: String,
        #[source]
        problem: Box<ConfigError>,
    },
    #[error("{path}: {problem}")]
    File {
        path: PathBuf,
        #[source]
        problem: Box<ConfigError>,
    },
    #[error("mapping {mapping:?}: {problem}")]
    Mapping {
        mapping: String,
        #[source]
        problem: Box<ConfigError>,
    },
    /// A path of the mapping another user could change.
    #[error("mapping {mapping:?}: {problem}")]
    Guard {
        mapping: String,
        #[source]
        problem: Box<ConfigError>,
    },
    /// `--reload-pidfile`'s directory is under one another user could
    /// replace: with a link to a root-owned one whose root-owned pidfile
    /// names a root process.
    #[error(
        "--reload-pidfile {}: {source}, who could replace the pidfile's directory and have root \
         signal another process; keep it in a directory under root's",
        pidfile.display()
    )]
    PidfileDir {
        pidfile: PathBuf,
        source: crate::files::OwnedError,
    },
    /// Where this mapping's paths meet another's (or its own) where they
    /// must not.
    #[error("mapping {mapping:?}: {conflict}")]
    Conflict {
        mapping: String,
        #[source]
        conflict: Box<ConfigError>,
    },
    /// An `update-kubeconfig=` or `update-pair=` file certsync may not keep
    /// (the writer's error names the option and path).
    #[error("mapping {mapping:?}: {source}")]
    Copy {
        mapping: String,
        #[source]
        source: crate::writer::WriterError,
    },
    #[error("no mappings: give at least one --sync or a --config file with mappings")]
    NoMappings,
    /// Two ways to reload the main container (at most one is taken).
    #[error("reload: --{first} and --{second} exclude each other: give one way to reload")]
    ReloadMethods {
        first: &'static str,
        second: &'static str,
    },
    /// A setting given as a flag or variable, refused by its flag's
    /// parser when read with the config file's.
    #[error("--{flag}: {source}")]
    Setting {
        flag: String,
        #[source]
        source: serde::de::value::Error,
    },
    #[error("reload: --reload-cmdline: {0}")]
    ReloadCmdline(#[source] regex::Error),
    #[error("reload: {0}")]
    ReloadUrl(#[source] crate::reload::ReloadError),
    /// `--print-config` could not write what it checked as YAML.
    #[error("--print-config: {0}")]
    Print(#[source] serde_yaml_ng::Error),

    // A kubelet-serving policy that would trust node-written addresses alone.
    #[error("--node-cidr {cidr} is every address: pass --allow-any-node-address if that is meant")]
    EveryAddress { cidr: String },
    #[error(
        "no --node-cidr: say which networks node addresses come from \
         (e.g. --node-cidr 192.168.10.0/24), or pass --allow-any-node-address \
         to accept any address a node lists in its own Node status"
    )]
    NoNodeCidr,

    // Why `--events` cannot name the Pod it needs.
    /// `POD_NAME` or `POD_NAMESPACE` (`var`) set to no Kubernetes name.
    #[error("--events: {var}: {source}")]
    EventsNotAName {
        var: &'static str,
        source: Box<ConfigError>,
    },
    #[error(
        "--events: mapping {mapping:?} (ca:) has no Kubernetes object: its Events go on the Pod certsync \
         runs in, named by POD_NAME and POD_NAMESPACE, which are not both set; {HOW}; or drop \
         --events"
    )]
    EventsNoPod { mapping: String },

    // A `--sync` flag that is not `KIND:SOURCE=TARGET[,OPTION=VALUE]...` as
    // the grammar reads it (the flag is named beside it,
    // [`ConfigError::Flag`]).
    #[error("expected KIND:SOURCE=TARGET")]
    NoTarget,
    #[error("the target directory is empty")]
    EmptyTarget,
    #[error(
        "unknown option {option:?} (known: {}; `certsync run -h` says which kinds each applies to)",
        grammar::OPTIONS.iter().map(|o| o.name).collect::<Vec<_>>().join(", ")
    )]
    UnknownOption { option: String },
    #[error("option {option:?} needs a value ({option}=...)")]
    NeedsValue { option: String },
    #[error("{option} takes no value or true/false, got {value:?}")]
    NotSwitch { option: String, value: String },
    #[error("option {option:?} needs a numeric id, got {value:?}")]
    NotId { option: String, value: String },
    /// Given twice, one of the two would be dropped without a word.
    #[error("option {option:?} is given twice")]
    OptionTwice { option: String },
    /// The options read, not the file's mapping (a value of the wrong
    /// shape).
    #[error("{0}")]
    Shape(#[source] serde_json::Error),

    // A mapping's options against the grammar, refused.
    #[error("unknown option {option:?}")]
    Unknown { option: String },
    #[error(
        "{name} does not apply to {kind}: sources{why}; {name} applies to {kinds} sources only",
        name = .option.name,
        kind = .kind.name(),
        why = .kind.publishes().map(|p| format!(" ({p})")).unwrap_or_default(),
        kinds = grammar::kinds_in_words(.option.kinds),
    )]
    NotForKind {
        option: &'static MappingOption,
        kind: SourceKind,
    },
    #[error("the mapping cannot be read back: {problem}")]
    Unreadable { problem: String },
    #[error("{option} goes with {needs}=")]
    Needs {
        option: &'static str,
        needs: &'static str,
    },
    #[error("{other} and {option}= exclude each other")]
    Excludes {
        option: &'static str,
        other: &'static str,
    },

    // A `clustertrustbundle:` selection refused.
    #[error("label {label:?} is not KEY=VALUE")]
    LabelNotKeyValue { label: String },
    #[error(
        "label= selects among a signer's bundles: give clustertrustbundle:SIGNER, not a \
         bundle name"
    )]
    LabelWithName,

    // Why one mapping, as written, is refused (the mapping is named beside
    // it, [`ConfigError::Mapping`]).
    #[error("source {given:?} has no KIND: prefix (e.g. dir:/path)")]
    NoKind { given: String },
    #[error(
        "unknown source kind {kind:?} (supported: {})",
        SourceKind::ALL.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
    )]
    UnknownKind { kind: String },
    #[error("{given:?}: expected NAMESPACE/NAME")]
    NotNamespaced { given: String },
    /// A Kubernetes namespace or object name that is not one.
    #[error(
        "{what} {value:?} is not a valid Kubernetes {what} (lower-case DNS-1123, at most {max} characters)"
    )]
    Name {
        what: &'static str,
        value: String,
        max: usize,
    },
    #[error("dir: needs a directory path")]
    NoDirectory,
    #[error("a tree: mapping is expanded before it is resolved")]
    TreeUnexpanded,
    #[error("a tree: mapping lists its objects: secret=NAME, configmap=NAME (or optional-...)")]
    TreeLists,
    #[error(
        "a tree: mapping names each object itself, publishes every key and says which are \
         optional (no name=, files=, optional)"
    )]
    TreeNamesItself,
    #[error("combined and ca-only exclude each other")]
    CombinedCaOnly,
    #[error("combined replaces cert and key; give one or the other")]
    CombinedAndPair,
    #[error("a ca-only mapping takes no cert or key")]
    CaOnlyAndPair,
    /// A file name the target may not hold; `option` the option that
    /// gave it (`combined`, `files=NAME`), none for a source file name.
    #[error("{}{source}", option.as_ref().map(|o| format!("{o}: ")).unwrap_or_default())]
    FileName {
        option: Option<String>,
        source: crate::bundle::BundleError,
    },
    #[error("files=all publishes every file; give no other files=")]
    AllAndNamed,
    #[error("files=: {name} is published twice")]
    PublishedTwice { name: String },
    #[error(transparent)]
    Mode(#[from] crate::cli::ValueError),
    #[error("owner and group must be real ids, not 4294967295 (-1)")]
    NotRealId,
    #[error("verify: {0}")]
    Verify(#[from] crate::reload::ReloadError),
    #[error("verify= needs a certificate/key pair, not a CA bundle")]
    VerifyCaOnly,
    /// `update-kubeconfig=` or `update-pair=` (`option`) not absolute.
    #[error(
        "{option} {}: give an absolute path{} (e.g. {})",
        path.display(),
        if *option == "update-pair" { " without .crt/.key" } else { "" },
        if *option == "update-pair" { "/etc/kubernetes/pki/apiserver" } else { "/etc/kubernetes/admin.conf" }
    )]
    CopyNotAbsolute { option: &'static str, path: PathBuf },
    /// A copy inside the mapping's own target.
    #[error(
        "{option} {} is inside the target {}; {}",
        path.display(),
        target.display(),
        if *option == "update-pair" {
            "it names kubeadm's copy of the pair elsewhere"
        } else {
            "it names a kubeconfig elsewhere (write-kubeconfig= publishes one in the target)"
        }
    )]
    CopyInOwnTarget {
        option: &'static str,
        path: PathBuf,
        target: PathBuf,
    },
    #[error(
        "update-pair {}: give the path without its extension; certsync writes PREFIX.crt and \
         PREFIX.key",
        prefix.display()
    )]
    PairWithExtension { prefix: PathBuf },

    // An option of a `csr:` or `ca:` mapping refused.
    #[error(transparent)]
    KeyAlg(crate::x509::X509Error),
    #[error("ip {value:?} is not an IPv4 or IPv6 address")]
    Ip { value: String },
    #[error("dns {value:?} is not a DNS name")]
    Dns { value: String },
    #[error("dns: {0}")]
    DnsRule(crate::x509::X509Error),
    #[error("cn and o may not be empty")]
    EmptySubject,
    #[error("a csr: mapping needs a subject: cn=, dns= or ip=")]
    NoCsrSubject,
    #[error("a ca: mapping needs a subject: cn=, dns=, ip= or template=")]
    NoCaSubject,
    #[error(
        "signer {signer} is not one whose usages certsync knows; give them, e.g. \
         usage=digital-signature,usage=server-auth"
    )]
    UnknownSignerUsages { signer: String },
    #[error(
        "a ca: mapping needs its usages (usage=digital-signature,\
         usage=key-encipherment,usage=server-auth) or template=PATH"
    )]
    NoCaUsages,
    #[error("usage {usage:?} is not a Kubernetes key usage (known: {})", CSR_USAGES.join(", "))]
    UnknownUsage { usage: String },
    #[error("usage {usage:?} is given twice")]
    UsageTwice { usage: String },
    #[error(transparent)]
    NotLeaf(crate::source::csr::CaUsage),
    #[error("lifetime: {source}{why}")]
    Lifetime {
        #[source]
        source: ValueError,
        why: &'static str,
    },
    #[error("approval-timeout: {0}")]
    ApprovalTimeout(#[source] ValueError),
    #[error(
        "renew {value:?} is not a window LO-HI of the lifetime such as 0.7-0.9 or 70%-90% \
         (both above 0 and below 1, LO <= HI)"
    )]
    Renew { value: String },
    #[error(
        "the signer kubernetes.io/legacy-unknown cannot be requested in certificates.k8s.io/v1"
    )]
    LegacyUnknown,
    #[error(
        "csr:{signer}: the signer name must be DOMAIN/PATH, e.g. \
         csr:kubernetes.io/kube-apiserver-client"
    )]
    SignerName { signer: String },
    #[error("ca={value}: a ClusterTrustBundle is selected by a signer name DOMAIN/PATH")]
    CaBundleSigner { value: String },
    #[error("ca=file: needs a path")]
    CaFileEmpty,
    #[error("ca key: {0}")]
    CaKey(#[source] BundleError),
    #[error(
        "ca {value:?}: for a csr: mapping give the signer's CA as file:PATH, \
         configmap:NAMESPACE/NAME[/KEY] or clustertrustbundle[:SIGNER]"
    )]
    CaSource { value: String },
    #[error("write-kubeconfig: {0}")]
    WriteKubeconfig(#[source] BundleError),
    #[error("write-kubeconfig: {file} is the pair's own file")]
    WriteKubeconfigPair { file: String },
    #[error(
        "ca: needs the CA as a prefix (ca:/etc/kubernetes/pki/ca for ca.crt and \
         ca.key) or as {option}=PATH"
    )]
    NoCaPrefix { option: &'static str },
    #[error("the CA certificate and key are the same file {}", .path.display())]
    CaSameFile { path: PathBuf },
    #[error(
        "{option}= and template= both say what to issue; template= copies the \
         subject, names and usages from the certificate, so give one or the other"
    )]
    TemplateAndOption { option: &'static str },

    // Why the config file is refused (its path is named beside it,
    // [`ConfigError::File`]).
    #[error(transparent)]
    Yaml(#[from] crate::files::YamlError),
    #[error(
        "line {line}: unknown key {key:?} (a setting is a flag of `certsync run` by its long \
         name, e.g. resync: 5m, reload-process: nginx; mappings go under mappings:)"
    )]
    UnknownKey { line: usize, key: String },
    #[error("line {line}: {key} takes a value or a list of values")]
    NotScalar { line: usize, key: String },
    #[error(transparent)]
    Unread(#[from] crate::files::OwnedError),
    #[error("not UTF-8 text")]
    NotUtf8,
    #[error("{0}")]
    Unresolved(#[source] std::io::Error),
    /// With `ca:` mappings, in a ConfigMap or Secret volume.
    #[error(
        "it goes with ca: mappings and is in a ConfigMap or Secret volume: anyone who may edit \
         that object could have the CA sign any identity. Give ca: mappings with --sync in the \
         pod's manifest, or keep this file on the node where only root may write"
    )]
    CaInVolume,
    /// With `ca:` mappings, changeable by another user.
    #[error(
        "it goes with ca: mappings, and {0}, who could have the CA sign any identity: make it \
         and its directories owned by root and writable by their owner only"
    )]
    CaOthersMayChange(#[source] crate::files::OwnedError),
    /// A setting's value, refused by its flag's parser.
    #[error("line {line}: {key}: {source}")]
    SettingInFile {
        line: usize,
        key: String,
        #[source]
        source: serde::de::value::Error,
    },

    // A path of a mapping that another user could change, and what that user
    // could do with it.
    #[error(
        "source {}: {source}, who could replace the source directory with a link to another and \
         have certsync publish what is there; keep it in a directory under root's",
        dir.display()
    )]
    SourceAbove { dir: PathBuf, source: OwnedError },
    #[error(
        "source {}: owner {uid}, mode {mode:04o}: may be changed by another user (group or others \
         may write it), any of whom could link in a file the others could not read and have \
         certsync publish it; make it writable by its owner only",
        dir.display()
    )]
    SourceWritable { dir: PathBuf, uid: u32, mode: u32 },
    #[error("target {0}")]
    TargetWritable(#[source] OwnedError),
    #[error(
        "target {}: {source}, who could re-create it and have the consumer read their own pair \
         there; give a target whose directories are owned by root (or certsync's user) and \
         writable by their owner only, or a subdirectory of a volume's root",
        target.display()
    )]
    TargetRecreatable { target: PathBuf, source: OwnedError },
    #[error(
        "target {}: no `..` in the target of a ca: mapping; give the path it means",
        target.display()
    )]
    CaTargetDotDot { target: PathBuf },
    /// `what`: the target, the template, the CA key or certificate.
    #[error(
        "{what} {}: {source}, who could redirect or choose what the CA signs; make it and its \
         directories owned by root and writable by their owner only",
        path.display()
    )]
    CaPath {
        what: &'static str,
        path: PathBuf,
        source: OwnedError,
    },
    /// `ca=file:` or `bootstrap-kubeconfig=` (`option`) refused by the
    /// reader every later read uses.
    #[error("{option} {}: {source}", path.display())]
    Steering {
        option: &'static str,
        path: PathBuf,
        source: OwnedError,
    },
    #[error("bootstrap-kubeconfig=: {0}")]
    BootstrapKubeconfig(#[source] crate::source::client::ClientError),

    // Where a mapping's paths meet another mapping's (`other`), or its own,
    // where they must not.
    #[error("the name is used twice (targets {} and {})", first.display(), second.display())]
    NameTwice { first: PathBuf, second: PathBuf },
    /// Two targets the same directory (`same`) or one inside the other.
    #[error(
        "its target {} {} the target {} of mapping {other:?}; two mappings would overwrite each \
         other forever",
        target.display(),
        if *same { "is the same directory as" } else { "overlaps" },
        theirs.display()
    )]
    Targets {
        target: PathBuf,
        theirs: PathBuf,
        other: String,
        same: bool,
    },
    /// A target in or around a source directory: its own (`other` none) or
    /// another mapping's.
    #[error(
        "the source and target directories overlap: target {} and {} {} (certsync would write \
         into what it reads)",
        target.display(),
        other.as_ref().map_or("its own source directory".to_owned(), |o| format!("the source directory of mapping {o:?}")),
        dir.display()
    )]
    SourceAndTarget {
        target: PathBuf,
        dir: PathBuf,
        other: Option<String>,
    },
    #[error(
        "its CA file {} lies in the target {} of mapping {other:?}; keep the CA outside every \
         target",
        file.display(),
        target.display()
    )]
    CaFileInTarget {
        file: PathBuf,
        target: PathBuf,
        other: String,
    },
    /// A copy of the live pair outside the targets (`option`:
    /// `update-kubeconfig` or `update-pair`) where no copy may be written.
    #[error("{option} {}: {problem}", path.display())]
    CopyPath {
        option: &'static str,
        path: PathBuf,
        problem: Box<ConfigError>,
    },

    // Why a copy may not be written where it is given.
    #[error("no `..` in it; give the path it means")]
    DotDot,
    /// A file of the copy is a CA file of a `ca:` mapping, by path or
    /// (`by_inode`) the same file through a bind mount or hard link.
    #[error(
        "{} is a CA file of mapping {other:?}{}; certsync never writes a CA",
        file.display(),
        if *by_inode { " (the same file by device and inode: a bind mount or hard link)" } else { "" }
    )]
    OverCa {
        file: PathBuf,
        other: String,
        by_inode: bool,
    },
    /// A file of the copy inside a target, by path or (`by_inode`)
    /// through a bind mount.
    #[error(
        "{} is inside the target {} of mapping {other:?}{}",
        file.display(),
        target.display(),
        if *by_inode { " (the same directory by device and inode: a bind mount)" } else { "" }
    )]
    InTarget {
        file: PathBuf,
        target: PathBuf,
        other: String,
        by_inode: bool,
    },
    /// Another copy (`theirs`, of mapping `other`) writes the same file.
    #[error("mapping {other:?} writes that file too ({theirs}); one copy per file")]
    CopyTwice { other: String, theirs: &'static str },
}

impl PolicyArgs {
    pub fn policy(&self) -> crate::approve::Policy {
        crate::approve::Policy {
            allowed_dns: self.allowed_dns.clone(),
            node_cidrs: self.node_cidrs.clone(),
            any_node_address: self.allow_any_node_address,
            service_cidrs: self.service_cidrs.clone(),
            reserved: self.reserved.clone(),
            max_expiration: self.max_expiration,
        }
    }

    /// Refuses a policy that would trust node-written addresses alone.
    pub fn check(&self) -> Result<(), ConfigError> {
        if let Some(all) = self.node_cidrs.iter().find(|c| c.is_everything()) {
            return Err(ConfigError::EveryAddress {
                cidr: all.to_string(),
            });
        }
        if self.node_cidrs.is_empty() && !self.allow_any_node_address {
            return Err(ConfigError::NoNodeCidr);
        }
        Ok(())
    }
}

impl ApproveArgs {
    pub fn config(&self) -> crate::approve::ApproverConfig {
        // Without a flag or POD_NAMESPACE, the client configuration's
        // namespace (context or service account), known once it is loaded.
        let namespace = self.lease_namespace.clone().or_else(|| {
            std::env::var("POD_NAMESPACE")
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        });
        let identity = std::env::var("POD_NAME")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("certsync-{}", std::process::id()));
        crate::approve::ApproverConfig {
            client: ClientSettings {
                kubeconfig: self.kubeconfig.clone(),
                context: self.context.clone(),
                watch_timeout: self.watch_timeout,
                ..ClientSettings::default()
            },
            policy: self.policy.policy(),
            signer: crate::approve::policy::SIGNER.into(),
            dry_run: self.dry_run,
            lease: (!self.lease_name.is_empty()).then(|| crate::approve::LeaseSettings {
                name: self.lease_name.clone(),
                namespace,
                identity,
                duration: self.lease_duration,
            }),
            events: self.events,
            admin_addr: self.admin_addr,
            selector: self.policy.selector.clone(),
        }
    }
}

impl RunArgs {
    /// How the main container is told about a new pair: one way at most
    /// (`--reload-pidfile` with `--reload-process`: the pidfile's process
    /// must have that name).
    pub(crate) fn reload(&self) -> Result<ReloadConfig, ConfigError> {
        let ways = [
            ("reload-pidfile", self.reload_pidfile.is_some()),
            (
                "reload-process",
                self.reload_process.is_some() && self.reload_pidfile.is_none(),
            ),
            ("reload-cmdline", self.reload_cmdline.is_some()),
            ("reload-url", self.reload_url.is_some()),
        ];
        let mut given = ways.iter().filter(|(_, set)| *set).map(|(name, _)| *name);
        if let (Some(first), Some(second)) = (given.next(), given.next()) {
            return Err(ConfigError::ReloadMethods { first, second });
        }
        let signal = |target| Method::Signal {
            target,
            signal: self.reload_signal,
        };
        let method = if let Some(path) = &self.reload_pidfile {
            pidfile_dir_guarded(path)?;
            Some(signal(Target::Pidfile {
                path: path.clone(),
                name: self.reload_process.clone(),
            }))
        } else if let Some(name) = &self.reload_process {
            Some(signal(Target::Name(name.clone())))
        } else if let Some(re) = &self.reload_cmdline {
            let re = regex::Regex::new(re).map_err(ConfigError::ReloadCmdline)?;
            Some(signal(Target::Cmdline(re)))
        } else if let Some(url) = &self.reload_url {
            let hook = HttpHook::new(&HttpHookConfig {
                url: url.clone(),
                method: self.reload_method.clone(),
                headers: self.reload_headers.clone(),
                bearer_token_file: self.reload_bearer_token_file.clone(),
                ca_file: self.reload_ca_file.clone(),
                insecure_skip_verify: self.reload_insecure_skip_verify,
                timeout: self.reload_timeout,
                retries: self.reload_retries,
                backoff: Duration::from_millis(250),
            })
            .map_err(ConfigError::ReloadUrl)?;
            Some(Method::Http(Box::new(hook)))
        } else {
            None
        };
        Ok(ReloadConfig {
            method,
            quiet: self.reload_quiet,
            max_delay: self.reload_max_delay.max(self.reload_quiet),
            find_timeout: self.reload_find_timeout,
            verify_timeout: self.verify_timeout,
            verify_retries: self.verify_retries,
        })
    }
}

/// A validated mapping: one source, one target directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    pub name: String,
    pub source: Source,
    /// Where the main container serves this pair, to check it after a reload.
    pub verify: Option<ServingCheck>,
    pub layout: Layout,
    /// Shared by the mapping's source and sync tasks.
    pub items: std::sync::Arc<[Item]>,
    pub expect: Expect,
    pub target: PathBuf,
    pub writer: WriterOptions,
    /// An absent object publishes no files rather than an error.
    pub optional: bool,
    /// A kubeconfig outside the target whose current-context user is kept
    /// holding the live pair, embedded (`update-kubeconfig=`).
    pub update_kubeconfig: Option<PathBuf>,
    /// `PREFIX.crt` and `PREFIX.key` outside the target kept holding the
    /// live pair (`update-pair=`).
    pub update_pair: Option<PathBuf>,
}

/// Everything `certsync run` needs.
#[derive(Debug, Clone)]
pub struct Config {
    pub mappings: Vec<Mapping>,
    /// `None`: no admin port (see `--admin-addr`).
    pub admin_addr: Option<std::net::SocketAddr>,
    pub stale_fraction: f64,
    /// `--generation`: the token `/readyz` answers with.
    pub generation: Option<String>,
    pub events: bool,
    /// With `events`: the Pod that `ca:` and `dir:` mappings' Events go on.
    pub events_pod: Option<crate::events::PodRef>,
    pub reload: ReloadConfig,
    pub client: ClientSettings,
    pub once: bool,
    /// With `once`: how long to wait for the API server to answer.
    pub once_timeout: Duration,
    pub debounce: Duration,
    pub resync: Duration,
    pub clock_skew: Duration,
    pub csr_renew_floor: Duration,
}

impl Config {
    /// `run`'s configuration, every check made: the one place a setting,
    /// a mapping and the whole (overlaps, guards, reload, Events) are
    /// judged, for `run`, `--print-config` and `kubeadm adopt` alike.
    pub fn build(settings: &Settings) -> Result<Self, ConfigError> {
        let args = &settings.args;
        let specs = mapping_specs(settings)?;
        if specs.is_empty() {
            return Err(ConfigError::NoMappings);
        }
        let mappings = specs
            .into_iter()
            .map(|s| s.resolve(args))
            .collect::<Result<Vec<_>, _>>()?;
        check_overlaps(&mappings)?;
        mappings.iter().try_for_each(target_guarded)?;
        mappings.iter().try_for_each(source_guarded)?;
        mappings.iter().try_for_each(ca_paths_guarded)?;
        mappings.iter().try_for_each(csr_paths_guarded)?;
        copies_guarded(&mappings)?;
        let events_pod =
            pod::events_pod(args.events, args.once, &mappings, |v| std::env::var(v).ok())?;
        Ok(Self {
            events_pod,
            mappings,
            admin_addr: args.admin_addr,
            stale_fraction: args.stale_fraction,
            generation: args.generation.clone(),
            events: args.events,
            reload: args.reload()?,
            client: ClientSettings {
                kubeconfig: args.kubeconfig.clone(),
                context: args.context.clone(),
                tls_server_name: args.tls_server_name.clone(),
                watch_timeout: args.watch_timeout,
                keepalive: args.api_keepalive,
            },
            once: args.once,
            once_timeout: args.once_timeout,
            debounce: args.debounce,
            resync: args.resync,
            clock_skew: args.clock_skew,
            csr_renew_floor: args.csr_renew_floor,
        })
    }
}

/// `certsync run --once --config PATH` as `run` loads it, every check
/// made by the same code, with `text` as PATH's: the configuration a
/// command is about to write there (`kubeadm adopt`, which must never
/// write one `run` refuses), or one it read there. Where the file lives
/// is not judged: there may be no file yet, and `run` judges it when it
/// reads it.
pub fn load_once(path: &std::path::Path, text: &str) -> Result<Config, ConfigError> {
    Config::build(&Settings::once(path, text)?)
}

/// Every mapping: the config file's, then the flags', with `tree:`
/// mappings expanded into one mapping per object.
fn mapping_specs(settings: &Settings) -> Result<Vec<MappingSpec>, ConfigError> {
    let mut specs = settings.file_mappings().to_vec();
    for s in &settings.args.sync {
        specs.push(MappingSpec::parse_flag(s)?);
    }
    let mut out = Vec::new();
    for spec in specs {
        out.extend(spec.expand_tree()?);
    }
    // Where the file lives is judged when it is read there.
    if let Some(file) = &settings.file
        && file.read
        && out.iter().any(|m| m.source.starts_with("ca:"))
    {
        file::ca_config_guarded(&file.path)?;
    }
    Ok(out)
}
