//! certsync binary: parse arguments, set up logging, run. Nothing else.

use std::process::ExitCode;

use anyhow::Context;
use tracing_subscriber::filter::{LevelFilter, Targets};

use std::sync::Arc;

use certsync::cli::{Cli, Command, CsrCommand, EXIT_USAGE, LogArgs, LogFormat, ReviewArgs};
use certsync::config::{Config, Parsed};
use certsync::inspect::{REVISION_HEADER, render, revision_cells};
use certsync::metrics::Metrics;

fn main() -> ExitCode {
    let Parsed { cli, effective } = match parse_args() {
        Ok(parsed) => parsed,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(EXIT_USAGE as u8)
            } else {
                ExitCode::SUCCESS // --help, --version
            };
        }
    };
    // A command a person reads (a table, then what it did) logs only
    // warnings unless asked; the daemons log at info.
    let quiet = matches!(cli.command, Command::Csr(_) | Command::Kubeadm(_));
    if let Err(e) = init_tracing(&cli.log, quiet) {
        eprintln!("certsync: {e:#}");
        return ExitCode::from(EXIT_USAGE as u8);
    }
    match cli.command {
        Command::Check(a) => report(
            certsync::inspect::check(&a.paths, a.warn_within).map(|rows| {
                let failing = rows.iter().any(|r| r.problem.is_some());
                (certsync::inspect::render_check(&rows, a.output), failing)
            }),
        ),
        Command::Revisions(a) => report(
            certsync::inspect::revisions(&a.target)
                .map(|rows| (render(&rows, a.output, REVISION_HEADER, revision_cells), false)),
        ),
        Command::Rollback(a) => report(certsync::inspect::rollback(&a.target, a.to).map(|r| {
            let text = format!(
                "{}: restored revision {} as revision {}; pinned until the source's content changes\n",
                a.target.display(),
                r.from_history,
                r.revision
            );
            (Ok(text), false)
        })),
        Command::Completion { shell } => {
            let mut cmd = <Cli as clap::CommandFactory>::command();
            clap_complete::generate(shell, &mut cmd, "certsync", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Man(a) => man(&a),
        Command::Approve(args) if args.policy.check().is_err() => usage(args.policy.check()),
        // Looking needs no policy flags (what they would check is marked);
        // approving or denying does.
        Command::Csr(CsrCommand::Review(a))
            if (a.approve || a.deny) && a.policy.check().is_err() =>
        {
            usage(a.policy.check())
        }
        Command::Approve(args) => match approve(args.config()) {
            Ok(code) => code,
            Err(e) => {
                tracing::error!(error = %certsync::error_chain(e.as_ref()), "certsync approve failed");
                ExitCode::FAILURE
            }
        },
        Command::Csr(CsrCommand::Review(a)) => match review(&a) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("certsync: {}", certsync::error_chain(e.as_ref()));
                ExitCode::FAILURE
            }
        },
        Command::Kubeadm(c) => match kubeadm(c) {
            Ok((text, code)) => {
                print!("{text}");
                ExitCode::from(code)
            }
            Err(e) => {
                eprintln!("certsync: {}", certsync::error_chain(e.as_ref()));
                ExitCode::FAILURE
            }
        },
        Command::Run(args) if args.print_config => {
            match certsync::config::print_config(&args, &effective) {
                Ok(text) => {
                    print!("{text}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("certsync: {e}");
                    ExitCode::from(EXIT_USAGE as u8)
                }
            }
        }
        Command::Run(args) => {
            let config = match Config::from_args(&args) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("certsync: {e}");
                    return ExitCode::from(EXIT_USAGE as u8);
                }
            };
            match run(config) {
                Ok(code) => code,
                Err(e) => {
                    // Each cause once (a cause's text is often already in
                    // its parent's message).
                    let error = certsync::error_chain(e.as_ref());
                    tracing::error!(%error, "certsync failed");
                    ExitCode::FAILURE
                }
            }
        }
    }
}

