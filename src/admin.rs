//! The admin HTTP port: `/livez` (the process is alive), `/readyz` (every
//! mapping has a valid current revision; 503 with one line per failing
//! mapping otherwise, and 503 once shutdown has begun) and `/metrics`
//! (OpenMetrics text). Loopback by default; nothing here changes state.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::sync::watch;

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

async fn readyz(State(m): State<Arc<Metrics>>) -> impl IntoResponse {
    match m.readiness() {
        Ok(()) => (StatusCode::OK, "ok\n".to_owned()),
        Err(problems) => (StatusCode::SERVICE_UNAVAILABLE, problems),
    }
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

/// Binds `addr` now (so a bad address fails at start) and serves until
/// shutdown.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) -> Result<impl Future<Output = ()>, AdminError> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| AdminError::Bind { addr, source })?;
    let bound = listener.local_addr().unwrap_or(addr);
    tracing::info!(addr = %bound, "admin port listening");
    Ok(async move {
        let app = router(metrics);
        let stop = async move { crate::shutdown::stopped(&mut shutdown).await };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(stop)
            .await
        {
            tracing::error!(error = %e, "admin port failed");
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use tower::ServiceExt;

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
