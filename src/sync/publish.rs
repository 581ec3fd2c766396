//! Publishing through the writer: the flip and the reload it calls for, a
//! rollback pin kept, the `update-kubeconfig=` file and `update-pair=`
//! copy brought to the live pair, and what each outcome logs, counts and records as an Event.

use std::sync::Arc;

use super::error::{Copy, LOG, SyncError, blocking, off_runtime};
use super::syncer::Syncer;
use crate::bundle::Bundle;
use crate::validate;
use crate::writer::{CopyUpdate, Outcome};

impl Syncer {
    /// Writes `bundle` as the live revision (nothing when it is already
    /// live), reloads after a flip, and records and logs the outcome.
    pub(super) async fn publish(&mut self, bundle: &Bundle) -> Result<Outcome, SyncError> {
        let (writer, b) = (self.writer.clone(), bundle.clone());
        let parsed = bundle.clone();
        let leaf = off_runtime(&self.mapping.name, move || {
            validate::leaf_of_bundle(&parsed)
        })
        .await?;
        // Every flip is followed by a reload (drift rewrites too: the
        // consumer may have read the damaged files), requested as soon as
        // the new revision is live.
        let reload = self.reload_request(leaf.as_ref());
        let flipped = move || reload.into_iter().for_each(|request| request());
        let outcome =
            match blocking(&self.mapping.name, move || writer.publish_then(&b, flipped)).await {
                Ok(o) => o,
                Err(e) => {
                    self.unready_if_broken(&e).await;
                    return Err(e);
                }
            };
        let revision = outcome.revision();
        if let Outcome::Pinned { revision } = outcome {
            self.metrics.pinned(&self.mapping.name, true);
            self.pinned(revision).await;
            return Ok(outcome);
        }
        let written = matches!(outcome, Outcome::Written { .. });
        if written {
            // A flip releases any pin (the writer removed it).
            self.metrics.pinned(&self.mapping.name, false);
        }
        // The content is ours but its revision is not the one we last saw:
        // someone else flipped `..data` (a `certsync rollback` back to the
        // source's content). The consumer may hold the files of the
        // revision in between: reload it.
        if matches!(outcome, Outcome::Unchanged { .. })
            && self.revision.is_some_and(|r| r != revision)
        {
            tracing::warn!(target: LOG, mapping = %self.mapping.name, revision, "the live revision was changed by another writer (a rollback?); reloading the consumer");
            self.reload_now(leaf.as_ref());
        }
        self.record_current(revision, leaf.as_ref());
        let name = self.mapping.name.clone();
        self.metrics
            .sync(&name, if written { "written" } else { "unchanged" });
        let kubeconfig = self.update_copies(bundle).await;
        self.metrics.ready(&name, kubeconfig);
        self.log_outcome(&outcome, leaf.as_ref(), bundle);
        Ok(outcome)
    }

    /// Logs what a publish did, and records a new revision as an Event.
    fn log_outcome(&self, outcome: &Outcome, leaf: Option<&validate::Leaf>, bundle: &Bundle) {
        let (name, hash) = (&self.mapping.name, bundle.hash());
        match outcome {
            Outcome::Written {
                revision,
                drift: Some(why),
            } => {
                tracing::warn!(target: LOG, mapping = %name, revision, hash = %hash.short(), drift = %why, "target drifted; restored the current pair in a new revision");
            }
            Outcome::Written {
                revision,
                drift: None,
            } => {
                let not_after = leaf
                    .map(|l| validate::rfc3339(l.not_after))
                    .unwrap_or_default();
                let subject = leaf.map_or("", |l| l.subject.as_str());
                if leaf.is_some() {
                    tracing::info!(target: LOG, mapping = %name, revision, hash = %hash.short(), subject, %not_after, target_dir = %self.mapping.target.display(), "published new revision");
                } else {
                    // A CA bundle (ca.crt only) has no leaf: no
                    // empty subject and date in the log.
                    tracing::info!(target: LOG, mapping = %name, revision, hash = %hash.short(), content = "CA certificates only", target_dir = %self.mapping.target.display(), "published new revision");
                }
                if let Some(events) = &self.events {
                    let serial = leaf.map_or("-", |l| l.serial.as_str());
                    events.send(crate::events::UPDATED, format!(
                        "revision {revision} written to {}: {subject}, serial {serial}, not after {not_after}",
                        self.mapping.target.display()
                    ));
                }
            }
            Outcome::Unchanged {
                revision,
                repaired_links,
            } if *repaired_links > 0 => {
                tracing::warn!(target: LOG, mapping = %name, revision, repaired_links, "restored missing or altered links in the target");
            }
            Outcome::Unchanged { revision, .. } => {
                tracing::debug!(target: LOG, mapping = %name, revision, "target already current");
            }
            Outcome::Pinned { .. } => {} // returned before
        }
    }

