//! API-server source: one Secret or ConfigMap, watched by name.
//!
//! Each mapping lists and watches exactly its object
//! (`fieldSelector=metadata.name=NAME`), so memory does not grow with the
//! namespace and RBAC can be limited with `resourceNames`. The watch
//! protocol is client-go's reflector's: list, then watch from the list's
//! resourceVersion, resume after a watch ends, follow bookmarks, re-list on
//! `410 Gone`, back off (exponentially, with jitter) on errors. It is
//! written out in `watch` rather than taken from kube-runtime so that an
//! idle watch holds no read buffer (see `watch`).
//!
//! Invariants: a missing, deleted or unreadable object is reported (published
//! as an error) and never turns into an empty bundle, so the last good files
//! stay; a `403` names the verb and the object that were denied.
//!
//! The client comes from `source::client` (HTTP/2, rebuilt when credentials
//! rotate); a rebuilt client restarts every watch.

use std::time::Duration;

use futures::AsyncBufReadExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{ListParams, WatchParams};
use kube::core::{ObjectList, Status, WatchEvent};
use kube::{Api, Client};
use tokio::sync::watch;

use super::{SourceError, Update, stall_deadline, watch_seconds};
use crate::bundle::{Bundle, BundleError};
use crate::config::Item;
use crate::error_chain;

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error(transparent)]
    Client(#[from] super::client::ClientError),
    #[error("{object} not found; keeping the last good files")]
    NotFound { object: String },
    #[error("{object} was deleted; keeping the last good files")]
    Deleted { object: String },
    #[error("{object}: key {key:?} is missing")]
    MissingKey { object: String, key: String },
    #[error(
        "forbidden: cannot {verb} {object}; certsync needs get, list and watch on it \
         (see deploy/rbac.yaml): {message}"
    )]
    Forbidden {
        verb: &'static str,
        object: String,
        message: String,
    },
    #[error("{verb} {object}: {message}")]
    Api {
        verb: &'static str,
        object: String,
        message: String,
    },
    #[error(transparent)]
    Name(#[from] BundleError),
}

/// Which kind of object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Secret,
    ConfigMap,
}

/// One object by kind, namespace and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRef {
    pub kind: Kind,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            Kind::Secret => "secret",
            Kind::ConfigMap => "configmap",
        };
        write!(f, "{kind} {}/{}", self.namespace, self.name)
    }
}

/// What the source reads from an object.
trait Payload {
    fn value(&self, key: &str) -> Option<Vec<u8>>;
    /// Every key, for `files=all`.
    fn keys(&self) -> Vec<String>;
}

impl Payload for Secret {
    fn value(&self, key: &str) -> Option<Vec<u8>> {
        self.data.as_ref()?.get(key).map(|b| b.0.clone())
    }
    fn keys(&self) -> Vec<String> {
        self.data.iter().flat_map(|d| d.keys().cloned()).collect()
    }
}

impl Payload for ConfigMap {
    fn keys(&self) -> Vec<String> {
        let text = self.data.iter().flat_map(|d| d.keys().cloned());
        let binary = self.binary_data.iter().flat_map(|d| d.keys().cloned());
        text.chain(binary).collect()
    }

    fn value(&self, key: &str) -> Option<Vec<u8>> {
        let text = self
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|s| s.clone().into_bytes());
        text.or_else(|| self.binary_data.as_ref()?.get(key).map(|b| b.0.clone()))
    }
}

/// One mapping's object and the keys it publishes.
#[derive(Debug, Clone)]
pub struct KubeObject {
    pub object: ObjectRef,
    pub items: std::sync::Arc<[Item]>,
    /// `files=all`: every key under its own name (`items` unused).
    pub all: bool,
    /// cert-syncer's optional objects: while the object does not exist the
    /// target holds no files (an empty revision), not an error.
    pub optional: bool,
    /// The mapping's name, for metrics.
    pub mapping: String,
    /// The object's uid as last seen (for Events).
    pub uid: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
}

