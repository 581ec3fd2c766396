//! The command line: clap's definitions of every subcommand, flag,
//! environment variable and help text, and the parsers of their values.
//! Nothing here reads files or builds a configuration (that is
//! [`crate::config`]).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use nix::sys::signal::Signal;

/// Exit code for bad usage (EX_USAGE).
pub const EXIT_USAGE: i32 = 64;

#[derive(Debug, Parser)]
#[command(
    name = "certsync",
    version,
    about = "Keeps TLS certificates on disk in step with their source, atomically.",
    long_about = "Keeps TLS certificate/key pairs on disk in step with their source (a \
Kubernetes Secret, ConfigMap or ClusterTrustBundle, a host directory, a certificate it requests through the CSR API, \
or one it issues from a CA on the node), validates every new pair, publishes it atomically through a `..data` \
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
    /// A kubeadm control-plane node: `kubeadm adopt` hands every certificate
    /// `kubeadm certs renew all` renews to certsync's `ca:` mappings,
    /// `kubeadm revert` gives them back.
    #[command(subcommand)]
    Kubeadm(KubeadmCommand),
    /// Print a shell completion script (e.g. `certsync completion bash >
    /// /etc/bash_completion.d/certsync`).
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print a man page (roff), made from the same definitions as --help:
    /// certsync(1), or a subcommand's (`certsync man csr review`); --dir
    /// writes every page.
    Man(ManArgs),
}

