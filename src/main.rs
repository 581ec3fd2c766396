//! certsync binary: parse arguments, set up logging, call the command's
//! function, exit with its code. Nothing else.

use std::process::ExitCode;

use tracing_subscriber::filter::{LevelFilter, Targets};

use certsync::cli::{Command, CsrCommand, KubeadmCommand, LogArgs, TextOrJson};
use certsync::command::{self, CommandError, Finished};
use certsync::config::Parsed;

fn main() -> ExitCode {
    match parse_args().map_err(CommandError::from).and_then(dispatch) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            e.report();
            ExitCode::from(e.exit_code())
        }
    }
}

fn dispatch(Parsed { cli, flags }: Parsed) -> Finished {
    // A command a person reads (a table, then what it did) logs only
    // warnings unless asked; the daemons log at info.
    let quiet = matches!(cli.command, Command::Csr(_) | Command::Kubeadm(_));
    init_tracing(&cli.log, quiet)?;
    match cli.command {
        Command::Run(a) => command::run(*a, &flags),
        Command::Check(a) => command::check(&a),
        Command::Revisions(a) => command::revisions(&a),
        Command::Rollback(a) => command::rollback(&a),
        Command::Approve(a) => command::approve(&a),
        Command::Csr(CsrCommand::Review(a)) => command::review(&a),
        Command::Kubeadm(KubeadmCommand::Adopt(a)) => command::adopt(&a),
        Command::Kubeadm(KubeadmCommand::Revert(a)) => command::revert(&a),
        Command::Kubeadm(KubeadmCommand::Status(a)) => command::status(&a),
        Command::Completion { shell } => command::completion(shell),
        Command::Man(a) => command::man(&a),
    }
}

fn init_tracing(log: &LogArgs, quiet: bool) -> Result<(), CommandError> {
    let default = if quiet {
        tracing::Level::WARN
    } else {
        tracing::Level::INFO
    };
    // `--log-level` went through `cli::log_filter` already; `RUST_LOG` is
    // held to the same rule (an unknown word would silence every line).
    let filter = match &log.log_level {
        Some(filter) => filter.clone(),
        None => match std::env::var("RUST_LOG") {
            Ok(v) if !v.trim().is_empty() => {
                certsync::cli::log_filter(&v).map_err(|problem| CommandError::LogEnv { problem })?
            }
            _ => Targets::new().with_default(default),
        },
    };
    // notify logs at info what is routine for certsync (the watch of a
    // revision directory that was retired: one line per rotation). It is
    // capped at warn unless the filter names it.
    let filter = if filter
        .iter()
        .any(|(target, _)| target.starts_with("notify"))
    {
        filter
    } else {
        let default = filter.default_level().unwrap_or(LevelFilter::OFF);
        filter.with_target("notify", default.min(LevelFilter::WARN))
    };
    let builder = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    match log.log_format {
        TextOrJson::Text => builder.finish().with(filter).init(),
        TextOrJson::Json => builder
            .json()
            .flatten_event(true)
            .finish()
            .with(filter)
            .init(),
    }
    Ok(())
}

/// The command line, parsed on a short-lived thread: clap builds the whole
/// command in stack frames of over 100 KiB, and on the main thread those
/// pages would stay resident for the life of the process (a sixth of an
/// idle sidecar's heap and stacks). A thread's stack is unmapped when it
/// ends.
fn parse_args() -> Result<Parsed, clap::Error> {
    let parse = || certsync::config::parse(std::env::args_os().collect());
    std::thread::Builder::new()
        .name("args".into())
        .stack_size(1 << 20)
        .spawn(parse)
        .map_or_else(|_| parse(), |t| t.join().unwrap_or_else(|_| parse()))
}
