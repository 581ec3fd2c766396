//! `certificates.k8s.io/v1` CertificateSigningRequests in the test API
//! server, with the real server's rules, so that what passes here passes
//! against a real cluster:
//!
//! - validation from pkg/apis/certificates/validation: a PEM `CERTIFICATE
//!   REQUEST` whose signature verifies, at least one usage, known and
//!   unique usages, a `DOMAIN/PATH` signer name (not the legacy one),
//!   `expirationSeconds` ≥ 600; conditions: Approved, Denied and Failed
//!   only `True`, Approved and Denied mutually exclusive, no duplicate type,
//!   none removed; `status.certificate` only CERTIFICATE blocks, set once;
//! - the registry's strategies (pkg/registry/certificates/certificates):
//!   on create the requester (`spec.username`, `groups`, `uid`) is the
//!   authenticated client, whatever the client wrote, and the status is
//!   cleared; an update of the object keeps its spec and status; `/approval`
//!   changes only the conditions (and may add Approved or Denied);
//!   `/status` changes only the conditions and the certificate, and may not
//!   add Approved or Denied.
//!
//! Clients are told apart by their bearer token (`ApiServer::add_user`).

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

// The usages the API knows (`pkg/apis/certificates`): one list, certsync's.
use certsync::source::csr::USAGES;

use super::super::Peer;
use super::{
    Shared, collection, commit, not_found, stale_write, status, unprocessable, validation,
};

pub const RESOURCE: &str = "certificatesigningrequests";
const KIND: &str = "CertificateSigningRequest.certificates.k8s.io";

/// A client as the server authenticated it.
#[derive(Clone, Debug)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
}

/// The user behind `Authorization: Bearer TOKEN`, else behind the
/// connection's client certificate; `None` is a 401.
pub(super) fn authenticate(shared: &Shared, headers: &HeaderMap, peer: &Peer) -> Option<User> {
    let token = headers
        .get("authorization")
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "));
    let mut user = match (token, &peer.0) {
        (Some(token), _) => shared.users.lock().unwrap().get(token).cloned()?,
        (None, Some((name, groups))) => User {
            name: name.clone(),
            uid: String::new(),
            groups: groups.clone(),
        },
        (None, None) => return None,
    };
    // Every authenticated request carries this group, as the real
    // authenticator adds it.
    if !user.groups.iter().any(|g| g == "system:authenticated") {
        user.groups.push("system:authenticated".into());
    }
    Some(user)
}

pub(super) fn unauthorized() -> Response {
    status(
        StatusCode::UNAUTHORIZED,
        "Unauthorized",
        "Unauthorized".into(),
    )
}

/// `ValidateSignerName`: `DOMAIN/PATH`, the domain a DNS subdomain.
pub(super) fn signer_name(name: &str) -> Option<String> {
    let Some((domain, path)) = name.split_once('/') else {
        return Some(
            "must be a fully qualified domain and path of the form 'example.com/signer-name'"
                .into(),
        );
    };
    if path.is_empty() {
        return Some("validating signerName path: must not be empty".into());
    }
    if name.len() > 571 {
        return Some("must be no more than 571 characters".into());
    }
    validation::dns_subdomain(domain).map(|m| format!("validating signerName domain: {m}"))
}

/// The PKCS#10 request in `spec.request` (base64 of PEM): parsed and its
/// signature checked.
fn request(spec: &Value) -> Result<(), String> {
    use base64::Engine as _;
    let pem = spec["request"]
        .as_str()
        .and_then(|s| base64::engine::general_purpose::STANDARD.decode(s).ok())
        .ok_or("PEM block type must be CERTIFICATE REQUEST")?;
    // `certificates.ParseCSR`: the first block only.
    let block = validation::go_pem_blocks(&String::from_utf8_lossy(&pem))
        .into_iter()
        .next()
        .filter(|b| b.label == "CERTIFICATE REQUEST")
        .ok_or("PEM block type must be CERTIFICATE REQUEST")?;
    use x509_parser::prelude::FromDer as _;
    let (_, req) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&block.der)
            .map_err(|e| format!("asn1: {e}"))?;
    req.verify_signature()
        .map_err(|e| format!("request signature is invalid: {e}"))
}

