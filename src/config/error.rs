//! `ConfigError`: why `run`'s or `approve`'s configuration is refused, each refusal a variant.

use std::path::PathBuf;

use super::grammar::{MappingOption, SourceKind};
use crate::beneath::PathError;
use crate::bundle::BundleError;
use crate::cli::ValueError;
use crate::source::csr::USAGES as CSR_USAGES;

/// Why `run`'s or `approve`'s configuration is refused. The variants
/// first name where (a `--sync` flag, the file, a mapping), and carry one
/// of the reasons below as `problem`.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// `problem`, said of where it was given: a `--sync` flag, or the
    /// flag or variable that gave a name that goes into an API path but is
    /// not a Kubernetes name.
    #[error("{at}: {problem}")]
    At {
        at: String,
        #[source]
        problem: Box<ConfigError>,
    },
    #[error("{path}: {problem}")]
    File {
        path: PathBuf,
        #[source]
        problem: Box<ConfigError>,
    },
    /// Also: a path of the mapping another user could change, or where its
    /// paths meet another's (or its own) where they must not.
    #[error("mapping {mapping:?}: {problem}")]
    Mapping {
        mapping: String,
        #[source]
        problem: Box<ConfigError>,
    },
    /// The writer's error names the option and path.
    #[error("mapping {mapping:?}: {source}")]
    Copy {
        mapping: String,
        source: crate::writer::WriterError,
    },
    #[error("no mappings: give at least one --sync or a --config file with mappings")]
    NoMappings,
    #[error("reload: --{first} and --{second} exclude each other: give one way to reload")]
    ReloadMethods {
        first: &'static str,
        second: &'static str,
    },
    /// A setting's value, refused when read with the file's: `at` is its
    /// flag (`--resync`; given as a flag or variable) or the file's
    /// `line N: KEY` (its path named beside it, [`ConfigError::File`]).
    #[error("{at}: {source}")]
    Setting {
        at: String,
        source: serde::de::value::Error,
    },
    #[error("reload: --reload-cmdline: {0}")]
    ReloadCmdline(#[source] regex::Error),
    #[error("reload: {0}")]
    ReloadUrl(#[source] crate::reload::ReloadError),
    #[error("--print-config: {0}")]
    Print(#[source] serde_yaml_ng::Error),

    // A kubelet-serving policy that would trust node-written addresses alone.
    #[error("--node-cidr {cidr} is every address: pass --allow-any-node-address if that is meant")]
    EveryAddress { cidr: String },
    #[error(
        "no --node-cidr: say which networks node addresses come from (e.g. --node-cidr \
         192.168.10.0/24), or pass --allow-any-node-address to accept any a node lists"
    )]
    NoNodeCidr,

    #[error(
        "--events: mapping {mapping:?} (ca:) records its Events on certsync's Pod: set POD_NAME and \
         POD_NAMESPACE from the downward API (fieldRef metadata.name, metadata.namespace), or drop \
         --events"
    )]
    EventsNoPod { mapping: String },

    // A `--sync` flag that is not `KIND:SOURCE=TARGET[,OPTION=VALUE]...` as
    // the grammar reads it (the flag is named beside it,
    // [`ConfigError::At`]).
    #[error("expected KIND:SOURCE=TARGET, TARGET a directory")]
    NoTarget,
    #[error(
        "unknown option {option:?} (known: {}; `certsync run -h` says which kinds each applies to)",
        super::grammar::OPTIONS.iter().map(|o| o.name).collect::<Vec<_>>().join(", ")
    )]
    UnknownOption { option: String },
    /// `takes`: what the option's shape takes ([`super::grammar::Shape::takes`]).
    #[error("option {option:?} takes {takes}, not {value:?}")]
    OptionValue {
        option: String,
        value: String,
        takes: &'static str,
    },
    /// An option, a usage or a published file: given twice, one of the two
    /// would be dropped without a word.
    #[error("{what} {value:?} is given twice")]
    Twice { what: &'static str, value: String },
    /// A mapping's options that do not read into (or back from) its
    /// fields: a value of the wrong shape.
    #[error("{0}")]
    Shape(#[source] serde_json::Error),

    // A mapping's options against the grammar, refused.
    #[error(
        "{name} does not apply to {kind}: sources{why}; {name} applies to {kinds} sources only",
        name = .option.name,
        kind = .kind.name(),
        why = .kind.publishes().map(|p| format!(" ({p})")).unwrap_or_default(),
        kinds = super::grammar::kinds_in_words(.option.kinds),
    )]
    NotForKind {
        option: &'static MappingOption,
        kind: SourceKind,
    },
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
    /// No `KIND:` prefix, or one no kind has.
    #[error(
        "unknown source kind in {given:?}: give KIND:SOURCE, KIND one of {}",
        SourceKind::ALL.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
    )]
    UnknownKind { given: String },
    #[error("{given:?}: expected NAMESPACE/NAME")]
    NotNamespaced { given: String },
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
    /// A file name the target may not hold; `option` the option that
    /// gave it (`combined`, `files=NAME`, `write-kubeconfig`, `ca key`),
    /// none for a source file name.
    #[error("{}{source}", option.as_ref().map(|o| format!("{o}: ")).unwrap_or_default())]
    FileName {
        option: Option<String>,
        source: BundleError,
    },
    #[error("files=all publishes every file; give no other files=")]
    AllAndNamed,
    #[error(transparent)]
    Mode(#[from] crate::cli::ValueError),
    #[error("owner and group must be real ids, not 4294967295 (-1)")]
    NotRealId,
    #[error("verify: {0}")]
    Verify(#[from] crate::reload::ReloadError),
    #[error("verify= needs a certificate/key pair, not a CA bundle")]
    VerifyCaOnly,

    // An option of a `csr:` or `ca:` mapping refused.
    /// A `key-alg=` x509 does not make, or a `dns=` that is not a host name
    /// (or a wildcard one), as x509 reads every DNS name.
    #[error("{0}: {1}")]
    X509(&'static str, #[source] crate::x509::X509Error),
    #[error("ip {value:?} is not an IPv4 or IPv6 address")]
    Ip { value: String },
    #[error("cn and o may not be empty")]
    EmptySubject,
    #[error(
        "a {}: mapping needs a subject: cn=, dns=, ip={}",
        kind.name(),
        if *kind == SourceKind::Ca { " or template=" } else { "" }
    )]
    NoSubject { kind: SourceKind },
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
    #[error(transparent)]
    NotLeaf(crate::source::csr::CaUsage),
    /// `lifetime=` or `approval-timeout=`; `why` the bound's reason.
    #[error("{option}: {source}{why}")]
    Duration {
        option: &'static str,
        source: ValueError,
        why: &'static str,
    },
    #[error(
        "renew {value:?} is not a window LO-HI of the lifetime such as 0.7-0.9 or 70%-90% \
         (both above 0 and below 1, LO <= HI)"
    )]
    Renew { value: String },
    #[error(
        "csr:{signer}: the signer name must be DOMAIN/PATH, e.g. \
         csr:kubernetes.io/kube-apiserver-client (kubernetes.io/legacy-unknown cannot be \
         requested in certificates.k8s.io/v1)"
    )]
    SignerName { signer: String },
    #[error(
        "ca {value:?}: for a csr: mapping give the signer's CA as file:PATH, \
         configmap:NAMESPACE/NAME[/KEY] or clustertrustbundle[:SIGNER] (SIGNER: DOMAIN/PATH)"
    )]
    CaSource { value: String },
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
    #[error("{}", .0.problem())]
    Unread(#[source] PathError),
    #[error("not UTF-8 text")]
    NotUtf8,
    #[error("{0}")]
    Unresolved(#[source] std::io::Error),
    #[error(
        "it goes with ca: mappings and is in a ConfigMap or Secret volume: anyone who may edit \
         that object could have the CA sign any identity. Give ca: mappings with --sync in the \
         pod's manifest, or keep this file on the node where only root may write"
    )]
    CaInVolume,
    #[error(
        "it goes with ca: mappings, and {0}, who could have the CA sign any identity: make it \
         and its directories owned by root and writable by their owner only"
    )]
    CaOthersMayChange(#[source] PathError),

    // A path of a mapping that another user could change, and what that user
    // could do with it.
    #[error("target {0}")]
    TargetWritable(#[source] PathError),
    /// `what`: the pidfile, a source, a target, a `ca:` mapping's template,
    /// CA key or certificate, a `csr:` mapping's `ca=file:` or
    /// `bootstrap-kubeconfig=`; `risk`: what whoever could change it could
    /// do, and what to do instead.
    #[error("{what} {}: {}{risk}", path.display(), source.problem())]
    Changeable {
        what: &'static str,
        path: PathBuf,
        source: PathError,
        risk: &'static str,
    },
    #[error("bootstrap-kubeconfig=: {0}")]
    BootstrapKubeconfig(#[source] crate::source::client::ClientError),

    // Where a mapping's paths meet another mapping's (`other`), or its own,
    // where they must not.
    #[error("the name is used twice (targets {} and {})", first.display(), second.display())]
    NameTwice { first: PathBuf, second: PathBuf },
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
    /// `other`: none for the mapping's own source directory.
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
    /// A path a mapping names (`option`: `target`, `update-kubeconfig`,
    /// `update-pair`), refused as written or for where it leads.
    #[error("{option} {}: {problem}", path.display())]
    PathOf {
        option: &'static str,
        path: PathBuf,
        problem: Box<ConfigError>,
    },

    // Why a path may not be used as written, or a copy written where it is
    // given.
    #[error("no `..` in it; give the path it means")]
    DotDot,
    #[error("give an absolute path")]
    NotAbsolute,
    #[error("give it without its extension; certsync writes PREFIX.crt and PREFIX.key")]
    WithExtension,
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
    #[error(
        "{} is inside the target {} of mapping {other:?}{}; give a path outside every target",
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
    #[error("mapping {other:?} writes that file too ({theirs}); one copy per file")]
    CopyTwice { other: String, theirs: &'static str },
}

impl ConfigError {
    /// `problem`, said of the mapping named `mapping`.
    pub(crate) fn of_mapping(mapping: &str, problem: ConfigError) -> Self {
        Self::Mapping {
            mapping: mapping.to_owned(),
            problem: Box::new(problem),
        }
    }

    /// `problem`, said of the config file `path`.
    pub(crate) fn of_file(path: &std::path::Path, problem: ConfigError) -> Self {
        Self::File {
            path: path.to_owned(),
            problem: Box::new(problem),
        }
    }

    /// A file name `option` gave that the target may not hold.
    pub(crate) fn file_name(option: &str) -> impl FnOnce(BundleError) -> Self {
        let option = option.to_owned();
        |source| Self::FileName {
            option: Some(option),
            source,
        }
    }
}
