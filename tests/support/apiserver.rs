//! A test API server for Secrets and ConfigMaps that speaks the real
//! protocol closely enough for kube-rs (and certsync) not to tell:
//!
//! - GET one object; LIST with `metadata.resourceVersion` and
//!   `fieldSelector=metadata.name=NAME`; WATCH as JSON lines of `ADDED`,
//!   `MODIFIED`, `DELETED`, `BOOKMARK` (with `allowWatchBookmarks`), resuming
//!   after `resourceVersion`, ending after `timeoutSeconds`;
//! - a resourceVersion it has no history for (compacted, or from before a
//!   restart that rewound the counter) gets a watch `ERROR` event with
//!   `410 Gone` (reason `Expired`), as a real apiserver sends it;
//! - POST, PUT, DELETE mutate and bump one global resourceVersion, as etcd
//!   does, so tests change objects through the Kubernetes API;
//! - writes are refused with 422 `Invalid` where a real server refuses
//!   them (see `validation`: names, data keys and sizes, the keys each
//!   Secret type requires, immutable types and data), `stringData` is
//!   folded into `data`, and `generateName` names a created object;
//! - Pods are stored as written (a test creates the one certsync runs
//!   in; nothing runs it), with the containers the real server requires;
//!   Events (events.k8s.io/v1) are checked as `ValidateEventCreate` does;
//! - an optional allow-list answers `403 Forbidden` for any other object,
//!   including a list or watch without a name selector, like RBAC with
//!   `resourceNames`;
//! - HTTP/1.1 and HTTP/2 (ALPN `h2` over TLS, as kube-apiserver), with
//!   the limit of concurrent streams per connection kube-apiserver v1.36
//!   advertises ([`MAX_STREAMS`]); it records each connection's protocol;
//! - faults on demand: drop every connection, end every watch, end each
//!   new watch at once with no event (as a proxy that cuts long requests
//!   does), stall watches (no bytes), answer 500 for the next N requests, 410 for the
//!   next N watches, compact history, rewind the
//!   resourceVersion counter, go down and come back on the same port,
//!   hold every write to a CSR's `/approval` unanswered, answer 403 for
//!   one verb on one resource (a missing RBAC rule).
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, mpsc, watch};
use tokio::task::JoinSet;

use super::validation;

#[path = "csr.rs"]
pub mod csr;
#[path = "ctb.rs"]
pub mod ctb;
#[path = "leases.rs"]
pub mod leases;
#[path = "network.rs"]
pub mod network;
#[path = "nodes.rs"]
pub mod nodes;

type Key = (String, String, String); // resource, namespace, name

#[derive(Clone, Debug)]
struct Logged {
    rv: u64,
    kind: &'static str,
    key: Key,
    object: Value,
}

#[derive(Default)]
struct Store {
    rv: u64,
    objects: BTreeMap<Key, Value>,
    log: Vec<Logged>,
    /// Watches from a resourceVersion below this get 410.
    oldest: u64,
    allow: Option<BTreeSet<Key>>,
    fail_next: u32,
    gone_next: u32,
    requests: Vec<String>,
    /// (verb, resource) answered 403, as RBAC without that rule answers.
    forbidden: BTreeSet<(String, String)>,
}

struct Shared {
    store: Mutex<Store>,
    events: broadcast::Sender<Logged>,
    /// The same events for watches of one object by name, so an update
    /// wakes its own watchers, not every watch of the server: this server
    /// shares the bench's CPUs with certsync (a real one does its fan-out
    /// on its own machine), and waking 1,000 watches per update took
    /// certsync's.
    named: Mutex<HashMap<Key, broadcast::Sender<Logged>>>,
    /// Bumped to end every open watch.
    generation: watch::Sender<u64>,
    stalled: watch::Sender<bool>,
    /// Every new watch answers 200 and ends at once, without an event.
    at_once: std::sync::atomic::AtomicBool,
    /// Every new watch sends one BOOKMARK (at the current resourceVersion)
    /// and ends at once.
    one_bookmark: std::sync::atomic::AtomicBool,
    /// Milliseconds between bookmarks on a watch that asked for them.
    bookmark_ms: std::sync::atomic::AtomicU64,
    /// Bearer token → user, for the resources that need an identity
    /// (CertificateSigningRequests).
    users: Mutex<HashMap<String, csr::User>>,
    /// Whether `certificates.k8s.io/v1beta1` ClusterTrustBundles are served.
    ctb_served: std::sync::atomic::AtomicBool,
    /// Whether `networking.k8s.io/v1` ServiceCIDRs are served.
    service_cidrs_served: std::sync::atomic::AtomicBool,
    /// Milliseconds each LIST waits before it is answered (0: none), so
    /// that lists overlap as they do on a loaded server.
    list_delay_ms: std::sync::atomic::AtomicU64,
    /// LIST requests being answered now, and the most there ever were.
    lists_in_flight: std::sync::atomic::AtomicUsize,
    lists_in_flight_max: std::sync::atomic::AtomicUsize,
    /// Server-side apply: per object, which field managers own each field.
    owners: Mutex<HashMap<Key, HashMap<String, std::collections::BTreeSet<String>>>>,
    /// While true, every write to a CSR's `/approval` waits before it is
    /// looked at (a slow write on a loaded server).
    approvals_held: watch::Sender<bool>,
    /// Writes to `/approval` that arrived (held or not).
    approvals_arrived: std::sync::atomic::AtomicUsize,
}

