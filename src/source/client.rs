//! The API client, found as kubectl finds it (`--kubeconfig`, `KUBECONFIG`,
//! `~/.kube/config`, else in-cluster; `--context`), rebuilt when a
//! credential file changes (every watch restarts with it).

mod error;
mod kubeconfig;
mod pool;

use std::path::PathBuf;
use std::time::Duration;

use kube::Client;
use kube::client::ConfigExt;
use tokio::sync::watch;
use tower::ServiceBuilder;

use crate::dirwatch::DirWatch;
pub use error::{ApiError, ClientError};
use kubeconfig::{KUBECONFIG_LIMIT, read_kubeconfigs};
pub use kubeconfig::{check_kubeconfig, client_cert_kubeconfig, one_context, parse_kubeconfig};

const SA_TOKEN: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";

/// How to reach the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientSettings {
    pub kubeconfig: Option<PathBuf>,
    pub context: Option<String>,
    /// Server name to verify in the API server's certificate (static pods
    /// reach it as `localhost` while its certificate names another host).
    pub tls_server_name: Option<String>,
    /// Server-side timeout of each watch call.
    pub watch_timeout: Duration,
    /// Silence on an HTTP/2 connection after which it is PINGed (dropped
    /// without an answer within half of it; client-go: 30 s and 15 s);
    /// connecting must finish within it too.
    pub keepalive: Duration,
}

impl Default for ClientSettings {
    fn default() -> Self {
        Self {
            kubeconfig: None,
            context: None,
            tls_server_name: None,
            watch_timeout: Duration::from_secs(290),
            keepalive: Duration::from_secs(30),
        }
    }
}

pub struct Loaded {
    pub config: kube::Config,
    /// The namespace the configuration implies: the chosen context's, or
    /// the pod's in a cluster; `None` when a context names none.
    pub namespace: Option<String>,
}

impl ClientSettings {
    /// The kubeconfig files to merge, and whether they come from
    /// `KUBECONFIG` (where a missing file is skipped); `None`: in-cluster.
    fn kubeconfigs(&self) -> Option<(Vec<PathBuf>, bool)> {
        if let Some(path) = &self.kubeconfig {
            return Some((vec![path.clone()], false));
        }
        if let Some(env) = std::env::var_os("KUBECONFIG") {
            let paths: Vec<PathBuf> = std::env::split_paths(&env)
                .filter(|p| !p.as_os_str().is_empty())
                .collect();
            if !paths.is_empty() {
                return Some((paths, true));
            }
        }
        let home = std::env::var_os("HOME").filter(|h| !h.is_empty())?;
        let path = PathBuf::from(home).join(".kube").join("config");
        path.exists().then(|| (vec![path], false))
    }

    pub async fn load(&self) -> Result<Loaded, ClientError> {
        let mut loaded = match self.kubeconfigs() {
            Some((paths, listed)) => {
                let (kc, shown) = read_kubeconfigs(&paths, listed)?;
                let context = self.context.clone().or_else(|| kc.current_context.clone());
                let namespace = kc
                    .contexts
                    .iter()
                    .find(|c| Some(&c.name) == context.as_ref())
                    .and_then(|c| c.context.as_ref()?.namespace.clone());
                let options = kube::config::KubeConfigOptions {
                    context: self.context.clone(),
                    ..Default::default()
                };
                let config = kube::Config::from_custom_kubeconfig(kc, &options)
                    .await
                    .map_err(|e| ClientError::Kubeconfig {
                        path: shown,
                        problem: Box::new(ClientError::Kube(e)),
                    })?;
                Loaded { config, namespace }
            }
            None => {
                if let Some(context) = &self.context {
                    return Err(ClientError::ContextWithoutKubeconfig(context.clone()));
                }
                let config = kube::Config::incluster().map_err(ClientError::InCluster)?;
                let namespace = Some(config.default_namespace.clone());
                Loaded { config, namespace }
            }
        };
        if let Some(name) = &self.tls_server_name {
            loaded.config.tls_server_name = Some(name.clone());
        }
        Ok(loaded)
    }

