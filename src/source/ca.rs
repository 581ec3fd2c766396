//! `ca:PREFIX`: certificates certsync issues from a CA on the node
//! (kubeadm's `pki/ca.crt` and `ca.key`). CA, template and key are judged
//! ([`material`]), a key made or kept (`keep-key`), the CA key signs in
//! memory ([`sign`]) and the result passes [`check`] before it is
//! published. Rotation is [`Renewing`]'s; the live pair is also issued
//! again when it no longer satisfies the mapping ([`lifetime`]), rechecked
//! every resync; after a restart, a good live revision is the state.
//!
//! Invariants: the CA key is read, never copied to disk, logged or
//! published; its type's `Debug` is redacted. notAfter never passes the
//! CA's own (capped, with a warning and `certsync_ca_lifetime_capped`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::csr::renewing::Renewing;
use super::csr::{CsrError, Window, check, renewal};
use super::error::Update;
pub use super::error::ca::CaError;
use crate::bundle::{Bundle, CA_FILE, CERT_FILE, KEY_FILE};
use crate::events::EventSink;
use crate::metrics::Metrics;
use crate::validate;

mod lifetime;
mod material;
mod reissue;
mod sign;
mod spec;
#[cfg(test)]
mod tests;

pub use material::key_pair;
use material::{Wanted, read_key, wanted};
pub use reissue::{KUBEADM_VALIDITY_SECS, reissue, renew_ca};
pub use spec::{BACKDATE, CaSpec};

/// `certsync kubeadm revert` issues again a kubeadm certificate that ends
/// within this; a `ca:` template this close to its end is warned about.
pub const TEMPLATE_MARGIN: Duration = Duration::from_secs(24 * 3600);

/// A certificate issued and checked.
pub struct Issued {
    pub bundle: Bundle,
    pub window: Window,
    /// notAfter was cut to the CA's.
    pub capped: bool,
    pub ca_not_after: i64,
    pub template_not_after: Option<i64>,
}

/// A mapping's local-CA source.
#[derive(Clone)]
pub struct CaSource {
    pub spec: Arc<CaSpec>,
    pub mapping: String,
    pub metrics: Arc<Metrics>,
    pub clock_skew: Duration,
    /// `--csr-renew-floor` ([`renewal::floor`]).
    pub renew_floor: Duration,
    /// How often the live pair is compared with the CA and template on disk.
    pub recheck: Duration,
    pub events: Option<EventSink>,
    /// The template's end within [`TEMPLATE_MARGIN`] was logged (once).
    pub template_due: Arc<AtomicBool>,
    /// The template is the mapping's own `update-pair=` copy: the live
    /// certificate, whose end says nothing about what revert hands back, so
    /// it is neither exported nor warned about.
    pub template_is_copy: bool,
}

/// Whether the live pair satisfies what is wanted now: [`check`], ca.crt
/// is the CA's current certificate, and the `lifetime=` asked for.
fn live_ok(w: &Wanted, live: &Bundle, now: SystemTime, skew: Duration) -> Result<Window, CaError> {
    let (_, window) = certified_key(live, w, now, skew)?;
    if live.get(CA_FILE) != Some(w.ca.pem.as_slice()) {
        return Err(CaError::OtherCa);
    }
    lifetime::same_lifetime(window, w, now, skew)?;
    Ok(window)
}

/// The live key and its certificate's window, if the live pair passes
/// [`check`] for what is wanted now. Anyone who can write the target can
/// plant a revision: a key kept on less (a self-signed pair, any pair the
/// CA ever issued for another identity, or an expired one) would be
/// certified for them (`keep_key_keeps_only_a_key_the_ca_certified`).
fn certified_key<'a>(
    live: &'a Bundle,
    w: &Wanted,
    now: SystemTime,
    skew: Duration,
) -> Result<(&'a [u8], Window), CaError> {
    let (Some(cert), Some(key)) = (live.get(CERT_FILE), live.get(KEY_FILE)) else {
        return Err(CaError::NoPair);
    };
    check(&w.want, cert, key, Some(&w.ca.pem), now, skew)
        .map(|window| (key, window))
        .map_err(CaError::csr)
}

