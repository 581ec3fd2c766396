//! The admin HTTP port: `/livez`, `/readyz` (every mapping has a valid
//! current revision; else 503 with one line per failing mapping, and 503
//! once shutdown has begun; with `run --generation TOKEN`, the header
//! [`GENERATION_HEADER`] tells `kubeadm adopt` this process from an earlier
//! one on the same port) and `/metrics` (OpenMetrics). Nothing here changes
//! state; whoever reaches the port holds at most [`MAX_CONNECTIONS`] of
//! certsync's descriptors, each for at most a header timeout while idle.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{AppendHeaders, IntoResponse};
use axum::routing::get;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::{oneshot, watch};
use tower::ServiceExt;

use crate::metrics::Metrics;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("admin port {addr}: {source}{hint}", hint = bind_hint(source))]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// What to do about a port that cannot be had.
fn bind_hint(e: &std::io::Error) -> &'static str {
    match e.kind() {
        std::io::ErrorKind::AddrInUse => {
            " (another process listens there, e.g. a second host-network pod on this \
             node: give this one its own --admin-addr)"
        }
        std::io::ErrorKind::AddrNotAvailable => {
            " (no interface has this address: fix --admin-addr)"
        }
        _ => "",
    }
}

pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(metrics)
}

/// The header `/readyz` carries `run --generation`'s token in.
pub const GENERATION_HEADER: &str = "certsync-generation";

async fn readyz(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    let (status, body) = match m.readiness() {
        Ok(()) => (StatusCode::OK, "ok\n".to_owned()),
        Err(problems) => (StatusCode::SERVICE_UNAVAILABLE, problems.to_string()),
    };
    // Checked to be a header value when parsed (`cli::generation`).
    let generation = m.generation().and_then(|g| HeaderValue::from_str(g).ok());
    let header = generation.map(|value| (GENERATION_HEADER, value));
    (status, AppendHeaders(header), body)
}

async fn metrics_text(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        m.encode(),
    )
}

/// How many admin connections are served at once (probes and scrapers
/// need a handful; the rest is room for bursts). It bounds the descriptors
/// whoever reaches the port (every local user; every Pod network peer on
/// 0.0.0.0) can make certsync hold, so the file work never runs out of
/// them. A connection over the cap closes the oldest one.
pub const MAX_CONNECTIONS: usize = 64;

/// A request's headers must be in within this time of the connection's
/// start or of the previous answer: idle, kept-alive idle and trickling
/// connections are closed (probes send at once; scrapers reconnect).
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest any connection lives, whatever it does: bounds a request
/// whose body trickles and a client that never reads its answer, which
/// the header timeout does not see.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// A request's head (and hyper's read buffer) at most: probes and scrapers
/// send a few hundred bytes; 64 connections hold at most 1 MiB.
const MAX_REQUEST_BYTES: usize = 16 * 1024;

/// Binds `addr` now (so a bad address fails at start) and serves until
/// shutdown, at most [`MAX_CONNECTIONS`] connections at once.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<impl Future<Output = ()>, AdminError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| AdminError::Bind { addr, source })?;
    let bound = listener.local_addr().unwrap_or(addr);
    tracing::info!(addr = %bound, max_connections = MAX_CONNECTIONS, "admin port listening");
    Ok(async move {
        let app = router(Arc::clone(&metrics));
        let mut open = Connections::default();
        loop {
            let accepted = tokio::select! {
                () = crate::shutdown::stopped(&mut shutdown) => break,
                accepted = listener.accept() => accepted,
            };
            // A peer gone before accept(2) is nothing; anything else (no
            // descriptor left, no memory) is waited out.
            let stream = match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    if !matches!(
                        e.kind(),
                        std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset
                    ) {
                        tracing::warn!(error = %e, "admin port cannot accept connections");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    continue;
                }
            };
            let (id, closed) = open.admit(&metrics);
            let (app, metrics, shutdown, open) = (
                app.clone(),
                Arc::clone(&metrics),
                shutdown.clone(),
                Arc::clone(&open.open),
            );
            tokio::spawn(async move {
                if connection(stream, app, shutdown, closed).await {
                    metrics.admin_connection_closed("timeout");
                }
                crate::lock(&open).remove(&id);
            });
            // The connection just accepted, and the one closed for it, run
            // before the next accept: the descriptors held stay at the cap
            // and a probe's request is read while it is the newest.
            tokio::task::yield_now().await;
        }
    })
}

