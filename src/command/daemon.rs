//! `certsync run` and `certsync approve`: the long-running commands, and
//! what they share: the open-files limit, the admin port, and the stop
//! that SIGTERM or SIGINT starts.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;

use super::error::{CommandError, Finished, LOG_TARGET, print};
use crate::cli::{ApproveArgs, RunArgs};
use crate::config::{Config, Flag, Settings};
use crate::metrics::Metrics;

/// Raises the open-files limit, binds the admin port (if any: a bad
/// address fails here, at start) and listens for SIGTERM and SIGINT,
/// which end every wait for a target's lock, mark /readyz as shutting
/// down and turn the receiver `work` is given true. A signal that cannot
/// be listened for is logged: the daemon then stops only when killed.
/// Then runs `work` to its end, and waits for the admin port to close its
/// connections. Boxed: a future awaited here lives on the main thread's
/// stack for the whole run, and every stack page it touches stays resident.
async fn serve<W, E>(
    metrics: Metrics,
    admin_addr: Option<SocketAddr>,
    work: impl FnOnce(Arc<Metrics>, watch::Receiver<bool>) -> W,
) -> Result<(), CommandError>
where
    W: std::future::Future<Output = Result<(), E>>,
    CommandError: From<E>,
{
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
    Box::pin(work(metrics, stopped)).await?;
    if let Some(admin) = admin {
        let _ = admin.await;
    }
    Ok(())
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
    let admin = config.run.admin_addr;
    serve(metrics, admin, |metrics, stopped| async move {
        crate::sync::log_plan(&config).await;
        crate::sync::run(config, metrics, stopped).await
    })
    .await
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
    let admin = Some(config.admin_addr);
    serve(Metrics::new(0.8), admin, |m, stop| {
        crate::approve::run(config, m, stop)
    })
    .await
}