/// One issuance (blocking).
fn issue(spec: &CaSpec, live: Option<&Bundle>, skew: Duration) -> Result<Issued, CaError> {
    let now = SystemTime::now();
    let w = wanted(spec, now, skew)?;
    let ca_key = read_key(&spec.ca_key, &spec.ca_cert, spec.allow_loose_ca_key, &w.ca)?;
    let kept = live
        .filter(|_| spec.keep_key)
        .and_then(|l| match certified_key(l, &w, now, skew) {
            Ok((pem, _)) => Some(pem),
            Err(problem) => {
                tracing::warn!(signer = %spec.issue.signer, %problem, "keep-key: the live pair is not one this mapping would issue now; making a new key");
                None
            }
        })
        .and_then(|pem| match key_pair(pem, w.want.key_alg) {
            Ok(k) => Some((k, pem.to_vec())),
            Err(problem) => {
                tracing::info!(signer = %spec.issue.signer, %problem, "keep-key: the live key cannot be kept; making a new one");
                None
            }
        });
    let (key, key_pem) = match kept {
        Some(k) => k,
        None => {
            let k = w
                .want
                .key_alg
                .generate()
                .map_err(|e| CaError::Key(Box::new(e)))?;
            let pem = k.serialize_pem().into_bytes();
            (k, pem)
        }
    };
    let lifetime = spec.issue.lifetime.unwrap_or(Duration::ZERO);
    let now_s = validate::unix_seconds(now);
    let backdate = lifetime::backdate(lifetime);
    let asked = now_s.saturating_add(i64::try_from(lifetime.as_secs()).unwrap_or(i64::MAX));
    let not_after = asked.min(w.ca.not_after);
    let ca_pem = w.ca.pem.clone();
    let window = Window {
        not_before: now_s - backdate,
        not_after,
    };
    let der = sign::certificate(&w, &ca_key, &key, window).map_err(CaError::signing)?;
    drop(ca_key);
    let cert_pem = crate::pem::encode("CERTIFICATE", &der).into_bytes();
    let checked = check(&w.want, &cert_pem, &key_pem, Some(&w.ca.pem), now, skew)
        .map_err(|e| CaError::Mismatch(Box::new(CaError::csr(e))))?;
    // What was just issued must pass the rule the live pair is held to, or
    // every recheck and every restart would issue again: fail instead.
    lifetime::same_lifetime(checked, &w, now, skew).map_err(|e| CaError::Mismatch(Box::new(e)))?;
    let mut bundle = Bundle::default();
    let origin = format!("issued by {}", spec.issue.signer);
    for (file, bytes) in [
        (CERT_FILE, cert_pem),
        (KEY_FILE, key_pem),
        (CA_FILE, ca_pem),
    ] {
        bundle
            .insert(file, bytes, &origin)
            .map_err(|e| CaError::signing(CaError::csr(CsrError::IssuedBundle(e))))?;
    }
    Ok(Issued {
        bundle,
        window: checked,
        capped: not_after < asked,
        ca_not_after: w.ca.not_after,
        template_not_after: w.template_not_after,
    })
}

impl CaSource {
    /// The live pair's window if it still satisfies the mapping; `None`
    /// (logged) if a certificate is needed now. When the CA or template
    /// cannot be read, a valid live pair stays (the last good files are
    /// never given up for a read error).
    pub async fn adopt(&self, live: Option<&Bundle>) -> Option<Window> {
        let live = live?.clone();
        let (spec, skew) = (Arc::clone(&self.spec), self.clock_skew);
        let checked = live.clone();
        let wanted = crate::blocking(move || {
            let w = wanted(&spec, SystemTime::now(), skew)?;
            let ok = live_ok(&w, &checked, SystemTime::now(), skew);
            Ok((w.ca.not_after, w.template_not_after, ok))
        })
        .await
        .unwrap_or_else(|e| Err(CaError::Task(e)));
        // The source is the CA files and template: up when they read.
        self.metrics.source_up(&self.mapping, wanted.is_ok());
        match wanted {
            Ok((ca_not_after, template_not_after, ok)) => {
                self.metrics.ca_expiry(&self.mapping, ca_not_after);
                self.template_expiry(template_not_after);
                match ok {
                    Ok(window) => Some(window),
                    Err(problem) => {
                        tracing::info!(mapping = %self.mapping, reason = %problem, "the live certificate does not satisfy the mapping; issuing a new one");
                        None
                    }
                }
            }
            Err(e) => {
                self.metrics.csr_error(&self.mapping, e.reason());
                tracing::error!(mapping = %self.mapping, error = %e, "cannot read what to issue; keeping the live pair while it is valid");
                self.failed(
                    &e,
                    "cannot read what to issue; the live files stay while valid",
                );
                let cert = live.get(CERT_FILE)?.to_vec();
                let leaf = crate::blocking(move || validate::leaf_of(&cert))
                    .await
                    .ok()
                    .flatten()?;
                (leaf.not_after > validate::unix_seconds(SystemTime::now())).then_some(Window {
                    not_before: leaf.not_before,
                    not_after: leaf.not_after,
                })
            }
        }
    }

    /// Records when the template ends and warns once when it comes within
    /// [`TEMPLATE_MARGIN`]: an expired template still serves (only its
    /// identity is copied), but revert hands a kubeadm template back.
    /// Whether it warned now.
    fn template_expiry(&self, not_after: Option<i64>) -> bool {
        let Some(not_after) = not_after.filter(|_| !self.template_is_copy) else {
            return false;
        };
        self.metrics.ca_template_expiry(&self.mapping, not_after);
        let now = validate::unix_seconds(SystemTime::now());
        let due = not_after <= now.saturating_add(TEMPLATE_MARGIN.as_secs() as i64);
        if self.template_due.swap(due, Ordering::Relaxed) || !due {
            return false;
        }
        let template = self
            .spec
            .template
            .as_deref()
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let template_not_after = validate::rfc3339(not_after);
        tracing::warn!(mapping = %self.mapping, %template, %template_not_after, "the template certificate has expired or expires within 24 h: certsync keeps issuing from it (only its subject, names and usages are used), but if it is kubeadm's, renew it (`kubeadm certs renew all`) before giving the node back to kubeadm");
        true
    }