/// The admin connections being served, and whether the cap was reached.
#[derive(Default)]
struct Connections {
    /// By accept order (oldest first), each with the sender that closes it.
    open: Arc<Mutex<BTreeMap<u64, oneshot::Sender<()>>>>,
    next_id: u64,
    /// Said once each time the cap is reached, not per connection.
    full: bool,
}

impl Connections {
    /// Counts a connection just accepted in: its id, and the receiver that
    /// tells it to close. Over the cap the oldest one is closed: whoever
    /// holds the port must keep re-opening, and a probe is answered before
    /// 64 newer connections push it out.
    fn admit(&mut self, metrics: &Metrics) -> (u64, oneshot::Receiver<()>) {
        self.next_id += 1;
        let (close, closed) = oneshot::channel();
        let mut open = crate::lock(&self.open);
        let oldest = (open.len() >= MAX_CONNECTIONS).then(|| open.pop_first());
        open.insert(self.next_id, close);
        drop(open);
        if let Some((_, oldest)) = oldest.flatten() {
            let _ = oldest.send(());
            metrics.admin_connection_closed("limit");
            if !self.full {
                self.full = true;
                tracing::warn!(
                    max_connections = MAX_CONNECTIONS,
                    "admin port: connection limit reached; closing the oldest connection for each new one"
                );
            }
        } else {
            self.full = false;
        }
        (self.next_id, closed)
    }
}

/// Serves one connection (HTTP/1.1) until it ends, times out or shutdown
/// has closed it after the request in progress. `true` when it timed out:
/// no full request head within [`HEADER_TIMEOUT`], or past
/// [`CONNECTION_LIFETIME`]; `false` when the peer closed it, or certsync
/// did after answering, at shutdown, or to make room for a newer one
/// (counted where it was closed).
async fn connection(
    stream: tokio::net::TcpStream,
    app: Router,
    mut shutdown: watch::Receiver<bool>,
    mut evicted: oneshot::Receiver<()>,
) -> bool {
    let service = hyper::service::service_fn(move |req: axum::extract::Request<Incoming>| {
        app.clone().oneshot(req.map(axum::body::Body::new))
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(MAX_REQUEST_BYTES);
    let conn = http.serve_connection(TokioIo::new(stream), service);
    let mut conn = std::pin::pin!(conn);
    let lifetime = tokio::time::sleep(CONNECTION_LIFETIME);
    let mut lifetime = std::pin::pin!(lifetime);
    let mut stopping = false;
    loop {
        tokio::select! {
            served = conn.as_mut() => {
                return served.is_err_and(|e| e.is_timeout());
            }
            () = &mut lifetime => return true,
            _ = &mut evicted => return false,
            () = crate::shutdown::stopped(&mut shutdown), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;

    async fn get(app: &Router, path: &str) -> (StatusCode, String) {
        let resp = app
            .clone()
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn readyz_follows_mappings_and_shutdown() {
        let m = Arc::new(Metrics::new(0.8));
        let app = router(Arc::clone(&m));
        assert_eq!(
            get(&app, "/readyz").await,
            (StatusCode::SERVICE_UNAVAILABLE, "starting\n".into())
        );
        m.add_mapping("web");
        m.started();
        assert_eq!(
            get(&app, "/readyz").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "mapping web: no valid revision yet\n".into()
            )
        );
        m.ready("web", None);
        assert_eq!(get(&app, "/readyz").await, (StatusCode::OK, "ok\n".into()));
        let generation = |app: &Router| {
            let app = app.clone();
            async move {
                let resp = app
                    .oneshot(Request::get("/readyz").body(Body::empty()).unwrap())
                    .await
                    .unwrap();
                resp.headers()
                    .get(GENERATION_HEADER)
                    .map(|v| v.to_str().unwrap().to_owned())
            }
        };
        assert_eq!(generation(&app).await, None, "no --generation, no header");
        m.set_generation("0123abcd".into());
        assert_eq!(generation(&app).await.as_deref(), Some("0123abcd"));
        assert_eq!(get(&app, "/livez").await.0, StatusCode::OK);
        m.begin_shutdown();
        assert_eq!(
            get(&app, "/readyz").await,
            (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n".into())
        );
        assert_eq!(
            get(&app, "/livez").await.0,
            StatusCode::OK,
            "alive while shutting down"
        );
        let (status, text) = get(&app, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
