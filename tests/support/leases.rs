//! `coordination.k8s.io/v1` Leases in the test API server, with the part
//! of server-side apply that leader election depends on: which field
//! manager owns each field. An apply (`application/apply-patch+yaml`)
//! that would change a field another manager owns is a `409 Conflict`
//! unless `force=true`; a merge or strategic-merge patch (an update)
//! always applies and takes over the fields it changes. So two candidates
//! applying themselves as holder at once get one winner, as from
//! kube-apiserver.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Shared, commit, merge, not_found, status};

pub const RESOURCE: &str = "leases";
pub const API_VERSION: &str = "coordination.k8s.io/v1";

/// Leaf fields under `spec`, as dotted paths, with their values.
fn leaves(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                leaves(&format!("{prefix}.{k}"), v, out);
            }
        }
        other => out.push((prefix.to_owned(), other.clone())),
    }
}

fn at<'a>(obj: &'a Value, path: &str) -> &'a Value {
    path.split('.').skip(1).fold(obj, |v, k| &v[k])
}

/// PATCH: apply, merge or strategic merge, with field ownership.
pub(super) async fn patch(
    State(shared): State<Arc<Shared>>,
    Path((ns, name)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: bytes::Bytes,
) -> Response {
    let apply = headers
        .get("content-type")
        .and_then(|c| c.to_str().ok())
        .is_some_and(|c| c.starts_with("application/apply-patch"));
    let manager = query.get("fieldManager").cloned().unwrap_or_default();
    if apply && manager.is_empty() {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "PATCH requests with apply content types require a fieldManager".into(),
        );
    }
    let force = query.get("force").is_some_and(|f| f == "true");
    let patch: Value = match serde_json::from_slice(&body)
        .ok()
        .or_else(|| serde_yaml_ng::from_slice(&body).ok())
    {
        Some(p) => p,
        None => {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                "the patch does not parse".into(),
            );
        }
    };
    let key = (RESOURCE.to_owned(), ns.clone(), name.clone());
    let mut st = shared.store.lock().unwrap();
    st.requests.push(format!("patch {RESOURCE} {ns}/{name}"));
    let (mut obj, created) = match st.objects.get(&key) {
        Some(o) => (o.clone(), false),
        None if apply => (
            json!({"apiVersion": API_VERSION, "kind": "Lease",
                   "metadata": {"name": name, "namespace": ns}, "spec": {}}),
            true,
        ),
        None => return not_found(RESOURCE, &name),
    };
    let mut fields = Vec::new();
    leaves("", &json!({"spec": patch["spec"].clone()}), &mut fields);
    let mut all_owners = shared.owners.lock().unwrap();
    let owners = all_owners.entry(key.clone()).or_default();
    if apply && !force {
        let conflicts: Vec<String> = fields
            .iter()
            .filter(|(path, value)| {
                at(&obj, path) != value
                    && owners
                        .get(path)
                        .is_some_and(|o| o.iter().any(|m| *m != manager))
            })
            .map(|(path, _)| {
                let other = owners[path]
                    .iter()
                    .find(|m| **m != manager)
                    .cloned()
                    .unwrap_or_default();
                format!("conflict with {other:?}: {path}")
            })
            .collect();
        if !conflicts.is_empty() {
            return status(
                StatusCode::CONFLICT,
                "Conflict",
                format!(
                    "Apply failed with {} conflict{}: {}",
                    conflicts.len(),
                    if conflicts.len() == 1 { "" } else { "s" },
                    conflicts.join(", ")
                ),
            );
        }
    }
    for (path, value) in &fields {
        let changed = at(&obj, path) != value;
        if value.is_null() {
            owners.remove(path);
        } else if changed || force {
            owners.insert(path.clone(), BTreeSet::from([manager.clone()]));
        } else {
            owners
                .entry(path.clone())
                .or_default()
                .insert(manager.clone());
        }
    }
    drop(all_owners);
    merge(&mut obj, &json!({"spec": patch["spec"].clone()}));
    if created {
        obj["metadata"]["uid"] = json!(format!("uid-{name}-{}", st.rv + 1));
    }
    let kind = if created { "ADDED" } else { "MODIFIED" };
    let obj = commit(&shared, &mut st, kind, key, obj);
    axum::Json(obj).into_response()
}
