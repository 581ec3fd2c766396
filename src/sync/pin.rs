//! An issuing source (`ca:`, `csr:`) held while a rollback pin holds its
//! target, and started again from the live pair once the pin is removed.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::LOG;
use crate::bundle::Bundle;
use crate::config::{Config, Mapping};
use crate::metrics::Metrics;
use crate::writer::Writer;

/// Whether `target` holds a rollback pin (`certsync rollback`).
pub(super) async fn target_pinned(target: &std::path::Path) -> bool {
    let target = target.to_owned();
    crate::blocking(move || Writer::existing(target).ok().and_then(|w| w.pin()))
        .await
        .ok()
        .flatten()
        .is_some()
}

/// The live pair on disk, if intact.
async fn live_on_disk(target: &std::path::Path) -> Option<Bundle> {
    let target = target.to_owned();
    crate::blocking(move || Writer::existing(target).ok()?.live().ok()?)
        .await
        .ok()
        .flatten()
        .filter(|l| l.problem.is_none())
        .map(|l| l.bundle)
}

/// Runs an issuing source (`ca:`, `csr:`) only while its target holds no
/// rollback pin: each pair it makes is new, so none can stand for "the
/// source changed" (what releases the pin of other sources), and issuing
/// over the pin would undo the operator's rollback at the next start or
/// renewal. While pinned nothing is issued or requested; once the pin is
/// removed the source starts again from the live pair on disk. Checked every
/// `every` (`--resync`); the writer refuses issued pairs over a pin in
/// between.
pub(super) struct PinHold {
    target: std::path::PathBuf,
    mapping: String,
    metrics: Arc<Metrics>,
    every: Duration,
    shutdown: watch::Receiver<bool>,
}

impl PinHold {
    pub(super) fn new(
        m: &Mapping,
        metrics: &Arc<Metrics>,
        config: &Config,
        shutdown: &watch::Receiver<bool>,
    ) -> Self {
        Self {
            target: m.target.clone(),
            mapping: m.name.clone(),
            metrics: Arc::clone(metrics),
            every: config.resync,
            shutdown: shutdown.clone(),
        }
    }

    /// Runs the source `start` makes from the live pair, whenever unpinned.
    pub(super) async fn run<F, Fut>(mut self, start: F)
    where
        F: Fn(Option<Bundle>) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let (target, mapping) = (&self.target, &self.mapping);
        loop {
            let mut said = false;
            while target_pinned(target).await {
                if !said {
                    self.metrics.pinned(mapping, true);
                    tracing::warn!(target: LOG, %mapping, target_dir = %target.display(), "the target is pinned by a rollback; not issuing while the pin holds (remove {}/..pin to renew again)", target.display());
                    said = true;
                }
                tokio::select! {
                    () = crate::shutdown::stopped(&mut self.shutdown) => return,
                    () = tokio::time::sleep(self.every) => {}
                }
            }
            if said {
                self.metrics.pinned(mapping, false);
                tracing::info!(target: LOG, %mapping, "the rollback pin was removed; the mapping issues again");
            }
            let run = start(live_on_disk(target).await);
            tokio::pin!(run);
            loop {
                tokio::select! {
                    () = &mut run => return,
                    () = tokio::time::sleep(self.every) => {
                        if target_pinned(target).await {
                            break;
                        }
                    }
                }
            }
        }
    }
}