impl KubeObject {
    fn bundle(&self, obj: &impl Payload) -> Result<Bundle, KubeError> {
        let mut bundle = Bundle::default();
        if self.all {
            // Every key under its own name; a name certsync would not write
            // (`..data`, a path) fails the whole update.
            for key in obj.keys() {
                let bytes = obj.value(&key).unwrap_or_default();
                bundle.insert(&key, bytes, format!("{} key {key}", self.object))?;
            }
            return Ok(bundle);
        }
        for item in self.items.iter() {
            match obj.value(&item.source) {
                Some(bytes) => bundle.insert(
                    &item.target,
                    bytes,
                    format!("{} key {}", self.object, item.source),
                )?,
                None if item.required => {
                    return Err(KubeError::MissingKey {
                        object: self.object.to_string(),
                        key: item.source.clone(),
                    });
                }
                None => {}
            }
        }
        Ok(bundle)
    }

    /// Reads the object once (for `--once`).
    pub async fn get(&self, client: Client) -> Result<Bundle, KubeError> {
        let ns = &self.object.namespace;
        let name = &self.object.name;
        match self.object.kind {
            Kind::Secret => {
                let obj = Api::<Secret>::namespaced(client, ns).get_opt(name).await;
                match self.found(obj) {
                    Ok(o) => self.bundle(&o),
                    Err(e) => self.absent(e),
                }
            }
            Kind::ConfigMap => {
                let obj = Api::<ConfigMap>::namespaced(client, ns).get_opt(name).await;
                match self.found(obj) {
                    Ok(o) => self.bundle(&o),
                    Err(e) => self.absent(e),
                }
            }
        }
    }

    /// What an absent object publishes: nothing (an empty bundle) when
    /// the mapping is optional, else the error.
    fn absent(&self, e: KubeError) -> Result<Bundle, KubeError> {
        match e {
            KubeError::NotFound { .. } | KubeError::Deleted { .. } if self.optional => {
                Ok(Bundle::default())
            }
            e => Err(e),
        }
    }

    fn found<K>(&self, obj: Result<Option<K>, kube::Error>) -> Result<K, KubeError> {
        obj.map_err(|e| self.api_error("get", &e))?
            .ok_or_else(|| KubeError::NotFound {
                object: self.object.to_string(),
            })
    }

    fn api_error(&self, verb: &'static str, e: &kube::Error) -> KubeError {
        let object = self.object.to_string();
        match e {
            kube::Error::Api(s) if s.code == 403 => KubeError::Forbidden {
                verb,
                object,
                message: s.message.clone(),
            },
            other => KubeError::Api {
                verb,
                object,
                message: error_chain(other),
            },
        }
    }

    /// Watches the object with the newest client from `clients`, publishing
    /// into `tx`, until shutdown.
    pub async fn run(
        self: Box<Self>,
        mut clients: watch::Receiver<Option<Client>>,
        watch_timeout: Duration,
        tx: watch::Sender<Option<Update>>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        loop {
            let Some(client) = super::newest_client(&mut clients, &mut shutdown).await else {
                return;
            };
            let watching: std::pin::Pin<Box<dyn Future<Output = ()> + Send + '_>> = match self
                .object
                .kind
            {
                Kind::Secret => Box::pin(self.watch::<Secret>(client, watch_timeout, &tx)),
                Kind::ConfigMap => Box::pin(self.watch::<ConfigMap>(client, watch_timeout, &tx)),
            };
            tokio::select! {
                () = crate::sync::stopped(&mut shutdown) => return,
                // A rebuilt client (rotated credentials): watch again with it.
                _ = clients.changed() => {}
                () = watching => {}
            }
        }
    }

