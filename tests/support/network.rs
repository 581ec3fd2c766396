//! What every real cluster has and the approver reads, served read-only:
//! the `kubernetes` ServiceCIDR (networking.k8s.io/v1, GA in 1.33), the
//! `default/kubernetes` Service and its EndpointSlice (discovery.k8s.io/v1),
//! as kube-apiserver creates them at start with the kubeadm defaults
//! (Service range 10.96.0.0/12, the first address for `kubernetes`) and
//! an advertise address of `APISERVER_ENDPOINT`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde_json::json;

use super::{Shared, Store, collection, commit, status};

pub const SERVICES: &str = "services";
pub const ENDPOINT_SLICES: &str = "endpointslices";
pub const SERVICE_CIDRS: &str = "servicecidrs";
pub const SERVICE_RANGE: &str = "10.96.0.0/12";
pub const KUBERNETES_SERVICE_IP: &str = "10.96.0.1";
/// The API server's advertise address (a control-plane node's IP).
pub const APISERVER_ENDPOINT: &str = "192.0.2.10";

/// Creates the three objects, as kube-apiserver's bootstrap controllers do.
pub(super) fn seed(shared: &Shared, st: &mut Store) {
    let key = |r: &str, ns: &str, n: &str| (r.to_owned(), ns.to_owned(), n.to_owned());
    commit(
        shared,
        st,
        "ADDED",
        key(SERVICE_CIDRS, "", "kubernetes"),
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR",
            "metadata": {"name": "kubernetes", "uid": "uid-servicecidr-kubernetes"},
            "spec": {"cidrs": [SERVICE_RANGE]},
        }),
    );
    commit(
        shared,
        st,
        "ADDED",
        key(SERVICES, "default", "kubernetes"),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "kubernetes", "namespace": "default", "uid": "uid-svc-kubernetes",
                         "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"clusterIP": KUBERNETES_SERVICE_IP, "clusterIPs": [KUBERNETES_SERVICE_IP],
                     "type": "ClusterIP", "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 6443}]},
        }),
    );
    commit(
        shared,
        st,
        "ADDED",
        key(ENDPOINT_SLICES, "default", "kubernetes"),
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "kubernetes", "namespace": "default", "uid": "uid-eps-kubernetes",
                         "labels": {"kubernetes.io/service-name": "kubernetes"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [APISERVER_ENDPOINT], "conditions": {"ready": true}}],
            "ports": [{"name": "https", "port": 6443, "protocol": "TCP"}],
        }),
    );
}

/// GET /apis/networking.k8s.io/v1/servicecidrs: 404 while the API is not
/// served (clusters before 1.33, or with it turned off).
pub(super) async fn list_service_cidrs(
    State(shared): State<Arc<Shared>>,
    query: Query<HashMap<String, String>>,
) -> Response {
    if !shared.service_cidrs_served.load(Ordering::Relaxed) {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource".into(),
        );
    }
    collection(
        State(shared),
        Path((String::new(), SERVICE_CIDRS.into())),
        query,
    )
    .await
}
