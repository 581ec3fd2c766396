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
use crate::source::ca::{CaSource, CaSpec};
use crate::source::csr::{CsrSource, CsrSpec};
use crate::source::hostdir::HostDir;
use crate::source::secret::{KubeObject, ObjectRef};
use crate::source::trust_bundle::{Selection, TrustBundles};
use crate::source::{SourceError, Update};

pub(super) fn host_dir(m: &Mapping, dir: &std::path::Path) -> HostDir {
    HostDir {
        dir: dir.to_owned(),
        layout: m.layout.clone(),
        items: m.items.clone(),
    }
}

pub(super) fn kube_object(m: &Mapping, object: &ObjectRef, metrics: &Arc<Metrics>) -> KubeObject {
    KubeObject {
        object: object.clone(),
        items: m.items.clone(),
        all: m.layout == crate::bundle::Layout::All,
        optional: m.optional,
        mapping: m.name.clone(),
        metrics: Arc::clone(metrics),
        uid: Arc::default(),
    }
}

pub(super) fn trust_bundles(
    m: &Mapping,
    selection: &Selection,
    metrics: &Arc<Metrics>,
) -> TrustBundles {
    TrustBundles {
        selection: selection.clone(),
        mapping: m.name.clone(),
        metrics: Arc::clone(metrics),
    }
}

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
        let (config, metrics, clients) = (self.config, self.metrics, self.clients);
        let shutdown = self.shutdown.clone();
        let task: Task = match &m.source {
            Source::Dir(dir) => {
                syncer.events = self.pod_events();
                Box::pin(host_dir(m, dir).run(
                    self.watcher.clone(),
                    config.run.debounce,
                    config.run.resync,
                    tx,
                    shutdown,
                ))
            }
            Source::Kube(object) => {
                let source = kube_object(m, object, metrics);
                if config.run.events {
                    let uid = Arc::clone(&source.uid);
                    syncer.events = Some(EventSink::new(
                        clients.clone(),
                        About::Object(object.clone(), uid),
                    ));
                }
                let watch_timeout = config.client.watch_timeout;
                Box::pin(Box::new(source).run(clients.clone(), watch_timeout, tx, shutdown))
            }
            // A selection across the cluster: Events on certsync's Pod.
            Source::TrustBundle(selection) => {
                syncer.events = self.pod_events();
                Box::pin(trust_bundles(m, selection, metrics).run(clients.clone(), tx, shutdown))
            }
            Source::Csr(spec) => {
                let mut source = csr_source(m, spec, metrics, config);
                if config.run.events {
                    source.events = Some(EventSink::new(
                        clients.clone(),
                        About::Csr(Arc::clone(&source.current)),
                    ));
                    syncer.events = source.events.clone();
                }
                let clients = clients.clone();
                let hold = PinHold::new(m, metrics, config, self.shutdown);
                Box::pin(hold.run(move |live| {
                    let run = source.clone();
                    run.run(clients.clone(), live, tx.clone(), shutdown.clone())
                }))
            }
            Source::Ca(spec) => {
                let mut source = ca_source(m, spec, metrics, config);
                source.events = self.pod_events();
                syncer.events = source.events.clone();
                let hold = PinHold::new(m, metrics, config, self.shutdown);
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
    let issued = match &m.source {
        Source::Dir(dir) => {
            let src = host_dir(m, dir);
            return match crate::blocking(move || src.read()).await {
                Ok(r) => r.map_err(|e| Arc::new(e.into())),
                Err(e) => Err(Arc::new(e.into())),
            };
        }
        Source::Kube(object) => {
            let client = client.clone()?;
            return kube_object(m, object, metrics)
                .get(client)
                .await
                .map_err(|e| Arc::new(e.into()));
        }
        Source::TrustBundle(selection) => {
            let client = client.clone()?;
            return trust_bundles(m, selection, metrics)
                .get(client)
                .await
                .map_err(Arc::new);
        }
        Source::Csr(spec) => {
            let source = csr_source(m, spec, metrics, config);
            if spec.bootstrap.is_none() {
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
            let issued = source.once(&client, live.as_ref()).await;
            issued.map_err(|e| SourceError::Csr(Box::new(e)))
        }
        Source::Ca(spec) => ca_source(m, spec, metrics, config)
            .once(live.as_ref())
            .await
            .map_err(|e| SourceError::Ca(Box::new(e))),
    };
    // Nothing issued: the live pair satisfies the mapping, and publishing
    // it again changes nothing.
    (issued.map_err(Arc::new)?)
        .or(live)
        .ok_or_else(|| Arc::new(SourceError::NoLivePair))
}

pub(super) fn csr_source(
    m: &Mapping,
    spec: &CsrSpec,
    metrics: &Arc<Metrics>,
    config: &Config,
) -> CsrSource {
    CsrSource {
        spec: Arc::new(spec.clone()),
        mapping: m.name.clone(),
        metrics: Arc::clone(metrics),
        clock_skew: config.run.clock_skew,
        target: m.target.clone(),
        settings: config.client.clone(),
        current: CsrRef::default(),
        events: None,
        renew_floor: config.run.csr_renew_floor,
    }
}

pub(super) fn ca_source(
    m: &Mapping,
    spec: &CaSpec,
    metrics: &Arc<Metrics>,
    config: &Config,
) -> CaSource {
    CaSource {
        spec: Arc::new(spec.clone()),
        mapping: m.name.clone(),
        metrics: Arc::clone(metrics),
        clock_skew: config.run.clock_skew,
        renew_floor: config.run.csr_renew_floor,
        recheck: config.run.resync,
        events: None,
        template_due: Arc::default(),
        template_is_copy: m.update_pair.as_ref().is_some_and(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            spec.template.as_ref() == Some(&p.with_file_name(format!("{name}.crt")))
        }),
    }
}