    /// Issues one certificate, logging what the CA's expiry did to it.
    pub async fn obtain(&self, live: Option<&Bundle>) -> Result<Issued, CaError> {
        let (spec, skew, live) = (Arc::clone(&self.spec), self.clock_skew, live.cloned());
        let issued = crate::blocking(move || issue(&spec, live.as_ref(), skew)).await??;
        let lifetime = self.spec.issue.lifetime.unwrap_or_default().as_secs() as i64;
        let now = validate::unix_seconds(SystemTime::now());
        self.metrics.ca_expiry(&self.mapping, issued.ca_not_after);
        self.template_expiry(issued.template_not_after);
        self.metrics.ca_capped(&self.mapping, issued.capped);
        if issued.capped {
            let ca_not_after = validate::rfc3339(issued.window.not_after);
            let renew_at = now + (lifetime as f64 * self.spec.issue.renew.0) as i64;
            if issued.window.not_after < renew_at {
                tracing::warn!(mapping = %self.mapping, %ca_not_after, "the CA expires before this certificate's renewal point: renew the CA now; certificates issued from it end with it");
            } else {
                tracing::warn!(mapping = %self.mapping, %ca_not_after, "the CA expires before the lifetime asked for; the certificate ends with the CA");
            }
        }
        Ok(issued)
    }

    /// Keeps the mapping's certificate current until shutdown, rechecking
    /// the live pair every `recheck`; publishes every issued bundle.
    pub async fn run(
        self,
        live: Option<Bundle>,
        tx: watch::Sender<Option<Update>>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let mut live = live;
        let current = self.adopt(live.as_ref()).await;
        let renew = (self.spec.issue.renew, self.renew_floor);
        let mut state = Renewing::new(&self.mapping, &self.metrics, renew, current);
        loop {
            let wait = state.wait();
            let recheck = state.current.is_some() && state.failures == 0 && wait > self.recheck;
            tokio::select! {
                () = crate::shutdown::stopped(&mut shutdown) => return,
                () = tokio::time::sleep(wait) => {}
                () = tokio::time::sleep(self.recheck), if recheck => {
                    if self.still_fits(live.as_ref(), &mut state).await {
                        continue;
                    }
                }
            }
            let result = tokio::select! {
                () = crate::shutdown::stopped(&mut shutdown) => return,
                r = self.obtain(live.as_ref()) => r,
            };
            match result {
                Ok(issued) => {
                    if state.issued(issued.window) {
                        let not_after = validate::rfc3339(issued.window.not_after);
                        tracing::info!(mapping = %self.mapping, %not_after, signer = %self.spec.issue.signer, "certificate issued");
                        live = Some(issued.bundle.clone());
                        super::error::publish(&tx, Ok(issued.bundle));
                    }
                }
                Err(e) => {
                    if state.failed(e.reason(), &e) {
                        self.failed(&e, "the live files stay; retrying with backoff");
                    }
                }
            }
        }
    }

    /// At a recheck: `true` when nothing is to be issued now: the live pair
    /// still fits, or one was issued less than the renewal floor ago (then
    /// at the floor's end, the deadline: else whoever can flip the template
    /// drives an issuance and a reload every recheck).
    async fn still_fits(&self, live: Option<&Bundle>, state: &mut Renewing<'_>) -> bool {
        if self.adopt(live).await.is_some() {
            return true;
        }
        // The floor after the last issuance of this process.
        let (Some(since), Some(w)) = (state.issued_at, state.current) else {
            return false;
        };
        let hold = since + renewal::floor(w, self.renew_floor);
        if SystemTime::now() >= hold {
            return false;
        }
        if state.deadline != Some(hold) {
            self.metrics.csr_error(&self.mapping, "renewal_floor");
            let renew_at = validate::rfc3339(validate::unix_seconds(hold));
            tracing::warn!(mapping = %self.mapping, %renew_at, "the live certificate no longer satisfies the mapping, but one was issued less than the renewal floor ago; issuing no sooner than that");
            state.deadline = Some(hold);
        }
        true
    }

    /// `--events`: a failure to issue (`CertificateRequestFailed`, the
    /// metric's reason first), naming paths, never file contents.
    fn failed(&self, e: &CaError, then: &str) {
        if let Some(events) = &self.events {
            events.send(
                crate::events::REQUEST_FAILED,
                format!("{}: mapping {}: {e}; {then}", e.reason(), self.mapping),
            );
        }
    }
}