/// SETTINGS_MAX_CONCURRENT_STREAMS as kube-apiserver v1.36 advertises it
/// (measured; its `--http2-max-streams-per-connection` default), not Go's
/// own default of 250: 1,000 watches need 10 connections on a real server.
pub const MAX_STREAMS: u32 = 100;

/// The running server. Stops when dropped.
pub struct ApiServer {
    pub addr: SocketAddr,
    tls: Option<tokio_rustls::TlsAcceptor>,
    /// SETTINGS_MAX_CONCURRENT_STREAMS of every HTTP/2 connection.
    max_streams: u32,
    /// The negotiated protocol of every connection accepted, in order.
    protocols: Arc<Mutex<Vec<&'static str>>>,
    shared: Arc<Shared>,
    accept: Option<tokio::task::JoinHandle<()>>,
    conns: Arc<Mutex<JoinSet<()>>>,
}

/// A port [`ApiServer::reserve`] holds; shown as its address.
pub struct Reserved(tokio::net::TcpSocket, SocketAddr);

impl std::fmt::Display for Reserved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.1.fmt(f)
    }
}

impl ApiServer {
    /// Starts on a free loopback port.
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::start_on(listener).await
    }

    /// A loopback port bound with nothing listening (for "API server down
    /// at start"): connections to it are refused, and no other socket can
    /// take it meanwhile. A port released and bound again later was taken
    /// in between, as another connection's ephemeral port (AddrInUse).
    pub async fn reserve() -> Reserved {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(([127, 0, 0, 1], 0).into()).unwrap();
        let addr = socket.local_addr().unwrap();
        Reserved(socket, addr)
    }

    /// Starts listening on the port `reserved` holds.
    pub async fn start_at(reserved: Reserved) -> Self {
        Self::start_on(reserved.0.listen(1024).unwrap()).await
    }

    /// Starts on a free loopback port serving HTTPS with `cert`/`key` (PEM).
    pub async fn start_tls(cert: &[u8], key: &[u8]) -> Self {
        Self::start_tls_with(cert, key, true, MAX_STREAMS).await
    }

    /// HTTPS offering `h2` only when `h2`, with `max_streams` per HTTP/2
    /// connection.
    pub async fn start_tls_with(cert: &[u8], key: &[u8], h2: bool, max_streams: u32) -> Self {
        let mut s = Self::start_on(TcpListener::bind("127.0.0.1:0").await.unwrap()).await;
        let alpn: &[&[u8]] = if h2 {
            &[b"h2", b"http/1.1"]
        } else {
            &[b"http/1.1"]
        };
        s.tls = Some(super::tls_acceptor_alpn(cert, key, alpn));
        s.max_streams = max_streams;
        s.up().await;
        s
    }

    /// HTTPS (h2 and HTTP/1.1) that also authenticates clients by
    /// certificates issued by `client_ca` (PEM), as `--client-ca-file` does.
    pub async fn start_tls_client_ca(cert: &[u8], key: &[u8], client_ca: &[u8]) -> Self {
        let mut s = Self::start_on(TcpListener::bind("127.0.0.1:0").await.unwrap()).await;
        s.tls = Some(super::tls_acceptor_with(
            cert,
            key,
            &[b"h2", b"http/1.1"],
            Some(client_ca),
        ));
        s.up().await;
        s
    }

    /// The protocol of every connection accepted so far (`h2`, `http/1.1`).
    pub fn protocols(&self) -> Vec<&'static str> {
        self.protocols.lock().unwrap().clone()
    }

    async fn start_on(listener: TcpListener) -> Self {
        let (events, _) = broadcast::channel(1024);
        let shared = Arc::new(Shared {
            store: Mutex::new(Store {
                rv: 100,
                oldest: 1,
                ..Default::default()
            }),
            events,
            named: Mutex::default(),
            generation: watch::channel(0).0,
            stalled: watch::channel(false).0,
            at_once: std::sync::atomic::AtomicBool::new(false),
            one_bookmark: std::sync::atomic::AtomicBool::new(false),
            bookmark_ms: std::sync::atomic::AtomicU64::new(500),
            list_delay_ms: std::sync::atomic::AtomicU64::new(0),
            lists_in_flight: std::sync::atomic::AtomicUsize::new(0),
            lists_in_flight_max: std::sync::atomic::AtomicUsize::new(0),
            users: Mutex::new(HashMap::from([(
                "test-token".to_owned(),
                csr::User {
                    name: "test-user".into(),
                    uid: "test-user-uid".into(),
                    groups: Vec::new(),
                },
            )])),
            ctb_served: std::sync::atomic::AtomicBool::new(true),
            service_cidrs_served: std::sync::atomic::AtomicBool::new(true),
            owners: Mutex::default(),
            approvals_held: watch::channel(false).0,
            approvals_arrived: std::sync::atomic::AtomicUsize::new(0),
        });
        {
            let mut st = shared.store.lock().unwrap();
            network::seed(&shared, &mut st);
        }
        let mut s = Self {
            addr: listener.local_addr().unwrap(),
            tls: None,
            max_streams: MAX_STREAMS,
            protocols: Arc::default(),
            shared,
            accept: None,
            conns: Arc::default(),
        };
        s.listen(listener);
        s
    }

    fn listen(&mut self, listener: TcpListener) {
        let app = router(Arc::clone(&self.shared));
        let conns = Arc::clone(&self.conns);
        let tls = self.tls.clone();
        let (protocols, max_streams) = (Arc::clone(&self.protocols), self.max_streams);
        self.accept = Some(tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (app, tls) = (app.clone(), tls.clone());
                let protocols = Arc::clone(&protocols);
                conns.lock().unwrap().spawn(super::serve_connection(
                    stream,
                    app,
                    tls,
                    max_streams,
                    move |p| protocols.lock().unwrap().push(p),
                ));
            }
        }));
    }

    /// A kubeconfig pointing at this server (plain HTTP, a dummy token).
    pub fn kubeconfig(&self, dir: &std::path::Path) -> std::path::PathBuf {
        write_kubeconfig(dir, &format!("http://{}", self.addr))
    }

    /// A kubeconfig for the HTTPS server, trusting `ca_file`.
    pub fn tls_kubeconfig(
        &self,
        dir: &std::path::Path,
        ca_file: &std::path::Path,
    ) -> std::path::PathBuf {
        let path = write_kubeconfig(dir, &format!("https://{}", self.addr));
        let text = std::fs::read_to_string(&path).unwrap().replace(
            "    server:",
            &format!(
                "    certificate-authority: {}\n    server:",
                ca_file.display()
            ),
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// Authenticates `token` as `user` (the kubeconfigs' `test-token` is
    /// `test-user`).
    pub fn add_user(&self, token: &str, user: csr::User) {
        self.shared
            .users
            .lock()
            .unwrap()
            .insert(token.to_owned(), user);
    }

    /// Serve ClusterTrustBundles or not (a cluster without the beta API).
    /// Serve the ServiceCIDR API (the default) or answer 404 for it, as a
    /// cluster before Kubernetes 1.33 does.
    pub fn serve_service_cidrs(&self, on: bool) {
        self.shared
            .service_cidrs_served
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    pub fn serve_cluster_trust_bundles(&self, on: bool) {
        self.shared
            .ctb_served
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    // ---- faults -------------------------------------------------------

    /// Stops listening and kills every connection (a crashed apiserver).
    pub fn down(&mut self) {
        if let Some(a) = self.accept.take() {
            a.abort();
        }
        self.drop_connections();
    }

    /// Listens again on the same port.
    pub async fn up(&mut self) {
        self.down();
        let listener = loop {
            match TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        self.listen(listener);
    }

    /// Resets every open connection mid-stream.
    pub fn drop_connections(&self) {
        self.conns.lock().unwrap().abort_all();
    }

    /// Ends every open watch cleanly (as a watch timeout does).
    pub fn end_watches(&self) {
        self.shared.generation.send_modify(|g| *g += 1);
    }

    /// While on, each new watch is answered (200) and ended at once
    /// without a single event: what a client sees behind a proxy or load
    /// balancer that cuts streaming responses.
    pub fn end_watches_at_once(&self, on: bool) {
        self.shared
            .at_once
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// While on, each new watch is answered with one BOOKMARK and ended
    /// at once: a server (or a proxy that cuts a stream after its first
    /// chunk) whose watches are never "short" by client-go's rule.
    pub fn end_watches_after_one_bookmark(&self, on: bool) {
        self.shared
            .one_bookmark
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// While stalled, open watches send nothing and new watch requests hang
    /// (other requests go through, so a test can still change objects).
    pub fn stall(&self, on: bool) {
        self.shared.stalled.send_replace(on);
    }

    /// The next `n` requests for secrets/configmaps answer 500.
    pub fn fail_next(&self, n: u32) {
        self.shared.store.lock().unwrap().fail_next = n;
    }

    /// The next `n` watch requests get 410 Gone, whatever their
    /// resourceVersion (a storm of expirations).
    pub fn gone_next(&self, n: u32) {
        self.shared.store.lock().unwrap().gone_next = n;
    }

    /// Sets Secret `ns/name`'s data, under a new resourceVersion, without
    /// a request: a write that reached etcd through another API server
    /// while this one was down (a rolling restart of an HA control plane).
    pub fn write_secret_data(&self, ns: &str, name: &str, data: &[(&str, &[u8])]) {
        use base64::Engine as _;
        let mut st = self.shared.store.lock().unwrap();
        let key: Key = ("secrets".into(), ns.into(), name.into());
        let mut obj = st.objects.get(&key).expect("the Secret exists").clone();
        obj["data"] = data
            .iter()
            .map(|(k, v)| {
                let v = base64::engine::general_purpose::STANDARD.encode(v);
                ((*k).to_owned(), Value::String(v))
            })
            .collect::<serde_json::Map<_, _>>()
            .into();
        commit(&self.shared, &mut st, "MODIFIED", key, obj);
    }

    /// Forgets history: watches from any earlier resourceVersion get 410.
    pub fn compact(&self) {
        let mut st = self.shared.store.lock().unwrap();
        st.oldest = st.rv + 1;
        st.log.clear();
    }

    /// A restart with a new resourceVersion history (an etcd restore): the
    /// counter starts again far below where it was, every object keeps its
    /// content under a new resourceVersion, and every connection drops.
    pub fn rewind(&self) {
        {
            let mut st = self.shared.store.lock().unwrap();
            st.rv = 1;
            st.log.clear();
            st.oldest = 2;
            let keys: Vec<Key> = st.objects.keys().cloned().collect();
            for key in keys {
                st.rv += 1;
                let rv = st.rv;
                let obj = st.objects.get_mut(&key).unwrap();
                obj["metadata"]["resourceVersion"] = json!(rv.to_string());
            }
        }
        self.drop_connections();
    }

    /// Only these objects may be read (`resource` is `secrets` or
    /// `configmaps`); anything else gets 403.
    pub fn allow_only(&self, objects: &[(&str, &str, &str)]) {
        self.shared.store.lock().unwrap().allow = Some(
            objects
                .iter()
                .map(|(r, n, o)| (r.to_string(), n.to_string(), o.to_string()))
                .collect(),
        );
    }

    /// While on, each write to a CSR's `/approval` is held (no answer)
    /// until this is turned off: a round of decisions held open.
    pub fn hold_approvals(&self, on: bool) {
        self.shared.approvals_held.send_replace(on);
    }

    /// Writes to a CSR's `/approval` that have arrived so far, held ones
    /// included.
    pub fn approvals_arrived(&self) -> usize {
        self.shared
            .approvals_arrived
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// While on, `verb` (`list`, `watch`, `get`) on `resource` is answered
    /// 403 Forbidden for everyone, as a missing RBAC rule is.
    pub fn forbid(&self, verb: &str, resource: &str, on: bool) {
        let key = (verb.to_owned(), resource.to_owned());
        let mut st = self.shared.store.lock().unwrap();
        if on {
            st.forbidden.insert(key);
        } else {
            st.forbidden.remove(&key);
        }
    }

    /// Injected 500s not yet served.
    pub fn failures_pending(&self) -> u32 {
        self.shared.store.lock().unwrap().fail_next
    }

    /// How often open watches get a bookmark (500 ms by default, to exercise
    /// them; a real apiserver sends about one a minute).
    pub fn bookmark_every(&self, every: Duration) {
        self.shared.bookmark_ms.store(
            every.as_millis() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Every LIST from now on is answered after `delay` (its admission
    /// first), as a busy API server answers: lists made at once overlap.
    pub fn slow_lists(&self, delay: Duration) {
        self.shared.list_delay_ms.store(
            delay.as_millis() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The most LIST requests this server was answering at the same time.
    pub fn lists_in_flight_max(&self) -> usize {
        self.shared
            .lists_in_flight_max
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Every request seen, as `VERB resource namespace/name {query}` (verb:
    /// get, list, watch, create, update, delete).
    pub fn requests(&self) -> Vec<String> {
        self.shared.store.lock().unwrap().requests.clone()
    }

    pub fn resource_version(&self) -> u64 {
        self.shared.store.lock().unwrap().rv
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.down();
    }
}

/// Writes a kubeconfig for `server` into `dir`.
pub fn write_kubeconfig(dir: &std::path::Path, server: &str) -> std::path::PathBuf {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n\
             users:\n- name: test\n  user:\n    token: test-token\n\
             contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n\
             current-context: test\n"
        ),
    )
    .unwrap();
    path
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        // As kube-apiserver serves it to anyone (system:public-info-viewer).
        .route(
            "/version",
            get(|| async {
                axum::Json(json!({
                    "major": "1", "minor": "36", "gitVersion": "v1.36.0",
                    "gitCommit": "", "gitTreeState": "clean", "buildDate": "",
                    "goVersion": "", "compiler": "gc", "platform": "linux/amd64",
                }))
            }),
        )
        .route(
            "/api/v1/namespaces/{ns}/{resource}",
            get(collection).post(create),
        )
        .route(
            "/api/v1/namespaces/{ns}/{resource}/{name}",
            get(get_one).put(replace).delete(delete),
        )
        // The status subresource: only `status` is taken from the body.
        .route(
            "/api/v1/namespaces/{ns}/{resource}/{name}/status",
            axum::routing::put(replace_status),
        )
        // Services of every namespace, as a cluster-wide list.
        .route(
            "/api/v1/services",
            get(
                |st: State<Arc<Shared>>, q: Query<HashMap<String, String>>| {
                    collection(st, Path((ALL_NAMESPACES.into(), "services".into())), q)
                },
            ),
        )
        .route(
            "/apis/events.k8s.io/v1/namespaces/{ns}/{resource}",
            get(collection).post(create),
        )
        .route(
            "/apis/events.k8s.io/v1/namespaces/{ns}/{resource}/{name}",
            get(get_one).patch(merge_patch),
        )
        .route(
            "/apis/certificates.k8s.io/v1/certificatesigningrequests",
            get(csr::list).post(csr::create),
        )
        .route(
            "/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}",
            get(csr::get_one).put(csr::replace).delete(csr::delete),
        )
        .route(
            "/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}/{sub}",
            axum::routing::put(csr::replace_subresource),
        )
        .route("/api/v1/nodes", get(nodes::list).post(nodes::create))
        .route(
            "/api/v1/nodes/{name}",
            get(nodes::get_one)
                .put(nodes::replace)
                .delete(nodes::delete),
        )
        .route(
            "/api/v1/nodes/{name}/{sub}",
            axum::routing::put(nodes::replace_status),
        )
        .route(
            "/apis/coordination.k8s.io/v1/namespaces/{ns}/{resource}",
            get(collection).post(create),
        )
        .route(
            "/apis/coordination.k8s.io/v1/namespaces/{ns}/{resource}/{name}",
            get(get_one).put(replace).patch(lease_patch).delete(delete),
        )
        .route(
            "/apis/networking.k8s.io/v1/servicecidrs",
            get(network::list_service_cidrs),
        )
        .route(
            "/apis/discovery.k8s.io/v1/namespaces/{ns}/{resource}",
            get(collection),
        )
        .route(
            "/apis/certificates.k8s.io/v1beta1/clustertrustbundles",
            get(ctb::list).post(ctb::create),
        )
        .route(
            "/apis/certificates.k8s.io/v1beta1/clustertrustbundles/{name}",
            get(ctb::get_one).put(ctb::replace).delete(ctb::delete),
        )
        .with_state(shared)
}

fn status(code: StatusCode, reason: &str, message: String) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": message, "reason": reason, "code": code.as_u16(),
    });
    (code, axum::Json(body)).into_response()
}

fn kind_of(resource: &str) -> Option<&'static str> {
    match resource {
        "secrets" => Some("Secret"),
        "configmaps" => Some("ConfigMap"),
        "pods" => Some("Pod"),
        "events" => Some("Event"),
        csr::RESOURCE => Some("CertificateSigningRequest"),
        ctb::RESOURCE => Some("ClusterTrustBundle"),
        nodes::RESOURCE => Some("Node"),
        leases::RESOURCE => Some("Lease"),
        network::SERVICES => Some("Service"),
        network::ENDPOINT_SLICES => Some("EndpointSlice"),
        network::SERVICE_CIDRS => Some("ServiceCIDR"),
        _ => None,
    }
}

fn api_version_of(resource: &str) -> &'static str {
    match resource {
        "events" => "events.k8s.io/v1",
        csr::RESOURCE => "certificates.k8s.io/v1",
        ctb::RESOURCE => ctb::API_VERSION,
        leases::RESOURCE => leases::API_VERSION,
        network::ENDPOINT_SLICES => "discovery.k8s.io/v1",
        network::SERVICE_CIDRS => "networking.k8s.io/v1",
        _ => "v1",
    }
}

/// Request log, 500 injection, stall and RBAC, in that order.
async fn admit(
    shared: &Shared,
    verb: &str,
    resource: &str,
    ns: &str,
    name: Option<&str>,
    query: &HashMap<String, String>,
) -> Result<(), Response> {
    {
        let mut st = shared.store.lock().unwrap();
        let q: BTreeMap<_, _> = query.iter().collect();
        st.requests.push(format!(
            "{verb} {resource} {ns}/{} {q:?}",
            name.unwrap_or("")
        ));
        if st.fail_next > 0 {
            st.fail_next -= 1;
            return Err(status(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                "injected failure".into(),
            ));
        }
    }
    if verb == "watch" {
        let mut stalled = shared.stalled.subscribe();
        let _ = stalled.wait_for(|s| !*s).await;
    }
    let st = shared.store.lock().unwrap();
    if st
        .forbidden
        .contains(&(verb.to_owned(), resource.to_owned()))
    {
        return Err(status(
            StatusCode::FORBIDDEN,
            "Forbidden",
            format!(
                "{resource} is forbidden: User \"system:serviceaccount:certsync:certsync\" \
                 cannot {verb} resource \"{resource}\" in API group \"\" at the cluster scope"
            ),
        ));
    }
    if let Some(allow) = &st.allow {
        let ok = name.is_some_and(|n| allow.contains(&(resource.into(), ns.into(), n.into())));
        if !ok {
            let what = name.map_or(String::new(), |n| format!(" {n:?}"));
            return Err(status(
                StatusCode::FORBIDDEN,
                "Forbidden",
                format!(
                    "{resource}{what} is forbidden: User \"system:serviceaccount:certsync:certsync\" \
                     cannot {verb} resource \"{resource}\" in API group \"\" in the namespace \"{ns}\""
                ),
            ));
        }
    }
    Ok(())
}

fn name_selector(query: &HashMap<String, String>) -> Option<String> {
    let sel = query.get("fieldSelector")?;
    let v = sel
        .strip_prefix("metadata.name==")
        .or_else(|| sel.strip_prefix("metadata.name="))?;
    Some(v.to_owned())
}

/// One LIST being answered, counted in [`Shared::lists_in_flight`] until
/// dropped (its response built).
struct InFlight<'a>(&'a Shared);

impl<'a> InFlight<'a> {
    fn enter(shared: &'a Shared) -> Self {
        use std::sync::atomic::Ordering::SeqCst;
        let now = shared.lists_in_flight.fetch_add(1, SeqCst) + 1;
        shared.lists_in_flight_max.fetch_max(now, SeqCst);
        Self(shared)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0
            .lists_in_flight
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The namespace a cluster-wide list is given (no real namespace has it).
const ALL_NAMESPACES: &str = "*";

async fn collection(
    State(shared): State<Arc<Shared>>,
    Path((ns, resource)): Path<(String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(kind) = kind_of(&resource) else {
        return status(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("no resource {resource}"),
        );
    };
    let watching = matches!(query.get("watch").map(String::as_str), Some("true" | "1"));
    let name = name_selector(&query);
    let verb = if watching { "watch" } else { "list" };
    if let Err(r) = admit(&shared, verb, &resource, &ns, name.as_deref(), &query).await {
        return r;
    }
    // `spec.signerName=` selects CSRs and ClusterTrustBundles by signer,
    // as the real server's field selectors for those kinds do.
    let signer = query
        .get("fieldSelector")
        .and_then(|s| s.strip_prefix("spec.signerName="))
        .map(str::to_owned);
    // Equality-based label selectors (`k=v,k2=v2`).
    let labels: Vec<(String, String)> = query
        .get("labelSelector")
        .map(|s| {
            s.split(',')
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.trim_end_matches('=').to_owned(), v.to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let matches = {
        let (resource, ns, name) = (resource.clone(), ns.clone(), name.clone());
        move |k: &Key, obj: &Value| {
            k.0 == resource
                && (k.1 == ns || ns == ALL_NAMESPACES)
                && name.as_ref().is_none_or(|n| *n == k.2)
                && signer
                    .as_ref()
                    .is_none_or(|s| obj["spec"]["signerName"] == s.as_str())
                && labels
                    .iter()
                    .all(|(k, v)| obj["metadata"]["labels"][k] == v.as_str())
        }
    };
    if !watching {
        let _in_flight = InFlight::enter(&shared);
        let delay = shared
            .list_delay_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        let st = shared.store.lock().unwrap();
        let items: Vec<Value> = st
            .objects
            .iter()
            .filter(|(k, v)| matches(k, v))
            .map(|(_, v)| v.clone())
            .collect();
        let body = json!({
            "apiVersion": api_version_of(&resource), "kind": format!("{kind}List"),
            "metadata": {"resourceVersion": st.rv.to_string()}, "items": items,
        });
        return axum::Json(body).into_response();
    }

    let bookmarks = query
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true");
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse().ok())
        .map_or(Duration::from_secs(1800), Duration::from_secs);
    let from: Option<u64> = query
        .get("resourceVersion")
        .filter(|v| !v.is_empty() && *v != "0")
        .and_then(|v| v.parse().ok());
    if shared.at_once.load(std::sync::atomic::Ordering::Relaxed) {
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::empty())
            .unwrap();
    }
    let (tx, rx) = mpsc::channel::<Bytes>(64);
    let line =
        |ty: &str, obj: &Value| Bytes::from(format!("{}\n", json!({"type": ty, "object": obj})));
    if shared
        .one_bookmark
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        let rv = shared.store.lock().unwrap().rv;
        let obj = json!({"kind": kind, "apiVersion": api_version_of(&resource),
                         "metadata": {"resourceVersion": rv.to_string()}});
        return Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(line("BOOKMARK", &obj)))
            .unwrap();
    }

    // Subscribe under the store lock, so no event falls between the replay
    // and the live stream.
    let (backlog, mut live, expired) = {
        let mut st = shared.store.lock().unwrap();
        let live = match &name {
            Some(n) => {
                let key = (resource.clone(), ns.clone(), n.clone());
                let mut named = shared.named.lock().unwrap();
                named
                    .entry(key)
                    .or_insert_with(|| broadcast::channel(64).0)
                    .subscribe()
            }
            None => shared.events.subscribe(),
        };
        let forced = st.gone_next > 0;
        st.gone_next = st.gone_next.saturating_sub(1);
        match from {
            _ if forced => (Vec::new(), live, Some(from.unwrap_or(0))),
            Some(rv) if rv + 1 < st.oldest || rv > st.rv => (Vec::new(), live, Some(rv)),
            Some(rv) => (
                st.log
                    .iter()
                    .filter(|e| e.rv > rv && matches(&e.key, &e.object))
                    .map(|e| line(e.kind, &e.object))
                    .collect(),
                live,
                None,
            ),
            // No resourceVersion: the current state as ADDED events first.
            None => (
                st.objects
                    .iter()
                    .filter(|(k, v)| matches(k, v))
                    .map(|(_, v)| line("ADDED", v))
                    .collect(),
                live,
                None,
            ),
        }
    };
    let mut generation = shared.generation.subscribe();
    let mut stalled = shared.stalled.subscribe();
    let shared2 = Arc::clone(&shared);
    tokio::spawn(async move {
        if let Some(rv) = expired {
            let gone = json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": format!("too old resource version: {rv}"), "reason": "Expired", "code": 410,
            });
            let _ = tx.send(line("ERROR", &gone)).await;
            return;
        }
        for b in backlog {
            if tx.send(b).await.is_err() {
                return;
            }
        }
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let every = shared2
            .bookmark_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        let mut bookmark = tokio::time::interval(Duration::from_millis(every.max(1)));
        bookmark.tick().await; // the first tick is immediate
        loop {
            if *stalled.borrow_and_update() {
                tokio::select! {
                    _ = stalled.changed() => continue,
                    _ = generation.changed() => return,
                }
            }
            tokio::select! {
                _ = &mut deadline => return,
                _ = generation.changed() => return,
                _ = stalled.changed() => continue,
                ev = live.recv() => match ev {
                    Ok(e) if matches(&e.key, &e.object) => {
                        if tx.send(line(e.kind, &e.object)).await.is_err() { return; }
                    }
                    Ok(_) => {}
                    Err(_) => return, // lagged or closed: end; the client resumes
                },
                _ = bookmark.tick(), if bookmarks => {
                    let rv = shared2.store.lock().unwrap().rv;
                    let obj = json!({"kind": kind, "apiVersion": api_version_of(&resource),
                                     "metadata": {"resourceVersion": rv.to_string()}});
                    if tx.send(line("BOOKMARK", &obj)).await.is_err() { return; }
                }
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(stream))
        .unwrap()
}

async fn get_one(
    State(shared): State<Arc<Shared>>,
    Path((ns, resource, name)): Path<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    if let Err(r) = admit(&shared, "get", &resource, &ns, Some(&name), &query).await {
        return r;
    }
    let st = shared.store.lock().unwrap();
    match st.objects.get(&(resource.clone(), ns, name.clone())) {
        Some(obj) => axum::Json(obj.clone()).into_response(),
        None => not_found(&resource, &name),
    }
}

/// Stores `obj` under a new resourceVersion and tells the watches.
fn commit(shared: &Shared, st: &mut Store, kind: &'static str, key: Key, mut obj: Value) -> Value {
    st.rv += 1;
    obj["metadata"]["resourceVersion"] = json!(st.rv.to_string());
    let logged = Logged {
        rv: st.rv,
        kind,
        key: key.clone(),
        object: obj.clone(),
    };
    st.log.push(logged.clone());
    if kind == "DELETED" {
        st.objects.remove(&key);
    } else {
        st.objects.insert(key, obj.clone());
    }
    if let Some(named) = shared.named.lock().unwrap().get(&logged.key) {
        let _ = named.send(logged.clone());
    }
    let _ = shared.events.send(logged);
    obj
}

fn normalize(resource: &str, ns: &str, mut obj: Value) -> Result<(Key, Value), Box<Response>> {
    let invalid = |code, reason, message: String| Box::new(status(code, reason, message));
    let kind = kind_of(resource).ok_or_else(|| {
        invalid(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("no resource {resource}"),
        )
    })?;
    let name = obj["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| {
            invalid(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                format!(
                    "{kind} \"\" is invalid: metadata.name: Required value: name or generateName is required"
                ),
            )
        })?;
    obj["apiVersion"] = json!(api_version_of(resource));
    obj["kind"] = json!(kind);
    obj["metadata"]["namespace"] = json!(ns);
    if kind == "Secret" {
        validation::fold_string_data(&mut obj);
    }
    let errors = match kind {
        "Secret" => validation::secret(&obj),
        "ConfigMap" => validation::config_map(&obj),
        "Pod" => validation::pod(&obj),
        "Event" => validation::event(&obj),
        _ => Vec::new(),
    };
    if !errors.is_empty() {
        return Err(unprocessable(kind, &name, &errors));
    }
    Ok(((resource.to_owned(), ns.to_owned(), name), obj))
}

/// 422 Invalid, worded as the real server words it.
fn unprocessable(kind: &str, name: &str, errors: &validation::Errors) -> Box<Response> {
    Box::new(status(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Invalid",
        validation::invalid(kind, name, errors),
    ))
}

/// `metadata.generateName`: the prefix plus five characters from the
/// alphabet apimachinery's `SimpleNameGenerator` uses.
fn generate_name(obj: &mut Value) {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    if obj["metadata"]["name"]
        .as_str()
        .is_some_and(|n| !n.is_empty())
    {
        return;
    }
    let Some(prefix) = obj["metadata"]["generateName"].as_str() else {
        return;
    };
    // A per-process counter scrambled by the pid: unique here, and unlike
    // an earlier run's names.
    let mut n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) * 7919
        + u64::from(std::process::id());
    let mut suffix = String::new();
    for _ in 0..5 {
        suffix.push(ALPHABET[(n % ALPHABET.len() as u64) as usize] as char);
        n /= ALPHABET.len() as u64;
    }
    obj["metadata"]["name"] = json!(format!("{prefix}{suffix}"));
}

/// The common start of create and replace: a well-formed object, the
/// request logged, and the store locked.
fn write_request<'a>(
    shared: &'a Shared,
    verb: &str,
    resource: &str,
    ns: &str,
    obj: Value,
) -> Result<(std::sync::MutexGuard<'a, Store>, Key, Value), Box<Response>> {
    let (key, obj) = normalize(resource, ns, obj)?;
    let mut st = shared.store.lock().unwrap();
    st.requests
        .push(format!("{verb} {resource} {ns}/{}", key.2));
    Ok((st, key, obj))
}

fn not_found(resource: &str, name: &str) -> Response {
    status(
        StatusCode::NOT_FOUND,
        "NotFound",
        format!("{resource} {name:?} not found"),
    )
}

async fn create(
    State(shared): State<Arc<Shared>>,
    Path((ns, resource)): Path<(String, String)>,
    axum::Json(mut obj): axum::Json<Value>,
) -> Response {
    generate_name(&mut obj);
    let (mut st, key, obj) = match write_request(&shared, "create", &resource, &ns, obj) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    insert_new(&shared, &mut st, key, obj)
}

/// Stores a new object (409 when the name is taken), with its uid.
/// PUT of a status subresource: the stored object with the body's
/// `status`, as kube-apiserver's status strategies keep the spec.
async fn replace_status(
    State(shared): State<Arc<Shared>>,
    Path((ns, resource, name)): Path<(String, String, String)>,
    axum::Json(mut obj): axum::Json<Value>,
) -> Response {
    // The stored object with the body's status and resourceVersion, then
    // an ordinary update (conflict check, validation).
    let current = {
        let st = shared.store.lock().unwrap();
        st.objects
            .get(&(resource.clone(), ns.clone(), name.clone()))
            .cloned()
    };
    let Some(mut updated) = current else {
        return not_found(&resource, &name);
    };
    updated["status"] = obj["status"].take();
    updated["metadata"]["resourceVersion"] = obj["metadata"]["resourceVersion"].take();
    replace(
        State(shared),
        Path((ns, resource, name)),
        axum::Json(updated),
    )
    .await
}

/// A JSON merge patch (RFC 7386): objects merge, `null` deletes.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// POST of a cluster-scoped object: its apiVersion and kind set, checked
/// by `validate` (422 on errors), then stored.
fn create_cluster_scoped(
    shared: &Shared,
    resource: &str,
    api_version: &str,
    kind: &str,
    mut obj: Value,
    validate: fn(&Value) -> validation::Errors,
) -> Response {
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let errors = validate(&obj);
    if !errors.is_empty() {
        // The real server names the kind with its group: Node,
        // ClusterTrustBundle.certificates.k8s.io.
        let qualified = match api_version.split_once('/') {
            Some((group, _)) => format!("{kind}.{group}"),
            None => kind.to_owned(),
        };
        return *unprocessable(&qualified, &name, &errors);
    }
    insert_cluster_scoped(shared, resource, &name, obj)
}

/// Creates the cluster-scoped `resource` object `name` (already validated).
fn insert_cluster_scoped(shared: &Shared, resource: &str, name: &str, obj: Value) -> Response {
    let mut st = shared.store.lock().unwrap();
    st.requests.push(format!("create {resource} /{name}"));
    let key = (resource.to_owned(), String::new(), name.to_owned());
    insert_new(shared, &mut st, key, obj)
}

fn insert_new(shared: &Shared, st: &mut Store, key: Key, mut obj: Value) -> Response {
    if st.objects.contains_key(&key) {
        return status(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!("{} {:?} already exists", key.0, key.2),
        );
    }
    obj["metadata"]["uid"] = json!(format!("uid-{}-{}", key.2, st.rv + 1));
    let obj = commit(shared, st, "ADDED", key, obj);
    (StatusCode::CREATED, axum::Json(obj)).into_response()
}

/// 409 when an update names a resourceVersion that is no longer current
/// (optimistic concurrency; an update without one always applies).
fn stale_write(current: &Value, new: &Value) -> Option<Response> {
    let sent = new["metadata"]["resourceVersion"].as_str().unwrap_or("");
    (!sent.is_empty() && current["metadata"]["resourceVersion"] != json!(sent)).then(|| {
        status(
            StatusCode::CONFLICT,
            "Conflict",
            "the object has been modified; please apply your changes to the latest version and try again".into(),
        )
    })
}

async fn replace(
    State(shared): State<Arc<Shared>>,
    Path((ns, resource, name)): Path<(String, String, String)>,
    axum::Json(obj): axum::Json<Value>,
) -> Response {
    let (mut st, key, mut obj) = match write_request(&shared, "update", &resource, &ns, obj) {
        Ok(v) => v,
        Err(r) => return *r,
    };
    let Some(current) = st.objects.get(&key) else {
        return not_found(&resource, &name);
    };
    if let Some(conflict) = stale_write(current, &obj) {
        return conflict;
    }
    let errors = validation::update(current, &obj);
    if !errors.is_empty() {
        return *unprocessable(obj["kind"].as_str().unwrap_or(""), &name, &errors);
    }
    obj["metadata"]["uid"] = current["metadata"]["uid"].clone();
    let obj = commit(&shared, &mut st, "MODIFIED", key, obj);
    axum::Json(obj).into_response()
}

/// A JSON merge patch (RFC 7386), as kube's event recorder sends for a
/// repeated event.
async fn merge_patch(
    State(shared): State<Arc<Shared>>,
    Path((ns, resource, name)): Path<(String, String, String)>,
    body: bytes::Bytes,
) -> Response {
    let Ok(patch) = serde_json::from_slice::<Value>(&body) else {
        return status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "patch is not JSON".into(),
        );
    };
    let key = (resource.clone(), ns.clone(), name.clone());
    let mut st = shared.store.lock().unwrap();
    st.requests.push(format!("patch {resource} {ns}/{name}"));
    let Some(mut obj) = st.objects.get(&key).cloned() else {
        return not_found(&resource, &name);
    };
    merge(&mut obj, &patch);
    let obj = commit(&shared, &mut st, "MODIFIED", key, obj);
    axum::Json(obj).into_response()
}

/// PATCH of a Lease (server-side apply with field ownership).
async fn lease_patch(
    state: State<Arc<Shared>>,
    Path((ns, resource, name)): Path<(String, String, String)>,
    query: Query<HashMap<String, String>>,
    headers: axum::http::HeaderMap,
    body: bytes::Bytes,
) -> Response {
    if resource != leases::RESOURCE {
        return not_found(&resource, &name);
    }
    leases::patch(state, Path((ns, name)), query, headers, body).await
}

async fn delete(
    State(shared): State<Arc<Shared>>,
    Path((ns, resource, name)): Path<(String, String, String)>,
) -> Response {
    let key = (resource.clone(), ns.clone(), name.clone());
    shared.owners.lock().unwrap().remove(&key);
    let mut st = shared.store.lock().unwrap();
    st.requests.push(format!("delete {resource} {ns}/{name}"));
    let Some(obj) = st.objects.get(&key).cloned() else {
        return not_found(&resource, &name);
    };
    let obj = commit(&shared, &mut st, "DELETED", key, obj);
    axum::Json(obj).into_response()
}