    /// A kube `Client` over [`pool::Pool`], with kube's own base-URI, auth
    /// (token refresh, exec plugins, token files) and header layers.
    pub fn client_for(&self, config: &kube::Config) -> Result<Client, ClientError> {
        if let Some(proxy) = &config.proxy_url {
            return Err(ClientError::Proxy(proxy.clone()));
        }
        let pool = pool::Pool::new(config, self.keepalive)?;
        let service = ServiceBuilder::new()
            .layer(config.base_uri_layer())
            .option_layer(config.auth_layer().map_err(ClientError::Build)?)
            .layer(config.extra_headers_layer().map_err(ClientError::Build)?)
            .service(pool);
        Ok(Client::new(service, config.default_namespace.clone()))
    }

    /// Keeps `tx` holding a client of the current credentials.
    pub async fn run_clients(
        self,
        watcher: DirWatch,
        tx: watch::Sender<Option<Client>>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let files =
            (self.kubeconfigs()).map_or_else(|| vec![PathBuf::from(SA_TOKEN)], |(paths, _)| paths);
        let shown = files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(":");
        let dir_of = |file: &PathBuf| file.parent().map(PathBuf::from).unwrap_or_default();
        let events = crate::dirwatch::Events::default();
        for file in &files {
            let name = file
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let _ = watcher.subscribe(&events, &dir_of(file), Some(&[&name, "..data"]));
        }
        let fingerprint = || {
            files
                .iter()
                .map(|file| {
                    crate::beneath::read_file(file, KUBECONFIG_LIMIT)
                        .ok()
                        .map(|bytes| crate::bundle::sha256(&bytes))
                })
                .collect::<Vec<_>>()
        };
        // The files' hashes the client was built from.
        let mut built_from = None;
        let mut failures = 0;
        loop {
            let now = fingerprint();
            if built_from.as_ref() != Some(&now) {
                match self.load().await.and_then(|l| self.client_for(&l.config)) {
                    Ok(client) => {
                        if built_from.replace(now).is_some() {
                            tracing::info!(file = %shown, "credentials changed; rebuilt the API client");
                        }
                        failures = 0;
                        let _ = tx.send(Some(client));
                    }
                    Err(e) => {
                        failures += 1;
                        let retry = crate::backoff(Duration::from_secs(1), failures.min(5));
                        tracing::error!(error = %e, retry_in = ?retry, "cannot build the API client");
                        tokio::select! {
                            () = crate::shutdown::stopped(&mut shutdown) => return,
                            () = tokio::time::sleep(retry) => {}
                        }
                        continue;
                    }
                }
            }
            tokio::select! {
                () = crate::shutdown::stopped(&mut shutdown) => return,
                () = events.changed() => {}
                // The directory may appear or be replaced without an event.
                () = tokio::time::sleep(Duration::from_secs(60)) => {
                    for file in &files {
                        let _ = watcher.rewatch(&dir_of(file));
                    }
                }
            }
        }
    }
}

/// Runs `watch` with the newest client until shutdown, again on each new one.
pub async fn follow<F: Future<Output = ()>>(
    mut clients: tokio::sync::watch::Receiver<Option<kube::Client>>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    mut watch: impl FnMut(kube::Client) -> F,
) {
    while let Some(client) = newest_client(&mut clients, &mut shutdown).await {
        tokio::select! {
            () = crate::shutdown::stopped(&mut shutdown) => return,
            _ = clients.changed() => {}
            () = watch(client) => {}
        }
    }
}

/// The newest client, waiting for the first; `None` on shutdown.
pub async fn newest_client(
    clients: &mut tokio::sync::watch::Receiver<Option<kube::Client>>,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> Option<kube::Client> {
    tokio::select! {
        () = crate::shutdown::stopped(shutdown) => None,
        c = clients.wait_for(Option::is_some) => c.ok().and_then(|c| c.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proxy_url_is_refused_by_name() {
        let mut config = kube::Config::new("https://10.0.0.1:6443".parse().unwrap());
        config.proxy_url = Some("http://proxy.example:3128".parse().unwrap());
        let e = ClientSettings::default()
            .client_for(&config)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("proxy-url http://proxy.example:3128/ is not supported"),
            "{e}"
        );
    }
}
