//! `CommandError`: why a command did not do its work, told once and made its exit code; what a command finished with.

use std::io::Write as _;

use crate::inspect::InspectError;
use crate::man::ManError;

/// Exit code for bad usage (EX_USAGE).
const EXIT_USAGE: u8 = 64;

/// The target of the lines the daemons log about themselves (their
/// start, stop and failure), as operators filter and alert on it.
pub(super) const LOG_TARGET: &str = "certsync";

/// What a command finished with: 0, or the code its report calls for
/// (`check` found a problem, `run --once` a failed mapping, `kubeadm
/// status` an unhealthy node). A command that could not do its work
/// returns a [`CommandError`] instead.
pub type Finished = Result<u8, CommandError>;

/// Why a command did not do its work. Each is said once, by
/// [`CommandError::report`], and exits with [`CommandError::exit_code`].
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The command line could not be parsed (or asked for `--help` or
    /// `--version`, which clap prints and exits 0 with).
    #[error(transparent)]
    Args(#[from] clap::Error),
    /// `RUST_LOG` is no filter (`--log-level` was checked by
    /// `cli::log_filter` when parsed; `RUST_LOG` is checked when logging
    /// starts).
    #[error("RUST_LOG: {problem} (or give --log-level)")]
    LogEnv { problem: crate::cli::ValueError },
    /// `run`'s flags, environment or config file refused, or (`approve`,
    /// `csr review --approve|--deny`) a node policy that would trust
    /// node-written addresses alone.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Man(#[from] ManError),
    #[error(transparent)]
    Inspect(#[from] InspectError),
    #[error(transparent)]
    Approve(#[from] crate::approve::ApproveError),
    #[error(transparent)]
    Kubeadm(#[from] crate::kubeadm::KubeadmError),
    #[error(transparent)]
    Json(#[from] serde_json::Error),
    /// `kubeadm status --textfile` could not be written.
    #[error("--textfile: {0}")]
    Textfile(#[from] crate::writer::WriterError),
    #[error("stdout: {0}")]
    Stdout(#[source] std::io::Error),
    /// A daemon's admin port could not be served.
    #[error(transparent)]
    Admin(#[from] crate::admin::AdminError),
    /// A daemon's sync stopped on an error.
    #[error(transparent)]
    Sync(#[from] crate::sync::SyncError),
    /// The `run` daemon could not start or stopped on an error: the
    /// admin port's or the sync's.
    #[error("certsync failed")]
    Run(#[source] Box<CommandError>),
    /// The `approve` controller could not start or stopped on an error:
    /// the admin port's or the controller's.
    #[error("certsync approve failed")]
    Approver(#[source] Box<CommandError>),
}

impl CommandError {
    /// The exit code of each failure: the table in
    /// docs/reference/exit-codes.md, in one place.
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Args(e) if !e.use_stderr() => 0,
            Self::Args(_)
            | Self::LogEnv { .. }
            | Self::Config(_)
            | Self::Man(ManError::Unknown { .. }) => EXIT_USAGE,
            // Work that could not be done.
            _ => 1,
        }
    }

    /// Tells the failure: clap's own text for the command line, a log
    /// line for the daemons (whose stderr is a log, JSON with
    /// `--log-format json`), else `certsync: ` and each cause once.
    pub fn report(&self) {
        match self {
            Self::Args(e) => {
                let _ = e.print();
            }
            Self::Run(e) | Self::Approver(e) => {
                let error = crate::error_chain(e.as_ref());
                tracing::error!(target: LOG_TARGET, %error, "{self}");
            }
            _ => eprintln!("certsync: {}", crate::error_chain(self)),
        }
    }
}

/// Prints a command's output.
pub(super) fn print(text: impl AsRef<[u8]>) -> Result<(), CommandError> {
    std::io::stdout()
        .write_all(text.as_ref())
        .map_err(CommandError::Stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every failure exits with the code docs/reference/exit-codes.md
    /// gives it: 64 for what the user asked wrongly, 0 for `--help`, 1
    /// for work that could not be done.
    #[test]
    fn each_failure_exits_with_its_documented_code() {
        use crate::cli::Cli;
        use clap::Parser as _;
        let io = || std::io::Error::other("refused");
        let bind = || crate::admin::AdminError::Bind {
            addr: ([127, 0, 0, 1], 1).into(),
            source: io(),
        };
        let cases: Vec<(CommandError, u8)> = vec![
            (
                Cli::try_parse_from(["certsync", "--help"])
                    .unwrap_err()
                    .into(),
                0,
            ),
            (
                Cli::try_parse_from(["certsync", "bogus"])
                    .unwrap_err()
                    .into(),
                64,
            ),
            (
                CommandError::LogEnv {
                    problem: crate::cli::ValueError::Fraction { value: "p".into() },
                },
                64,
            ),
            (crate::config::ConfigError::NoNodeCidr.into(), 64),
            (crate::config::ConfigError::NoMappings.into(), 64),
            (
                ManError::Unknown {
                    name: "x".into(),
                    known: "run".into(),
                }
                .into(),
                64,
            ),
            (
                ManError::Write {
                    path: "/x".into(),
                    source: io(),
                }
                .into(),
                1,
            ),
            (CommandError::Stdout(io()), 1),
            (
                InspectError::Path {
                    path: "/x".into(),
                    problem: Box::new(InspectError::NotTarget),
                }
                .into(),
                1,
            ),
            (
                crate::kubeadm::KubeadmError::Refused {
                    dir: "/x".into(),
                    reason: Box::new(crate::kubeadm::Refusal::ExternalEtcd),
                }
                .into(),
                1,
            ),
            (CommandError::Run(Box::new(bind().into())), 1),
            (CommandError::Approver(Box::new(bind().into())), 1),
        ];
        for (e, code) in cases {
            assert_eq!(e.exit_code(), code, "{e:?}");
        }
    }
}
