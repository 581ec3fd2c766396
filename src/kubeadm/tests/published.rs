//! The cluster's CA certificates (`kube-system/certsync-kubeadm-cas`)
//! through the one ConfigMap client: absent read as none, created when it
//! was absent, replaced at the version read, and a write at a version
//! another node has replaced since refused (409), as kube-apiserver does.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use super::adopted::{Aborting, bind, serve_json};
use crate::kubeadm::KubeadmError;
use crate::kubeadm::api;

const PATH: &str = "/api/v1/namespaces/kube-system/configmaps";

/// An API server holding at most that one ConfigMap, with
/// resourceVersions; each write as `METHOD path`.
struct Store {
    url: String,
    writes: Arc<Mutex<Vec<String>>>,
    _task: Aborting,
}

fn status(code: u16, reason: &str) -> serde_json::Value {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "reason": reason, "code": code, "message": reason})
}

impl Store {
    async fn start() -> Store {
        let (listener, url) = bind().await;
        let writes = Arc::new(Mutex::new(Vec::new()));
        let stored: Mutex<Option<serde_json::Value>> = Mutex::default();
        let seen = writes.clone();
        let task = serve_json(listener, move |method, path, sent| {
            let mut stored = stored.lock().expect("lock");
            let named = format!("{PATH}/certsync-kubeadm-cas");
            match (method.as_str(), path.as_str()) {
                ("GET", p) if p == named => match &*stored {
                    Some(o) => (200, o.clone()),
                    None => (404, status(404, "NotFound")),
                },
                ("POST", PATH) if stored.is_some() => (409, status(409, "AlreadyExists")),
                ("PUT", p)
                    if p == named
                        && stored.as_ref().map(|o| &o["metadata"]["resourceVersion"])
                            != Some(&sent["metadata"]["resourceVersion"]) =>
                {
                    (409, status(409, "Conflict"))
                }
                ("POST", PATH) | ("PUT", _) => {
                    seen.lock().expect("lock").push(format!("{method} {path}"));
                    let version = stored.as_ref().map_or(0, |o| {
                        o["metadata"]["resourceVersion"]
                            .as_str()
                            .and_then(|v| v.parse::<u64>().ok())
                            .unwrap_or(0)
                    });
                    let mut o = sent.clone();
                    o["metadata"]["resourceVersion"] = (version + 1).to_string().into();
                    *stored = Some(o.clone());
                    (if method == "POST" { 201 } else { 200 }, o)
                }
                _ => (404, status(404, "NotFound")),
            }
        });
        Store {
            url,
            writes,
            _task: task,
        }
    }
}

#[tokio::test]
async fn created_when_absent_replaced_at_the_version_read_and_a_stale_write_refused() {
    let store = Store::start().await;
    let config =
        kube::Client::try_from(kube::Config::new(store.url.parse().expect("url"))).expect("client");
    let none = api::published(&config).await.expect("read");
    assert!(none.object.is_none() && none.pem.is_empty());
    let first = BTreeMap::from([("ca.crt".to_owned(), "A".to_owned())]);
    let create = none.with(&first).expect("to write");
    api::PUBLISHED.put(&config, &create).await.expect("created");
    // Two nodes read the same version; the first to write wins.
    let (one, two) = (
        api::published(&config).await.expect("read"),
        api::published(&config).await.expect("read"),
    );
    assert_eq!(one.pem, first);
    assert!(one.with(&first).is_none(), "nothing to write");
    let renewed = BTreeMap::from([("ca.crt".to_owned(), "B".to_owned())]);
    api::PUBLISHED
        .put(&config, &one.with(&renewed).expect("to write"))
        .await
        .expect("replaced");
    let other = BTreeMap::from([("ca.crt".to_owned(), "C".to_owned())]);
    match api::PUBLISHED
        .put(&config, &two.with(&other).expect("to write"))
        .await
    {
        Err(KubeadmError::Api {
            action: "write",
            source: kube::Error::Api(e),
            ..
        }) => {
            assert_eq!(e.code, 409)
        }
        other => panic!("a stale write: {other:?}"),
    }
    assert_eq!(api::published(&config).await.expect("read").pem, renewed);
    assert_eq!(
        *store.writes.lock().expect("lock"),
        [
            format!("POST {PATH}"),
            format!("PUT {PATH}/certsync-kubeadm-cas")
        ]
    );
}
