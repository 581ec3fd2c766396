//! The per-mapping sync task: the newest update applied, the target
//! watched for drift (repaired once it is quiet), a resync on every tick.

use std::time::Duration;

use tokio::sync::watch;

use super::error::LOG;
use super::syncer::Syncer;
use crate::dirwatch::{DirWatch, Identity};
use crate::metrics::Metrics;
use crate::source::Update;
use crate::writer::DATA;

/// The directories a sync task watches for drift, re-armed after every
/// change: a deleted or replaced target (or a new live revision behind
/// `..data`) is a new inode, which the kernel's old watch does not follow.
pub(super) struct Watched {
    watcher: DirWatch,
    /// What is watched of the target itself and, through `..data`, of the
    /// live revision (a chmod or edit of a live file happens there). The
    /// paths are the syncer's: not kept twice for every mapping.
    armed: [Option<Identity>; 2],
    events: crate::dirwatch::Events,
}

impl Watched {
    /// Subscribed, not yet armed: the sync task arms as it starts.
    pub(super) fn new(watcher: &DirWatch, target: &std::path::Path) -> Self {
        Self {
            events: watcher.route(&[target, &target.join(DATA)]),
            watcher: watcher.clone(),
            armed: [None; 2],
        }
    }

    /// The target's watch result; `..data` may be missing for a moment (no
    /// flip yet, a deleted target): the next re-arm tries again.
    fn rearm(
        &mut self,
        target: &std::path::Path,
        metrics: &Metrics,
    ) -> Result<(), crate::dirwatch::DirWatchError> {
        let [t, d] = &mut self.armed;
        let watched = self.watcher.rearm(target, t);
        let _ = self.watcher.rearm(&target.join(DATA), d);
        metrics.file_watch_polling(self.watcher.polling());
        watched
    }
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn sync_loop(
    mut syncer: Box<Syncer>,
    _claim: crate::writer::Claim,
    mut watched: Watched,
    mut updates: watch::Receiver<Option<Update>>,
    debounce: Duration,
    resync: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut tick = crate::shutdown::resync_interval(resync).await;
    let mut repair_at: Option<tokio::time::Instant> = None;
    if let Err(e) = watched.rearm(&syncer.mapping.target, &syncer.metrics) {
        tracing::warn!(target: LOG, mapping = %syncer.mapping.name, error = %e, "cannot watch the target; drift is caught on resync only");
    }
    // An issuing source keeps a good live pair without publishing it
    // again: the kubeconfig is brought to it now, not at the first resync.
    if syncer.mapping.update_kubeconfig.is_some() {
        Box::pin(syncer.repair()).await;
    }
    loop {
        tokio::select! {
            biased;
            () = crate::shutdown::stopped(&mut shutdown) => return,
            changed = updates.changed() => {
                if changed.is_err() {
                    return; // the source task ended (shutdown)
                }
                let Some(update) = updates.borrow_and_update().clone() else {
                    continue;
                };
                // The write paths are boxed: a task's allocation is the
                // size of its largest await state, and it lives as long as
                // the mapping. Unboxed, the rare write made every idle task
                // 2.3 KiB; boxed, it costs an allocation per write instead.
                match update {
                    // The source answered (with content good or refused).
                    Ok(bundle) => {
                        syncer.metrics.source_up(&syncer.mapping.name, true);
                        let _ = Box::pin(syncer.apply(bundle)).await;
                    }
                    Err(f) => { syncer.source_failed(f); }
                }
            }
            // Target changes (our own flips included) are checked once the
            // target has been quiet for `debounce`. The wait is a deadline
            // kept beside the loop, never a wait inside it: new updates must
            // not queue behind a drift check.
            () = watched.events.changed() => {
                repair_at = Some(tokio::time::Instant::now() + debounce);
                continue;
            }
            () = tokio::time::sleep_until(repair_at.unwrap_or_else(tokio::time::Instant::now)),
                if repair_at.is_some() => {
                repair_at = None;
                Box::pin(syncer.repair()).await;
            }
            _ = tick.tick() => Box::pin(syncer.resync()).await,
        }
        let _ = watched.rearm(&syncer.mapping.target, &syncer.metrics);
    }
}