/// `certsync man`: one page, or all of them for packagers.
#[derive(Debug, Args)]
pub struct ManArgs {
    /// The subcommand whose page to print, e.g. `run` or `csr review`
    /// (default: the top page, certsync(1)).
    #[arg(value_name = "SUBCOMMAND", conflicts_with = "dir")]
    pub command: Vec<String>,
    /// Write every page instead (certsync.1, certsync-run.1,
    /// certsync-csr-review.1, ...) into DIR, created if missing, e.g.
    /// /usr/share/man/man1; prints the paths written.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// The mapping grammar, shown after `run -h` and `run --help`.
pub const MAPPING_GRAMMAR: &str = "\
Mappings (--sync KIND:SOURCE=TARGET[,OPTION=VALUE]..., or the config file's `mappings:`):
  dir:PATH                   a host directory (inotify, debounced, resync)
  secret:NAMESPACE/NAME      one Secret, listed and watched by name
  configmap:NAMESPACE/NAME   one ConfigMap, listed and watched by name
  csr:SIGNER                 a certificate certsync requests and renews itself
  ca:PREFIX                  a certificate certsync issues from PREFIX.crt/PREFIX.key
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

Options of csr: (see docs/guides/requesting-certificates.md):
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
  update-kubeconfig=PATH     keep PATH's current user holding the pair, embedded
                             (admin.conf; refused unless it can be done safely)

Options of ca: (see docs/guides/kubeadm-control-plane.md): cn=, o=, dns=, ip=,
key-alg=, usage=, renew= as for csr:, and
  cert=PATH, key=PATH        the CA's files instead of PREFIX.crt, PREFIX.key
  template=PATH              copy subject, SANs and usages from this certificate
  lifetime=DURATION          default 365d, never past the CA's own expiry
  keep-key                   renewals keep the live key (kubeadm certs renew)
  allow-loose-ca-key         use a CA key that group or others may read
  update-kubeconfig=PATH     as for csr: (kubeadm's admin.conf, super-admin.conf)

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

#[derive(Debug, Subcommand)]
pub enum KubeadmCommand {
    /// Read the node's kubeadm files, print the plan (every file written,
    /// manifest flag and volume changed) and apply it: backups, certsync's
    /// config, certsync's static pod, then, once that pod is running and
    /// ready (--ready-timeout), the component manifests; not ready, the pod
    /// comes out (the previous one back) and nothing of kubeadm's changes.
    /// The ClusterConfiguration (kubeadm-config) stays kubeadm's, so nodes
    /// join as kubeadm makes them (adopt each after its join); it needs no
    /// API server. Each CA with less than 90% of its span left is renewed
    /// with its own key, and etcd, the API server and the controller-manager
    /// load its certificates side by side (ca-bundle.crt), so its end needs
    /// no restart. Adopting again with another --image upgrades certsync,
    /// and after an outage issues fresh pairs. Refuses what it does not
    /// recognise; a second run changes nothing.
    Adopt(AdoptArgs),
    /// Give the certificates back to kubeadm: its pairs and kubeconfigs
    /// from adopt's backup (any that ends within 24 h issued again from the
    /// CA, kubeadm's certificate with a new serial and validity), its
    /// manifests restored, certsync's static pod removed, fields an
    /// earlier adopt left in the ClusterConfiguration taken out; certsync's files moved into
    /// the backup (removed with --purge). Refuses an unreadable
    /// ClusterConfiguration, a file the backup lacks, a CA that ends within
    /// 24 h. Nothing to do on a node never adopted.
    Revert(RevertArgs),
    /// Whether the node is adopted and healthy: adopt's record and backups,
    /// certsync's pod (its image, admin address and /readyz), each
    /// certificate's end and renewal window read from its live target (with
    /// certsync down too), the last renewal error, whether each component
    /// manifest still names certsync's files, and each CA's end (warned when
    /// adopt would renew it, or kubelet.conf lacks it). Exit 0 when healthy, else the
    /// code of the first cause found (docs/reference/exit-codes.md).
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The node's kubeadm directory (its /etc/kubernetes) as seen from here.
    #[arg(long, value_name = "DIR", default_value = "/etc/kubernetes")]
    pub kubeadm_dir: PathBuf,
    /// Output format: text, json, or prometheus (for node_exporter's
    /// textfile collector; metric names in docs/reference/metrics.md).
    #[arg(short, long, value_enum, default_value = "text")]
    pub output: StatusOutput,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusOutput {
    Text,
    Json,
    Prometheus,
}

#[derive(Debug, Args)]
pub struct AdoptArgs {
    /// The node's kubeadm directory (its /etc/kubernetes) as seen from here;
    /// paths written into files stay the node's own /etc/kubernetes/... .
    #[arg(long, value_name = "DIR", default_value = "/etc/kubernetes")]
    pub kubeadm_dir: PathBuf,
    /// Print the plan and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// A ca: option for every mapping adopt writes: lifetime=, renew=,
    /// key-alg= or keep-key= (repeatable). The configuration is judged as
    /// `certsync run` judges it before anything is written, and refused
    /// when the upper end of renew= (default 90%) leaves less than 6m of
    /// the lifetime: client-go (kube-scheduler, kube-controller-manager)
    /// re-reads its client certificate file only every 5m. To watch
    /// renewals happen on a node you are watching: --set lifetime=8m
    /// --set renew=20%-25%, then adopt again with the defaults; at 8m the
    /// node stops if certsync is down for more than about 1.5 minutes
    /// (certsync kubeadm status warns while such a lifetime is in place).
    #[arg(long = "set", value_name = "OPTION=VALUE", value_parser = check_set)]
    pub set: Vec<(String, String)>,
    /// The certsync image for certsync's static pod (the node's kubelet
    /// pulls it), e.g. registry.example.com/platform/certsync:0.1.0.
    #[arg(long, value_name = "IMAGE")]
    pub image: String,
    /// Output format of the plan.
    #[arg(short, long, value_enum, default_value = "text")]
    pub output: PlanOutput,
    /// The address of certsync's admin port (/livez, /readyz, /metrics) in
    /// its static pod, written into its arguments and probes. The pod runs
    /// in the node's network: 0.0.0.0:9814 (or the node's address) lets
    /// Prometheus scrape it; the port serves nothing secret and changes nothing.
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9814")]
    pub admin_addr: std::net::SocketAddr,
    /// How long certsync's pod (this configuration and image) has to be
    /// running and ready, every target holding a live pair, before adopt
    /// changes any component manifest. Not ready in time: adopt takes the
    /// pod out (puts the previous one back), puts back every file it
    /// changed and exits 1, saying what it saw. Covers the kubelet pulling
    /// the image.
    #[arg(long, value_name = "DURATION", value_parser = duration(1000, 3_600_000), default_value = "5m")]
    pub ready_timeout: Duration,
}

/// `--set` options adopt accepts: how a certificate is renewed, never who
/// it is for (that is kubeadm's template or the component's identity).
pub const SETTABLE: [&str; 4] = ["lifetime", "renew", "key-alg", "keep-key"];

/// One `kubeadm adopt --set OPTION=VALUE`, refused unless it is one of
/// [`SETTABLE`] (the value itself is checked with the configuration).
pub fn check_set(spec: &str) -> Result<(String, String), String> {
    let (k, v) = spec
        .split_once('=')
        .ok_or_else(|| format!("--set {spec:?}: expected OPTION=VALUE"))?;
    if !SETTABLE.contains(&k) {
        return Err(format!(
            "--set {k}: adopt sets only {} on its mappings (identity options such as \
             cn, o, dns, ip, usage or template come from kubeadm's certificates)",
            SETTABLE.join(", ")
        ));
    }
    if v.is_empty() {
        return Err(format!("--set {k}: empty value"));
    }
    Ok((k.to_owned(), v.to_owned()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PlanOutput {
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct RevertArgs {
    /// The node's kubeadm directory (its /etc/kubernetes) as seen from here.
    #[arg(long, value_name = "DIR", default_value = "/etc/kubernetes")]
    pub kubeadm_dir: PathBuf,
    /// Remove certsync's configuration, kubeconfigs and targets instead of
    /// moving them into the backup (the backups stay).
    #[arg(long)]
    pub purge: bool,
    /// Check and print what revert would do; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Revert even when the ClusterConfiguration (kubeadm-config) cannot be
    /// read: the entries to take out by hand are printed. Without it revert
    /// refuses, changing nothing.
    #[arg(long)]
    pub local_only: bool,
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
    /// Kubeconfig (default, as kubectl: `KUBECONFIG`'s paths merged, then
    /// `~/.kube/config`, then the pod's service account).
    #[arg(long, env = "CERTSYNC_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, env = "CERTSYNC_CONTEXT", value_name = "NAME")]
    pub context: Option<String>,
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
    /// Kubeconfig (default, as kubectl: `KUBECONFIG`'s paths merged, then
    /// `~/.kube/config`, then the pod's service account).
    #[arg(long, env = "CERTSYNC_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, env = "CERTSYNC_CONTEXT", value_name = "NAME")]
    pub context: Option<String>,
    /// The Lease replicas elect a leader with (only the leader writes);
    /// `--lease-name ""` for a single replica without election.
    #[arg(long, env = "CERTSYNC_LEASE_NAME", default_value = "certsync-approver")]
    pub lease_name: String,
    /// Namespace of the Lease (default: POD_NAMESPACE, else the namespace
    /// of the kubeconfig context or of the pod's service account, else
    /// kube-system).
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

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Certificate files, directories (every *.crt and *.pem), targets or
    /// kubeconfigs (`*.conf`: the certificate embedded for the current
    /// context's user, as in kubeadm's admin.conf).
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
    /// Log level or filter: `LEVEL` and `TARGET=LEVEL` directives,
    /// comma-separated (e.g. `debug`, `info,certsync=trace`); levels are
    /// trace, debug, info, warn (or warning), error and off. Without it,
    /// `RUST_LOG` (same form) is used, and `info` without that.
    #[arg(long, global = true, env = "CERTSYNC_LOG_LEVEL", value_parser = log_filter, value_name = "FILTER")]
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
    /// CSR API, e.g. `csr:kubernetes.io/kube-apiserver-client`),
    /// `ca:PREFIX` (a certificate certsync issues and renews from the CA
    /// PREFIX.crt/PREFIX.key on the node), `clustertrustbundle:NAME|SIGNER`,
    /// `tree:NAMESPACE` (cert-syncer's layout); the grammar is below.
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
    /// `write-kubeconfig=FILE` (a kubeconfig using the pair, in the target),
    /// `update-kubeconfig=PATH` (csr: and ca:: an existing kubeconfig, such
    /// as admin.conf, whose current user certsync keeps holding the live
    /// pair as embedded data).
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

    /// With --once: how long to wait for the API server to answer (an init
    /// container may start beside it) before failing.
    #[arg(long, env = "CERTSYNC_ONCE_TIMEOUT", value_parser = duration(0, YEAR), default_value = "1m", value_name = "DURATION")]
    pub once_timeout: Duration,

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

    /// When the signer issues certificates already due for renewal, csr:
    /// mappings request (and ca: mappings issue) a new one no sooner than
    /// this (or 10 % of the issued lifetime up to a day, if longer) after the
    /// previous one; a renewal point still ahead is never delayed.
    #[arg(long, env = "CERTSYNC_CSR_RENEW_FLOOR", value_parser = duration(1000, YEAR), default_value = "5m")]
    pub csr_renew_floor: Duration,

    /// Kubeconfig for Kubernetes mappings. Without it, as kubectl:
    /// `KUBECONFIG`'s paths merged, then `~/.kube/config`, then the pod's
    /// service account. Rebuilt when the file changes.
    #[arg(
        long,
        env = "CERTSYNC_KUBECONFIG",
        help_heading = "Kubernetes API",
        value_name = "FILE"
    )]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use (default: its current context).
    #[arg(
        long,
        env = "CERTSYNC_CONTEXT",
        help_heading = "Kubernetes API",
        value_name = "NAME"
    )]
    pub context: Option<String>,

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

    /// Address of the admin port (/livez, /readyz, /metrics), e.g.
    /// 127.0.0.1:9808, or 0.0.0.0:9808 for kubelet probes on a pod IP.
    /// None unless given: host-network pods on one node share its ports,
    /// and any fixed default would collide between two of them.
    #[arg(
        long,
        env = "CERTSYNC_ADMIN_ADDR",
        help_heading = "Health and metrics",
        value_name = "ADDR"
    )]
    pub admin_addr: Option<std::net::SocketAddr>,

    /// Share of a certificate's lifetime after which, with nothing newer
    /// arrived, it is reported stale (warning + metric); kubelet rotates at 70-90%.
    #[arg(long, env = "CERTSYNC_STALE_FRACTION", help_heading = "Health and metrics", default_value_t = 0.8, value_parser = parse_fraction)]
    pub stale_fraction: f64,

    /// A token /readyz answers with in its Certsync-Generation header:
    /// `kubeadm adopt` gives certsync's pod one (a digest of its
    /// configuration and image) and waits for that pod, not an earlier one
    /// on the same port, to be ready. Letters, digits, '-', '.', '_'.
    #[arg(long, env = "CERTSYNC_GENERATION", help_heading = "Health and metrics", value_parser = generation, value_name = "TOKEN")]
    pub generation: Option<String>,

    /// Record Kubernetes Events (CertificateUpdated, CertificateRejected,
    /// CertificateRequestFailed) on source Secrets/ConfigMaps, csr: requests,
    /// and for ca: (and dir:) mappings on this Pod (needs POD_NAME and
    /// POD_NAMESPACE from the downward API); needs deploy/rbac-events.yaml.
    #[arg(long, env = "CERTSYNC_EVENTS", help_heading = "Kubernetes API")]
    pub events: bool,
}

/// A log filter (`--log-level`, `RUST_LOG`) in tracing's `Targets` form,
/// with klog's and Python's `warning` spelled `warn`. Every directive must
/// be `LEVEL` or `TARGET=LEVEL` with a known level: tracing reads a bare
/// unknown word (`verbose`, `warning`) as a target name, which turns off
/// every other log line, errors included.
pub fn log_filter(s: &str) -> Result<String, String> {
    let level = |word: &str| {
        let word = word.trim().to_ascii_lowercase();
        match word.as_str() {
            "trace" | "debug" | "info" | "warn" | "error" | "off" => Some(word),
            "warning" => Some("warn".to_owned()),
            _ => None,
        }
    };
    let bad = |directive: &str, why: &str| {
        format!(
            "log directive {directive:?}: {why} (directives are LEVEL or TARGET=LEVEL, \
             comma-separated; levels: trace, debug, info, warn or warning, error, off)"
        )
    };
    let mut out = Vec::new();
    for directive in s.split(',') {
        let d = directive.trim();
        if d.is_empty() {
            continue;
        }
        match d.split_once('=') {
            None => out.push(level(d).ok_or_else(|| bad(d, "not a level"))?),
            Some((target, lvl)) => {
                let target = target.trim();
                let ok_target = !target.is_empty()
                    && target
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '-' | '.'));
                if !ok_target {
                    return Err(bad(d, "not a module path before `=`"));
                }
                let lvl = level(lvl).ok_or_else(|| bad(d, "not a level after `=`"))?;
                out.push(format!("{target}={lvl}"));
            }
        }
    }
    if out.is_empty() {
        return Err(bad(s, "no directive"));
    }
    Ok(out.join(","))
}

