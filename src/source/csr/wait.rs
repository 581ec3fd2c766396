//! Waiting for the request to be decided, watched by name, its uid checked.

use futures::StreamExt;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::Api;
use kube::runtime::watcher;

use super::spec::CsrSource;
use crate::source::error::csr::CsrError;
use crate::source::watch::{Listed, Watch, WatchError, watch_seconds};

/// What a wait has said once already.
#[derive(Default)]
pub(super) struct Said {
    waiting: bool,
    approved: bool,
}

impl CsrSource {
    /// Waits for `name` (uid `uid`) to be settled, or the approval timeout:
    /// `created`, then the request as the watch loop sees it.
    pub(super) async fn wait(
        &self,
        api: &Api<CertificateSigningRequest>,
        name: &str,
        uid: &str,
        created: CertificateSigningRequest,
    ) -> Result<Vec<u8>, CsrError> {
        let deadline = tokio::time::Instant::now() + self.spec.approval_timeout;
        let mut said = Said::default();
        if let Some(done) = self.settled(name, uid, &created, &mut said) {
            return done;
        }
        // A consistent list (not from the cache, whose copy may predate
        // the create) and no paging: one object.
        let mut config = watcher::Config::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(watch_seconds(self.settings.watch_timeout));
        config.page_size = None;
        let what = format!("certificatesigningrequest {name}");
        let events = Watch::new(api.clone(), config, what).stream();
        let mut events = std::pin::pin!(events);
        let mut listed = Listed::default();
        loop {
            let Ok(event) = tokio::time::timeout_at(deadline, events.next()).await else {
                return Err(CsrError::Timeout {
                    csr: name.into(),
                    waited: self.spec.approval_timeout,
                });
            };
            let obj = match event.map(|e| e.map(|e| listed.apply(e))) {
                Some(Ok(None)) => continue,
                // Listed again without it, or deleted.
                Some(Ok(Some(_))) => match listed.items().values().next() {
                    Some(o) => o,
                    None => return Err(CsrError::Deleted { csr: name.into() }),
                },
                Some(Err(e @ WatchError::Stalled { .. })) => {
                    tracing::warn!(mapping = %self.mapping, csr = %name, "{e}");
                    continue;
                }
                Some(Err(e)) => {
                    tracing::debug!(mapping = %self.mapping, csr = %name, error = %e, "watch failed; watching again");
                    continue;
                }
                // Never: a failure to retry, not a verdict.
                None => {
                    return Err(CsrError::WatchEnded { csr: name.into() });
                }
            };
            if let Some(done) = self.settled(name, uid, obj, &mut said) {
                return done;
            }
        }
    }

    /// `Some` when `obj` is issued, denied, failed or replaced; `None`:
    /// pending (waiting for approval, approved: each said once).
    pub(super) fn settled(
        &self,
        name: &str,
        uid: &str,
        obj: &CertificateSigningRequest,
        said: &mut Said,
    ) -> Option<Result<Vec<u8>, CsrError>> {
        if obj.metadata.uid.as_deref() != Some(uid) {
            return Some(Err(CsrError::Replaced { csr: name.into() }));
        }
        let status = obj.status.as_ref();
        let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
        let find = |ty: &str| {
            let c = conditions
                .iter()
                .find(|c| c.type_ == ty && c.status == "True")?;
            let text = |t: &Option<String>| t.clone().unwrap_or_default();
            Some((text(&c.reason), text(&c.message)))
        };
        for (ty, outcome) in [("Denied", "was denied"), ("Failed", "failed")] {
            if let Some((reason, message)) = find(ty) {
                let csr = name.into();
                return Some(Err(CsrError::Decided {
                    csr,
                    outcome,
                    reason,
                    message,
                }));
            }
        }
        let approved = find("Approved").is_some();
        match status.and_then(|s| s.certificate.as_ref()) {
            Some(cert) if approved && !cert.0.is_empty() => return Some(Ok(cert.0.clone())),
            _ if approved => {
                if !said.approved {
                    said.approved = true;
                    tracing::info!(mapping = %self.mapping, csr = %name, "approved; waiting for the signer to issue the certificate");
                }
            }
            _ => {
                if !said.waiting {
                    said.waiting = true;
                    tracing::warn!(
                        mapping = %self.mapping,
                        csr = %name,
                        signer = %self.spec.signer,
                        "waiting for approval; an administrator can approve it with: kubectl certificate approve {name}"
                    );
                }
            }
        }
        None
    }
}