    /// Lists the object, then watches it from the list's resourceVersion:
    /// the protocol of client-go's reflector and kube-runtime's watcher
    /// (resume after a watch ends, bookmarks, re-list on `410 Gone`,
    /// exponential backoff with jitter on errors), written out here so that
    /// a quiet watch holds no read buffer: kube-runtime's reader keeps 8 KiB
    /// per watch for its lifetime, which was a third of certsync's memory at
    /// 1,000 mappings. Each event line is read into a buffer of its own and
    /// freed once parsed.
    async fn watch<K>(&self, client: Client, timeout: Duration, tx: &watch::Sender<Option<Update>>)
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Payload
            + Clone
            + serde::de::DeserializeOwned,
    {
        let request = kube::core::Request::new(K::url_path(&(), Some(&self.object.namespace)));
        let fields = format!("metadata.name={}", self.object.name);
        let params = WatchParams::default()
            .fields(&fields)
            .timeout(watch_seconds(timeout));
        // Failures in a row (see `retry_delay`); any success resets it.
        let mut failures = 0u32;
        // Where to resume watching; `None`: list first.
        let mut resume: Option<String> = None;
        loop {
            let version = match resume.take() {
                Some(version) => version,
                // Boxed, as the request below: a request's state lives
                // only while it is in flight, not in every idle watch task.
                None => match Box::pin(self.list::<K>(&client, &request, &fields)).await {
                    Ok((version, update)) => {
                        failures = 0;
                        super::publish(tx, update.map_err(SourceError::from));
                        version
                    }
                    Err(e) => {
                        Box::pin(self.failed(tx, e, &mut failures)).await;
                        continue;
                    }
                },
            };
            match self
                .watch_from::<K>(&client, &request, &params, version, tx, &mut failures)
                .await
            {
                Ended::At(version) => resume = Some(version),
                // Routine (the watch fell too far behind): not an error,
                // but still paced, so a server that answers every watch
                // with 410 is not re-listed in a tight loop.
                Ended::Gone => {
                    tracing::debug!(object = %self.object, "resourceVersion expired; re-listing");
                    failures = failures.saturating_add(1);
                    Box::pin(tokio::time::sleep(retry_delay(failures))).await;
                }
                Ended::Failed(version, e) => {
                    Box::pin(self.failed(tx, e, &mut failures)).await;
                    resume = Some(version);
                }
            }
        }
    }

    /// Publishes a failure, counts the restart and waits out the backoff.
    async fn failed(&self, tx: &watch::Sender<Option<Update>>, e: KubeError, failures: &mut u32) {
        self.metrics.watch_restarted(&self.mapping);
        super::publish(tx, Err(SourceError::from(e)));
        *failures = failures.saturating_add(1);
        tokio::time::sleep(retry_delay(*failures)).await;
    }

    /// Lists the object (from the API server's cache, as kube-runtime and
    /// client-go do): the list's resourceVersion and what to publish.
    async fn list<K>(
        &self,
        client: &Client,
        request: &kube::core::Request,
        fields: &str,
    ) -> Result<(String, Result<Bundle, KubeError>), KubeError>
    where
        K: kube::Resource + Payload + Clone + serde::de::DeserializeOwned,
    {
        let list = request
            .list(&ListParams::default().fields(fields).match_any())
            .map_err(|e| self.api_error("list", &kube::Error::BuildRequest(e)))?;
        let list: ObjectList<K> = client
            .request(list)
            .await
            .map_err(|e| self.api_error("list", &e))?;
        let version = list.metadata.resource_version.unwrap_or_default();
        let update = match list.items.first() {
            Some(obj) => self.applied(obj),
            None => self.absent(KubeError::NotFound {
                object: self.object.to_string(),
            }),
        };
        Ok((version, update))
    }

