//! Kubernetes Events (opt-in with `--events`) on a mapping's source Secret
//! or ConfigMap, its newest CSR (recorded in `default`, as
//! kube-controller-manager records them), or, for mappings with no object
//! (`ca:`, `dir:`), the Pod certsync runs in (`POD_NAME`, `POD_NAMESPACE`;
//! a static pod's mirror pod, whose uid is read before each event: kubelet
//! may have made it again). Each is sent from its own task under a timeout,
//! so syncing never waits on the API server; failures are logged. The uid
//! is included when known (`kubectl describe` matches on it). Notes never
//! hold key material: revision numbers, serials and validation messages.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::watch;

/// The object a mapping's events are about.
#[derive(Clone, Debug)]
pub enum About {
    /// The source Secret or ConfigMap; its uid is set by the source when
    /// it sees the object.
    Object(ObjectRef, Arc<Mutex<Option<String>>>),
    /// The newest CertificateSigningRequest of a `csr:` mapping (name,
    /// uid), set by the source when it creates one.
    Csr(CsrRef),
    /// The Pod certsync runs in.
    Pod(PodRef),
}

/// The Pod certsync runs in, from the downward API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodRef {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pod {}/{}", self.namespace, self.name)
    }
}

/// The newest request of a `csr:` mapping: name and uid.
pub type CsrRef = Arc<Mutex<Option<(String, String)>>>;

/// Where a mapping's events go.
#[derive(Clone)]
pub struct EventSink {
    clients: watch::Receiver<Option<Client>>,
    about: About,
}

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSink")
            .field("about", &self.about)
            .finish_non_exhaustive()
    }
}

impl EventSink {
    pub fn new(clients: watch::Receiver<Option<Client>>, about: About) -> Self {
        Self { clients, about }
    }

    /// Records `said` with `note` about the mapping's object.
    pub fn send(&self, (type_, reason, action): Said, note: String) {
        let Some(client) = self.clients.borrow().clone() else {
            return;
        };
        let event = event(type_, reason, action, note);
        let (reference, object) = match &self.about {
            About::Object(object, uid) => {
                let kind = format!("{:?}", object.kind);
                let uid = crate::lock(uid).clone();
                let reference = core_v1(&kind, &object.namespace, &object.name, uid);
                (reference, object.to_string())
            }
            // Before the first request there is nothing to attach to.
            About::Csr(csr) => match crate::lock(csr).clone() {
                Some((name, uid)) => csr_reference(&name, &uid),
                None => return,
            },
            // The uid is resolved in the event's own task.
            About::Pod(pod) => {
                let pod = pod.clone();
                tokio::spawn(async move {
                    let uid = pod_uid(&client, &pod).await;
                    let reference = core_v1("Pod", &pod.namespace, &pod.name, uid);
                    record(client, reference, pod.to_string(), event).await;
                });
                return;
            }
        };
        tokio::spawn(record(client, reference, object, event));
    }
}

/// What an event of a mapping's says: its type, reason and action.
pub type Said = (EventType, &'static str, &'static str);
/// A certificate request failed (denied, failed, timed out, refused).
pub const REQUEST_FAILED: Said = (EventType::Warning, "CertificateRequestFailed", "Request");
/// After a new revision was flipped in.
pub const UPDATED: Said = (EventType::Normal, "CertificateUpdated", "Sync");
/// A reload signal was not sent: the pidfile did not prove its process
/// is the consumer.
pub const RELOAD_REFUSED: Said = (EventType::Warning, "ReloadRefused", "Reload");
/// After the source's content was refused.
pub const REJECTED: Said = (EventType::Warning, "CertificateRejected", "Validate");

/// A namespaced core/v1 object as an event's subject.
fn core_v1(kind: &str, namespace: &str, name: &str, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        kind: Some(kind.into()),
        api_version: Some("v1".into()),
        namespace: Some(namespace.into()),
        name: Some(name.into()),
        uid,
        ..Default::default()
    }
}

/// A CertificateSigningRequest as an event's subject.
fn csr_reference(name: &str, uid: &str) -> (ObjectReference, String) {
    let reference = ObjectReference {
        kind: Some("CertificateSigningRequest".into()),
        api_version: Some("certificates.k8s.io/v1".into()),
        name: Some(name.to_owned()),
        uid: Some(uid.to_owned()),
        ..Default::default()
    };
    (reference, format!("certificatesigningrequest {name}"))
}

/// An Event about CSR `name` (the approver's decisions).
pub fn on_csr(client: Client, name: &str, uid: &str, type_: EventType, reason: &str, note: String) {
    let (reference, object) = csr_reference(name, uid);
    let event = event(type_, reason, "Decide", note);
    tokio::spawn(record(client, reference, object, event));
}

/// The Pod's uid, or `None` (logged) when it cannot be read: the event
/// still names the Pod, only `kubectl describe` may not match it.
async fn pod_uid(client: &Client, pod: &PodRef) -> Option<String> {
    let pods: kube::Api<Pod> = kube::Api::namespaced(client.clone(), &pod.namespace);
    match tokio::time::timeout(TIMEOUT, pods.get(&pod.name)).await {
        Ok(Ok(p)) => p.metadata.uid,
        Ok(Err(e)) => {
            tracing::warn!(object = %pod, error = %e, "cannot read the pod's uid for its events (RBAC: get pods); recording without it");
            None
        }
        Err(_) => {
            tracing::warn!(object = %pod, "reading the pod's uid for its events timed out; recording without it");
            None
        }
    }
}

/// Each API call of an event (the pod's uid, the event) is bounded by this.
const TIMEOUT: Duration = Duration::from_secs(10);

fn event(type_: EventType, reason: &str, action: &str, note: String) -> Event {
    Event {
        type_,
        reason: reason.into(),
        // The API caps notes at 1 kB.
        note: Some(note.chars().take(1000).collect()),
        action: action.into(),
        secondary: None,
    }
}

/// Records `event` about `reference` (from its own task), under a
/// timeout; failures are logged, never returned.
async fn record(client: Client, reference: ObjectReference, object: String, event: Event) {
    let reporter = Reporter {
        controller: "certsync".into(),
        instance: std::env::var("POD_NAME")
            .ok()
            .or_else(|| std::env::var("HOSTNAME").ok()),
    };
    let recorder = Recorder::new(client, reporter);
    match tokio::time::timeout(TIMEOUT, recorder.publish(&event, &reference)).await {
        Ok(Ok(())) => tracing::debug!(object, reason = %event.reason, "event recorded"),
        Ok(Err(e)) => {
            tracing::warn!(object, reason = %event.reason, error = %e, "cannot record event (RBAC: deploy/rbac-events.yaml)")
        }
        Err(_) => {
            tracing::warn!(object, reason = %event.reason, "recording an event timed out")
        }
    }
}

/// Which kind of object (its `Debug` is its API kind).
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
        let kind = format!("{:?}", self.kind).to_ascii_lowercase();
        write!(f, "{kind} {}/{}", self.namespace, self.name)
    }
}
