//! Command line and config file → a validated [`Config`].
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
//! ```
//!
//! Paths containing `=` or `,` need the config file.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use nix::sys::signal::Signal;
use serde::Deserialize;

use crate::bundle::{CA_FILE, CERT_FILE, KEY_FILE, check_file_name};
use crate::reload::http::{HttpHook, HttpHookConfig};
use crate::reload::pid::Target;
use crate::reload::verify::ServingCheck;
use crate::reload::{Method, ReloadConfig};
use crate::source::client::ClientSettings;
use crate::source::csr::{CaSource, CsrSpec, KeyAlg, USAGES as CSR_USAGES, default_usages};
use crate::source::secret::{Kind, ObjectRef};
use crate::source::trust_bundle::Selection;
use crate::validate::Expect;
use crate::writer::WriterOptions;

/// Exit code for bad usage (EX_USAGE).
pub const EXIT_USAGE: i32 = 64;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--sync {spec:?}: {problem}")]
    Flag { spec: String, problem: String },
    #[error("{path}: {problem}")]
    File { path: PathBuf, problem: String },
    #[error("mapping {mapping:?}: {problem}")]
    Mapping { mapping: String, problem: String },
    #[error("no mappings: give at least one --sync or a --config file with mappings")]
    NoMappings,
    #[error("reload: {problem}")]
    Reload { problem: String },
}

#[derive(Debug, Parser)]
#[command(
    name = "certsync",
    version,
    about = "Keeps TLS certificates on disk in step with their source, atomically.",
    long_about = "Keeps TLS certificate/key pairs on disk in step with their source (a \
Kubernetes Secret or ConfigMap, or a host directory), validates every new pair, publishes it atomically through a `..data` \
symlink flip (the kubelet Secret-volume layout) and keeps earlier revisions for rollback."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Keep every mapping's target in step with its source (or sync once).
    #[command(after_help = MAPPING_GRAMMAR)]
    Run(Box<RunArgs>),
    /// Expiry report for certificate files, directories or certsync targets;
    /// exits 1 if anything expires within --warn-within or does not match its key.
    Check(CheckArgs),
    /// List the revisions of a target, newest first (* marks the live one).
    Revisions(RevisionsArgs),
    /// Restore an earlier revision of a target atomically and pin it until
    /// the source's content changes (a running certsync keeps it and reloads).
    Rollback(RollbackArgs),
    /// Approve kubelet serving certificates (signer
    /// kubernetes.io/kubelet-serving) that pass every check, deny those that
    /// definitely fail one; a controller, safe in several replicas.
    Approve(Box<ApproveArgs>),
    /// Certificate signing requests: `csr review` shows pending CSRs with
    /// the approver's verdict, and approves or denies on request.
    #[command(subcommand)]
    Csr(CsrCommand),
    /// Print a shell completion script (e.g. `certsync completion bash >
    /// /etc/bash_completion.d/certsync`).
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), made from the same definitions as --help.
    Man,
}

/// The mapping grammar, shown after `run -h` and `run --help`.
pub const MAPPING_GRAMMAR: &str = "\
Mappings (--sync KIND:SOURCE=TARGET[,OPTION=VALUE]..., or the config file's `mappings:`):
  dir:PATH                   a host directory (inotify, debounced, resync)
  secret:NAMESPACE/NAME      one Secret, listed and watched by name
  configmap:NAMESPACE/NAME   one ConfigMap, listed and watched by name
  csr:SIGNER                 a certificate certsync requests and renews itself
  clustertrustbundle:NAME    one ClusterTrustBundle, as ca.crt
  clustertrustbundle:SIGNER  every ClusterTrustBundle of a signer (label=KEY=VALUE
                             narrows it), joined in name order, as ca.crt
  tree:NAMESPACE             cert-syncer's layout: DEST/secrets/NAME/KEY and
                             DEST/configmaps/NAME/KEY for secret=NAME, configmap=NAME,
                             optional-secret=NAME, optional-configmap=NAME (repeatable)

Options of every kind:
  name=NAME                  name in logs and metrics (default: the target path)
  cert=, key=, ca=           source file or key of the chain, key and CA bundle
                             (default tls.crt, tls.key, ca.crt; ca optional)
  combined=FILE              dir: one PEM with chain and key (kubelet-server-current.pem)
  ca-only                    a CA bundle only, no key
  cert-mode=, key-mode=, owner=, group=
                             override the global file modes and owner
  files=all | files=NAME[:TARGET] (repeatable)
                             publish keys under their own names, each checked by content
  allow-non-pem              with files=, publish non-PEM keys as they are
  optional                   with files=, an absent object leaves no files (cert-syncer)
  verify=HOST:PORT           after a reload, check the consumer serves the new pair
  sni=NAME                   server name sent by verify=

Options of csr: (see README, Requesting certificates):
  cn=, o= (repeatable)       subject
  dns=, ip= (repeatable)     SANs
  key-alg=ALG                ecdsa-p256 (default), ecdsa-p384, rsa-2048|3072|4096, ed25519
  lifetime=DURATION          expirationSeconds (>= 10m)
  usage=USAGE (repeatable)   e.g. digital-signature, server-auth (defaults per kubernetes.io signer)
  ca=file:PATH | configmap:NS/NAME[/KEY] | clustertrustbundle[:SIGNER]
                             the signer CA the issued chain must verify against
  renew=LO-HI                renewal window of the lifetime (default 70%-90%)
  approval-timeout=DURATION  default 15m
  bootstrap-kubeconfig=FILE  first request with it, renewals with the issued pair
  write-kubeconfig=FILE      publish a kubeconfig that uses the pair

Examples:
  certsync run --sync 'dir:/etc/kubernetes/pki=/etc/certs/apiserver,cert=apiserver.crt,key=apiserver.key'
  certsync run --sync 'secret:kube-system/scheduler-serving=/etc/certs/serving,verify=127.0.0.1:10259'
  certsync run --sync 'csr:kubernetes.io/kube-apiserver-client=/etc/certs/client,cn=system:kube-scheduler'";

#[derive(Debug, Subcommand)]
pub enum CsrCommand {
    /// Pending CSRs (or those named) with requester, node, SANs, usages,
    /// key, age and the verdict of `certsync approve`'s checks.
    Review(ReviewArgs),
}

/// The kubelet-serving policy's bounds (approve and review).
#[derive(Debug, Args)]
pub struct PolicyArgs {
    /// The node networks: an IP SAN is approved only inside one of these
    /// ranges (and only if the node's Node lists it); repeatable, e.g.
    /// `--node-cidr 192.168.10.0/24 --node-cidr fd00:10::/64`. Required
    /// unless --allow-any-node-address.
    #[arg(
        long = "node-cidr",
        env = "CERTSYNC_NODE_CIDR",
        value_delimiter = ',',
        value_name = "CIDR"
    )]
    pub node_cidrs: Vec<crate::approve::policy::Cidr>,
    /// Declare no node network: approve any IP address a node's Node lists
    /// (never reserved ones, never another node's). A node writes its own
    /// Node status, so this lets a compromised node get a certificate for
    /// any free address in the cluster's networks.
    #[arg(long, env = "CERTSYNC_ALLOW_ANY_NODE_ADDRESS")]
    pub allow_any_node_address: bool,
    /// DNS SANs beyond the node's own name must match one of these
    /// patterns (a name, or `*.SUFFIX` for names under SUFFIX) and be
    /// listed by the node's Node; repeatable. A requested wildcard, a
    /// Service name or another node's name is denied whatever the pattern.
    #[arg(
        long = "allowed-dns",
        env = "CERTSYNC_ALLOWED_DNS",
        value_delimiter = ',',
        value_name = "PATTERN"
    )]
    pub allowed_dns: Vec<String>,
    /// A Service range to refuse besides those the cluster reports
    /// (ServiceCIDR objects, the `kubernetes` Service's IP); for clusters
    /// without the networking.k8s.io/v1 ServiceCIDR API; repeatable.
    #[arg(
        long = "service-cidr",
        env = "CERTSYNC_SERVICE_CIDR",
        value_delimiter = ',',
        value_name = "CIDR"
    )]
    pub service_cidrs: Vec<crate::approve::policy::Cidr>,
    /// An IP address, CIDR or DNS name that is never a node's, besides
    /// what the approver reads from the cluster: a load balancer or VIP in
    /// front of the API server that its EndpointSlices, `cluster-info` and
    /// `kubeadm-config` do not name; repeatable.
    #[arg(
        long = "reserved",
        env = "CERTSYNC_RESERVED",
        value_delimiter = ',',
        value_name = "IP|CIDR|NAME"
    )]
    pub reserved: Vec<crate::approve::policy::Reserved>,
    /// Deny requests whose expirationSeconds is longer than this.
    #[arg(long, env = "CERTSYNC_MAX_EXPIRATION", value_parser = duration(600_000, YEAR * 100), value_name = "DURATION")]
    pub max_expiration: Option<Duration>,
    /// Decide only CSRs whose labels match this selector (as kubectl's
    /// `-l`), e.g. to roll the approver out gradually; default: every
    /// kubelet serving CSR.
    #[arg(short = 'l', long, env = "CERTSYNC_SELECTOR", value_name = "SELECTOR")]
    pub selector: Option<String>,
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
    pub fn check(&self) -> Result<(), String> {
        if let Some(all) = self.node_cidrs.iter().find(|c| c.is_everything()) {
            return Err(format!(
                "--node-cidr {all} is every address: pass --allow-any-node-address if that is meant"
            ));
        }
        if self.node_cidrs.is_empty() && !self.allow_any_node_address {
            return Err(
                "no --node-cidr: say which networks node addresses come from \
                 (e.g. --node-cidr 192.168.10.0/24), or pass --allow-any-node-address \
                 to accept any address a node lists in its own Node status"
                    .into(),
            );
        }
        Ok(())
    }
}

