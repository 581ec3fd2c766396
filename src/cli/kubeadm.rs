//! `certsync kubeadm adopt|revert|status`: their flags, and the `--set`
//! options adopt accepts.

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser as _};
use clap::{Args, Subcommand, ValueEnum};

use super::values::{SETTABLE, ValueError, duration};

#[derive(Debug, Subcommand)]
pub enum KubeadmCommand {
    /// Hand the node's certificates and CA renewals to certsync (plan first).
    ///
    /// Read the node's kubeadm files, print the plan (every file written,
    /// manifest flag and volume changed) and apply it: backups, certsync's
    /// config, certsync's static pod, then, once that pod is running and
    /// ready (--ready-timeout), the component manifests; not ready, the pod
    /// comes out (the previous one back) and nothing of kubeadm's changes.
    /// The ClusterConfiguration (kubeadm-config) stays kubeadm's, so nodes
    /// join as kubeadm makes them (adopt each after its join); it needs no
    /// API server. Each CA with less than 90% of its span left is renewed
    /// with its own key, and etcd, the API server and the controller-manager
    /// load its certificates side by side (ca-bundle.crt), as does the
    /// kubelet's kubelet.conf (read at the kubelet's next start: restart it
    /// before the old certificate ends); one renewal serves every node
    /// (kube-system/certsync-kubeadm-cas). Adopting again with another --image upgrades certsync,
    /// and after an outage issues fresh pairs. Refuses what it does not
    /// recognise. Run again with nothing due, it changes and waits for nothing (one look
    /// at the pod: exit 1 when it is not ready); run once
    /// a CA is due (status warns: ca-renewal-due), it renews that CA.
    Adopt(AdoptArgs),
    /// Give the node's certificates back to kubeadm from adopt's backup.
    ///
    /// Give the certificates back to kubeadm: its pairs and kubeconfigs
    /// from adopt's backup (any that ends within 24 h issued again from the
    /// CA, kubeadm's certificate with a new serial and validity), its
    /// manifests restored, certsync's static pod removed; certsync's files
    /// moved into the backup (removed with --purge). It changes only this
    /// node's files and needs no API server (it then waits for this node's
    /// own to come back, --api-server-timeout). Refuses a file the backup
    /// lacks, a certificate to issue again from a CA that ends within 24 h.
    /// Nothing to do on a node never adopted.
    Revert(RevertArgs),
    /// Report whether the node is adopted and healthy (exit code per cause).
    ///
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
    /// Also write the report as Prometheus text to PATH, for
    /// node_exporter's textfile collector (e.g.
    /// /var/lib/node_exporter/textfile/certsync.prom): written to a
    /// temporary file, fsynced and renamed over PATH, so the collector
    /// never reads part of it. When status fails before it can report,
    /// PATH says so (`certsync_kubeadm_status_complete 0`) instead of
    /// losing the node's series. PATH's directory and those above it must
    /// be root's and written by no one else (else exit 1, naming it).
    #[arg(long, value_name = "PATH")]
    pub textfile: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusOutput {
    Text,
    Json,
    Prometheus,
}

/// `kubeadm adopt`'s flags: what adopt is asked to do (`kubeadm::Options`).
#[derive(Debug, Clone, Args)]
pub struct AdoptArgs {
    /// The node's kubeadm directory (its /etc/kubernetes) as seen from here;
    /// paths written into files stay the node's own /etc/kubernetes/... .
    #[arg(
        long = "kubeadm-dir",
        value_name = "DIR",
        default_value = "/etc/kubernetes"
    )]
    pub dir: PathBuf,
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
    /// --set renew=20%-25%, then adopt again with --set lifetime=365d --set
    /// renew=70%-90% (options left out are kept); at 8m the scheduler and
    /// controller-manager may stop if certsync is down for more than about
    /// 1.5 minutes, the whole node after about 6.5
    /// (certsync kubeadm status warns while such a lifetime is in place).
    #[arg(long = "set", value_name = "OPTION=VALUE", value_parser = check_set)]
    pub set: Vec<(String, String)>,
    /// The certsync image for certsync's static pod (the node's kubelet
    /// pulls it), e.g. registry.example.com/platform/certsync:0.1.0.
    /// Default: the adopted node's current one (its pod's, else adopt's
    /// record's); a node not adopted yet needs it.
    #[arg(long, value_name = "IMAGE")]
    pub image: Option<String>,
    /// Output format of the plan.
    #[arg(short = 'o', long = "output", value_name = "OUTPUT", default_value = "text", action = clap::ArgAction::Set,
          value_parser = PossibleValuesParser::new(["text", "json"]).map(|v| v == "json"))]
    pub json: bool,
    /// The address of certsync's admin port (/livez, /readyz, /metrics) in
    /// its static pod, written into its arguments and probes. The pod runs
    /// in the node's network: 0.0.0.0:9814 (or the node's address) lets
    /// Prometheus scrape it; the port serves nothing secret and changes nothing.
    /// Default: the adopted node's current one, else 127.0.0.1:9814.
    #[arg(long, value_name = "ADDR")]
    pub admin_addr: Option<std::net::SocketAddr>,
    /// How long certsync's pod (this configuration and image) has to be
    /// running and ready, every target holding a live pair, before adopt
    /// changes any component manifest. Not ready in time: adopt takes the
    /// pod out (puts the previous one back), puts back every file it
    /// changed and exits 1, saying what it saw. Covers the kubelet pulling
    /// the image.
    #[arg(long, value_name = "DURATION", value_parser = duration(1000, 3_600_000), default_value = "5m")]
    pub ready_timeout: Duration,
    /// How long to wait, once adopt changed the API server's manifest, for
    /// it to restart on certsync's files: serving the certificate its new
    /// --tls-cert-file holds at its advertise address and answering /readyz
    /// through admin.conf. Not back in time: exit 1, saying what was seen
    /// (the node stays adopted; `certsync kubeadm revert` hands it back).
    /// 0s: do not wait.
    #[arg(long, value_name = "DURATION", value_parser = duration(0, 3_600_000), default_value = "3m")]
    pub api_server_timeout: Duration,
    /// How many of the newest backups under /etc/kubernetes/certsync/backup
    /// a successful adopt keeps (they hold private keys). Older ones go,
    /// except the first and any other that holds kubeadm's own copy of a
    /// file revert hands back: those stay whatever N is.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..).map(usize::from), default_value = "3")]
    pub keep_backups: usize,
    /// The time adopt judges the CAs by: now, but for tests.
    #[arg(skip = std::time::SystemTime::now())]
    pub now: std::time::SystemTime,
}

