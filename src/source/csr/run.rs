//! A `csr:` mapping kept current ([`Renewing`]), or requested once.

use std::time::{Duration, SystemTime};

use kube::Client;
use tokio::sync::watch;

use super::renewing::{RETRY_CAP, Renewing};
use super::spec::CsrSource;
use crate::bundle::{Bundle, CERT_FILE, KEY_FILE};
use crate::source::error::Update;
use crate::source::error::csr::CsrError;
use crate::validate;

impl CsrSource {
    /// The client for the next request: with a bootstrap kubeconfig, its
    /// credentials until there is a valid pair (`own_pair`), then its
    /// cluster with the live pair, as kubelet's TLS bootstrap does; else
    /// the process's. `None` on shutdown.
    pub async fn client(
        &self,
        clients: &mut watch::Receiver<Option<Client>>,
        shutdown: &mut watch::Receiver<bool>,
        own_pair: bool,
    ) -> Option<Client> {
        if self.spec.bootstrap.is_none() {
            return crate::source::client::newest_client(clients, shutdown).await;
        }
        let mut failures = 0;
        loop {
            let e = match self.client_config().await {
                Ok(mut config) => {
                    if own_pair {
                        let path = |f: &str| Some(self.target.join(f).display().to_string());
                        config.auth_info = kube::config::AuthInfo {
                            client_certificate: path(CERT_FILE),
                            client_key: path(KEY_FILE),
                            ..Default::default()
                        };
                    }
                    match self.settings.client_for(&config) {
                        Ok(c) => return Some(c),
                        Err(e) => CsrError::Client(e),
                    }
                }
                Err(e) => e,
            };
            failures += 1;
            let retry = crate::backoff(Duration::from_secs(1), failures).min(RETRY_CAP);
            tracing::error!(mapping = %self.mapping, error = %e, retry_in = ?retry, "cannot build the API client for certificate requests");
            tokio::select! {
                () = crate::shutdown::stopped(shutdown) => return None,
                () = tokio::time::sleep(retry) => {}
            }
        }
    }

    /// Keeps the mapping's certificate current until shutdown.
    pub async fn run(
        self,
        mut clients: watch::Receiver<Option<Client>>,
        live: Option<Bundle>,
        tx: watch::Sender<Option<Update>>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let Some(client) = self
            .client(&mut clients, &mut shutdown, live.is_some())
            .await
        else {
            return;
        };
        let current = self.adopt(&client, live.as_ref()).await;
        let renew = (self.spec.renew, self.renew_floor);
        let mut state = Renewing::new(&self.mapping, &self.metrics, renew, current);
        loop {
            let wait = state.wait();
            tokio::select! {
                () = crate::shutdown::stopped(&mut shutdown) => return,
                () = tokio::time::sleep(wait) => {}
            }
            // The live pair authenticates renewals only while it is valid.
            let own_pair = state
                .current
                .is_some_and(|w| w.not_after > validate::unix_seconds(SystemTime::now()));
            let Some(client) = self.client(&mut clients, &mut shutdown, own_pair).await else {
                return;
            };
            let result = tokio::select! {
                () = crate::shutdown::stopped(&mut shutdown) => return,
                r = self.obtain(&client) => r,
            };
            match result {
                Ok(issued) => {
                    let not_after = validate::rfc3339(issued.window.not_after);
                    tracing::info!(mapping = %self.mapping, csr = %issued.csr, %not_after, "certificate issued");
                    if state.issued(issued.window) {
                        crate::source::error::publish(&tx, Ok(issued.bundle));
                    }
                }
                Err(e) => {
                    state.failed(e.reason(), &e);
                    // On each request's own object: every failure.
                    if let Some(events) = &self.events {
                        events.send(crate::events::REQUEST_FAILED, e.to_string());
                    }
                }
            }
        }
    }
}
