//! `v1` Nodes in the test API server, with the registry's strategy
//! (pkg/registry/core/node): a create may set every field, status
//! included (kubelet registers its Node with its addresses); an update of
//! the object keeps the stored status; `/status` changes only the status.
//! Address types are the five the API knows.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{
    Shared, collection, commit, not_found, stale_write, status, unprocessable, validation,
};

pub const RESOURCE: &str = "nodes";
const KIND: &str = "Node";
const ADDRESS_TYPES: &[&str] = &[
    "Hostname",
    "InternalIP",
    "ExternalIP",
    "InternalDNS",
    "ExternalDNS",
];

fn key(name: &str) -> super::Key {
    (RESOURCE.into(), String::new(), name.into())
}

fn validate(obj: &Value) -> validation::Errors {
    let mut errors = validation::Errors::new();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    if let Some(m) = validation::dns_subdomain(name) {
        errors.push((
            "metadata.name".into(),
            format!("Invalid value: {name:?}: {m}"),
        ));
    }
    for (i, a) in obj["status"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let ty = a["type"].as_str().unwrap_or_default();
        if !ADDRESS_TYPES.contains(&ty) {
            errors.push((
                format!("status.addresses[{i}].type"),
                format!("Unsupported value: {ty:?}: supported values: {ADDRESS_TYPES:?}"),
            ));
        }
    }
    errors
}

pub(super) async fn list(
    State(shared): State<Arc<Shared>>,
    query: Query<HashMap<String, String>>,
) -> Response {
    collection(State(shared), Path((String::new(), RESOURCE.into())), query).await
}

pub(super) async fn create(
    State(shared): State<Arc<Shared>>,
    axum::Json(obj): axum::Json<Value>,
) -> Response {
    super::create_cluster_scoped(&shared, RESOURCE, "v1", KIND, obj, validate)
}

pub(super) async fn get_one(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    query: Query<HashMap<String, String>>,
) -> Response {
    super::get_one(
        State(shared),
        Path((String::new(), RESOURCE.into(), name)),
        query,
    )
    .await
}

/// PUT on the object (`status` false: the stored status stays) or on
/// `/status` (only the status changes).
async fn update(shared: Arc<Shared>, name: String, new: Value, status_only: bool) -> Response {
    let mut st = shared.store.lock().unwrap();
    let Some(old) = st.objects.get(&key(&name)).cloned() else {
        return not_found(RESOURCE, &name);
    };
    if let Some(conflict) = stale_write(&old, &new) {
        return conflict;
    }
    let mut obj = if status_only {
        old.clone()
    } else {
        new.clone()
    };
    obj["status"] = if status_only {
        new["status"].clone()
    } else {
        old["status"].clone()
    };
    obj["metadata"]["uid"] = old["metadata"]["uid"].clone();
    obj["apiVersion"] = json!("v1");
    obj["kind"] = json!(KIND);
    let errors = validate(&obj);
    if !errors.is_empty() {
        return *unprocessable(KIND, &name, &errors);
    }
    st.requests.push(format!("update {RESOURCE} /{name}"));
    let obj = commit(&shared, &mut st, "MODIFIED", key(&name), obj);
    axum::Json(obj).into_response()
}

pub(super) async fn replace(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
    axum::Json(obj): axum::Json<Value>,
) -> Response {
    update(shared, name, obj, false).await
}

pub(super) async fn replace_status(
    State(shared): State<Arc<Shared>>,
    Path((name, sub)): Path<(String, String)>,
    axum::Json(obj): axum::Json<Value>,
) -> Response {
    if sub != "status" {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("nodes/{sub} is not served"),
        );
    }
    update(shared, name, obj, true).await
}

pub(super) async fn delete(
    State(shared): State<Arc<Shared>>,
    Path(name): Path<String>,
) -> Response {
    super::delete(State(shared), Path((String::new(), RESOURCE.into(), name))).await
}