/// `certsync man`: one page to stdout, or every page into `--dir`.
fn man(a: &certsync::cli::ManArgs) -> ExitCode {
    use certsync::man::ManError;
    use std::io::Write;
    let result = match &a.dir {
        Some(dir) => certsync::man::write_all(dir).map(|paths| {
            paths
                .iter()
                .map(|p| format!("{}\n", p.display()))
                .collect::<String>()
                .into_bytes()
        }),
        None => certsync::man::page(&a.command),
    };
    match result {
        Ok(text) => match std::io::stdout().write_all(&text) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("certsync: stdout: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e @ ManError::Unknown { .. }) => {
            eprintln!("certsync: {e}");
            ExitCode::from(EXIT_USAGE as u8)
        }
        Err(e) => {
            eprintln!("certsync: {}", certsync::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// Prints a command's output; exit 1 on error or when `failing`.
fn report(
    result: Result<
        (Result<String, certsync::inspect::InspectError>, bool),
        certsync::inspect::InspectError,
    >,
) -> ExitCode {
    match result.and_then(|(text, failing)| Ok((text?, failing))) {
        Ok((text, failing)) => {
            print!("{text}");
            if failing {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("certsync: {e}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing(log: &LogArgs, quiet: bool) -> anyhow::Result<()> {
    let default = if quiet {
        tracing::Level::WARN
    } else {
        tracing::Level::INFO
    };
    // `--log-level` went through `cli::log_filter` already; `RUST_LOG` is
    // held to the same rule (an unknown word would silence every line).
    let text = match &log.log_level {
        Some(level) => Some(level.clone()),
        None => match std::env::var("RUST_LOG") {
            Ok(v) if !v.trim().is_empty() => Some(
                certsync::cli::log_filter(&v)
                    .map_err(|e| anyhow::anyhow!("RUST_LOG: {e} (or give --log-level)"))?,
            ),
            _ => None,
        },
    };
    let filter = match text {
        Some(text) => text.parse::<Targets>().context("--log-level")?,
        None => Targets::new().with_default(default),
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
        LogFormat::Text => builder.finish().with(filter).init(),
        LogFormat::Json => builder
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

/// One thread for all async work, whatever the node's core count: certsync
/// is I/O-bound, and file writes already run on tokio's blocking pool. A
/// multi-threaded runtime would start a worker per CPU (64 on a large
/// control-plane node) for nothing.
#[tokio::main(flavor = "current_thread")]
async fn run(config: Config) -> anyhow::Result<ExitCode> {
    certsync::limits::raise_open_files();
    if config.once {
        let failures = Box::pin(certsync::sync::once(&config)).await;
        return Ok(if failures.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let metrics = Arc::new(Metrics::new(config.stale_fraction));
    if let Some(g) = &config.generation {
        metrics.set_generation(g.clone());
    }
    let admin = match config.admin_addr {
        Some(addr) => Some(tokio::spawn(
            certsync::admin::serve(addr, Arc::clone(&metrics), stopped.clone()).await?,
        )),
        None => None,
    };
    let m = Arc::clone(&metrics);
    tokio::spawn(async move {
        if let Err(e) = shutdown_signal().await {
            tracing::error!(error = %e, "cannot listen for signals");
            return;
        }
        tracing::info!("shutting down after the write in progress");
        // A target's lock another process holds is not waited for.
        certsync::writer::stop_waiting();
        m.begin_shutdown();
        let _ = stop.send(true);
    });
    certsync::sync::log_plan(&config).await;
    // Boxed: a future awaited here lives on the main thread's stack for
    // the whole run, and every stack page it touches stays resident.
    Box::pin(certsync::sync::run(config, metrics, stopped)).await?;
    if let Some(admin) = admin {
        let _ = admin.await;
    }
    Ok(ExitCode::SUCCESS)
}

/// `certsync approve`: the controller and its admin port until a signal.
#[tokio::main(flavor = "current_thread")]
async fn approve(config: certsync::approve::ApproverConfig) -> anyhow::Result<ExitCode> {
    certsync::limits::raise_open_files();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let metrics = Arc::new(Metrics::new(0.8));
    let admin =
        certsync::admin::serve(config.admin_addr, Arc::clone(&metrics), stopped.clone()).await?;
    let admin = tokio::spawn(admin);
    let m = Arc::clone(&metrics);
    tokio::spawn(async move {
        if shutdown_signal().await.is_ok() {
            m.begin_shutdown();
            let _ = stop.send(true);
        }
    });
    Box::pin(certsync::approve::run(config, metrics, stopped)).await?;
    let _ = admin.await;
    Ok(ExitCode::SUCCESS)
}

/// `certsync csr review`: the table, then what `--approve`/`--deny` did.
#[tokio::main(flavor = "current_thread")]
async fn review(a: &ReviewArgs) -> anyhow::Result<ExitCode> {
    let settings = certsync::source::client::ClientSettings {
        kubeconfig: a.kubeconfig.clone(),
        context: a.context.clone(),
        ..Default::default()
    };
    // No node network given: every other check runs, and the addresses
    // are marked as not checked (never approved: `--approve` needs them).
    let addresses_unchecked = a.policy.node_cidrs.is_empty() && !a.policy.allow_any_node_address;
    let mut policy = a.policy.policy();
    if addresses_unchecked {
        policy.any_node_address = true;
    }
    let (rows, done) = certsync::approve::review(
        &settings,
        &a.names,
        a.policy.selector.as_deref(),
        &policy,
        addresses_unchecked,
        a.approve,
        a.deny,
    )
    .await?;
    print!(
        "{}",
        render(
            &rows,
            a.output,
            certsync::approve::REVIEW_HEADER,
            certsync::approve::review_cells
        )?
    );
    for line in done {
        eprintln!("{line}");
    }
    Ok(ExitCode::SUCCESS)
}

/// `certsync kubeadm adopt|revert|status`: what it printed, and its exit
/// code (status: 0 when healthy, else its first cause's).
#[tokio::main(flavor = "current_thread")]
async fn kubeadm(c: certsync::cli::KubeadmCommand) -> anyhow::Result<(String, u8)> {
    use certsync::cli::{KubeadmCommand, PlanOutput};
    use certsync::kubeadm::Options;
    let text = match c {
        KubeadmCommand::Adopt(a) => {
            let opts = Options {
                dir: a.kubeadm_dir,
                dry_run: a.dry_run,
                set: a.set,
                image: a.image,
                admin_addr: a.admin_addr,
                json: a.output == PlanOutput::Json,
                purge: false,
                local_only: false,
                ready_timeout: a.ready_timeout,
                now: std::time::SystemTime::now(),
            };
            Box::pin(certsync::kubeadm::adopt(&opts)).await?
        }
        KubeadmCommand::Revert(a) => {
            let opts = Options {
                dir: a.kubeadm_dir,
                dry_run: a.dry_run,
                set: Vec::new(),
                image: String::new(),
                admin_addr: ([127, 0, 0, 1], 0).into(),
                json: false,
                purge: a.purge,
                local_only: a.local_only,
                ready_timeout: std::time::Duration::ZERO,
                now: std::time::SystemTime::now(),
            };
            certsync::kubeadm::revert(&opts).await?
        }
        KubeadmCommand::Status(a) => return kubeadm_status(&a).await,
    };
    Ok((text, 0))
}

/// `certsync kubeadm status`: the report in the format asked for, and 0
/// when healthy, else the first cause's exit code.
async fn kubeadm_status(a: &certsync::cli::StatusArgs) -> anyhow::Result<(String, u8)> {
    use certsync::cli::StatusOutput;
    let s = certsync::kubeadm::status(&a.kubeadm_dir).await?;
    let text = match a.output {
        StatusOutput::Text => s.text(),
        StatusOutput::Json => serde_json::to_string_pretty(&s)? + "\n",
        StatusOutput::Prometheus => s.prometheus(),
    };
    Ok((text, s.exit_code()))
}

/// A refused combination of flags: said, and the usage exit code.
fn usage(refused: Result<(), String>) -> ExitCode {
    if let Err(e) = refused {
        eprintln!("certsync: {e}");
    }
    ExitCode::from(EXIT_USAGE as u8)
}

async fn shutdown_signal() -> std::io::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
