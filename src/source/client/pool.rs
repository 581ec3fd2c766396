//! The connections under the API client: every request multiplexed over
//! as few HTTP/2 connections as `SETTINGS_MAX_CONCURRENT_STREAMS` allows,
//! as Go's transport does (kube-rs alone: one HTTP/1.1 connection per
//! watch), PINGed after `keepalive` of silence; HTTP/1.1 without `h2`.
//!
//! Invariants: a request never waits for a stream slot on a full connection
//! (h2 would queue it behind minutes-long watches); a closed connection is
//! never handed out again.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use http_body_util::BodyExt as _;
use hyper::client::conn::http2;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::{Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ConfigExt};
use tower::BoxError;

use super::error::ClientError;
use crate::error_chain;

/// The TLS connector, connecting (TCP and TLS together) bounded by
/// `within`: a server that accepts and then says nothing would otherwise
/// hold a request, and over HTTP/2 the pool's lock, forever.
#[derive(Clone)]
struct Connector {
    inner: HttpsConnector<HttpConnector>,
    within: Duration,
}

impl tower::Service<http::Uri> for Connector {
    type Response = <HttpsConnector<HttpConnector> as tower::Service<http::Uri>>::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let (connecting, within) = (self.inner.call(uri), self.within);
        Box::pin(async move {
            tokio::time::timeout(within, connecting)
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "not connected (TCP and TLS handshake) within {}",
                        humantime::format_duration(within)
                    )
                    .into())
                })
        })
    }
}

#[derive(Clone)]
pub(super) struct Pool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    connector: Connector,
    server: http::Uri,
    keepalive: Duration,
    /// Held while choosing or opening a connection, so a burst of requests
    /// at start opens one connection, not one each.
    conns: tokio::sync::Mutex<Conns>,
    /// Once the server has shown it does not speak HTTP/2.
    h1: hyper_util::client::legacy::Client<Connector, Body>,
}

#[derive(Default)]
struct Conns {
    h2: Vec<H2Conn>,
    h1_only: bool,
}

struct H2Conn {
    send: http2::SendRequest<Body>,
    /// Requests whose response body lives.
    streams: Arc<AtomicUsize>,
    max_streams: Arc<AtomicUsize>,
}

/// A response body, holding its [`Stream`] (if any) until it is dropped.
type PoolBody = http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, hyper::Error>;

/// One open stream; released when the response body is dropped.
struct Stream(Arc<AtomicUsize>);

impl Drop for Stream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Pool {
    /// The connections to `config`'s server (none open yet).
    pub(super) fn new(config: &kube::Config, keepalive: Duration) -> Result<Self, ClientError> {
        let tls = config.rustls_client_config().map_err(ClientError::Build)?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        // For HTTP/1.1, where there are no PINGs: the kernel notices a dead peer.
        http.set_keepalive(Some(keepalive));
        let mut https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http();
        if let Some(name) = &config.tls_server_name {
            let name = name
                .clone()
                .try_into()
                .map_err(|source| ClientError::ServerName {
                    name: name.clone(),
                    source,
                })?;
            https =
                https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
        }
        let connector = Connector {
            inner: https.enable_all_versions().wrap_connector(http),
            within: keepalive,
        };
        let h1 = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .http2_only(false)
            .build(connector.clone());
        Ok(Self {
            inner: Arc::new(PoolInner {
                connector,
                server: config.cluster_url.clone(),
                keepalive,
                conns: tokio::sync::Mutex::default(),
                h1,
            }),
        })
    }