    /// After a failed write: not ready while the target holds no intact
    /// revision (deleted, unwritable), since the consumer has nothing to read.
    async fn unready_if_broken(&self, err: &SyncError) {
        let writer = self.writer.clone();
        let live = blocking(&self.mapping.name, move || writer.live()).await;
        if !matches!(live, Ok(Some(ref l)) if l.problem.is_none()) {
            self.metrics.ready(
                &self.mapping.name,
                Some(format!("the target holds no valid files: {err}")),
            );
        }
    }

    /// An operator's rollback is in place (`certsync rollback`): the source
    /// still offers the content rolled back from, so it is not published.
    /// When the live revision changed under us, the consumer is reloaded
    /// with the restored pair.
    async fn pinned(&mut self, revision: u64) {
        let name = self.mapping.name.clone();
        self.metrics.sync(&name, "pinned");
        if self.revision == Some(revision) {
            return;
        }
        let writer = self.writer.clone();
        let live = blocking(&name, move || writer.live()).await.ok().flatten();
        let Some(live) = live else { return };
        tracing::warn!(target: LOG, mapping = %name, revision, "rollback in place: keeping it until the source content changes");
        let leaf = validate::leaf_of_bundle(&live.bundle);
        self.record_current(revision, leaf.as_ref());
        let kubeconfig = self.update_copies(&live.bundle).await;
        self.metrics.ready(&name, kubeconfig);
        self.reload_now(leaf.as_ref());
    }

    /// Makes the mapping's `update-kubeconfig=` file and `update-pair=`
    /// copy hold the pair of `live` (the live revision's content), where
    /// they do not. `Some` problem (for readiness) when one failed: the
    /// target stays published, the failure is logged and counted, and the
    /// next repair or resync tries again.
    async fn update_copies(&mut self, live: &Bundle) -> Option<String> {
        use crate::bundle::{CERT_FILE, KEY_FILE};
        let copies = [
            (Copy::Kubeconfig, self.mapping.update_kubeconfig.clone()),
            (Copy::Pair, self.mapping.update_pair.clone()),
        ];
        let (Some(cert), Some(key)) = (live.get(CERT_FILE), live.get(KEY_FILE)) else {
            return None;
        };
        let name = self.mapping.name.clone();
        for (copy, path) in copies {
            let Some(path) = path else { continue };
            let (c, k, p) = (cert.to_vec(), key.to_vec(), path.clone());
            let result = blocking(&name, move || match copy {
                Copy::Kubeconfig => crate::writer::update_kubeconfig(&p, &c, &k),
                Copy::Pair => crate::writer::update_pair(&p, &c, &k),
            })
            .await;
            let failed = match result {
                Ok(CopyUpdate::Replaced { before }) => {
                    // Another writer's certificate (`kubeadm certs renew
                    // all` over kubeadm's files) is a mistake to notice:
                    // the file held neither nothing, nor what certsync
                    // last left there.
                    let last = self.copied.insert(copy, cert.to_vec());
                    let others = before.is_some() && last.is_some() && before != last;
                    match (copy, others) {
                        (Copy::Kubeconfig, false) => {
                            tracing::info!(target: LOG, mapping = %name, kubeconfig = %path.display(), "kubeconfig now embeds the live pair");
                        }
                        (Copy::Pair, false) => {
                            tracing::info!(target: LOG, mapping = %name, prefix = %path.display(), "the pair's .crt and .key now hold the live pair");
                        }
                        (Copy::Kubeconfig, true) => {
                            tracing::warn!(target: LOG, mapping = %name, kubeconfig = %path.display(), "the kubeconfig held a client certificate certsync did not write (`kubeadm certs renew`?); it embeds the live pair again");
                        }
                        (Copy::Pair, true) => {
                            tracing::warn!(target: LOG, mapping = %name, prefix = %path.display(), "the pair's .crt held a certificate certsync did not write (`kubeadm certs renew`?); its .crt and .key hold the live pair again");
                        }
                    }
                    continue;
                }
                Ok(CopyUpdate::Unchanged) => {
                    self.copied.insert(copy, cert.to_vec());
                    continue;
                }
                Err(e) => Arc::new(e),
            };
            self.copy_failing = Some((copy, Arc::clone(&failed)));
            let err = SyncError::Copy {
                copy,
                source: failed,
            };
            // Keyed without the pair's hash: the same file problem with
            // each renewed pair is one problem.
            self.report(None, &err);
            return Some(err.to_string());
        }
        if self.copy_failing.take().is_some() {
            self.last_problem = None;
        }
        None
    }

    fn reload_now(&self, leaf: Option<&validate::Leaf>) {
        if let Some(request) = self.reload_request(leaf) {
            request();
        }
    }

    /// The reload to ask for once a revision whose leaf is `leaf` is live,
    /// verified at the mapping's `verify=` address if it has one. `None`
    /// when nothing is to be reloaded (`--once`, no method, no check).
    fn reload_request(
        &self,
        leaf: Option<&validate::Leaf>,
    ) -> Option<impl FnOnce() + Send + 'static> {
        let handle = self.reload.clone()?;
        let name = self.mapping.name.clone();
        let verify = self.mapping.verify.clone().zip(leaf.map(|l| l.sha256));
        let events = self.events.clone();
        Some(move || handle.request(&name, verify, events))
    }
}