#[derive(Debug, Args)]
pub struct ReviewArgs {
    /// CSRs to review (default: every pending one).
    pub names: Vec<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    pub output: crate::inspect::Output,
    /// Approve the reviewed kubelet serving CSRs that pass every check.
    #[arg(long)]
    pub approve: bool,
    /// Deny the reviewed kubelet serving CSRs that definitely fail a check.
    #[arg(long)]
    pub deny: bool,
    /// Kubeconfig (default: `KUBECONFIG`, then the pod's service account).
    #[arg(long, env = "CERTSYNC_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    pub policy: PolicyArgs,
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    #[command(flatten)]
    pub policy: PolicyArgs,
    /// Log what would be decided; write nothing.
    #[arg(long, env = "CERTSYNC_DRY_RUN")]
    pub dry_run: bool,
    /// Kubeconfig (default: `KUBECONFIG`, then the pod's service account).
    #[arg(long, env = "CERTSYNC_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The Lease replicas elect a leader with (only the leader writes);
    /// `--lease-name ""` for a single replica without election.
    #[arg(long, env = "CERTSYNC_LEASE_NAME", default_value = "certsync-approver")]
    pub lease_name: String,
    /// Namespace of the Lease (default: the pod's, from POD_NAMESPACE or
    /// the service account, else kube-system).
    #[arg(long, env = "CERTSYNC_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// How long a leader holds the Lease without renewing it.
    #[arg(long, env = "CERTSYNC_LEASE_DURATION", value_parser = duration(2000, 3_600_000), default_value = "15s")]
    pub lease_duration: Duration,
    /// Record CertificateApproved / CertificateDenied Events on the CSRs.
    #[arg(long, env = "CERTSYNC_EVENTS")]
    pub events: bool,
    /// Address of the admin port (/livez, /readyz, /metrics).
    #[arg(long, env = "CERTSYNC_ADMIN_ADDR", default_value = "127.0.0.1:9808")]
    pub admin_addr: std::net::SocketAddr,
    /// Server-side timeout of each watch call.
    #[arg(long, env = "CERTSYNC_WATCH_TIMEOUT", value_parser = duration(MS, YEAR), default_value = "1m")]
    pub watch_timeout: Duration,
}

impl ApproveArgs {
    pub fn config(&self) -> crate::approve::ApproverConfig {
        let namespace = self.lease_namespace.clone().unwrap_or_else(|| {
            std::env::var("POD_NAMESPACE")
                .ok()
                .or_else(|| {
                    std::fs::read_to_string(
                        "/var/run/secrets/kubernetes.io/serviceaccount/namespace",
                    )
                    .ok()
                })
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "kube-system".into())
        });
        let identity = std::env::var("POD_NAME")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| format!("certsync-{}", std::process::id()));
        crate::approve::ApproverConfig {
            client: ClientSettings {
                kubeconfig: self.kubeconfig.clone(),
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

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Certificate files, directories (every *.crt and *.pem) or targets.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    pub output: crate::inspect::Output,
    /// Fail when a certificate expires sooner than this.
    #[arg(long, value_parser = duration(0, YEAR * 100), default_value = "30d")]
    pub warn_within: Duration,
}

#[derive(Debug, Args)]
pub struct RevisionsArgs {
    /// A certsync target directory.
    pub target: PathBuf,
    /// Output format.
    #[arg(short, long, value_enum, default_value = "table")]
    pub output: crate::inspect::Output,
}

#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// A certsync target directory.
    pub target: PathBuf,
    /// The revision to restore (default: the newest in history, i.e. the one
    /// live before the current one). Nothing is pruned.
    #[arg(long, value_name = "REVISION")]
    pub to: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Logging")]
pub struct LogArgs {
    /// Log format.
    #[arg(
        long,
        global = true,
        env = "CERTSYNC_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    pub log_format: LogFormat,
    /// Log level or filter (e.g. `debug`, `certsync=trace`). Without it,
    /// `RUST_LOG` is used, and `info` without that.
    #[arg(long, global = true, env = "CERTSYNC_LOG_LEVEL")]
    pub log_level: Option<String>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// A mapping `KIND:SOURCE=TARGET[,OPTION=VALUE]...`; repeatable. In the
    /// environment variable, separate mappings with `;`.
    ///
    /// Kinds: `dir:PATH` (a host directory), `secret:NAMESPACE/NAME`,
    /// `configmap:NAMESPACE/NAME` (one object, watched by name),
    /// `csr:SIGNER` (a certificate certsync requests and renews through the
    /// CSR API, e.g. `csr:kubernetes.io/kube-apiserver-client`).
    /// Options: `name=` (used in logs; default: the target path),
    /// `cert=`, `key=`, `ca=` (source file names or object keys; default
    /// tls.crt, tls.key, ca.crt; ca is optional), `combined=FILE` (one PEM with chain and key,
    /// e.g. kubelet-server-current.pem), `ca-only` (a CA bundle, no key),
    /// `cert-mode=`, `key-mode=`, `owner=`, `group=` (override the global
    /// flags for this mapping), `verify=HOST:PORT` and `sni=NAME` (check
    /// what the consumer serves after a reload).
    ///
    /// csr: options: `cn=`, `o=` (subject; o repeatable), `dns=`, `ip=`
    /// (SANs; repeatable), `key-alg=` (ecdsa-p256 default, ecdsa-p384, rsa-2048,
    /// rsa-3072, rsa-4096, ed25519), `lifetime=` (expirationSeconds, >= 10m;
    /// default: the signer's), `usage=` (repeatable, e.g. server-auth;
    /// default for the kubernetes.io signers as kubelet asks), `ca=`
    /// (the signer CA the issued chain must verify against, published as
    /// ca.crt: `file:PATH`, `configmap:NAMESPACE/NAME[/KEY]` or
    /// `clustertrustbundle[:SIGNER]`),
    /// `renew=` (window of the lifetime, default 70%-90%),
    /// `approval-timeout=` (default 15m), `bootstrap-kubeconfig=FILE`
    /// (first request with it, renewals with the issued pair),
    /// `write-kubeconfig=FILE` (a kubeconfig using the pair, in the target).
    #[arg(
        long = "sync",
        env = "CERTSYNC_SYNC",
        value_delimiter = ';',
        value_name = "SPEC"
    )]
    pub sync: Vec<String>,

    /// YAML file with a `mappings:` list (each entry takes `source`,
    /// `target` and the same options as `--sync`, e.g. `key-mode: "0600"`)
    /// and any other flag of `run` by its long name (`resync: 5m`,
    /// `reload-process: nginx`); flags and `CERTSYNC_*` variables override
    /// the file.
    #[arg(long, env = "CERTSYNC_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Print the effective configuration (file, environment and flags
    /// merged; header values and a URL's credentials, query values and
    /// fragment redacted) as YAML and exit.
    #[arg(long)]
    pub print_config: bool,

    /// Sync every mapping once and exit: 0 if all succeeded, 1 if any failed
    /// (for init containers).
    #[arg(long, env = "CERTSYNC_ONCE")]
    pub once: bool,

    /// How long a source directory must be quiet before it is read, so a
    /// pair written non-atomically (certificate, then key) is read whole.
    #[arg(long, env = "CERTSYNC_DEBOUNCE", value_parser = duration(0, YEAR), default_value = "2s")]
    pub debounce: Duration,

    /// Re-read every source and re-check every target this often, as a
    /// safety net for missed file events.
    #[arg(long, env = "CERTSYNC_RESYNC", value_parser = duration(MS, YEAR), default_value = "1m")]
    pub resync: Duration,

    /// Revisions kept in each target, the live one included (>= 1).
    #[arg(long, env = "CERTSYNC_KEEP_REVISIONS", help_heading = "Files", default_value_t = 3, value_parser = count(1, 1000))]
    pub keep_revisions: u32,

    /// Mode of published certificate files (octal).
    #[arg(long, env = "CERTSYNC_CERT_MODE", help_heading = "Files", value_parser = cert_mode, default_value = "0644")]
    pub cert_mode: u32,

    /// Mode of published key files (octal; never world-readable).
    #[arg(long, env = "CERTSYNC_KEY_MODE", help_heading = "Files", value_parser = key_mode, default_value = "0600")]
    pub key_mode: u32,

    /// Numeric owner of published files (default: certsync's user).
    #[arg(
        long,
        env = "CERTSYNC_OWNER",
        help_heading = "Files",
        value_name = "UID"
    )]
    pub owner: Option<u32>,

    /// Numeric group of published files (default: certsync's group).
    #[arg(
        long,
        env = "CERTSYNC_GROUP",
        help_heading = "Files",
        value_name = "GID"
    )]
    pub group: Option<u32>,

    /// How far in the future a certificate's not-before may be and still be
    /// accepted, to forgive clock skew between issuer and node.
    #[arg(long, env = "CERTSYNC_CLOCK_SKEW", value_parser = duration(0, YEAR), default_value = "5m")]
    pub clock_skew: Duration,

    /// csr: mappings request a new certificate no sooner than this (or 10 %
    /// of the issued lifetime up to a day, if longer) after the previous one was issued,
    /// even when the signer issues certificates already due for renewal.
    #[arg(long, env = "CERTSYNC_CSR_RENEW_FLOOR", value_parser = duration(1000, YEAR), default_value = "5m")]
    pub csr_renew_floor: Duration,

    /// Kubeconfig for secret:/configmap: mappings. Without it, `KUBECONFIG`,
    /// then the pod's service account. Rebuilt when the file changes.
    #[arg(
        long,
        env = "CERTSYNC_KUBECONFIG",
        help_heading = "Kubernetes API",
        value_name = "FILE"
    )]
    pub kubeconfig: Option<PathBuf>,

    /// Name to verify in the API server's certificate, for servers reached
    /// as `localhost` whose certificate names another host (static pods).
    #[arg(
        long,
        env = "CERTSYNC_TLS_SERVER_NAME",
        help_heading = "Kubernetes API",
        value_name = "NAME"
    )]
    pub tls_server_name: Option<String>,

    /// Server-side timeout of each watch call. A silently dead connection
    /// is noticed within this plus 5 s; the watch then resumes.
    #[arg(long, env = "CERTSYNC_WATCH_TIMEOUT", help_heading = "Kubernetes API", value_parser = duration(MS, YEAR), default_value = "1m")]
    pub watch_timeout: Duration,

    /// Silence on an HTTP/2 connection to the API server after which
    /// certsync sends a PING; with no answer within half of it, the
    /// connection is dropped and every watch resumes on a new one.
    /// Connecting (TCP and the TLS handshake) must finish within it too.
    #[arg(long, env = "CERTSYNC_API_KEEPALIVE", help_heading = "Kubernetes API", value_parser = duration(1000, 3_600_000), default_value = "30s")]
    pub api_keepalive: Duration,

    #[command(flatten)]
    pub reload: ReloadArgs,

    /// Address of the admin port (/livez, /readyz, /metrics). Loopback by
    /// default; use 0.0.0.0:9808 for kubelet probes on a pod IP.
    #[arg(
        long,
        env = "CERTSYNC_ADMIN_ADDR",
        help_heading = "Health and metrics",
        default_value = "127.0.0.1:9808"
    )]
    pub admin_addr: std::net::SocketAddr,

    /// Share of a certificate's lifetime after which, with nothing newer
    /// arrived, it is reported stale (warning + metric); kubelet rotates at 70-90%.
    #[arg(long, env = "CERTSYNC_STALE_FRACTION", help_heading = "Health and metrics", default_value_t = 0.8, value_parser = parse_fraction)]
    pub stale_fraction: f64,

    /// Record Kubernetes Events on source Secrets/ConfigMaps
    /// (CertificateUpdated, CertificateRejected); needs deploy/rbac-events.yaml.
    #[arg(long, env = "CERTSYNC_EVENTS", help_heading = "Kubernetes API")]
    pub events: bool,
}