    /// An HTTP/2 connection with a stream taken on it; `None`: HTTP/1.1.
    async fn route(&self) -> Result<Option<(http2::SendRequest<Body>, Stream)>, ClientError> {
        let inner = &self.inner;
        let mut conns = inner.conns.lock().await;
        if conns.h1_only {
            return Ok(None);
        }
        conns.h2.retain(|c| !c.send.is_closed());
        let free = conns.h2.iter().find(|c| {
            c.send.is_ready()
                && c.streams.load(Ordering::Acquire) < c.max_streams.load(Ordering::Acquire)
        });
        if let Some(c) = free {
            c.streams.fetch_add(1, Ordering::AcqRel);
            return Ok(Some((c.send.clone(), Stream(Arc::clone(&c.streams)))));
        }
        let connect_err = |source| ClientError::Connect {
            server: inner.server.to_string(),
            source,
        };
        // Bounded by the connector: a silent server cannot hold this lock,
        // and every request behind it, for long.
        let io = tower::ServiceExt::oneshot(inner.connector.clone(), inner.server.clone())
            .await
            .map_err(connect_err)?;
        if !io.connected().is_negotiated_h2() {
            tracing::info!(server = %inner.server, "the API server does not offer HTTP/2; using HTTP/1.1 (one connection per watch)");
            conns.h1_only = true;
            return Ok(None);
        }
        let (send, connection) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(inner.keepalive)
            .keep_alive_timeout(inner.keepalive / 2)
            .keep_alive_while_idle(true)
            .handshake(io)
            .await
            .map_err(|e| connect_err(Box::new(e)))?;
        let server = inner.server.to_string();
        // Until the server's SETTINGS arrive, h2's own default (100).
        let mut connection = Box::pin(connection);
        let max_streams = Arc::new(AtomicUsize::new(connection.current_max_send_streams()));
        let limit = Arc::clone(&max_streams);
        tokio::spawn(async move {
            // Every frame the server sends (SETTINGS included) wakes this
            // poll, so the limit read after it is current.
            let driven = std::future::poll_fn(|cx| {
                let done = connection.as_mut().poll(cx);
                limit.store(connection.current_max_send_streams(), Ordering::Release);
                done
            });
            match driven.await {
                Ok(()) => tracing::debug!(%server, "HTTP/2 connection closed"),
                Err(e) => {
                    tracing::info!(%server, error = %error_chain(&e), "HTTP/2 connection lost; watches resume on a new one")
                }
            }
        });
        tracing::debug!(server = %inner.server, open = conns.h2.len() + 1, "opened an HTTP/2 connection");
        let streams = Arc::new(AtomicUsize::new(1));
        let stream = Stream(Arc::clone(&streams));
        conns.h2.push(H2Conn {
            send: send.clone(),
            streams,
            max_streams,
        });
        Ok(Some((send, stream)))
    }

    /// `req` on a connection with a free stream. A stream the server
    /// refused (`REFUSED_STREAM`: it processed nothing) is sent again, as
    /// Go's transport does: a new connection's first burst is sent before
    /// the server's SETTINGS say how many streams it takes (h2 assumes
    /// 100 until then; a server allowing fewer refuses the rest).
    async fn send(self, req: Request<Body>) -> Result<Response<PoolBody>, BoxError> {
        const ATTEMPTS: usize = 4;
        let (parts, body) = req.into_parts();
        // kube's request bodies are in memory (JSON, or empty for GETs).
        let body = body.collect().await?.to_bytes();
        let mut attempt = 1;
        loop {
            let again = Request::from_parts(parts.clone(), Body::from(body.clone()));
            match self.clone().send_once(again).await {
                Err(e) if attempt < ATTEMPTS && refused_stream(&*e) => {
                    tracing::debug!(server = %self.inner.server, attempt, "the API server refused a stream before processing it; sending it again");
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn send_once(self, req: Request<Body>) -> Result<Response<PoolBody>, BoxError> {
        let (resp, stream) = match self.route().await? {
            None => (self.inner.h1.request(req).await?, None),
            Some((mut send, stream)) => (send.send_request(req).await?, Some(stream)),
        };
        // The body holds the stream slot until it is dropped.
        Ok(resp.map(|body| {
            body.map_frame(move |frame| {
                let _held = &stream;
                frame
            })
            .boxed_unsync()
        }))
    }
}

/// Whether `e` is an HTTP/2 `REFUSED_STREAM`: the request was not
/// processed, so sending it again is safe.
fn refused_stream(e: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(e), |c| c.source()).any(|c| {
        c.downcast_ref::<h2::Error>()
            .is_some_and(|h| h.is_remote() && h.reason() == Some(h2::Reason::REFUSED_STREAM))
    })
}

impl tower::Service<Request<Body>> for Pool {
    type Response = Response<PoolBody>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        Box::pin(self.clone().send(req))
    }
}