/// One `kubeadm adopt --set OPTION=VALUE`, refused unless it is one of
/// [`SETTABLE`] (the value itself is checked with the configuration).
pub fn check_set(spec: &str) -> Result<(String, String), ValueError> {
    let (k, v) = spec.split_once('=').ok_or_else(|| ValueError::NoValue {
        spec: spec.to_owned(),
    })?;
    if !SETTABLE.contains(&k) {
        return Err(ValueError::NotSettable {
            option: k.to_owned(),
        });
    }
    if v.is_empty() {
        return Err(ValueError::Empty {
            option: k.to_owned(),
        });
    }
    Ok((k.to_owned(), v.to_owned()))
}

/// `kubeadm revert`'s flags: what revert is asked to do (`kubeadm::RevertOptions`).
#[derive(Debug, Clone, Args)]
pub struct RevertArgs {
    /// The node's kubeadm directory (its /etc/kubernetes) as seen from here.
    #[arg(
        long = "kubeadm-dir",
        value_name = "DIR",
        default_value = "/etc/kubernetes"
    )]
    pub dir: PathBuf,
    /// Remove certsync's configuration, kubeconfigs, targets and CA bundles instead of
    /// moving them into the backup (the backups stay).
    #[arg(long)]
    pub purge: bool,
    /// Check and print what revert would do; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// How long to wait, once everything is handed back, for the API
    /// server to restart on kubeadm's files: serving kubeadm's certificate
    /// (pki/apiserver.crt) at its advertise address and answering /readyz
    /// through admin.conf. Not back in time: exit 1, saying what was seen
    /// (the node stays reverted). 0s: do not wait.
    #[arg(long, value_name = "DURATION", value_parser = duration(0, 3_600_000), default_value = "3m")]
    pub api_server_timeout: Duration,
}