const MS: u64 = 1;
const YEAR: u64 = 365 * 24 * 3600 * 1000;

/// A duration parser with bounds in milliseconds: zero where it makes no
/// sense (a resync every 0 s), and no more than the bound (a year by
/// default), so deadline arithmetic can never overflow.
fn duration(min_ms: u64, max_ms: u64) -> impl Fn(&str) -> Result<Duration, String> + Clone {
    move |s: &str| {
        let d = humantime::parse_duration(s).map_err(|e| format!("{s:?}: {e}"))?;
        let ms = d.as_millis();
        if ms < u128::from(min_ms) {
            Err(format!("{s:?} is too short: at least {}", fmt_ms(min_ms)))
        } else if ms > u128::from(max_ms) {
            Err(format!("{s:?} is too long: at most {}", fmt_ms(max_ms)))
        } else {
            Ok(d)
        }
    }
}

fn fmt_ms(ms: u64) -> String {
    humantime::format_duration(Duration::from_millis(ms)).to_string()
}

/// A whole-number parser with inclusive bounds.
fn count(min: u32, max: u32) -> impl Fn(&str) -> Result<u32, String> + Clone {
    move |s: &str| match s.parse::<u32>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not a whole number from {min} to {max}")),
    }
}

fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!("{s:?} is not a fraction in (0, 1]")),
    }
}

/// How the main container is told about a new pair. At most one of
/// `--reload-process`, `--reload-cmdline`, `--reload-pidfile`, `--reload-url`;
/// none for consumers that watch their files (Kubernetes components).
#[derive(Debug, Args)]
#[command(next_help_heading = "Reloading the main container")]
pub struct ReloadArgs {
    /// Signal the process with this name (comm, or executable/argv[0] base
    /// name), found through a shared PID namespace. Only the top-most match
    /// of each process tree (e.g. the nginx master) is signalled.
    #[arg(
        long,
        env = "CERTSYNC_RELOAD_PROCESS",
        value_name = "NAME",
        group = "reload_target"
    )]
    pub reload_process: Option<String>,
    /// Signal the process whose command line matches this regular expression.
    #[arg(
        long,
        env = "CERTSYNC_RELOAD_CMDLINE",
        value_name = "REGEX",
        group = "reload_target"
    )]
    pub reload_cmdline: Option<String>,
    /// Signal the process whose PID is in this file (re-read every reload).
    #[arg(
        long,
        env = "CERTSYNC_RELOAD_PIDFILE",
        value_name = "FILE",
        group = "reload_target"
    )]
    pub reload_pidfile: Option<PathBuf>,
    /// Call this URL instead of sending a signal (success: a 2xx answer).
    #[arg(
        long,
        env = "CERTSYNC_RELOAD_URL",
        value_name = "URL",
        group = "reload_target"
    )]
    pub reload_url: Option<String>,

    /// Signal to send (name, e.g. SIGHUP or HUP).
    #[arg(long, env = "CERTSYNC_RELOAD_SIGNAL", value_parser = parse_signal, default_value = "SIGHUP")]
    pub reload_signal: Signal,
    /// HTTP method of the reload call.
    #[arg(long, env = "CERTSYNC_RELOAD_METHOD", default_value = "POST")]
    pub reload_method: String,
    /// Extra header `Name: value` for the reload call; repeatable (newline-separated in the env var).
    #[arg(
        long = "reload-header",
        env = "CERTSYNC_RELOAD_HEADER",
        value_name = "HEADER",
        value_delimiter = '\n'
    )]
    pub reload_headers: Vec<String>,
    /// Send `Authorization: Bearer <contents of FILE>` (re-read every call).
    #[arg(long, env = "CERTSYNC_RELOAD_BEARER_TOKEN_FILE", value_name = "FILE")]
    pub reload_bearer_token_file: Option<PathBuf>,
    /// Trust only this CA for an https reload URL (may be a ca.crt certsync publishes).
    #[arg(long, env = "CERTSYNC_RELOAD_CA_FILE", value_name = "FILE")]
    pub reload_ca_file: Option<PathBuf>,
    /// Do not verify the reload URL's certificate; loopback URLs only.
    #[arg(long, env = "CERTSYNC_RELOAD_INSECURE_SKIP_VERIFY")]
    pub reload_insecure_skip_verify: bool,
    /// Timeout of each reload call.
    #[arg(long, env = "CERTSYNC_RELOAD_TIMEOUT", value_parser = duration(MS, YEAR), default_value = "5s")]
    pub reload_timeout: Duration,
    /// Retries of a failed reload call (exponential backoff with jitter).
    #[arg(long, env = "CERTSYNC_RELOAD_RETRIES", default_value_t = 3, value_parser = count(0, 100))]
    pub reload_retries: u32,
    /// How long to keep looking for the process to signal (it may still be
    /// starting) before giving up until the next change.
    #[arg(long, env = "CERTSYNC_RELOAD_FIND_TIMEOUT", value_parser = duration(0, YEAR), default_value = "10s")]
    pub reload_find_timeout: Duration,
    /// Flips closer together than this (across all mappings) become one reload.
    #[arg(long, env = "CERTSYNC_RELOAD_QUIET", value_parser = duration(0, YEAR), default_value = "200ms")]
    pub reload_quiet: Duration,
    /// A reload is never deferred longer than this after a flip.
    #[arg(long, env = "CERTSYNC_RELOAD_MAX_DELAY", value_parser = duration(0, YEAR), default_value = "2s")]
    pub reload_max_delay: Duration,
    /// How long a mapping's `verify=` check waits for the new certificate.
    #[arg(long, env = "CERTSYNC_VERIFY_TIMEOUT", value_parser = duration(MS, YEAR), default_value = "10s")]
    pub verify_timeout: Duration,
    /// Reloads repeated when verification still sees the old certificate.
    #[arg(long, env = "CERTSYNC_VERIFY_RETRIES", default_value_t = 2, value_parser = count(0, 100))]
    pub verify_retries: u32,
}

/// Signals a process can catch and treat as "reload" (or "restart"):
/// never KILL or STOP (which cannot be handled), job control or faults.
const RELOAD_SIGNALS: [Signal; 7] = [
    Signal::SIGHUP,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
];

fn parse_signal(s: &str) -> Result<Signal, String> {
    let name = s.to_ascii_uppercase();
    let name = if name.starts_with("SIG") {
        name
    } else {
        format!("SIG{name}")
    };
    let signal: Signal = name
        .parse()
        .map_err(|_| format!("{s:?} is not a signal name such as SIGHUP"))?;
    if RELOAD_SIGNALS.contains(&signal) {
        Ok(signal)
    } else {
        let allowed: Vec<&str> = RELOAD_SIGNALS.iter().map(|s| s.as_str()).collect();
        Err(format!(
            "{signal} cannot be used to reload a process (it cannot be caught, or stops or \
             crashes it); use one of {}",
            allowed.join(", ")
        ))
    }
}

