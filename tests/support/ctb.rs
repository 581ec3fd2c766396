//! `certificates.k8s.io/v1beta1` ClusterTrustBundles in the test API
//! server, with the real server's rules (pkg/apis/certificates/validation
//! `ValidateClusterTrustBundle`, `ValidateClusterTrustBundleUpdate`,
//! `validateTrustBundle`; core validation `ValidateClusterTrustBundleName`):
//!
//! - with `spec.signerName`, the name must start with the signer name, `/`
//!   turned into `:`, and a `:`; the rest is a DNS subdomain; without one,
//!   the name may not contain `:`; the signer name is immutable;
//! - `spec.trustBundle`: at most 1 MiB of PEM `CERTIFICATE` blocks without
//!   headers, each an X.509 CA certificate, none twice, at least one;
//! - lists and watches may select on `spec.signerName` (and the name).
//!
//! Readable by every authenticated client, as the real server's default
//! RBAC makes them. [`super::ApiServer::serve_cluster_trust_bundles`]
//! turns the resource off, as on clusters without the beta API.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::super::Peer;
use super::{
    Shared, collection, commit, not_found, stale_write, status, unprocessable, validation,
};

pub const RESOURCE: &str = "clustertrustbundles";
pub const API_VERSION: &str = "certificates.k8s.io/v1beta1";
const KIND: &str = "ClusterTrustBundle.certificates.k8s.io";
/// `certificates.MaxTrustBundleSize`.
const MAX_TRUST_BUNDLE_SIZE: usize = 1024 * 1024;

fn key(name: &str) -> super::Key {
    (RESOURCE.into(), String::new(), name.into())
}

/// 404 as for any resource the server does not serve, or 401.
fn refused(shared: &Shared, headers: &HeaderMap, peer: &Peer) -> Option<Response> {
    if !shared.ctb_served.load(Ordering::Relaxed) {
        return Some(status(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource".into(),
        ));
    }
    super::csr::authenticate(shared, headers, peer)
        .is_none()
        .then(super::csr::unauthorized)
}

/// `ValidateClusterTrustBundleName`.
fn name_error(name: &str, signer: &str) -> Option<String> {
    if signer.is_empty() {
        if name.contains(':') {
            return Some(
                "ClusterTrustBundle without signer name must not have \":\" in its name".into(),
            );
        }
        return validation::dns_subdomain(name);
    }
    let prefix = format!("{}:", signer.replace('/', ":"));
    match name.strip_prefix(&prefix) {
        Some(rest) => validation::dns_subdomain(rest),
        None => Some(format!(
            "ClusterTrustBundle for signerName {signer} must be named with prefix {prefix}"
        )),
    }
}

/// `validateTrustBundle`.
fn trust_bundle_errors(bundle: &str) -> Vec<String> {
    if bundle.len() > MAX_TRUST_BUNDLE_SIZE {
        return vec![format!(
            "Too long: may not be more than {MAX_TRUST_BUNDLE_SIZE} bytes"
        )];
    }
    let mut errors = Vec::new();
    let mut seen: HashMap<Vec<u8>, Vec<usize>> = HashMap::new();
    for (i, block) in validation::go_pem_blocks(bundle).into_iter().enumerate() {
        let invalid = |m: String| format!("Invalid value: \"<value omitted>\": {m}");
        if block.label != "CERTIFICATE" {
            errors.push(invalid(format!(
                "entry {i} has bad block type: {}",
                block.label
            )));
        } else if block.headers {
            errors.push(invalid(format!("entry {i} has PEM block headers")));
        } else {
            match x509_parser::parse_x509_certificate(&block.der) {
                Err(_) => errors.push(invalid(format!("entry {i} does not parse as X.509"))),
                Ok((_, cert)) => match cert.basic_constraints() {
                    Ok(Some(bc)) if bc.value.ca => {
                        seen.entry(block.der.clone()).or_default().push(i);
                    }
                    Ok(_) => {
                        errors.push(invalid(format!("entry {i} does not have the CA bit set")))
                    }
                    Err(_) => {
                        errors.push(invalid(format!("entry {i} has invalid basic constraints")))
                    }
                },
            }
        }
    }
    if !errors.is_empty() {
        return errors;
    }
    if seen.is_empty() {
        errors.push(
            "Invalid value: \"<value omitted>\": at least one trust anchor must be provided".into(),
        );
    }
    for indices in seen.values().filter(|v| v.len() > 1) {
        errors.push(format!(
            "Invalid value: \"<value omitted>\": duplicate trust anchor (indices {indices:?})"
        ));
    }
    errors
}