pub(crate) const MS: u64 = 1;

pub(crate) const YEAR: u64 = 365 * 24 * 3600 * 1000;

/// A duration parser with bounds in milliseconds: zero where it makes no
/// sense (a resync every 0 s), and no more than the bound (a year by
/// default), so deadline arithmetic can never overflow.
pub(crate) fn duration(
    min_ms: u64,
    max_ms: u64,
) -> impl Fn(&str) -> Result<Duration, String> + Clone {
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

pub(crate) fn fmt_ms(ms: u64) -> String {
    humantime::format_duration(Duration::from_millis(ms)).to_string()
}

/// `run --generation`: a short token fit for an HTTP header as it is.
pub(crate) fn generation(s: &str) -> Result<String, String> {
    let fits = !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'));
    if fits {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "{:?}: 1-128 letters, digits, '-', '.' or '_'",
            crate::escape(s)
        ))
    }
}

/// A whole-number parser with inclusive bounds.
pub(crate) fn count(min: u32, max: u32) -> impl Fn(&str) -> Result<u32, String> + Clone {
    move |s: &str| match s.parse::<u32>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not a whole number from {min} to {max}")),
    }
}

pub(crate) fn parse_fraction(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f > 0.0 && f <= 1.0 => Ok(f),
        _ => Err(format!("{s:?} is not a fraction in (0, 1]")),
    }
}

