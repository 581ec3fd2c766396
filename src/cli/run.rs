//! `certsync run`'s flags and environment variables, which are the config
//! file's settings too.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use nix::sys::signal::Signal;

use super::setting;
use super::values::{
    MS, YEAR, count, duration, generation, key_mode, parse_fraction, parse_mode, parse_signal,
};

/// The flags that tell the main container about a new pair.
const RELOADING: &str = "Reloading the main container";

/// `certsync run`'s flags. Each flag but `--sync`, `--config`,
/// `--print-config` and `--once` is also a setting of the config file by
/// its long name, read from the texts it is given by the flag's own parser
/// ([`setting`]).
#[derive(Debug, Clone, Args, serde::Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
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
    /// `tree:NAMESPACE` (cert-syncer's layout). Every option, with the
    /// kinds it applies to, is listed below the flags.
    #[arg(
        long = "sync",
        env = "CERTSYNC_SYNC",
        value_delimiter = ';',
        value_name = "SPEC"
    )]
    #[serde(skip)]
    pub sync: Vec<String>,

    /// YAML file with a `mappings:` list (each entry takes `source`,
    /// `target` and the same options as `--sync`, e.g. `key-mode: "0600"`)
    /// and any other flag of `run` by its long name (`resync: 5m`,
    /// `reload-process: nginx`); flags and `CERTSYNC_*` variables override
    /// the file.
    #[arg(long, env = "CERTSYNC_CONFIG", value_name = "FILE")]
    #[serde(skip)]
    pub config: Option<PathBuf>,

    /// Print the effective configuration (file, environment and flags
    /// merged; header values and a URL's credentials, query values and
    /// fragment redacted) as YAML and exit.
    #[arg(long)]
    #[serde(skip)]
    pub print_config: bool,

    /// Sync every mapping once and exit: 0 if all succeeded, 1 if any failed
    /// (for init containers).
    #[arg(long, env = "CERTSYNC_ONCE")]
    #[serde(skip)]
    pub once: bool,

    /// With --once: how long to wait for the API server to answer (an init
    /// container may start beside it) before failing.
    #[arg(long, env = "CERTSYNC_ONCE_TIMEOUT", value_parser = duration(0, YEAR), default_value = "1m", value_name = "DURATION")]
    #[serde(deserialize_with = "setting::duration::<_, 0, YEAR>")]
    pub once_timeout: Duration,

    /// How long a source directory must be quiet before it is read, so a
    /// pair written non-atomically (certificate, then key) is read whole.
    #[arg(long, env = "CERTSYNC_DEBOUNCE", value_parser = duration(0, YEAR), default_value = "2s")]
    #[serde(deserialize_with = "setting::duration::<_, 0, YEAR>")]
    pub debounce: Duration,

    /// Re-read every source and re-check every target this often, as a
    /// safety net for missed file events.
    #[arg(long, env = "CERTSYNC_RESYNC", value_parser = duration(MS, YEAR), default_value = "1m")]
    #[serde(deserialize_with = "setting::duration::<_, MS, YEAR>")]
    pub resync: Duration,

    /// Revisions kept in each target, the live one included (>= 1).
    #[arg(long, env = "CERTSYNC_KEEP_REVISIONS", help_heading = "Files", default_value_t = 3, value_parser = count(1, 1000))]
    #[serde(deserialize_with = "setting::count::<_, 1, 1000>")]
    pub keep_revisions: u32,

    /// Mode of published certificate files (octal).
    #[arg(long, env = "CERTSYNC_CERT_MODE", help_heading = "Files", value_parser = parse_mode, default_value = "0644")]
    #[serde(deserialize_with = "setting::cert_mode")]
    pub cert_mode: u32,

    /// Mode of published key files (octal; never world-readable).
    #[arg(long, env = "CERTSYNC_KEY_MODE", help_heading = "Files", value_parser = key_mode, default_value = "0600")]
    #[serde(deserialize_with = "setting::key_mode")]
    pub key_mode: u32,

    /// Numeric owner of published files (default: certsync's user).
    #[arg(
        long,
        env = "CERTSYNC_OWNER",
        help_heading = "Files",
        value_name = "UID"
    )]
    #[serde(deserialize_with = "setting::some")]
    pub owner: Option<u32>,

    /// Numeric group of published files (default: certsync's group).
    #[arg(
        long,
        env = "CERTSYNC_GROUP",
        help_heading = "Files",
        value_name = "GID"
    )]
    #[serde(deserialize_with = "setting::some")]
    pub group: Option<u32>,

    /// How far in the future a certificate's not-before may be and still be
    /// accepted, to forgive clock skew between issuer and node.
    #[arg(long, env = "CERTSYNC_CLOCK_SKEW", value_parser = duration(0, YEAR), default_value = "5m")]
    #[serde(deserialize_with = "setting::duration::<_, 0, YEAR>")]
    pub clock_skew: Duration,

    /// When the signer issues certificates already due for renewal, csr:
    /// mappings request (and ca: mappings issue) a new one no sooner than
    /// this (or 10 % of the issued lifetime up to a day, if longer) after the
    /// previous one; a renewal point still ahead is never delayed.
    #[arg(long, env = "CERTSYNC_CSR_RENEW_FLOOR", value_parser = duration(1000, YEAR), default_value = "5m")]
    #[serde(deserialize_with = "setting::duration::<_, 1000, YEAR>")]
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
    #[serde(deserialize_with = "setting::some")]
    pub kubeconfig: Option<PathBuf>,

    /// The kubeconfig context to use (default: its current context).
    #[arg(
        long,
        env = "CERTSYNC_CONTEXT",
        help_heading = "Kubernetes API",
        value_name = "NAME"
    )]
    #[serde(deserialize_with = "setting::some")]
    pub context: Option<String>,

    /// Name to verify in the API server's certificate, for servers reached
    /// as `localhost` whose certificate names another host (static pods).
    #[arg(
        long,
        env = "CERTSYNC_TLS_SERVER_NAME",
        help_heading = "Kubernetes API",
        value_name = "NAME"
    )]
    #[serde(deserialize_with = "setting::some")]
    pub tls_server_name: Option<String>,

    /// Server-side timeout of each watch call. A silently dead connection
    /// is noticed within this plus 5 s; the watch then resumes.
    #[arg(long, env = "CERTSYNC_WATCH_TIMEOUT", help_heading = "Kubernetes API", value_parser = duration(MS, YEAR), default_value = "1m")]
    #[serde(deserialize_with = "setting::duration::<_, MS, YEAR>")]
    pub watch_timeout: Duration,

    /// Silence on an HTTP/2 connection to the API server after which
    /// certsync sends a PING; with no answer within half of it, the
    /// connection is dropped and every watch resumes on a new one.
    /// Connecting (TCP and the TLS handshake) must finish within it too.
    #[arg(long, env = "CERTSYNC_API_KEEPALIVE", help_heading = "Kubernetes API", value_parser = duration(1000, 3_600_000), default_value = "30s")]
    #[serde(deserialize_with = "setting::duration::<_, 1000, 3_600_000>")]
    pub api_keepalive: Duration,

    /// Signal the process with this name (comm, or executable/`argv[0]` base
    /// name), found through a shared PID namespace. Only the top-most match
    /// of each process tree (e.g. the nginx master) is signalled. Every
    /// process of that name the PID namespace shows is a match: on a host
    /// (not in a pod) that is every user's; use --reload-pidfile there.
    #[arg(
        long,
        help_heading = RELOADING,
        env = "CERTSYNC_RELOAD_PROCESS",
        value_name = "NAME"
    )]
    #[serde(deserialize_with = "setting::some")]
    pub reload_process: Option<String>,
    /// Signal the process whose command line matches this regular expression.
    #[arg(
        long,
        help_heading = RELOADING,
        env = "CERTSYNC_RELOAD_CMDLINE",
        value_name = "REGEX"
    )]
    #[serde(deserialize_with = "setting::some")]
    pub reload_cmdline: Option<String>,
    /// Signal the process whose PID is in this file (re-read every reload).
    /// Only when that process runs as the file's owner (a root-owned file:
    /// a root process); with --reload-process too, it must have that name.
    /// A symlink is never followed. The directories above the pidfile's own
    /// must be root's (or a volume's root), checked at start.
    #[arg(
        long,
        help_heading = RELOADING,
        env = "CERTSYNC_RELOAD_PIDFILE",
        value_name = "FILE"
    )]
    #[serde(deserialize_with = "setting::some")]
    pub reload_pidfile: Option<PathBuf>,
    /// Call this URL instead of sending a signal (success: a 2xx answer).
    #[arg(
        long,
        help_heading = RELOADING,
        env = "CERTSYNC_RELOAD_URL",
        value_name = "URL"
    )]
    #[serde(deserialize_with = "setting::some")]
    pub reload_url: Option<String>,

    /// Signal to send (name, e.g. SIGHUP or HUP).
    #[arg(long, help_heading = RELOADING, env = "CERTSYNC_RELOAD_SIGNAL", value_parser = parse_signal, default_value = "SIGHUP")]
    #[serde(deserialize_with = "setting::signal")]
    pub reload_signal: Signal,
    /// HTTP method of the reload call.
    #[arg(long, help_heading = RELOADING, env = "CERTSYNC_RELOAD_METHOD", default_value = "POST")]
    #[serde(deserialize_with = "setting::value")]
    pub reload_method: String,
    /// Extra header `Name: value` for the reload call; repeatable (newline-separated in the env var).
    #[arg(
        long = "reload-header",
        help_heading = RELOADING,
        env = "CERTSYNC_RELOAD_HEADER",
        value_name = "HEADER",
        value_delimiter = '\n'
    )]
    #[serde(rename = "reload-header")]
    pub reload_headers: Vec<String>,
    /// Send `Authorization: Bearer <contents of FILE>` (re-read every call).
    #[arg(long, help_heading = RELOADING, env = "CERTSYNC_RELOAD_BEARER_TOKEN_FILE", value_name = "FILE")]
    #[serde(deserialize_with = "setting::some")]
    pub reload_bearer_token_file: Option<PathBuf>,
    /// Trust only this CA for an https reload URL (may be a ca.crt certsync publishes).
    #[arg(long, help_heading = RELOADING, env = "CERTSYNC_RELOAD_CA_FILE", value_name = "FILE")]
    #[serde(deserialize_with = "setting::some")]
    pub reload_ca_file: Option<PathBuf>,
    /// Do not verify the reload URL's certificate; loopback URLs only.
    #[arg(long, help_heading = RELOADING, env = "CERTSYNC_RELOAD_INSECURE_SKIP_VERIFY")]
    #[serde(deserialize_with = "setting::value")]
    pub reload_insecure_skip_verify: bool,
    /// Timeout of each reload call.
    #[arg(long, help_heading = RELOADING, env = "CERTSYNC_RELOAD_TIMEOUT", value_parser = duration(MS, YEAR), default_value = "5s")]
    #[serde(deserialize_with = "setting::duration::<_, MS, YEAR>")]
    pub reload_timeout: Duration,
    /// Retries of a failed reload call (exponential backoff with jitter).
    #[arg(long, help_heading = RELOADING, env = "CERTSYNC_RELOAD_RETRIES", default_value_t = 3, value_parser = count(0, 100))]
    #[serde(deserialize_with = "setting::count::<_, 0, 100>")]
    pub reload_retries: u32,
    /// How long to keep looking for the process to signal (it may still be
    /// starting) before giving up until the next change.
    #[arg(long, help_heading = RELOADING, env = "CERTSYNC_RELOAD_FIND_TIMEOUT", value_parser = duration(0, YEAR), default_value = "10s")]
    #[serde(deserialize_with = "setting::duration::<_, 0, YEAR>")]
    pub reload_find_timeout: Duration,
    /// Flips closer together than this (across all mappings) become one reload.
    #[arg(long, help_heading = RELOADING, env = "CERTSYNC_RELOAD_QUIET", value_parser = duration(0, YEAR), default_value = "200ms")]
    #[serde(deserialize_with = "setting::duration::<_, 0, YEAR>")]
    pub reload_quiet: Duration,
    /// A reload is never deferred longer than this after a flip.
    #[arg(long, help_heading = RELOADING, env = "CERTSYNC_RELOAD_MAX_DELAY", value_parser = duration(0, YEAR), default_value = "2s")]
    #[serde(deserialize_with = "setting::duration::<_, 0, YEAR>")]
    pub reload_max_delay: Duration,
    /// How long a mapping's `verify=` check waits for the new certificate.
    #[arg(long, help_heading = RELOADING, env = "CERTSYNC_VERIFY_TIMEOUT", value_parser = duration(MS, YEAR), default_value = "10s")]
    #[serde(deserialize_with = "setting::duration::<_, MS, YEAR>")]
    pub verify_timeout: Duration,
    /// Reloads repeated when verification still sees the old certificate.
    #[arg(long, help_heading = RELOADING, env = "CERTSYNC_VERIFY_RETRIES", default_value_t = 2, value_parser = count(0, 100))]
    #[serde(deserialize_with = "setting::count::<_, 0, 100>")]
    pub verify_retries: u32,

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
    #[serde(deserialize_with = "setting::some")]
    pub admin_addr: Option<std::net::SocketAddr>,

    /// Share of a certificate's lifetime after which, with nothing newer
    /// arrived, it is reported stale (warning + metric); kubelet rotates at 70-90%.
    #[arg(long, env = "CERTSYNC_STALE_FRACTION", help_heading = "Health and metrics", default_value_t = 0.8, value_parser = parse_fraction)]
    #[serde(deserialize_with = "setting::fraction")]
    pub stale_fraction: f64,

    /// A token /readyz answers with in its Certsync-Generation header:
    /// `kubeadm adopt` gives certsync's pod one (a digest of its
    /// configuration and image) and waits for that pod, not an earlier one
    /// on the same port, to be ready. Letters, digits, '-', '.', '_'.
    #[arg(long, env = "CERTSYNC_GENERATION", help_heading = "Health and metrics", value_parser = generation, value_name = "TOKEN")]
    #[serde(deserialize_with = "setting::generation")]
    pub generation: Option<String>,

    /// Record Kubernetes Events (CertificateUpdated, CertificateRejected,
    /// CertificateRequestFailed) on source Secrets/ConfigMaps, csr: requests,
    /// and for ca: (and dir:) mappings on this Pod (needs POD_NAME and
    /// POD_NAMESPACE from the downward API); needs deploy/rbac-events.yaml.
    #[arg(long, env = "CERTSYNC_EVENTS", help_heading = "Kubernetes API")]
    #[serde(deserialize_with = "setting::value")]
    pub events: bool,
}
