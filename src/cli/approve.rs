//! `certsync approve` and `certsync csr review`: the kubelet-serving
//! policy's flags they share, and each one's own.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

use super::values::{MS, YEAR, duration};

#[derive(Debug, Subcommand)]
pub enum CsrCommand {
    /// Show pending CSRs with the approver's verdict; approve or deny on request.
    ///
    /// Pending CSRs (or those named) with requester, node, SANs, usages,
    /// key, age and the verdict of `certsync approve`'s checks.
    Review(ReviewArgs),
}

/// The kubeconfig and context approve and review reach the API server with.
#[derive(Debug, Args)]
pub struct KubeArgs {
    /// Kubeconfig (default, as kubectl: `KUBECONFIG`'s paths merged, then
    /// `~/.kube/config`, then the pod's service account).
    #[arg(long, env = "CERTSYNC_KUBECONFIG", value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, env = "CERTSYNC_CONTEXT", value_name = "NAME")]
    pub context: Option<String>,
}

/// The kubelet-serving policy's bounds (approve and review).
#[derive(Debug, Args)]
pub struct PolicyArgs {
    #[command(flatten)]
    pub policy: crate::approve::Policy,
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
    #[command(flatten)]
    pub kube: KubeArgs,
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
    #[command(flatten)]
    pub kube: KubeArgs,
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
