//! The command line: clap's definitions of every subcommand, flag,
//! environment variable and help text, and the parsers of their values.
//! Nothing here reads files or builds a configuration (that is
//! [`crate::config`]).

mod approve;
mod kubeadm;
mod run;
mod setting;
mod values;

pub use approve::{ApproveArgs, CsrCommand, PolicyArgs, ReviewArgs};
pub use kubeadm::{AdoptArgs, KubeadmCommand, RevertArgs, StatusArgs, StatusOutput, check_set};
pub use run::RunArgs;
pub use values::{SETTABLE, TextOrJson, ValueError, key_mode, log_filter, parse_mode};
pub(crate) use values::{YEAR, duration};

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

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
    Run(Box<RunArgs>),
    /// Report when certificates expire; exit 1 if one is due within --warn-within.
    ///
    /// Expiry report for certificate files, directories or certsync targets;
    /// exits 1 if anything expires within --warn-within or does not match its key.
    Check(CheckArgs),
    /// List the revisions of a target, newest first (* marks the live one).
    Revisions(RevisionsArgs),
    /// Restore an earlier revision of a target atomically, and pin it.
    ///
    /// Restore an earlier revision of a target atomically and pin it until
    /// the source's content changes (a running certsync keeps it and reloads).
    Rollback(RollbackArgs),
    /// Approve kubelet serving certificates that pass every check (a controller).
    ///
    /// Approve kubelet serving certificates (signer
    /// kubernetes.io/kubelet-serving) that pass every check, deny those that
    /// definitely fail one; a controller, safe in several replicas.
    Approve(Box<ApproveArgs>),
    /// Review pending certificate signing requests with the approver's verdict.
    ///
    /// Certificate signing requests: `csr review` shows pending CSRs with
    /// the approver's verdict, and approves or denies on request.
    #[command(subcommand)]
    Csr(CsrCommand),
    /// Hand a kubeadm control-plane node's certificates to certsync, and back.
    ///
    /// A kubeadm control-plane node: `kubeadm adopt` hands every certificate
    /// `kubeadm certs renew all` renews to certsync's `ca:` mappings,
    /// `kubeadm revert` gives them back.
    #[command(subcommand)]
    Kubeadm(KubeadmCommand),
    /// Print a shell completion script.
    ///
    /// Print a shell completion script (e.g. `certsync completion bash >
    /// /etc/bash_completion.d/certsync`).
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print a man page (roff), or write every page with --dir.
    ///
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
    pub log_format: TextOrJson,
    /// Log level or filter: `LEVEL` and `TARGET=LEVEL` directives,
    /// comma-separated (e.g. `debug`, `info,certsync=trace`); levels are
    /// trace, debug, info, warn (or warning), error and off. Without it,
    /// `RUST_LOG` (same form) is used, and `info` without that.
    #[arg(long, global = true, env = "CERTSYNC_LOG_LEVEL", value_parser = log_filter, value_name = "FILTER")]
    pub log_level: Option<tracing_subscriber::filter::Targets>,
}
