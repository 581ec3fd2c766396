//! `certsync run` and `certsync approve`: the long-running commands, and
//! what they share: the open-files limit, the admin port, and the stop
//! that SIGTERM or SIGINT starts.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::error::{CommandError, Finished, LOG_TARGET, print};
use crate::cli::{ApproveArgs, RunArgs};
use crate::config::{Config, Flag, Settings};
use crate::metrics::Metrics;

/// A daemon's shared parts while it runs.
struct Daemon {
    metrics: Arc<Metrics>,
    /// Turns true on SIGTERM or SIGINT.
    stopped: watch::Receiver<bool>,
    admin: Option<JoinHandle<()>>,
}

impl Daemon {
    /// Raises the open-files limit, binds the admin port (if any: a bad
    /// address fails here, at start) and listens for SIGTERM and SIGINT,
    /// which end every wait for a target's lock, mark /readyz as shutting
    /// down and turn `stopped` true. A signal that cannot be listened for
    /// is logged: the daemon then stops only when killed.
    async fn start(metrics: Metrics, admin_addr: Option<SocketAddr>) -> Result<Self, CommandError> {
        crate::limits::raise_open_files();
        let (stop, stopped) = watch::channel(false);
        let metrics = Arc::new(metrics);
        let admin = match admin_addr {
            Some(addr) => Some(tokio::spawn(
                crate::admin::serve(addr, Arc::clone(&metrics), stopped.clone()).await?,
            )),
            None => None,
        };
        let m = Arc::clone(&metrics);
        tokio::spawn(async move {
            if let Err(e) = crate::shutdown::signalled().await {
                tracing::error!(target: LOG_TARGET, error = %e, "cannot listen for signals");
                return;
            }
            tracing::info!(target: LOG_TARGET, "shutting down after the write in progress");
            // A target's lock another process holds is not waited for.
            crate::writer::stop_waiting();
            m.begin_shutdown();
            let _ = stop.send(true);
        });
        Ok(Self {
            metrics,
            stopped,
            admin,
        })
    }

    /// Runs the daemon's work to its end, then waits for the admin port to
    /// close its connections. Boxed: a future awaited here lives on the
    /// main thread's stack for the whole run, and every stack page it
    /// touches stays resident.
    async fn run_until_finished<E>(
        self,
        work: impl std::future::Future<Output = Result<(), E>>,
    ) -> Result<(), CommandError>
    where
        CommandError: From<E>,
    {
        Box::pin(work).await?;
        if let Some(admin) = self.admin {
            let _ = admin.await;
        }
        Ok(())
    }
}

/// `certsync run`: `--print-config`, one sync (`--once`: 1 when a mapping
/// failed), or the daemon until a signal.
pub fn run(args: RunArgs, flags: &[Flag]) -> Finished {
    let settings = Settings::load(args, flags)?;
    if settings.args.print_config {
        print(&crate::config::print_config(&settings)?)?;
        return Ok(0);
    }
    let config = Config::build(&settings)?;
    if config.run.once {
        crate::limits::raise_open_files();
        return Ok(u8::from(!once(&config).is_empty()));
    }
    daemon(config).map_err(|e| CommandError::Run(Box::new(e)))?;
    Ok(0)
}

/// One thread for all async work, whatever the node's core count: certsync
/// is I/O-bound, and file writes already run on tokio's blocking pool. A
/// multi-threaded runtime would start a worker per CPU (64 on a large
/// control-plane node) for nothing.
#[tokio::main(flavor = "current_thread")]
async fn once(config: &Config) -> Vec<crate::sync::SyncError> {
    Box::pin(crate::sync::once(config)).await
}

#[tokio::main(flavor = "current_thread")]
async fn daemon(config: Config) -> Result<(), CommandError> {
    let metrics = Metrics::new(config.run.stale_fraction);
    if let Some(g) = &config.run.generation {
        metrics.set_generation(g.clone());
    }
    let d = Daemon::start(metrics, config.run.admin_addr).await?;
    crate::sync::log_plan(&config).await;
    let run = crate::sync::run(config, Arc::clone(&d.metrics), d.stopped.clone());
    d.run_until_finished(run).await
}

/// `certsync approve`: the controller and its admin port until a signal.
pub fn approve(args: &ApproveArgs) -> Finished {
    args.policy.check()?;
    let config = args.config(|var| std::env::var(var).ok())?;
    approver(config).map_err(|e| CommandError::Approver(Box::new(e)))?;
    Ok(0)
}

#[tokio::main(flavor = "current_thread")]
async fn approver(config: crate::approve::ApproverConfig) -> Result<(), CommandError> {
    let d = Daemon::start(Metrics::new(0.8), Some(config.admin_addr)).await?;
    let run = crate::approve::run(config, Arc::clone(&d.metrics), d.stopped.clone());
    d.run_until_finished(run).await
}