    /// Watches from `version` until the watch ends, publishing every event.
    /// A watch the server has not ended in time is stalled
    /// ([`stall_deadline`]): resume anew.
    async fn watch_from<K>(
        &self,
        client: &Client,
        request: &kube::core::Request,
        params: &WatchParams,
        mut version: String,
        tx: &watch::Sender<Option<Update>>,
        failures: &mut u32,
    ) -> Ended
    where
        K: kube::Resource + Payload + Clone + serde::de::DeserializeOwned,
    {
        // `timeoutSeconds` as sent: kube-core sends 290 when none is set.
        let (deadline, said) = stall_deadline(params.timeout.unwrap_or(290));
        let stalled = || KubeError::Api {
            verb: "watch",
            object: self.object.to_string(),
            message: format!("{said}; watching again"),
        };
        let stream = match request.watch(params, &version) {
            Ok(req) => {
                match tokio::time::timeout_at(deadline, Box::pin(client.request_stream(req))).await
                {
                    Ok(stream) => stream,
                    Err(_) => return Ended::Failed(version, stalled()),
                }
            }
            Err(e) => Err(kube::Error::BuildRequest(e)),
        };
        let mut stream = match stream {
            Ok(s) => std::pin::pin!(s),
            Err(e) => return Ended::Failed(version, self.api_error("watch", &e)),
        };
        loop {
            // A buffer per event, dropped once parsed: a watch that waits
            // for its next event holds nothing.
            let mut line = Vec::new();
            let Ok(read) =
                tokio::time::timeout_at(deadline, stream.read_until(b'\n', &mut line)).await
            else {
                return Ended::Failed(version, stalled());
            };
            match read {
                Ok(0) => return Ended::At(version),
                Ok(_) => {}
                // TLS and chunked-encoding EOFs after a long watch: resume.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                    return Ended::At(version);
                }
                Err(e) => {
                    let e = KubeError::Api {
                        verb: "watch",
                        object: self.object.to_string(),
                        message: error_chain(&e),
                    };
                    return Ended::Failed(version, e);
                }
            }
            let event = match serde_json::from_slice::<WatchEvent<K>>(&line) {
                Ok(event) => event,
                Err(e) => {
                    // A line that is not an event: a Status, or garbage.
                    let message = serde_json::from_slice::<Status>(&line)
                        .map_or_else(|_| format!("unreadable watch event: {e}"), |s| s.message);
                    let e = KubeError::Api {
                        verb: "watch",
                        object: self.object.to_string(),
                        message,
                    };
                    return Ended::Failed(version, e);
                }
            };
            let update = match event {
                WatchEvent::Added(obj) | WatchEvent::Modified(obj) => {
                    version = obj.meta().resource_version.clone().unwrap_or(version);
                    self.applied(&obj)
                }
                WatchEvent::Deleted(obj) => {
                    version = obj.meta().resource_version.clone().unwrap_or(version);
                    self.absent(KubeError::Deleted {
                        object: self.object.to_string(),
                    })
                }
                WatchEvent::Bookmark(b) => {
                    version = b.metadata.resource_version;
                    *failures = 0;
                    continue;
                }
                WatchEvent::Error(s) if s.code == 410 => return Ended::Gone,
                WatchEvent::Error(s) => {
                    let object = self.object.to_string();
                    let e = if s.code == 403 {
                        KubeError::Forbidden {
                            verb: "watch",
                            object,
                            message: s.message,
                        }
                    } else {
                        KubeError::Api {
                            verb: "watch",
                            object,
                            message: format!("{} ({})", s.message, s.code),
                        }
                    };
                    return Ended::Failed(version, e);
                }
            };
            *failures = 0;
            super::publish(tx, update.map_err(SourceError::from));
        }
    }

    /// The bundle of an object that was listed, added or modified.
    fn applied(&self, obj: &(impl kube::Resource + Payload)) -> Result<Bundle, KubeError> {
        *self
            .uid
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = obj.meta().uid.clone();
        self.bundle(obj)
    }
}

/// The wait before retrying after `failures` failures in a row: from 0.8 s
/// (client-go's and kube-runtime's start), doubling, jittered, at most 30 s.
fn retry_delay(failures: u32) -> Duration {
    crate::backoff(Duration::from_millis(800), failures).min(Duration::from_secs(30))
}