fn validate(obj: &Value) -> validation::Errors {
    let mut errors = validation::Errors::new();
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let signer = obj["spec"]["signerName"].as_str().unwrap_or_default();
    if let Some(m) = name_error(name, signer) {
        errors.push((
            "metadata.name".into(),
            format!("Invalid value: {name:?}: {m}"),
        ));
    }
    if !signer.is_empty()
        && let Some(m) = super::csr::signer_name(signer)
    {
        errors.push((
            "spec.signerName".into(),
            format!("Invalid value: {signer:?}: {m}"),
        ));
    }
    let bundle = obj["spec"]["trustBundle"].as_str().unwrap_or_default();
    for m in trust_bundle_errors(bundle) {
        errors.push(("spec.trustBundle".into(), m));
    }
    errors
}

/// GET on the collection: list or watch, selecting on `spec.signerName`.
pub(super) async fn list(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Extension(peer): axum::Extension<Peer>,
    query: Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = refused(&shared, &headers, &peer) {
        return r;
    }
    collection(State(shared), Path((String::new(), RESOURCE.into())), query).await
}

pub(super) async fn create(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Extension(peer): axum::Extension<Peer>,
    axum::Json(mut obj): axum::Json<Value>,
) -> Response {
    if let Some(r) = refused(&shared, &headers, &peer) {
        return r;
    }
    super::generate_name(&mut obj);
    super::create_cluster_scoped(
        &shared,
        RESOURCE,
        API_VERSION,
        "ClusterTrustBundle",
        obj,
        validate,
    )
}

pub(super) async fn get_one(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Extension(peer): axum::Extension<Peer>,
    Path(name): Path<String>,
    query: Query<HashMap<String, String>>,
) -> Response {
    if let Some(r) = refused(&shared, &headers, &peer) {
        return r;
    }
    super::get_one(
        State(shared),
        Path((String::new(), RESOURCE.into(), name)),
        query,
    )
    .await
}

/// PUT: the bundle may change, the signer name may not.
pub(super) async fn replace(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Extension(peer): axum::Extension<Peer>,
    Path(name): Path<String>,
    axum::Json(mut obj): axum::Json<Value>,
) -> Response {
    if let Some(r) = refused(&shared, &headers, &peer) {
        return r;
    }
    let mut st = shared.store.lock().unwrap();
    let Some(old) = st.objects.get(&key(&name)).cloned() else {
        return not_found(RESOURCE, &name);
    };
    if let Some(conflict) = stale_write(&old, &obj) {
        return conflict;
    }
    obj["apiVersion"] = json!(API_VERSION);
    obj["kind"] = json!("ClusterTrustBundle");
    obj["metadata"]["uid"] = old["metadata"]["uid"].clone();
    let mut errors = validate(&obj);
    if obj["spec"]["signerName"] != old["spec"]["signerName"] {
        errors.push((
            "spec.signerName".into(),
            "Invalid value: field is immutable".into(),
        ));
    }
    if !errors.is_empty() {
        return *unprocessable(KIND, &name, &errors);
    }
    st.requests.push(format!("update {RESOURCE} /{name}"));
    let obj = commit(&shared, &mut st, "MODIFIED", key(&name), obj);
    axum::Json(obj).into_response()
}

pub(super) async fn delete(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Extension(peer): axum::Extension<Peer>,
    Path(name): Path<String>,
) -> Response {
    if let Some(r) = refused(&shared, &headers, &peer) {
        return r;
    }
    super::delete(State(shared), Path((String::new(), RESOURCE.into(), name))).await
}