impl ReloadArgs {
    fn build(&self) -> Result<ReloadConfig, ConfigError> {
        let err = |problem: String| ConfigError::Reload { problem };
        let signal = |target| Method::Signal {
            target,
            signal: self.reload_signal,
        };
        let method = if let Some(name) = &self.reload_process {
            Some(signal(Target::Name(name.clone())))
        } else if let Some(re) = &self.reload_cmdline {
            let re = regex::Regex::new(re).map_err(|e| err(format!("--reload-cmdline: {e}")))?;
            Some(signal(Target::Cmdline(re)))
        } else if let Some(path) = &self.reload_pidfile {
            Some(signal(Target::Pidfile(path.clone())))
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
            .map_err(|e| err(e.to_string()))?;
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

/// Parses an octal file mode such as `0644` or `640`: read and write
/// bits only (no setuid/setgid/sticky, no execute), writable by the owner
/// alone, readable by the owner.
pub fn parse_mode(s: &str) -> Result<u32, String> {
    let digits = s.strip_prefix("0o").unwrap_or(s);
    let m = match u32::from_str_radix(digits, 8) {
        Ok(m) if m <= 0o7777 => m,
        _ => return Err(format!("{s:?} is not an octal file mode such as 0644")),
    };
    if m & 0o7000 != 0 {
        Err(format!("mode {m:04o} sets setuid, setgid or sticky bits"))
    } else if m & 0o111 != 0 {
        Err(format!("mode {m:04o} makes a certificate file executable"))
    } else if m & 0o022 != 0 {
        Err(format!(
            "mode {m:04o} lets users other than the owner write the file"
        ))
    } else if m & 0o400 == 0 {
        Err(format!("mode {m:04o} does not let the owner read the file"))
    } else {
        Ok(m)
    }
}

fn cert_mode(s: &str) -> Result<u32, String> {
    parse_mode(s)
}

/// A key mode: a valid mode that is not readable by every user.
pub fn key_mode(s: &str) -> Result<u32, String> {
    let m = parse_mode(s)?;
    if m & 0o007 != 0 {
        return Err(format!(
            "key mode {m:04o} would make the private key readable by every user"
        ));
    }
    Ok(m)
}

/// One mapping as written by the user, in either form.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct MappingSpec {
    pub source: String,
    pub target: PathBuf,
    pub name: Option<String>,
    pub cert: Option<String>,
    pub key: Option<String>,
    pub ca: Option<String>,
    pub combined: Option<String>,
    #[serde(default)]
    pub ca_only: bool,
    pub cert_mode: Option<String>,
    pub key_mode: Option<String>,
    pub owner: Option<u32>,
    pub group: Option<u32>,
    pub verify: Option<String>,
    pub sni: Option<String>,
    // csr: mappings only.
    pub cn: Option<String>,
    #[serde(default)]
    pub o: Vec<String>,
    #[serde(default)]
    pub dns: Vec<String>,
    #[serde(default)]
    pub ip: Vec<String>,
    pub key_alg: Option<String>,
    pub lifetime: Option<String>,
    #[serde(default)]
    pub usage: Vec<String>,
    pub renew: Option<String>,
    pub approval_timeout: Option<String>,
    pub bootstrap_kubeconfig: Option<PathBuf>,
    pub write_kubeconfig: Option<String>,
    // clustertrustbundle: mappings by signer only.
    #[serde(default)]
    pub label: Vec<String>,
    /// `all`, or `NAME` / `NAME:TARGET`; repeatable.
    #[serde(default)]
    pub files: Vec<String>,
    #[serde(default)]
    pub allow_non_pem: bool,
    #[serde(default)]
    pub optional: bool,
    // tree: mappings (cert-syncer's layout).
    #[serde(default)]
    pub secret: Vec<String>,
    #[serde(default)]
    pub configmap: Vec<String>,
    #[serde(default)]
    pub optional_secret: Vec<String>,
    #[serde(default)]
    pub optional_configmap: Vec<String>,
}

/// The config file: `mappings:` and any of `run`'s flags by their long
/// names (checked by [`file_settings`]).
#[derive(Debug, Deserialize)]
struct ConfigFile {
    #[serde(default)]
    mappings: Vec<MappingSpec>,
}

/// Flags that are not settings of the file (it is the config, or they act
/// once).
const NOT_IN_FILE: &[&str] = &["sync", "config", "print-config", "help", "once"];

/// The global settings of a config file, as `(flag, values)`, each key
/// checked against `run`'s flags; an unknown key is an error naming its
/// line.
fn file_settings(path: &Path, text: &str) -> Result<Vec<(String, Vec<String>)>, ConfigError> {
    use clap::CommandFactory;
    let err = |problem: String| ConfigError::File {
        path: path.to_owned(),
        problem,
    };
    let doc: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(text).map_err(|e| err(e.to_string()))?;
    let Some(map) = doc.as_mapping() else {
        return Ok(Vec::new());
    };
    let mut cmd = Cli::command();
    cmd.build();
    let run = cmd.find_subcommand("run").cloned().unwrap_or_default();
    let known: Vec<String> = run
        .get_arguments()
        .filter_map(|a| a.get_long().map(str::to_owned))
        .filter(|l| !NOT_IN_FILE.contains(&l.as_str()))
        .collect();
    let line = |key: &str| {
        text.lines()
            .position(|l| l.starts_with(&format!("{key}:")))
            .map_or(0, |i| i + 1)
    };
    let mut out = Vec::new();
    for (k, v) in map {
        let key = k.as_str().unwrap_or_default();
        // `owner: null` (as --print-config shows an unset flag) sets nothing.
        if key == "mappings" || v.is_null() {
            continue;
        }
        if !known.iter().any(|l| l == key) {
            return Err(err(format!(
                "line {}: unknown key {key:?} (a setting is a flag of `certsync run` by its long \
                 name, e.g. resync: 5m, reload-process: nginx; mappings go under mappings:)",
                line(key)
            )));
        }
        let scalar = |v: &serde_yaml_ng::Value| match v {
            serde_yaml_ng::Value::String(s) => Ok(s.clone()),
            serde_yaml_ng::Value::Number(n) => Ok(n.to_string()),
            serde_yaml_ng::Value::Bool(b) => Ok(b.to_string()),
            _ => Err(err(format!(
                "line {}: {key} takes a value or a list of values",
                line(key)
            ))),
        };
        let values = match v {
            serde_yaml_ng::Value::Sequence(items) => {
                items.iter().map(scalar).collect::<Result<Vec<_>, _>>()?
            }
            other => vec![scalar(other)?],
        };
        out.push((key.to_owned(), values));
    }
    Ok(out)
}

/// Parses the command line with `run --config FILE`'s settings filled in:
/// each setting of the file becomes its flag unless the command line or the
/// environment already set that flag, and the whole line is parsed again,
/// so a setting is checked by exactly the flag's own parser. Returns the
/// parsed command and, for `run`, the effective setting of every flag.
pub fn parse(argv: Vec<std::ffi::OsString>) -> Result<Parsed, clap::Error> {
    use clap::{CommandFactory, FromArgMatches, parser::ValueSource};
    let cmd = Cli::command();
    let matches = cmd.clone().try_get_matches_from(&argv)?;
    let mut argv = argv;
    let mut from_file = None;
    if let Some(run) = matches.subcommand_matches("run")
        && let Some(path) = run.get_one::<PathBuf>("config")
    {
        from_file = Some(path.clone());
        let text = std::fs::read_to_string(path).map_err(|e| {
            cmd.clone().error(
                clap::error::ErrorKind::Io,
                format!("{}: {e}", path.display()),
            )
        })?;
        let settings = file_settings(path, &text).map_err(|e| {
            cmd.clone()
                .error(clap::error::ErrorKind::ValueValidation, e)
        })?;
        let mut built = cmd.clone();
        built.build();
        let ids: std::collections::HashMap<String, String> = built
            .find_subcommand("run")
            .into_iter()
            .flat_map(|sub| sub.get_arguments())
            .filter_map(|a| Some((a.get_long()?.to_owned(), a.get_id().as_str().to_owned())))
            .collect();
        for (flag, values) in settings {
            // `file_settings` checked every key against these long names.
            let Some(id) = ids.get(&flag) else { continue };
            let given = matches!(
                run.value_source(id),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            );
            if given {
                continue;
            }
            let is_switch = matches!(
                values.as_slice(),
                [v] if v == "true" || v == "false"
            ) && run
                .get_raw(id)
                .is_none_or(|mut r| r.next().is_some_and(|v| v == "false"));
            for v in values {
                if is_switch {
                    if v == "true" {
                        argv.push(format!("--{flag}").into());
                    }
                } else {
                    argv.push(format!("--{flag}={v}").into());
                }
            }
        }
    }
    let matches = cmd.clone().try_get_matches_from(&argv).map_err(|e| {
        // Name the file when one of its settings is what was refused.
        match &from_file {
            Some(path) if e.use_stderr() => {
                let first = e.render().to_string();
                let first = first.lines().next().unwrap_or_default();
                let first = first.strip_prefix("error: ").unwrap_or(first);
                cmd.clone().error(
                    e.kind(),
                    format!("{first} (with the settings of {})", path.display()),
                )
            }
            _ => e,
        }
    })?;
    let cli = Cli::from_arg_matches(&matches)?;
    let mut effective = Vec::new();
    if let Some(run) = matches.subcommand_matches("run") {
        let mut built = cmd;
        built.build();
        if let Some(sub) = built.find_subcommand("run") {
            for arg in sub.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if NOT_IN_FILE.contains(&long) {
                    continue;
                }
                let values: Vec<String> = run
                    .get_raw(arg.get_id().as_str())
                    .map(|r| r.map(|v| v.to_string_lossy().into_owned()).collect())
                    .unwrap_or_default();
                effective.push((long.to_owned(), values));
            }
        }
    }
    Ok(Parsed { cli, effective })
}

/// A parsed command line, and for `run` every flag's effective values.
#[derive(Debug)]
pub struct Parsed {
    pub cli: Cli,
    pub effective: Vec<(String, Vec<String>)>,
}

/// `run --print-config`: the effective settings and mappings as YAML,
/// header values and a reload URL's userinfo, query values and fragment
/// redacted (they may hold credentials).
pub fn print_config(
    args: &RunArgs,
    effective: &[(String, Vec<String>)],
) -> Result<String, ConfigError> {
    let mut settings = serde_yaml_ng::Mapping::new();
    for (flag, values) in effective {
        let shown: Vec<String> = values
            .iter()
            .map(|v| {
                if flag == "reload-header" {
                    match v.split_once(':') {
                        Some((name, _)) => format!("{name}: <redacted>"),
                        None => "<redacted>".into(),
                    }
                } else if flag == "reload-url" {
                    crate::reload::http::redact_text(v)
                } else {
                    v.clone()
                }
            })
            .collect();
        let value = match shown.as_slice() {
            [] => serde_yaml_ng::Value::Null,
            [one] if !matches!(flag.as_str(), "reload-header") => one.clone().into(),
            many => serde_yaml_ng::Value::Sequence(many.iter().cloned().map(Into::into).collect()),
        };
        settings.insert(flag.clone().into(), value);
    }
    // Each mapping as written, without the options it does not set.
    let mut mappings = serde_json::to_value(mapping_specs(args)?).unwrap_or_default();
    for m in mappings.as_array_mut().into_iter().flatten() {
        if let Some(m) = m.as_object_mut() {
            m.retain(|_, v| {
                !(v.is_null() || *v == serde_json::json!(false) || *v == serde_json::json!([]))
            });
        }
    }
    settings.insert(
        "mappings".into(),
        serde_yaml_ng::to_value(&mappings).map_err(|e| ConfigError::Reload {
            problem: e.to_string(),
        })?,
    );
    serde_yaml_ng::to_string(&settings).map_err(|e| ConfigError::Reload {
        problem: e.to_string(),
    })
}

impl MappingSpec {
    /// Parses the `--sync` form.
    pub fn parse_flag(spec: &str) -> Result<Self, ConfigError> {
        let err = |problem: String| ConfigError::Flag {
            spec: spec.to_owned(),
            problem,
        };
        let (source, rest) = spec
            .split_once('=')
            .ok_or_else(|| err("expected KIND:SOURCE=TARGET".into()))?;
        let mut parts = rest.split(',');
        let target = parts.next().unwrap_or_default();
        if target.is_empty() {
            return Err(err("the target directory is empty".into()));
        }
        let mut m = MappingSpec {
            source: source.to_owned(),
            target: PathBuf::from(target),
            ..Default::default()
        };
        for opt in parts {
            let (k, v) = opt.split_once('=').unwrap_or((opt, ""));
            let value = || {
                if v.is_empty() {
                    Err(err(format!("option {k:?} needs a value ({k}=...)")))
                } else {
                    Ok(v.to_owned())
                }
            };
            let number = || {
                v.parse::<u32>()
                    .map_err(|_| err(format!("option {k:?} needs a numeric id, got {v:?}")))
            };
            match k {
                "name" => m.name = Some(value()?),
                "cert" => m.cert = Some(value()?),
                "key" => m.key = Some(value()?),
                "ca" => m.ca = Some(value()?),
                "combined" => m.combined = Some(value()?),
                "ca-only" => {
                    m.ca_only = match v {
                        "" | "true" => true,
                        "false" => false,
                        _ => {
                            return Err(err(format!(
                                "ca-only takes no value or true/false, got {v:?}"
                            )));
                        }
                    }
                }
                "cert-mode" => m.cert_mode = Some(value()?),
                "key-mode" => m.key_mode = Some(value()?),
                "owner" => m.owner = Some(number()?),
                "verify" => m.verify = Some(value()?),
                "sni" => m.sni = Some(value()?),
                "group" => m.group = Some(number()?),
                "cn" => m.cn = Some(value()?),
                "o" => m.o.push(value()?),
                "dns" => m.dns.push(value()?),
                "ip" => m.ip.push(value()?),
                "key-alg" => m.key_alg = Some(value()?),
                "lifetime" => m.lifetime = Some(value()?),
                "usage" => m.usage.push(value()?),
                "renew" => m.renew = Some(value()?),
                "approval-timeout" => m.approval_timeout = Some(value()?),
                "bootstrap-kubeconfig" => m.bootstrap_kubeconfig = Some(value()?.into()),
                "write-kubeconfig" => m.write_kubeconfig = Some(value()?),
                "label" => m.label.push(value()?),
                "files" => m.files.push(value()?),
                "optional" => {
                    m.optional = match v {
                        "" | "true" => true,
                        "false" => false,
                        _ => {
                            return Err(err(format!(
                                "optional takes no value or true/false, got {v:?}"
                            )));
                        }
                    }
                }
                "secret" => m.secret.push(value()?),
                "configmap" => m.configmap.push(value()?),
                "optional-secret" => m.optional_secret.push(value()?),
                "optional-configmap" => m.optional_configmap.push(value()?),
                "allow-non-pem" => {
                    m.allow_non_pem = match v {
                        "" | "true" => true,
                        "false" => false,
                        _ => {
                            return Err(err(format!(
                                "allow-non-pem takes no value or true/false, got {v:?}"
                            )));
                        }
                    }
                }
                _ => {
                    return Err(err(format!(
                        "unknown option {k:?} (known: name, cert, key, ca, combined, ca-only, \
                         cert-mode, key-mode, owner, group, verify, sni; for csr: cn, o, dns, \
                         ip, key-alg, lifetime, usage, renew, approval-timeout, \
                         bootstrap-kubeconfig, write-kubeconfig; for clustertrustbundle: \
                         label; files, allow-non-pem, optional; for tree: secret, configmap, \
                         optional-secret, optional-configmap)"
                    )));
                }
            }
        }
        Ok(m)
    }