/// How one watch request ended.
enum Ended {
    /// Normally (its timeout, or the server closed it): resume here.
    At(String),
    /// `410 Gone`: the resourceVersion is too old; list again.
    Gone,
    /// With an error: back off, then resume here.
    Failed(String, KubeError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::{CA_FILE, CERT_FILE, KEY_FILE};
    use k8s_openapi::ByteString;
    use std::collections::BTreeMap;

    fn object(kind: Kind, items: &[(&str, &'static str, bool)]) -> KubeObject {
        KubeObject {
            all: false,
            optional: false,
            mapping: "m".into(),
            uid: Default::default(),
            metrics: std::sync::Arc::new(crate::metrics::Metrics::new(0.8)),
            object: ObjectRef {
                kind,
                namespace: "ns".into(),
                name: "obj".into(),
            },
            items: items
                .iter()
                .map(|(source, target, required)| Item {
                    source: source.to_string(),
                    target: target.to_string(),
                    required: *required,
                })
                .collect(),
        }
    }

    #[test]
    fn secret_keys_map_to_files() {
        let secret = Secret {
            data: Some(BTreeMap::from([
                ("tls.crt".to_owned(), ByteString(b"C".to_vec())),
                ("tls.key".to_owned(), ByteString(b"K".to_vec())),
                ("unrelated".to_owned(), ByteString(b"X".to_vec())),
            ])),
            ..Default::default()
        };
        let o = object(
            Kind::Secret,
            &[
                ("tls.crt", CERT_FILE, true),
                ("tls.key", KEY_FILE, true),
                ("ca.crt", CA_FILE, false),
            ],
        );
        let b = o.bundle(&secret).unwrap();
        assert_eq!(b.files().len(), 2, "only mapped keys; optional ca absent");
        assert_eq!(b.get(KEY_FILE), Some(&b"K"[..]));
        assert_eq!(b.origin(KEY_FILE), "secret ns/obj key tls.key");

        let o = object(Kind::Secret, &[("apiserver.key", KEY_FILE, true)]);
        let e = o.bundle(&secret).unwrap_err().to_string();
        assert_eq!(e, "secret ns/obj: key \"apiserver.key\" is missing");
        let empty = o.bundle(&Secret::default()).unwrap_err().to_string();
        assert!(empty.contains("is missing"), "{empty}");
    }

    #[test]
    fn configmap_reads_data_then_binary_data() {
        let cm = ConfigMap {
            data: Some(BTreeMap::from([(
                "ca-bundle.crt".to_owned(),
                "TEXT".to_owned(),
            )])),
            binary_data: Some(BTreeMap::from([(
                "bin.crt".to_owned(),
                ByteString(vec![0, 1]),
            )])),
            ..Default::default()
        };
        let o = object(Kind::ConfigMap, &[("ca-bundle.crt", CA_FILE, true)]);
        assert_eq!(o.bundle(&cm).unwrap().get(CA_FILE), Some(&b"TEXT"[..]));
        let o = object(Kind::ConfigMap, &[("bin.crt", CA_FILE, true)]);
        assert_eq!(o.bundle(&cm).unwrap().get(CA_FILE), Some(&[0u8, 1][..]));
        assert_eq!(o.object.to_string(), "configmap ns/obj");
    }

    #[test]
    fn error_chain_includes_each_cause_once() {
        #[derive(Debug)]
        struct Layer(&'static str, Option<Box<Layer>>);
        impl std::fmt::Display for Layer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for Layer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                self.1.as_deref().map(|l| l as _)
            }
        }
        let tls = Layer("invalid peer certificate: not valid for name", None);
        let connect = Layer("client error (Connect)", Some(Box::new(tls)));
        let top = Layer(
            "ServiceError: client error (Connect)",
            Some(Box::new(connect)),
        );
        assert_eq!(
            error_chain(&top),
            "ServiceError: client error (Connect): invalid peer certificate: not valid for name"
        );
    }
}