/// `status.certificate` (base64 of PEM): only CERTIFICATE blocks, each a
/// certificate, at least one.
fn certificate(text: &str) -> Result<(), String> {
    use base64::Engine as _;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| e.to_string())?;
    let mut blocks = 0;
    for block in validation::go_pem_blocks(&String::from_utf8_lossy(&pem)) {
        if block.label != "CERTIFICATE" {
            return Err(format!(
                "only CERTIFICATE PEM blocks are allowed, found {:?}",
                block.label
            ));
        }
        if block.headers {
            return Err("no PEM block headers are permitted".into());
        }
        x509_parser::parse_x509_certificate(&block.der).map_err(|e| e.to_string())?;
        blocks += 1;
    }
    if blocks == 0 {
        return Err("must contain at least one CERTIFICATE PEM block".into());
    }
    Ok(())
}

fn conditions(obj: &Value) -> Vec<Value> {
    obj["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn of_type(obj: &Value, ty: &str) -> Vec<Value> {
    conditions(obj)
        .into_iter()
        .filter(|c| c["type"] == ty)
        .collect()
}

/// `validateCertificateSigningRequest`.
fn validate(obj: &Value) -> validation::Errors {
    let mut errors = validation::Errors::new();
    let spec = &obj["spec"];
    if let Err(e) = request(spec) {
        errors.push((
            "spec.request".into(),
            format!("Invalid value: \"<request>\": {e}"),
        ));
    }
    let usages: Vec<&str> = spec["usages"]
        .as_array()
        .map(|u| u.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if usages.is_empty() {
        errors.push(("spec.usages".into(), "Required value".into()));
    }
    for (i, u) in usages.iter().enumerate() {
        if !USAGES.contains(u) {
            errors.push((
                format!("spec.usages[{i}]"),
                format!("Unsupported value: {u:?}"),
            ));
        }
        if usages[..i].contains(u) {
            errors.push((
                format!("spec.usages[{i}]"),
                format!("Duplicate value: {u:?}"),
            ));
        }
    }
    match spec["signerName"].as_str().unwrap_or("") {
        "kubernetes.io/legacy-unknown" => errors.push((
            "spec.signerName".into(),
            "Invalid value: \"kubernetes.io/legacy-unknown\": the legacy signerName is not allowed via this API version".into(),
        )),
        "" => errors.push(("spec.signerName".into(), "Required value".into())),
        s => {
            if let Some(m) = signer_name(s) {
                errors.push(("spec.signerName".into(), format!("Invalid value: {s:?}: {m}")));
            }
        }
    }
    if let Some(secs) = spec["expirationSeconds"].as_i64().filter(|s| *s < 600) {
        errors.push((
            "spec.expirationSeconds".into(),
            format!("Invalid value: {secs}: may not specify a duration less than 600 seconds (10 minutes)"),
        ));
    }
    let mut seen = Vec::new();
    for (i, c) in conditions(obj).iter().enumerate() {
        let ty = c["type"].as_str().unwrap_or("");
        let st = c["status"].as_str().unwrap_or("");
        let path = format!("status.conditions[{i}]");
        if ty.is_empty() {
            errors.push((format!("{path}.type"), "Required value".into()));
        }
        let only_true = matches!(ty, "Approved" | "Denied" | "Failed");
        if st.is_empty() {
            errors.push((format!("{path}.status"), "Required value".into()));
        } else if (only_true && st != "True") || !matches!(st, "True" | "False" | "Unknown") {
            errors.push((
                format!("{path}.status"),
                format!("Unsupported value: {st:?}"),
            ));
        }
        if (ty == "Approved" && seen.contains(&"Denied"))
            || (ty == "Denied" && seen.contains(&"Approved"))
        {
            errors.push((
                format!("{path}.type"),
                format!(
                    "Invalid value: {ty:?}: Approved and Denied conditions are mutually exclusive"
                ),
            ));
        }
        if seen.contains(&ty) {
            errors.push((format!("{path}.type"), format!("Duplicate value: {ty:?}")));
        }
        seen.push(ty);
    }
    if let Some(cert) = obj["status"]["certificate"]
        .as_str()
        .filter(|c| !c.is_empty())
        && let Err(e) = certificate(cert)
    {
        errors.push((
            "status.certificate".into(),
            format!("Invalid value: \"<certificate data>\": {e}"),
        ));
    }
    errors
}

/// Which part of the object a write may change.
#[derive(Clone, Copy, PartialEq)]
enum Part {
    Main,
    Approval,
    Status,
}

/// `validateCertificateSigningRequestUpdate`, after the strategy has kept
/// what this path may not change.
fn validate_update(new: &Value, old: &Value, path: Part) -> validation::Errors {
    let mut errors = validate(new);
    let forbidden = |m: String| ("status.conditions".to_owned(), format!("Forbidden: {m}"));
    for ty in ["Approved", "Denied", "Failed"] {
        if of_type(new, ty).len() < of_type(old, ty).len() {
            errors.push(forbidden(format!(
                "updates may not remove a condition of type {ty:?}"
            )));
        }
    }
    if path != Part::Approval {
        for ty in ["Approved", "Denied"] {
            let (n, o) = (of_type(new, ty), of_type(old, ty));
            if n.len() > o.len() {
                errors.push(forbidden(format!(
                    "updates may not add a condition of type {ty:?}"
                )));
            } else if n.len() == o.len() && n != o {
                errors.push(forbidden(format!(
                    "updates may not modify a condition of type {ty:?}"
                )));
            }
        }
    }
    let (nc, oc) = (&new["status"]["certificate"], &old["status"]["certificate"]);
    if nc != oc {
        if path != Part::Status {
            errors.push((
                "status.certificate".into(),
                "Forbidden: updates may not set certificate content".into(),
            ));
        } else if oc.as_str().is_some_and(|c| !c.is_empty()) {
            errors.push((
                "status.certificate".into(),
                "Forbidden: updates may not modify existing certificate content".into(),
            ));
        }
    }
    errors
}

fn key(name: &str) -> super::Key {
    (RESOURCE.into(), String::new(), name.into())
}

/// GET (list or watch) on the collection.
pub(super) async fn list(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Extension(peer): axum::Extension<Peer>,
    query: Query<std::collections::HashMap<String, String>>,
) -> Response {
    if authenticate(&shared, &headers, &peer).is_none() {
        return unauthorized();
    }
    collection(State(shared), Path((String::new(), RESOURCE.into())), query).await
}

/// POST: the requester is who authenticated, the status starts empty.
pub(super) async fn create(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Extension(peer): axum::Extension<Peer>,
    axum::Json(mut obj): axum::Json<Value>,
) -> Response {
    let Some(user) = authenticate(&shared, &headers, &peer) else {
        return unauthorized();
    };
    super::generate_name(&mut obj);
    let Some(name) = obj["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
    else {
        return *unprocessable(
            KIND,
            "",
            &vec![(
                "metadata.name".into(),
                "Required value: name or generateName is required".into(),
            )],
        );
    };
    obj["apiVersion"] = json!("certificates.k8s.io/v1");
    obj["kind"] = json!("CertificateSigningRequest");
    if let Some(meta) = obj["metadata"].as_object_mut() {
        meta.remove("namespace");
    }
    obj["spec"]["username"] = json!(user.name);
    obj["spec"]["uid"] = json!(user.uid);
    obj["spec"]["groups"] = json!(user.groups);
    if let Some(spec) = obj["spec"].as_object_mut() {
        spec.remove("extra");
    }
    obj["status"] = json!({});
    let errors = validate(&obj);
    if !errors.is_empty() {
        return *unprocessable(KIND, &name, &errors);
    }
    obj["metadata"]["creationTimestamp"] = json!(certsync::validate::rfc3339(
        certsync::validate::unix_seconds(std::time::SystemTime::now())
    ));
    super::insert_cluster_scoped(&shared, RESOURCE, &name, obj)
}

/// GET one, as any other object once the client is authenticated.
pub(super) async fn get_one(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Extension(peer): axum::Extension<Peer>,
    Path(name): Path<String>,
    query: Query<std::collections::HashMap<String, String>>,
) -> Response {
    if authenticate(&shared, &headers, &peer).is_none() {
        return unauthorized();
    }
    super::get_one(
        State(shared),
        Path((String::new(), RESOURCE.into(), name)),
        query,
    )
    .await
}

async fn update(
    shared: Arc<Shared>,
    headers: HeaderMap,
    peer: Peer,
    name: String,
    new: Value,
    path: Part,
) -> Response {
    if authenticate(&shared, &headers, &peer).is_none() {
        return unauthorized();
    }
    if path == Part::Approval {
        shared
            .approvals_arrived
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let mut held = shared.approvals_held.subscribe();
        let _ = held.wait_for(|h| !*h).await;
    }
    // A body that is not an object (a JSON array, say) is a decoding
    // error, not an update that changes nothing.
    if !new.is_object() || new["kind"] != "CertificateSigningRequest" {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the body of the request was in an unknown format".into(),
        );
    }
    let mut st = shared.store.lock().unwrap();
    let verb = match path {
        Part::Main => "update",
        Part::Approval => "update approval",
        Part::Status => "update status",
    };
    st.requests.push(format!("{verb} {RESOURCE} /{name}"));
    let Some(old) = st.objects.get(&key(&name)).cloned() else {
        return not_found(RESOURCE, &name);
    };
    if let Some(conflict) = stale_write(&old, &new) {
        return conflict;
    }
    // What each path may change; the rest is the stored object's.
    let mut obj = old.clone();
    match path {
        Part::Main => {
            obj["metadata"]["labels"] = new["metadata"]["labels"].clone();
            obj["metadata"]["annotations"] = new["metadata"]["annotations"].clone();
        }
        Part::Approval => obj["status"]["conditions"] = new["status"]["conditions"].clone(),
        Part::Status => {
            obj["status"]["conditions"] = new["status"]["conditions"].clone();
            obj["status"]["certificate"] = new["status"]["certificate"].clone();
        }
    }
    let errors = validate_update(&obj, &old, path);
    if !errors.is_empty() {
        return *unprocessable(KIND, &name, &errors);
    }
    let obj = commit(&shared, &mut st, "MODIFIED", key(&name), obj);
    axum::Json(obj).into_response()
}

/// PUT on the object: labels and annotations only.
pub(super) async fn replace(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Extension(peer): axum::Extension<Peer>,
    Path(name): Path<String>,
    axum::Json(obj): axum::Json<Value>,
) -> Response {
    update(shared, headers, peer, name, obj, Part::Main).await
}

/// PUT on `/approval` (the conditions, Approved and Denied included) or
/// `/status` (the conditions but those two, and the certificate, once).
pub(super) async fn replace_subresource(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Extension(peer): axum::Extension<Peer>,
    Path((name, sub)): Path<(String, String)>,
    axum::Json(obj): axum::Json<Value>,
) -> Response {
    let part = match sub.as_str() {
        "approval" => Part::Approval,
        "status" => Part::Status,
        _ => return not_found(&format!("{RESOURCE}/{sub}"), &name),
    };
    update(shared, headers, peer, name, obj, part).await
}

/// DELETE, as any other object once the client is authenticated.
pub(super) async fn delete(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    axum::Extension(peer): axum::Extension<Peer>,
    Path(name): Path<String>,
) -> Response {
    if authenticate(&shared, &headers, &peer).is_none() {
        return unauthorized();
    }
    super::delete(State(shared), Path((String::new(), RESOURCE.into(), name))).await
}
