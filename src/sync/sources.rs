//! Each mapping's source kind, dispatched once: what it needs (the
//! process's API client, where its Events go), how `run` starts it and how
//! `run --once` reads it, and how the plan names it. Every `match` on
//! [`Source`] here is exhaustive, so a new kind is refused by the compiler
//! until each of these says what it does.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use kube::Client;
use tokio::sync::watch;

use super::pin::PinHold;
use super::syncer::{Failure, Syncer};
use crate::bundle::Bundle;
use crate::config::{Config, Mapping, Source};
use crate::dirwatch::DirWatch;
use crate::events::{About, CsrRef, EventSink};
use crate::metrics::Metrics;
use crate::source::ca::CaSource;
use crate::source::csr::CsrSource;
use crate::source::hostdir::HostDir;
use crate::source::secret::KubeObject;
use crate::source::trust_bundle::TrustBundles;
use crate::source::{SourceError, Update};

/// Whether `run` needs the process's API client: a mapping's source uses
/// it, or Events go on the Pod (`ca:`, `dir:` with `--events`).
pub(super) fn needs_client(config: &Config) -> bool {
    config.events_pod.is_some()
        || config
            .mappings
            .iter()
            .any(|m| needs_process_client(&m.source))
}

/// Whether a source uses the process's API client (`--kubeconfig` or the
/// pod's): a `csr:` mapping with a bootstrap kubeconfig makes its own.
pub(super) fn needs_process_client(source: &Source) -> bool {
    match source {
        Source::Dir(_) | Source::Ca(_) => false,
        Source::Kube(_) | Source::TrustBundle(_) => true,
        Source::Csr(spec) => spec.bootstrap.is_none(),
    }
}

/// The source as the plan logged at start names it.
pub(super) fn describe(source: &Source) -> String {
    match source {
        Source::Dir(dir) => format!("dir {}", dir.display()),
        Source::Kube(object) => object.to_string(),
        Source::TrustBundle(selection) => selection.to_string(),
        Source::Csr(spec) => format!("csr {}", spec.signer),
        Source::Ca(spec) => format!("ca {}", spec.ca_cert.display()),
    }
}

/// What every source task of `run` may use.
pub(super) struct Running<'a> {
    pub config: &'a Config,
    pub metrics: &'a Arc<Metrics>,
    pub watcher: &'a DirWatch,
    pub clients: &'a watch::Receiver<Option<Client>>,
    pub shutdown: &'a watch::Receiver<bool>,
}

/// A source task of `run`, until shutdown.
pub(super) type Task = Pin<Box<dyn Future<Output = ()> + Send>>;

impl Running<'_> {
    /// Events on certsync's own Pod, for kinds with no object of their
    /// own, when the Pod is known (`Config` requires it for `ca:`).
    fn pod_events(&self) -> Option<EventSink> {
        let pod = self.config.events_pod.clone()?;
        Some(EventSink::new(self.clients.clone(), About::Pod(pod)))
    }

    /// The task that runs `m`'s source, publishing into `tx`, and the
    /// syncer with its Events attached.
    pub(super) fn start(
        &self,
        m: &Mapping,
        mut syncer: Syncer,
        tx: watch::Sender<Option<Update>>,
    ) -> (Syncer, Task) {
        let (config, clients) = (self.config, self.clients);
        let shutdown = self.shutdown.clone();
        let task: Task = match make(m, self.metrics, config) {
            Made::Dir(source) => {
                syncer.events = self.pod_events();
                Box::pin(source.run(
                    self.watcher.clone(),
                    config.run.debounce,
                    config.run.resync,
                    tx,
                    shutdown,
                ))
            }
            Made::Kube(source) => {
                if config.run.events {
                    let about = About::Object(source.object.clone(), Arc::clone(&source.uid));
                    syncer.events = Some(EventSink::new(clients.clone(), about));
                }
                let watch_timeout = config.client.watch_timeout;
                Box::pin(Box::new(source).run(clients.clone(), watch_timeout, tx, shutdown))
            }
            // A selection across the cluster: Events on certsync's Pod.
            Made::TrustBundles(source) => {
                syncer.events = self.pod_events();
                Box::pin(source.run(clients.clone(), tx, shutdown))
            }
            Made::Csr(mut source) => {
                if config.run.events {
                    source.events = Some(EventSink::new(
                        clients.clone(),
                        About::Csr(Arc::clone(&source.current)),
                    ));
                    syncer.events = source.events.clone();
                }
                let clients = clients.clone();
                let hold = PinHold::new(m, self.metrics, config, self.shutdown);
                Box::pin(hold.run(move |live| {
                    let run = source.clone();
                    run.run(clients.clone(), live, tx.clone(), shutdown.clone())
                }))
            }
            Made::Ca(mut source) => {
                source.events = self.pod_events();
                syncer.events = source.events.clone();
                let hold = PinHold::new(m, self.metrics, config, self.shutdown);
                Box::pin(
                    hold.run(move |live| source.clone().run(live, tx.clone(), shutdown.clone())),
                )
            }
        };
        (syncer, task)
    }
}