    fn resolve(self, args: &RunArgs) -> Result<Mapping, ConfigError> {
        let name = self
            .name
            .clone()
            .unwrap_or_else(|| self.target.display().to_string());
        let err = |problem: String| ConfigError::Mapping {
            mapping: name.clone(),
            problem,
        };
        let (kind, location) = self.source.split_once(':').ok_or_else(|| {
            err(format!(
                "source {:?} has no KIND: prefix (e.g. dir:/path)",
                self.source
            ))
        })?;
        let object = |kind| {
            let (namespace, obj) = location
                .split_once('/')
                .ok_or_else(|| err(format!("{:?}: expected NAMESPACE/NAME", self.source)))?;
            check_dns("namespace", namespace, 63).map_err(&err)?;
            check_dns("name", obj, 253).map_err(&err)?;
            Ok(ObjectRef {
                kind,
                namespace: namespace.to_owned(),
                name: obj.to_owned(),
            })
        };
        let source = match kind {
            "dir" if !location.is_empty() => Source::Dir(PathBuf::from(location)),
            "dir" => return Err(err("dir: needs a directory path".into())),
            "secret" => Source::Kube(object(Kind::Secret)?),
            "configmap" => Source::Kube(object(Kind::ConfigMap)?),
            "csr" => Source::Csr(Box::new(self.csr_spec(location).map_err(&err)?)),
            "clustertrustbundle" => {
                Source::TrustBundle(self.trust_bundle_selection(location).map_err(&err)?)
            }
            other => {
                return Err(err(format!(
                    "unknown source kind {other:?} (supported: dir, secret, configmap, csr, \
                     clustertrustbundle)"
                )));
            }
        };
        let csr_only = [
            ("cn", self.cn.is_some()),
            ("o", !self.o.is_empty()),
            ("dns", !self.dns.is_empty()),
            ("ip", !self.ip.is_empty()),
            ("key-alg", self.key_alg.is_some()),
            ("lifetime", self.lifetime.is_some()),
            ("usage", !self.usage.is_empty()),
            ("renew", self.renew.is_some()),
            ("approval-timeout", self.approval_timeout.is_some()),
            ("bootstrap-kubeconfig", self.bootstrap_kubeconfig.is_some()),
            ("write-kubeconfig", self.write_kubeconfig.is_some()),
        ];
        if !matches!(source, Source::Csr(_))
            && let Some((opt, _)) = csr_only.iter().find(|(_, set)| *set)
        {
            return Err(err(format!("{opt} applies to csr: sources only")));
        }
        if !matches!(source, Source::Dir(_) | Source::Csr(_)) && self.combined.is_some() {
            return Err(err("combined applies to dir: sources only".into()));
        }

        if !matches!(source, Source::TrustBundle(_)) && !self.label.is_empty() {
            return Err(err(
                "label applies to clustertrustbundle: sources only".into()
            ));
        }
        if matches!(source, Source::TrustBundle(_)) {
            for (opt, set) in [
                ("cert", self.cert.is_some()),
                ("key", self.key.is_some()),
                ("ca", self.ca.is_some()),
                ("combined", self.combined.is_some()),
            ] {
                if set {
                    return Err(err(format!(
                        "{opt} does not apply to clustertrustbundle: sources (the bundles are \
                         published as ca.crt)"
                    )));
                }
            }
        }
        if matches!(source, Source::Csr(_)) {
            for (opt, set) in [
                ("cert", self.cert.is_some()),
                ("key", self.key.is_some()),
                ("combined", self.combined.is_some()),
                ("ca-only", self.ca_only),
            ] {
                if set {
                    return Err(err(format!(
                        "{opt} does not apply to csr: sources (certsync makes the key and \
                         publishes tls.crt, tls.key and, with ca=, ca.crt)"
                    )));
                }
            }
        }
        if !self.files.is_empty() || self.allow_non_pem {
            if self.files.is_empty() {
                return Err(err("allow-non-pem goes with files=".into()));
            }
            if !matches!(source, Source::Dir(_) | Source::Kube(_)) {
                return Err(err(
                    "files= applies to dir:, secret: and configmap: sources".into(),
                ));
            }
            for (opt, set) in [
                ("cert", self.cert.is_some()),
                ("key", self.key.is_some()),
                ("ca", self.ca.is_some()),
                ("combined", self.combined.is_some()),
                ("ca-only", self.ca_only),
            ] {
                if set {
                    return Err(err(format!(
                        "{opt} and files= exclude each other (files= names every file published)"
                    )));
                }
            }
        }
        let ca_only = self.ca_only || matches!(source, Source::TrustBundle(_));
        let expect = if !self.files.is_empty() {
            Expect::Files {
                allow_non_pem: self.allow_non_pem,
            }
        } else if ca_only {
            Expect::CaOnly
        } else {
            Expect::Pair
        };
        let mut items = Vec::new();
        let layout = if self.files.iter().any(|f| f == "all") {
            if self.files.len() > 1 {
                return Err(err(
                    "files=all publishes every file; give no other files=".into()
                ));
            }
            Layout::All
        } else if !self.files.is_empty() {
            for f in &self.files {
                let (source_name, target_name) = f.split_once(':').unwrap_or((f, f));
                check_file_name(target_name).map_err(|e| err(format!("files={f}: {e}")))?;
                if items.iter().any(|i: &Item| i.target == target_name) {
                    return Err(err(format!("files=: {target_name} is published twice")));
                }
                items.push(Item::new(source_name, target_name, true));
            }
            Layout::Files
        } else {
            match (&self.combined, ca_only) {
                (Some(_), true) => {
                    return Err(err("combined and ca-only exclude each other".into()));
                }
                (Some(file), false) => {
                    if self.cert.is_some() || self.key.is_some() {
                        return Err(err(
                            "combined replaces cert and key; give one or the other".into()
                        ));
                    }
                    check_file_name(file).map_err(|e| err(format!("combined: {e}")))?;
                    Layout::Combined(file.clone())
                }
                (None, true) => {
                    if self.cert.is_some() || self.key.is_some() {
                        return Err(err("a ca-only mapping takes no cert or key".into()));
                    }
                    Layout::Files
                }
                (None, false) => {
                    items.push(Item::new(
                        self.cert.as_deref().unwrap_or(CERT_FILE),
                        CERT_FILE,
                        true,
                    ));
                    items.push(Item::new(
                        self.key.as_deref().unwrap_or(KEY_FILE),
                        KEY_FILE,
                        true,
                    ));
                    Layout::Files
                }
            }
        };
        if self.files.is_empty() {
            let ca_item = match &source {
                Source::Csr(_) => CA_FILE,
                _ => self.ca.as_deref().unwrap_or(CA_FILE),
            };
            items.push(Item::new(ca_item, CA_FILE, ca_only));
        }
        for item in &items {
            check_file_name(&item.source).map_err(|e| err(e.to_string()))?;
        }
        let writer = WriterOptions {
            keep: args.keep_revisions as usize,
            cert_mode: match &self.cert_mode {
                Some(s) => parse_mode(s).map_err(&err)?,
                None => args.cert_mode,
            },
            key_mode: match &self.key_mode {
                Some(s) => key_mode(s).map_err(&err)?,
                None => args.key_mode,
            },
            owner: self.owner.or(args.owner),
            group: self.group.or(args.group),
        };
        // -1 means "leave unchanged" to chown(2): never a real id.
        if writer.owner == Some(u32::MAX) || writer.group == Some(u32::MAX) {
            return Err(err(
                "owner and group must be real ids, not 4294967295 (-1)".into()
            ));
        }
        if self.sni.is_some() && self.verify.is_none() {
            return Err(err("sni= goes with verify=HOST:PORT".into()));
        }
        let verify = self
            .verify
            .as_deref()
            .map(|addr| ServingCheck::parse(addr, self.sni.clone()))
            .transpose()
            .map_err(|e| err(format!("verify: {e}")))?;
        if verify.is_some() && expect == Expect::CaOnly {
            return Err(err(
                "verify= needs a certificate/key pair, not a CA bundle".into()
            ));
        }
        if self.optional && (!matches!(source, Source::Kube(_)) || self.files.is_empty()) {
            return Err(err(
                "optional applies to secret: and configmap: mappings with files= (an absent \
                 object then leaves no files, as cert-syncer does)"
                    .into(),
            ));
        }
        Ok(Mapping {
            optional: self.optional,
            name,
            source,
            verify,
            layout,
            items: items.into(),
            expect,
            target: self.target,
            writer,
        })
    }
}

/// Where a mapping's content comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A host directory.
    Dir(PathBuf),
    /// One Secret or ConfigMap.
    Kube(ObjectRef),
    /// Certificates requested through the CSR API.
    Csr(Box<CsrSpec>),
    /// ClusterTrustBundles, as a CA bundle.
    TrustBundle(Selection),
}

impl MappingSpec {
    /// `clustertrustbundle:NAME` or `clustertrustbundle:SIGNER` (a name
    /// with `/`, which bundle names cannot contain) and its `label=` options.
    fn trust_bundle_selection(&self, location: &str) -> Result<Selection, String> {
        if location.contains('/') {
            let labels = self
                .label
                .iter()
                .map(|l| match l.split_once('=') {
                    Some((k, v)) if !k.is_empty() => Ok((k.to_owned(), v.to_owned())),
                    _ => Err(format!("label {l:?} is not KEY=VALUE")),
                })
                .collect::<Result<Vec<_>, _>>()?;
            return Ok(Selection::Signer {
                signer: location.to_owned(),
                labels,
            });
        }
        if !self.label.is_empty() {
            return Err("label= selects among a signer's bundles: give \
                        clustertrustbundle:SIGNER, not a bundle name"
                .into());
        }
        let plain = location.replace(':', "-");
        check_dns("name", &plain, 253)?;
        Ok(Selection::Name(location.to_owned()))
    }

