//! Kubernetes Events on a mapping's source Secret or ConfigMap (opt-in with
//! `--events`): `CertificateUpdated` after a flip, `CertificateRejected` with
//! the reason when validation fails.
//!
//! Events are sent from their own task with a timeout, so syncing never
//! waits on the API server; a failure is logged and otherwise ignored. The
//! object's uid is included when known, which is what `kubectl describe`
//! matches events on. Notes never contain key material: they are built from
//! revision numbers, serials and validation messages.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::watch;

use crate::source::secret::{Kind, ObjectRef};

/// Where a mapping's events go.
#[derive(Clone)]
pub struct EventSink {
    clients: watch::Receiver<Option<Client>>,
    object: ObjectRef,
    /// Set by the source when it sees the object.
    uid: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSink")
            .field("object", &self.object)
            .finish_non_exhaustive()
    }
}

impl EventSink {
    pub fn new(
        clients: watch::Receiver<Option<Client>>,
        object: ObjectRef,
        uid: Arc<Mutex<Option<String>>>,
    ) -> Self {
        Self {
            clients,
            object,
            uid,
        }
    }

    /// After a new revision was flipped in.
    pub fn updated(&self, note: String) {
        self.send(EventType::Normal, "CertificateUpdated", "Sync", note);
    }

    /// After the source's content was refused.
    pub fn rejected(&self, note: String) {
        self.send(EventType::Warning, "CertificateRejected", "Validate", note);
    }

    fn send(&self, type_: EventType, reason: &str, action: &str, note: String) {
        let Some(client) = self.clients.borrow().clone() else {
            return;
        };
        let (kind, api_version) = match self.object.kind {
            Kind::Secret => ("Secret", "v1"),
            Kind::ConfigMap => ("ConfigMap", "v1"),
        };
        let reference = ObjectReference {
            kind: Some(kind.into()),
            api_version: Some(api_version.into()),
            namespace: Some(self.object.namespace.clone()),
            name: Some(self.object.name.clone()),
            uid: self
                .uid
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            ..Default::default()
        };
        let reporter = Reporter {
            controller: "certsync".into(),
            instance: std::env::var("POD_NAME")
                .ok()
                .or_else(|| std::env::var("HOSTNAME").ok()),
        };
        let event = Event {
            type_,
            reason: reason.into(),
            // The API caps notes at 1 kB.
            note: Some(note.chars().take(1000).collect()),
            action: action.into(),
            secondary: None,
        };
        let object = self.object.to_string();
        tokio::spawn(async move {
            let recorder = Recorder::new(client, reporter);
            match tokio::time::timeout(
                Duration::from_secs(10),
                recorder.publish(&event, &reference),
            )
            .await
            {
                Ok(Ok(())) => tracing::debug!(object, reason = %event.reason, "event recorded"),
                Ok(Err(e)) => {
                    tracing::warn!(object, reason = %event.reason, error = %e, "cannot record event (RBAC: deploy/rbac-events.yaml)")
                }
                Err(_) => {
                    tracing::warn!(object, reason = %event.reason, "recording an event timed out")
                }
            }
        });
    }
}
