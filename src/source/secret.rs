//! One Secret or ConfigMap, watched by name (`metadata.name=NAME`): memory
//! does not grow with the namespace, and RBAC may use `resourceNames`.
//!
//! Invariants: a missing, deleted or unreadable object is published as an
//! error and never turns into an empty bundle (unless `optional`), so the
//! last good files stay; a `403` names the verb and the object denied.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::runtime::watcher;
use kube::{Api, Client};
use tokio::sync::watch;

pub use super::error::secret::KubeError;
use super::error::{SourceError, Update};
use super::watch::{Listed, WatchError, watch_seconds};
use crate::bundle::{Bundle, Item};

pub use crate::events::{Kind, ObjectRef};

/// What is read from a Secret or ConfigMap (also a `csr:` mapping's CA).
pub(super) trait Payload:
    kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + Default
    + std::fmt::Debug
    + serde::de::DeserializeOwned
    + Send
    + 'static
{
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

#[derive(Debug, Clone)]
pub struct KubeObject {
    pub object: ObjectRef,
    pub items: std::sync::Arc<[Item]>,
    /// `files=all`: every key under its own name (`items` unused).
    pub all: bool,
    /// cert-syncer's optional objects: while the object does not exist the
    /// target holds no files (an empty revision), not an error.
    pub optional: bool,
    pub mapping: String,
    /// The object's uid as last seen (for Events).
    pub uid: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
}

impl KubeObject {
    fn bundle(&self, obj: &impl Payload) -> Result<Bundle, KubeError> {
        // `files=all`: every key under its own name; a name certsync would
        // not write (`..data`, a path) fails the whole update.
        let items: Vec<Item> = if self.all {
            obj.keys().iter().map(|k| Item::new(k, k, true)).collect()
        } else {
            self.items.to_vec()
        };
        let mut bundle = Bundle::default();
        for item in items {
            match obj.value(&item.source) {
                Some(bytes) => bundle.insert(
                    &item.target,
                    bytes,
                    format!("{} key {}", self.object, item.source),
                )?,
                None if item.required => {
                    return Err(KubeError::MissingKey {
                        object: self.object.to_string(),
                        key: item.source,
                    });
                }
                None => {}
            }
        }
        Ok(bundle)
    }

    /// Reads the object once (for `--once`).
    pub async fn get(&self, client: Client) -> Result<Bundle, KubeError> {
        match self.object.kind {
            Kind::Secret => self.get_as::<Secret>(client).await,
            Kind::ConfigMap => self.get_as::<ConfigMap>(client).await,
        }
        .or_else(|e| self.absent(e))
    }

    /// Only a missing object is absent: what `bundle` refuses never is.
    async fn get_as<K: Payload>(&self, client: Client) -> Result<Bundle, KubeError> {
        let api = Api::<K>::namespaced(client, &self.object.namespace);
        let object = self.object.to_string();
        let obj = match api.get_opt(&self.object.name).await {
            Ok(obj) => obj.ok_or(KubeError::NotFound { object })?,
            Err(kube::Error::Api(s)) if s.code == 403 => {
                return Err(self.forbidden("get", s.message));
            }
            Err(source) => return Err(KubeError::Get { object, source }),
        };
        self.bundle(&obj)
    }

    /// A `403`: what RBAC must allow.
    fn forbidden(&self, verb: &'static str, message: String) -> KubeError {
        KubeError::Forbidden {
            verb,
            object: self.object.to_string(),
            message,
        }
    }

    /// An absent object: an empty bundle when optional, else the error.
    fn absent(&self, e: KubeError) -> Result<Bundle, KubeError> {
        match e {
            KubeError::NotFound { .. } | KubeError::Deleted { .. } if self.optional => {
                Ok(Bundle::default())
            }
            e => Err(e),
        }
    }

    /// Watches the object with the newest client until shutdown.
    pub async fn run(
        self: Box<Self>,
        clients: watch::Receiver<Option<Client>>,
        watch_timeout: Duration,
        tx: watch::Sender<Option<Update>>,
        shutdown: watch::Receiver<bool>,
    ) {
        let (this, tx) = (&*self, &tx);
        super::client::follow(clients, shutdown, move |client| async move {
            match this.object.kind {
                Kind::Secret => this.watch::<Secret>(client, watch_timeout, tx).await,
                Kind::ConfigMap => this.watch::<ConfigMap>(client, watch_timeout, tx).await,
            }
        })
        .await;
    }

    /// Watches the object, publishing what it sees; listed from the API
    /// server's cache (`resourceVersion=0`, as informers do), unpaged.
    async fn watch<K: Payload>(
        &self,
        client: Client,
        timeout: Duration,
        tx: &watch::Sender<Option<Update>>,
    ) {
        let api: Api<K> = Api::namespaced(client, &self.object.namespace);
        let mut config = watcher::Config::default()
            .fields(&format!("metadata.name={}", self.object.name))
            .timeout(watch_seconds(timeout))
            .any_semantic();
        config.page_size = None;
        let events = super::watch::Watch::new(api, config, self.object.to_string()).stream();
        let mut events = std::pin::pin!(events);
        // The object as listed, until the list is complete.
        let mut listed = Listed::default();
        while let Some(event) = events.next().await {
            let update = match event.map(|e| listed.apply(e)) {
                Ok(None) => continue,
                Ok(Some(changed)) => match listed.items().values().next() {
                    Some(obj) => {
                        *crate::lock(&self.uid) = obj.meta().uid.clone();
                        self.bundle(obj)
                    }
                    // A re-list without it, or its deletion (named).
                    None if changed.is_none() => self.absent(KubeError::NotFound {
                        object: self.object.to_string(),
                    }),
                    None => self.absent(KubeError::Deleted {
                        object: self.object.to_string(),
                    }),
                },
                Err(e) => {
                    self.metrics.watch_restarted(&self.mapping);
                    Err(match e {
                        WatchError::Api {
                            verb,
                            code: Some(403),
                            message,
                            ..
                        } => self.forbidden(verb, message),
                        e => KubeError::Watch(e),
                    })
                }
            };
            super::error::publish(tx, update.map_err(SourceError::from));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::{CA_FILE, CERT_FILE, KEY_FILE};
    use crate::error_chain;
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