    /// The `csr:SIGNER` options as a [`CsrSpec`].
    fn csr_spec(&self, signer: &str) -> Result<CsrSpec, String> {
        match signer.split_once('/') {
            Some((domain, path)) if !path.is_empty() && check_dns("name", domain, 253).is_ok() => {
                if signer == "kubernetes.io/legacy-unknown" {
                    return Err("the signer kubernetes.io/legacy-unknown cannot be requested in certificates.k8s.io/v1".into());
                }
            }
            _ => {
                return Err(format!(
                    "csr:{signer}: the signer name must be DOMAIN/PATH, e.g. \
                     csr:kubernetes.io/kube-apiserver-client"
                ));
            }
        }
        let key_alg: KeyAlg = match &self.key_alg {
            Some(s) => s.parse()?,
            None => KeyAlg::default(),
        };
        let ips = self
            .ip
            .iter()
            .map(|s| {
                s.parse::<std::net::IpAddr>()
                    .map_err(|_| format!("ip {s:?} is not an IPv4 or IPv6 address"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        for d in &self.dns {
            let wildcard = d.strip_prefix("*.").unwrap_or(d);
            check_dns("name", &wildcard.to_ascii_lowercase(), 253)
                .map_err(|_| format!("dns {d:?} is not a DNS name"))?;
        }
        if self.cn.as_deref().is_some_and(str::is_empty) || self.o.iter().any(String::is_empty) {
            return Err("cn and o may not be empty".into());
        }
        if self.cn.is_none() && self.dns.is_empty() && ips.is_empty() {
            return Err("a csr: mapping needs a subject: cn=, dns= or ip=".into());
        }
        let usages = if self.usage.is_empty() {
            default_usages(signer, key_alg).ok_or_else(|| {
                format!(
                    "signer {signer} is not one whose usages certsync knows; give them, e.g. \
                     usage=digital-signature,usage=server-auth"
                )
            })?
        } else {
            let mut usages: Vec<String> = Vec::new();
            for u in &self.usage {
                let u = u.replace('-', " ").to_ascii_lowercase();
                if !CSR_USAGES.contains(&u.as_str()) {
                    return Err(format!(
                        "usage {u:?} is not a Kubernetes key usage (known: {})",
                        CSR_USAGES.join(", ")
                    ));
                }
                if usages.contains(&u) {
                    return Err(format!("usage {u:?} is given twice"));
                }
                usages.push(u);
            }
            usages
        };
        let lifetime = self
            .lifetime
            .as_deref()
            .map(duration(600_000, YEAR * 100))
            .transpose()
            .map_err(|e| format!("lifetime: {e} (the API requires at least 10m)"))?;
        let approval_timeout = self
            .approval_timeout
            .as_deref()
            .map(duration(1000, YEAR))
            .transpose()
            .map_err(|e| format!("approval-timeout: {e}"))?
            .unwrap_or(Duration::from_secs(15 * 60));
        let renew = match &self.renew {
            Some(s) => parse_renew(s)?,
            None => (0.7, 0.9),
        };
        let ca = self
            .ca
            .as_deref()
            .map(|ca| parse_ca(ca, signer))
            .transpose()?;
        Ok(CsrSpec {
            signer: signer.to_owned(),
            common_name: self.cn.clone(),
            organizations: self.o.clone(),
            dns: self.dns.clone(),
            ips,
            key_alg,
            lifetime,
            usages,
            ca,
            renew,
            approval_timeout,
            bootstrap: self.bootstrap_kubeconfig.clone(),
            write_kubeconfig: self
                .write_kubeconfig
                .as_deref()
                .map(|f| {
                    check_file_name(f)
                        .map_err(|e| format!("write-kubeconfig: {e}"))
                        .and_then(|()| {
                            if [CERT_FILE, KEY_FILE, CA_FILE].contains(&f) {
                                Err(format!("write-kubeconfig: {f} is the pair's own file"))
                            } else {
                                Ok(f.to_owned())
                            }
                        })
                })
                .transpose()?,
        })
    }
}

/// `renew=LO-HI`: the renewal window as shares of the lifetime, as
/// fractions (`0.7-0.9`) or percentages (`70%-90%`).
fn parse_renew(s: &str) -> Result<(f64, f64), String> {
    let share = |p: &str| -> Option<f64> {
        let p = p.trim();
        let v = match p.strip_suffix('%') {
            Some(n) => n.parse::<f64>().ok()? / 100.0,
            None => p.parse::<f64>().ok()?,
        };
        (v > 0.0 && v < 1.0).then_some(v)
    };
    match s.split_once('-').map(|(a, b)| (share(a), share(b))) {
        Some((Some(lo), Some(hi))) if lo <= hi => Ok((lo, hi)),
        _ => Err(format!(
            "renew {s:?} is not a window LO-HI of the lifetime such as 0.7-0.9 or 70%-90% \
             (both above 0 and below 1, LO <= HI)"
        )),
    }
}

/// `ca=` of a csr: mapping: `file:PATH` (or an absolute path),
/// `configmap:NAMESPACE/NAME[/KEY]` (key `ca.crt` by default), or
/// `clustertrustbundle[:SIGNER]` (the mapping's own signer by default).
fn parse_ca(s: &str, signer: &str) -> Result<CaSource, String> {
    if s == "clustertrustbundle" {
        return Ok(CaSource::TrustBundles {
            signer: signer.to_owned(),
        });
    }
    if let Some(other) = s.strip_prefix("clustertrustbundle:") {
        if !other.contains('/') {
            return Err(format!(
                "ca={s}: a ClusterTrustBundle is selected by a signer name DOMAIN/PATH"
            ));
        }
        return Ok(CaSource::TrustBundles {
            signer: other.to_owned(),
        });
    }
    if let Some(path) = s.strip_prefix("file:").or(s.starts_with('/').then_some(s)) {
        if path.is_empty() {
            return Err("ca=file: needs a path".into());
        }
        return Ok(CaSource::File(PathBuf::from(path)));
    }
    if let Some(rest) = s.strip_prefix("configmap:") {
        let mut parts = rest.splitn(3, '/');
        let (namespace, name) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        let key = parts.next().unwrap_or(CA_FILE);
        check_dns("namespace", namespace, 63)?;
        check_dns("name", name, 253)?;
        check_file_name(key).map_err(|e| format!("ca key: {e}"))?;
        return Ok(CaSource::ConfigMap {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            key: key.to_owned(),
        });
    }
    Err(format!(
        "ca {s:?}: for a csr: mapping give the signer's CA as file:PATH, \
         configmap:NAMESPACE/NAME[/KEY] or clustertrustbundle[:SIGNER]"
    ))
}

/// Checks a Kubernetes namespace or object name (DNS-1123: lower-case
/// letters, digits, '-' and, for names, '.'; alphanumeric at both ends).
fn check_dns(what: &str, s: &str, max: usize) -> Result<(), String> {
    let dots = what == "name";
    let ok = !s.is_empty()
        && s.len() <= max
        && s.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || (dots && b == b'.')
        })
        && s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric());
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{what} {s:?} is not a valid Kubernetes {what} (lower-case DNS-1123, at most {max} characters)"
        ))
    }
}

/// How the source's files map to target files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// One source file per target file (see [`Mapping::items`]).
    Files,
    /// Every key of the object, or every file of the directory, under its
    /// own name (`files=all`).
    All,
    /// One PEM holding chain and key, split into tls.crt and tls.key.
    Combined(String),
}

/// A source file (or key) published under a target name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub source: String,
    pub target: String,
    pub required: bool,
}

