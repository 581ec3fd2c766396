//! An issuing source (`ca:`, `csr:`) held while a rollback pin holds its
//! target, and started again from the live pair once the pin is removed.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::error::LOG;
use crate::bundle::Bundle;
use crate::config::{Config, Mapping};
use crate::metrics::Metrics;
use crate::writer::Writer;

/// Says that `mapping`'s target is pinned, so nothing is issued over it.
pub(super) fn warn_pinned(mapping: &str, target: &std::path::Path) {
    tracing::warn!(target: LOG, %mapping, target_dir = %target.display(), "the target is pinned by a rollback; not issuing while the pin holds (remove {}/..pin to renew again)", target.display());
}

/// Whether `target` holds a rollback pin (`certsync rollback`).
pub(super) async fn target_pinned(target: &std::path::Path) -> bool {
    let target = target.to_owned();
    crate::blocking(move || Writer::existing(target).ok().and_then(|w| w.pin()))
        .await
        .ok()
        .flatten()
        .is_some()
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
            every: config.run.resync,
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
                    warn_pinned(mapping, target);
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
            // From the live pair on disk, if intact.
            let t = target.clone();
            let live = crate::blocking(move || Writer::existing(t).ok()?.live().ok()?).await;
            let run = start(
                live.ok()
                    .flatten()
                    .filter(|l| l.problem.is_none())
                    .map(|l| l.bundle),
            );
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::{CERT_FILE, KEY_FILE};
    use crate::writer::WriterOptions;
    use std::sync::Mutex;

    fn pair(cn: &str) -> Bundle {
        let p = crate::test_certs::Pair::new(cn);
        let mut b = Bundle::default();
        b.insert(CERT_FILE, p.cert, "test").unwrap();
        b.insert(KEY_FILE, p.key, "test").unwrap();
        b
    }

    /// An issuing mapping whose target is pinned to an older pair (a
    /// rollback to the 8-minute pair after adopting again with a year):
    /// its source, which would issue at once for the other lifetime, is
    /// not started while the pin holds; removing the pin starts it from
    /// the pinned pair.
    #[tokio::test]
    async fn a_pinned_target_starts_no_issuing_source() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        let w = Writer::open(
            &target,
            WriterOptions {
                issuing: true,
                ..Default::default()
            },
        )
        .unwrap();
        let (old, new) = (pair("old"), pair("new"));
        w.publish(&old).unwrap();
        w.publish(&new).unwrap();
        w.rollback(None, |_| Ok(())).unwrap();
        assert!(w.pin().is_some());

        let (_stop, shutdown) = watch::channel(false);
        let hold = PinHold {
            target: target.clone(),
            mapping: "apiserver".into(),
            metrics: Arc::new(Metrics::new(0.5)),
            every: Duration::from_millis(20),
            shutdown,
        };
        let started: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
        let seen = Arc::clone(&started);
        let task = tokio::spawn(hold.run(move |live| {
            seen.lock()
                .unwrap()
                .push(live.map(|b| b.hash().to_string()));
            std::future::pending::<()>()
        }));
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(started.lock().unwrap().is_empty(), "started over the pin");

        std::fs::remove_file(target.join("..pin")).unwrap();
        for _ in 0..100 {
            if !started.lock().unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        task.abort();
        assert_eq!(*started.lock().unwrap(), vec![Some(old.hash().to_string())]);
    }
}