/// How the main container is told about a new pair. At most one of
/// `--reload-process`, `--reload-cmdline`, `--reload-pidfile`, `--reload-url`
/// (`--reload-pidfile` with `--reload-process`: the pidfile's process must
/// have that name); none for consumers that watch their files (Kubernetes components).
#[derive(Debug, Args)]
#[command(next_help_heading = "Reloading the main container")]
pub struct ReloadArgs {
    /// Signal the process with this name (comm, or executable/argv[0] base
    /// name), found through a shared PID namespace. Only the top-most match
    /// of each process tree (e.g. the nginx master) is signalled. Every
    /// process of that name the PID namespace shows is a match: on a host
    /// (not in a pod) that is every user's; use --reload-pidfile there.
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
    /// Only when that process runs as the file's owner (a root-owned file:
    /// a root process); with --reload-process too, it must have that name.
    /// A symlink is never followed. The directories above the pidfile's own
    /// must be root's (or a volume's root), checked at start.
    #[arg(
        long,
        env = "CERTSYNC_RELOAD_PIDFILE",
        value_name = "FILE",
        conflicts_with_all = ["reload_cmdline", "reload_url"]
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
pub(crate) const RELOAD_SIGNALS: [Signal; 7] = [
    Signal::SIGHUP,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
    Signal::SIGINT,
    Signal::SIGQUIT,
    Signal::SIGTERM,
];

pub(crate) fn parse_signal(s: &str) -> Result<Signal, String> {
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

pub(crate) fn cert_mode(s: &str) -> Result<u32, String> {
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