impl Item {
    fn new(source: &str, target: &str, required: bool) -> Self {
        Self {
            source: source.to_owned(),
            target: target.to_owned(),
            required,
        }
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
}

/// Everything `certsync run` needs.
#[derive(Debug, Clone)]
pub struct Config {
    pub mappings: Vec<Mapping>,
    pub admin_addr: std::net::SocketAddr,
    pub stale_fraction: f64,
    pub events: bool,
    pub reload: ReloadConfig,
    pub client: ClientSettings,
    pub once: bool,
    pub debounce: Duration,
    pub resync: Duration,
    pub clock_skew: Duration,
    pub csr_renew_floor: Duration,
}

impl Config {
    /// Builds the configuration from `run`'s arguments (reading `--config`).
    pub fn from_args(args: &RunArgs) -> Result<Self, ConfigError> {
        let specs = mapping_specs(args)?;
        if specs.is_empty() {
            return Err(ConfigError::NoMappings);
        }
        let mappings = specs
            .into_iter()
            .map(|s| s.resolve(args))
            .collect::<Result<Vec<_>, _>>()?;
        check_overlaps(&mappings)?;
        Ok(Self {
            mappings,
            admin_addr: args.admin_addr,
            stale_fraction: args.stale_fraction,
            events: args.events,
            reload: args.reload.build()?,
            client: ClientSettings {
                kubeconfig: args.kubeconfig.clone(),
                tls_server_name: args.tls_server_name.clone(),
                watch_timeout: args.watch_timeout,
                keepalive: args.api_keepalive,
            },
            once: args.once,
            debounce: args.debounce,
            resync: args.resync,
            clock_skew: args.clock_skew,
            csr_renew_floor: args.csr_renew_floor,
        })
    }
}

/// Every mapping: the config file's, then the flags', with `tree:`
/// mappings expanded into one mapping per object.
fn mapping_specs(args: &RunArgs) -> Result<Vec<MappingSpec>, ConfigError> {
    let mut specs = Vec::new();
    if let Some(path) = &args.config {
        specs.extend(read_config_file(path)?);
    }
    for s in &args.sync {
        specs.push(MappingSpec::parse_flag(s)?);
    }
    let mut out = Vec::new();
    for spec in specs {
        out.extend(spec.expand_tree()?);
    }
    Ok(out)
}

impl MappingSpec {
    /// `tree:NAMESPACE=DEST,secret=A,configmap=B,optional-configmap=C`:
    /// cert-syncer's layout, `DEST/secrets/A/KEY` and
    /// `DEST/configmaps/B/KEY`, as one `files=all` mapping per object, each
    /// watched by name; optional objects leave no files while absent.
    fn expand_tree(self) -> Result<Vec<MappingSpec>, ConfigError> {
        let listed = !(self.secret.is_empty()
            && self.configmap.is_empty()
            && self.optional_secret.is_empty()
            && self.optional_configmap.is_empty());
        let Some(namespace) = self.source.strip_prefix("tree:") else {
            if listed {
                return Err(ConfigError::Mapping {
                    mapping: self.target.display().to_string(),
                    problem: "secret=, configmap=, optional-secret= and optional-configmap= \
                              belong to tree: mappings"
                        .into(),
                });
            }
            return Ok(vec![self]);
        };
        let err = |problem: String| ConfigError::Mapping {
            mapping: format!("tree:{namespace}"),
            problem,
        };
        check_dns("namespace", namespace, 63).map_err(&err)?;
        if !listed {
            return Err(err(
                "a tree: mapping lists its objects: secret=NAME, configmap=NAME (or optional-...)"
                    .into(),
            ));
        }
        let rest = MappingSpec {
            source: String::new(),
            target: PathBuf::new(),
            secret: Vec::new(),
            configmap: Vec::new(),
            optional_secret: Vec::new(),
            optional_configmap: Vec::new(),
            name: None,
            files: vec!["all".into()],
            ..self.clone()
        };
        if self.name.is_some() || !self.files.is_empty() {
            return Err(err(
                "a tree: mapping names each object itself and publishes every key (no name=, files=)"
                    .into(),
            ));
        }
        let lists = [
            ("secret", "secrets", &self.secret, false),
            ("configmap", "configmaps", &self.configmap, false),
            ("secret", "secrets", &self.optional_secret, true),
            ("configmap", "configmaps", &self.optional_configmap, true),
        ];
        let mut out = Vec::new();
        for (kind, dir, names, optional) in lists {
            for name in names {
                out.push(MappingSpec {
                    source: format!("{kind}:{namespace}/{name}"),
                    target: self.target.join(dir).join(name),
                    name: Some(format!("{namespace}/{dir}/{name}")),
                    optional,
                    ..rest.clone()
                });
            }
        }
        Ok(out)
    }
}

fn read_config_file(path: &Path) -> Result<Vec<MappingSpec>, ConfigError> {
    let err = |problem: String| ConfigError::File {
        path: path.to_owned(),
        problem,
    };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    // Settings beside the mappings are applied by `parse`; here they are
    // only checked, so a file is refused the same way from any caller.
    file_settings(path, &text)?;
    let file: ConfigFile = serde_yaml_ng::from_str(&text).map_err(|e| err(e.to_string()))?;
    Ok(file.mappings)
}

/// `path` as the kernel will resolve it: absolute, with the longest
/// existing prefix canonicalized (symlinks and `..` resolved) and the rest,
/// which does not exist yet and so holds no symlink, normalized as text.
pub fn resolve_path(path: &Path) -> PathBuf {
    use std::path::Component;
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
    let parts: Vec<Component> = abs.components().collect();
    for split in (1..=parts.len()).rev() {
        let head: PathBuf = parts[..split].iter().collect();
        let Ok(mut out) = std::fs::canonicalize(&head) else {
            continue;
        };
        for c in &parts[split..] {
            match c {
                Component::ParentDir => {
                    out.pop();
                }
                Component::Normal(n) => out.push(n),
                _ => {}
            }
        }
        return out;
    }
    abs
}

/// One task owns each target: no two mappings may share a target, nest one
/// target in another, or write into (or around) a source directory; names
/// are unique. Paths are compared as the kernel resolves them, so `tgt`,
/// `./tgt`, `/abs/tgt` and a symlink to it are one directory.
fn check_overlaps(mappings: &[Mapping]) -> Result<(), ConfigError> {
    let mut names = std::collections::HashMap::with_capacity(mappings.len());
    for (j, b) in mappings.iter().enumerate() {
        if let Some(&i) = names.get(b.name.as_str()) {
            let a: &Mapping = &mappings[i];
            return Err(ConfigError::Mapping {
                mapping: a.name.clone(),
                problem: format!(
                    "the name is used twice (targets {} and {})",
                    resolve_path(&a.target).display(),
                    resolve_path(&b.target).display()
                ),
            });
        }
        names.insert(b.name.as_str(), j);
    }
    // Every target and host source directory, sorted component by
    // component: a directory's subtree then follows it directly, so one
    // pass with a stack of the enclosing directories finds every nesting
    // (comparing all pairs took 0.15 s of start-up at 1,000 mappings).
    let mut dirs: Vec<(PathBuf, bool, usize)> = Vec::with_capacity(mappings.len() * 2);
    for (i, m) in mappings.iter().enumerate() {
        dirs.push((resolve_path(&m.target), true, i));
        if let Source::Dir(dir) = &m.source {
            dirs.push((resolve_path(dir), false, i));
        }
    }
    dirs.sort();
    let mut enclosing: Vec<&(PathBuf, bool, usize)> = Vec::new();
    for cur in &dirs {
        while enclosing.last().is_some_and(|up| !cur.0.starts_with(&up.0)) {
            enclosing.pop();
        }
        if let Some(e) = enclosing.iter().find_map(|up| overlap(mappings, up, cur)) {
            return Err(e);
        }
        enclosing.push(cur);
    }
    Ok(())
}

/// The error for directory `inner` lying in (or being) `outer`, if that
/// is a conflict: a target in or around another target, or around or in
/// any source directory. Sources may nest: both are only read.
fn overlap(
    mappings: &[Mapping],
    outer: &(PathBuf, bool, usize),
    inner: &(PathBuf, bool, usize),
) -> Option<ConfigError> {
    let fail = |m: &Mapping, problem: String| {
        Some(ConfigError::Mapping {
            mapping: m.name.clone(),
            problem,
        })
    };
    match (outer, inner) {
        ((_, false, _), (_, false, _)) => None,
        ((ta, true, i), (tb, true, j)) => {
            // Reported on the mapping listed first, as it was written.
            let ((ta, i), (tb, j)) = if i < j {
                ((ta, *i), (tb, *j))
            } else {
                ((tb, *j), (ta, *i))
            };
            let how = if ta == tb {
                "is the same directory as"
            } else {
                "overlaps"
            };
            fail(
                &mappings[i],
                format!(
                    "its target {} {how} the target {} of mapping {:?}; \
                     two mappings would overwrite each other forever",
                    ta.display(),
                    tb.display(),
                    mappings[j].name
                ),
            )
        }
        ((ta, true, i), (sb, false, j)) | ((sb, false, j), (ta, true, i)) => {
            let whose = if i == j {
                "its own source directory".to_owned()
            } else {
                format!("the source directory of mapping {:?}", mappings[*j].name)
            };
            fail(
                &mappings[*i],
                format!(
                    "the source and target directories overlap: target {} and {whose} {} \
                     (certsync would write into what it reads)",
                    ta.display(),
                    sb.display()
                ),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_args(extra: &[&str]) -> Result<RunArgs, clap::Error> {
        let cli = Cli::try_parse_from(["certsync", "run"].iter().chain(extra))?;
        let Command::Run(args) = cli.command else {
            panic!("not run")
        };
        Ok(*args)
    }

    fn config(extra: &[&str]) -> Result<Config, ConfigError> {
        Config::from_args(&run_args(extra).unwrap())
    }

    #[test]
    fn flag_forms() {
        let c = config(&[
            "--sync",
            "dir:/etc/kubernetes/pki=/etc/certs/apiserver,cert=apiserver.crt,key=apiserver.key,name=apiserver",
            "--sync",
            "dir:/var/lib/kubelet/pki=/etc/certs/kubelet,combined=kubelet-server-current.pem,key-mode=0640,owner=1000",
        ])
        .unwrap();
        let [api, kubelet] = c.mappings.as_slice() else {
            panic!("two mappings")
        };
        assert_eq!(api.name, "apiserver");
        assert_eq!(api.source, Source::Dir("/etc/kubernetes/pki".into()));
        assert_eq!(
            *api.items,
            [
                Item::new("apiserver.crt", CERT_FILE, true),
                Item::new("apiserver.key", KEY_FILE, true),
                Item::new("ca.crt", CA_FILE, false),
            ]
        );
        assert_eq!(kubelet.name, "/etc/certs/kubelet");
        assert_eq!(
            kubelet.layout,
            Layout::Combined("kubelet-server-current.pem".into())
        );
        assert_eq!(kubelet.writer.key_mode, 0o640);
        assert_eq!(kubelet.writer.owner, Some(1000));
        assert_eq!(kubelet.writer.cert_mode, 0o644);
        assert_eq!(c.debounce, Duration::from_secs(2));

        let c = config(&[
            "--sync",
            "secret:openshift-kube-scheduler/kube-scheduler-client-cert-key=/t/client",
            "--sync",
            "configmap:kube-system/ca.bundle=/t/ca,ca-only,ca=ca-bundle.crt",
            "--tls-server-name",
            "api.example",
        ])
        .unwrap();
        assert_eq!(
            c.mappings[0].source,
            Source::Kube(ObjectRef {
                kind: Kind::Secret,
                namespace: "openshift-kube-scheduler".into(),
                name: "kube-scheduler-client-cert-key".into(),
            })
        );
        assert_eq!(
            *c.mappings[1].items,
            [Item::new("ca-bundle.crt", CA_FILE, true)]
        );
        assert_eq!(c.client.tls_server_name.as_deref(), Some("api.example"));
    }

    #[test]
    fn config_file_and_flags_combine() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("certsync.yaml");
        std::fs::write(
            &file,
            "mappings:\n  - source: dir:/src/ca\n    target: /t/ca\n    ca-only: true\n    ca: ca-bundle.crt\n    cert-mode: \"0640\"\n",
        )
        .unwrap();
        let c = config(&[
            "--config",
            file.to_str().unwrap(),
            "--sync",
            "dir:/src/a=/t/a",
        ])
        .unwrap();
        assert_eq!(c.mappings.len(), 2);
        assert_eq!(c.mappings[0].expect, Expect::CaOnly);
        assert_eq!(
            *c.mappings[0].items,
            [Item::new("ca-bundle.crt", CA_FILE, true)]
        );
        assert_eq!(c.mappings[0].writer.cert_mode, 0o640);

        std::fs::write(
            &file,
            "mappings:\n  - source: dir:/a\n    target: /b\n    colour: red\n",
        )
        .unwrap();
        let e = config(&["--config", file.to_str().unwrap()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("certsync.yaml") && e.contains("colour"), "{e}");
    }

    /// A csr: mapping reads the same from the config file as from a flag,
    /// lists and all.
    #[test]
    fn csr_mappings_in_either_form() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("certsync.yaml");
        std::fs::write(
            &file,
            "mappings:\n  - source: csr:kubernetes.io/kube-apiserver-client\n    target: /t/a\n    \
             cn: system:kube-scheduler\n    o: [team-a, team-b]\n    dns: [a.example]\n    \
             ip: [\"10.0.0.1\", \"fd00::1\"]\n    key-alg: rsa-3072\n    lifetime: 30d\n    \
             renew: 50%-60%\n    ca: clustertrustbundle\n",
        )
        .unwrap();
        let flag = "csr:kubernetes.io/kube-apiserver-client=/t/b,cn=system:kube-scheduler,\
                    o=team-a,o=team-b,dns=a.example,ip=10.0.0.1,ip=fd00::1,key-alg=rsa-3072,\
                    lifetime=30d,renew=0.5-0.6,ca=clustertrustbundle";
        let c = config(&["--config", file.to_str().unwrap(), "--sync", flag]).unwrap();
        let [Source::Csr(a), Source::Csr(b)] = [&c.mappings[0].source, &c.mappings[1].source]
        else {
            panic!("not csr: {:?}", c.mappings)
        };
        assert_eq!(a, b);
        assert_eq!(a.organizations, ["team-a", "team-b"]);
        assert_eq!(a.ips.len(), 2);
        assert_eq!(a.key_alg, KeyAlg::Rsa(3072));
        assert_eq!(
            a.usages,
            ["digital signature", "key encipherment", "client auth"]
        );
        assert_eq!(a.lifetime, Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(a.renew, (0.5, 0.6));
        assert_eq!(
            a.ca,
            Some(CaSource::TrustBundles {
                signer: "kubernetes.io/kube-apiserver-client".into()
            })
        );
        assert_eq!(a.approval_timeout, Duration::from_secs(900));
    }

    #[test]
    fn bad_mappings_are_refused_with_the_reason() {
        let cases: &[(&[&str], &str)] = &[
            (&[], "no mappings"),
            (&["--sync", "dir:/a"], "expected KIND:SOURCE=TARGET"),
            (&["--sync", "dir:/a="], "target directory is empty"),
            (&["--sync", "/a=/b"], "no KIND: prefix"),
            (&["--sync", "nfs:/a=/b"], "unknown source kind \"nfs\""),
            (&["--sync", "secret:default=/b"], "expected NAMESPACE/NAME"),
            (
                &["--sync", "secret:Default/x=/b"],
                "namespace \"Default\" is not a valid",
            ),
            (
                &["--sync", "configmap:ns/x_y=/b"],
                "name \"x_y\" is not a valid",
            ),
            (
                &["--sync", "secret:ns/x=/b,combined=c.pem"],
                "dir: sources only",
            ),
            (
                &["--sync", "dir:/a=/b,colour=red"],
                "unknown option \"colour\"",
            ),
            (&["--sync", "dir:/a=/b,cert="], "needs a value"),
            (&["--sync", "dir:/a=/b,cert=../x"], "not allowed"),
            (
                &["--sync", "dir:/a=/b,combined=c.pem,key=k"],
                "combined replaces cert and key",
            ),
            (
                &["--sync", "dir:/a=/b,ca-only,cert=c"],
                "takes no cert or key",
            ),
            (
                &["--sync", "dir:/a=/b,key-mode=0644"],
                "readable by every user",
            ),
            (
                &["--sync", "dir:/a=/b,key-mode=999"],
                "not an octal file mode",
            ),
            (&["--sync", "dir:/a=/b,owner=root"], "numeric id"),
            (&["--sync", "dir:/a=/b,owner=4294967295"], "real ids"),
            (&["--sync", "dir:/a=/b,cert-mode=4644"], "setuid"),
            (
                &["--sync", "dir:/a=/b,cert-mode=0666"],
                "other than the owner write",
            ),
            (
                &["--sync", "dir:/a=/t", "--sync", "dir:/c=/t/sub"],
                "overlaps",
            ),
            (
                &["--sync", "dir:/a=/t,name=x", "--sync", "dir:/c=/u,name=x"],
                "used twice",
            ),
            (
                &["--sync", "dir:/a=/a/out"],
                "source and target directories overlap",
            ),
            (&["--sync", "dir:/a=/b,verify=nohost"], "is not host:port"),
            (&["--sync", "dir:/a=/b,sni=x"], "sni= goes with verify="),
            (
                &["--sync", "dir:/a=/b,ca-only,verify=127.0.0.1:1"],
                "not a CA bundle",
            ),
            (
                &["--sync", "dir:/a=/b", "--reload-cmdline", "("],
                "--reload-cmdline",
            ),
            (
                &[
                    "--sync",
                    "dir:/a=/b",
                    "--reload-url",
                    "https://example.com/",
                    "--reload-insecure-skip-verify",
                ],
                "loopback URLs only",
            ),
        ];
        for (args, want) in cases {
            let e = config(args).unwrap_err().to_string();
            assert!(e.contains(want), "{args:?}: {e:?} lacks {want:?}");
        }
    }

    /// Paths are compared as the kernel resolves them: the same directory
    /// spelled differently, through `..` or through a symlink is caught.
    #[test]
    fn overlaps_are_found_through_spellings_and_symlinks() {
        let d = tempfile::tempdir().unwrap();
        let base = d.path().canonicalize().unwrap();
        let src = base.join("src");
        std::fs::create_dir(&src).unwrap();
        std::os::unix::fs::symlink(&src, base.join("alias")).unwrap();
        let b = base.display();
        let cases = [
            (
                vec![format!("dir:{b}/src={b}/src")],
                "its own source directory",
            ),
            (
                vec![format!("dir:{b}/src={b}/src/./")],
                "its own source directory",
            ),
            (
                vec![format!("dir:{b}/src={b}/src/new/../")],
                "its own source directory",
            ),
            (
                vec![format!("dir:{b}/src={b}/alias/out")],
                "its own source directory",
            ),
            (
                vec![format!("dir:{b}/src={b}/new/../src/x")],
                "its own source directory",
            ),
            (
                vec![
                    format!("dir:{b}/a={b}/t,name=one"),
                    format!("dir:{b}/c={b}/./t,name=two"),
                ],
                "is the same directory as the target",
            ),
            (
                vec![
                    format!("dir:{b}/a={b}/t,name=one"),
                    format!("dir:{b}/src={b}/t2,name=two"),
                    format!("dir:{b}/e={b}/alias,name=three"),
                ],
                "the source directory of mapping \"two\"",
            ),
        ];
        for (specs, want) in cases {
            let mut args = vec![];
            for s in &specs {
                args.push("--sync");
                args.push(s.as_str());
            }
            let e = config(&args).unwrap_err().to_string();
            assert!(e.contains(want), "{specs:?}: {e}");
        }
        // Among many mappings (one sorted pass, not all pairs): a nesting
        // is found however many siblings sort between the two directories,
        // and sources may share or nest in each other.
        let many = |extra: &[String]| {
            let mut specs: Vec<String> = (0..40)
                .map(|i| format!("dir:{b}/s/{}=/{b}/t/a{i}", i % 3))
                .collect();
            specs.push(format!("dir:{b}/s=/{b}/u"));
            specs.extend_from_slice(extra);
            let args: Vec<&str> = specs.iter().flat_map(|s| ["--sync", s.as_str()]).collect();
            config(&args).map(|c| c.mappings.len())
        };
        assert_eq!(many(&[]).unwrap(), 41);
        for (extra, want) in [
            (format!("dir:{b}/x={b}/t"), "overlaps the target"),
            (format!("dir:{b}/x={b}/t/a7/in"), "overlaps the target"),
            (
                format!("dir:{b}/t/a39/x={b}/y"),
                "the source directory of mapping",
            ),
            (
                format!("dir:{b}/x={b}/s/2/out"),
                "the source directory of mapping",
            ),
        ] {
            let e = many(std::slice::from_ref(&extra)).unwrap_err().to_string();
            assert!(e.contains(want), "{extra}: {e}");
        }
        // Relative spellings resolve against the working directory.
        assert_eq!(
            resolve_path(Path::new(".")),
            std::env::current_dir().unwrap()
        );
    }

    /// Numbers, durations, modes and signals that would crash, overflow or
    /// endanger the node are refused by the parser, naming the flag.
    #[test]
    fn unsafe_numbers_modes_and_signals_are_refused() {
        let cases: &[(&[&str], &str)] = &[
            (&["--resync", "0s"], "too short"),
            (&["--watch-timeout", "0s"], "too short"),
            (&["--reload-timeout", "0ms"], "too short"),
            (&["--verify-timeout", "0s"], "too short"),
            (&["--debounce", "500000000years"], "too long"),
            (&["--clock-skew", "2years"], "too long"),
            (&["--resync=-1s"], "--resync"),
            (&["--keep-revisions", "0"], "from 1 to 1000"),
            (
                &["--keep-revisions", "99999999999999999999"],
                "from 1 to 1000",
            ),
            (&["--reload-retries", "1000"], "from 0 to 100"),
            (&["--cert-mode", "0777"], "executable"),
            (&["--cert-mode", "2644"], "setuid"),
            (&["--cert-mode", "0664"], "other than the owner write"),
            (&["--key-mode", "0604"], "readable by every user"),
            (&["--key-mode", "0040"], "owner read"),
            (&["--reload-signal", "KILL"], "cannot be used to reload"),
            (&["--reload-signal", "SIGSTOP"], "cannot be used to reload"),
            (&["--reload-signal", "segv"], "cannot be used to reload"),
        ];
        for (extra, want) in cases {
            let mut args = vec!["--sync", "dir:/a=/b"];
            args.extend_from_slice(extra);
            let e = run_args(&args).unwrap_err().to_string();
            let flag = extra[0].split('=').next().unwrap();
            assert!(e.contains(want) && e.contains(flag), "{extra:?}: {e}");
        }
        for ok in [
            ["--debounce", "0s"],
            ["--reload-signal", "usr2"],
            ["--cert-mode", "0440"],
        ] {
            let mut args = vec!["--sync", "dir:/a=/b"];
            args.extend_from_slice(&ok);
            run_args(&args).unwrap();
        }
    }

    #[test]
    fn one_reload_method_at_most() {
        let e = run_args(&[
            "--sync",
            "dir:/a=/b",
            "--reload-process",
            "nginx",
            "--reload-url",
            "http://127.0.0.1/",
        ])
        .unwrap_err()
        .to_string();
        assert!(e.contains("cannot be used with"), "{e}");
        let c = config(&[
            "--sync",
            "dir:/a=/b",
            "--reload-process",
            "nginx",
            "--reload-signal",
            "usr1",
        ])
        .unwrap();
        assert!(matches!(
            c.reload.method,
            Some(Method::Signal {
                signal: nix::sys::signal::Signal::SIGUSR1,
                ..
            })
        ));
        assert!(
            config(&["--sync", "dir:/a=/b"])
                .unwrap()
                .reload
                .method
                .is_none()
        );
    }

    #[test]
    fn durations_and_octal_modes_parse() {
        // (CERTSYNC_* variables are tested through the binary, in
        // tests/hostdir.rs: setting the environment here would race.)
        let a = run_args(&[
            "--sync",
            "dir:/a=/b",
            "--debounce",
            "250ms",
            "--cert-mode",
            "640",
        ])
        .unwrap();
        assert_eq!(a.debounce, Duration::from_millis(250));
        assert_eq!(a.cert_mode, 0o640);
    }
}