/// Reads a mapping's source once (`--once`). `client` is the API client,
/// or why there is none.
pub(super) async fn read_once(
    m: &Mapping,
    client: &Result<Client, Failure>,
    metrics: &Arc<Metrics>,
    live: Option<Bundle>,
    config: &Config,
) -> Result<Bundle, Failure> {
    match make(m, metrics, config) {
        Made::Dir(src) => {
            return match crate::blocking(move || src.read()).await {
                Ok(r) => r.map_err(|e| Arc::new(e.into())),
                Err(e) => Err(Arc::new(e.into())),
            };
        }
        Made::Kube(source) => {
            let got = source.get(client.clone()?).await;
            return Ok(got.map_err(SourceError::from)?);
        }
        Made::TrustBundles(source) => return Ok(source.get(client.clone()?).await?),
        Made::Csr(source) => {
            if source.spec.bootstrap.is_none() {
                client.clone()?;
            }
            let (_clients_tx, mut clients) = watch::channel(client.clone().ok());
            let (_stop, mut never) = watch::channel(false);
            let Some(client) = source
                .client(&mut clients, &mut never, live.is_some())
                .await
            else {
                return Err(Arc::new(SourceError::NoClient));
            };
            if source.adopt(&client, live.as_ref()).await.is_none() {
                let issued = source.obtain(&client).await.map(|i| i.bundle);
                return issued.map_err(|e| Arc::new(SourceError::Csr(Box::new(e))));
            }
        }
        Made::Ca(source) => {
            if source.adopt(live.as_ref()).await.is_none() {
                let issued = source.obtain(live.as_ref()).await.map(|i| i.bundle);
                return issued.map_err(|e| Arc::new(SourceError::Ca(Box::new(e))));
            }
        }
    }
    // Nothing issued: the live pair satisfies the mapping, and publishing
    // it again changes nothing.
    live.ok_or_else(|| Arc::new(SourceError::NoLivePair))
}

/// A mapping's source, made from its settings: what `run` starts and
/// `run --once` reads.
enum Made {
    Dir(HostDir),
    Kube(KubeObject),
    TrustBundles(TrustBundles),
    Csr(CsrSource),
    Ca(CaSource),
}

fn make(m: &Mapping, metrics: &Arc<Metrics>, config: &Config) -> Made {
    let (mapping, metrics) = (m.name.clone(), Arc::clone(metrics));
    let (clock_skew, renew_floor) = (config.run.clock_skew, config.run.csr_renew_floor);
    match &m.source {
        Source::Dir(dir) => Made::Dir(HostDir {
            dir: dir.clone(),
            layout: m.layout.clone(),
            items: m.items.clone(),
        }),
        Source::Kube(object) => Made::Kube(KubeObject {
            object: object.clone(),
            items: m.items.clone(),
            all: m.layout == crate::bundle::Layout::All,
            optional: m.optional,
            mapping,
            metrics,
            uid: Arc::default(),
        }),
        Source::TrustBundle(selection) => Made::TrustBundles(TrustBundles {
            selection: selection.clone(),
            mapping,
            metrics,
        }),
        Source::Csr(spec) => Made::Csr(CsrSource {
            spec: Arc::from(spec.clone()),
            mapping,
            metrics,
            clock_skew,
            target: m.target.clone(),
            settings: config.client.clone(),
            current: CsrRef::default(),
            events: None,
            renew_floor,
        }),
        Source::Ca(spec) => Made::Ca(CaSource {
            spec: Arc::from(spec.clone()),
            mapping,
            metrics,
            clock_skew,
            renew_floor,
            recheck: config.run.resync,
            events: None,
            template_due: Arc::default(),
            template_is_copy: m.update_pair.as_ref().is_some_and(|p| {
                let name = p.file_name().unwrap_or_default().to_string_lossy();
                spec.template.as_ref() == Some(&p.with_file_name(format!("{name}.crt")))
            }),
        }),
    }
}
