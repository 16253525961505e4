//! The listener: accepts connections and serves each with hyper, so that a server bound to a
//! network holds what clients do to it ([`ServerLimits`]):
//!
//! - a client has [`ServerLimits::header_timeout`] to send a request's headers, else its
//!   connection is closed (a client sending header lines slowly was held forever);
//! - at most [`ServerLimits::max_connections`] are served at once; one more gets 503 in the
//!   one error shape naming `max_connections`, and its connection is closed;
//! - a shutdown stops accepting, lets the requests in flight finish, and cuts whatever is
//!   still open after [`ServerLimits::shutdown_grace`], whatever clients do.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::response::IntoResponse;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tower::ServiceExt as _;

use crate::error::{ApiError, ErrorKind};

/// What one server holds at most, and how long it waits. Build it from
/// [`ServerLimits::default`] and its setters.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerLimits {
    /// Connections served at once (default 512).
    pub max_connections: usize,
    /// Event streams open at once, every tenant's together (default 128).
    pub max_streams: usize,
    /// Event streams one tenant may hold open at once (default 16).
    pub max_streams_per_tenant: usize,
    /// How long a client has to send a request's headers (default 10 s).
    pub header_timeout: Duration,
    /// How long a shutdown waits for what is open before it cuts it (default 10 s).
    pub shutdown_grace: Duration,
}

impl Default for ServerLimits {
    fn default() -> Self {
        Self {
            max_connections: 512,
            max_streams: 128,
            max_streams_per_tenant: 16,
            header_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(10),
        }
    }
}

impl ServerLimits {
    /// Connections served at once (at least 1).
    #[must_use]
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n.max(1);
        self
    }

    /// Event streams open at once, every tenant's together.
    #[must_use]
    pub fn max_streams(mut self, n: usize) -> Self {
        self.max_streams = n;
        self
    }

    /// Event streams one tenant may hold open at once.
    #[must_use]
    pub fn max_streams_per_tenant(mut self, n: usize) -> Self {
        self.max_streams_per_tenant = n;
        self
    }

    /// How long a client has to send a request's headers.
    #[must_use]
    pub fn header_timeout(mut self, d: Duration) -> Self {
        self.header_timeout = d;
        self
    }

    /// How long a shutdown waits for what is open before it cuts it.
    #[must_use]
    pub fn shutdown_grace(mut self, d: Duration) -> Self {
        self.shutdown_grace = d;
        self
    }
}

/// Connections past the cap answered at once with 503 (more are closed unanswered).
const OVERFLOW_ANSWERS: usize = 64;
/// How long a connection past the cap has to send its headers.
const OVERFLOW_HEADER_TIMEOUT: Duration = Duration::from_secs(2);

/// Serves `app` on `listener` until `shutdown` resolves, then calls `on_shutdown` and winds
/// down within the grace.
pub(crate) async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    limits: &ServerLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_shutdown: impl FnOnce(),
) -> std::io::Result<()> {
    let open = Arc::new(Semaphore::new(limits.max_connections));
    let overflow = Arc::new(Semaphore::new(OVERFLOW_ANSWERS));
    let busy = busy_router(limits.max_connections);
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        while connections.try_join_next().is_some() {}
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it was accepted:
                    // wait a little and go on.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let (service, permit, header_timeout, keep_alive) = match open.clone().try_acquire_owned() {
            Ok(permit) => (app.clone(), permit, limits.header_timeout, true),
            Err(_) => match overflow.clone().try_acquire_owned() {
                Ok(permit) => (busy.clone(), permit, OVERFLOW_HEADER_TIMEOUT, false),
                Err(_) => {
                    tracing::warn!("refused a connection: the server holds its most");
                    continue;
                }
            },
        };
        let hyper_service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            let service = service.clone();
            async move {
                let response = service
                    .oneshot(req.map(axum::body::Body::new))
                    .await
                    .unwrap_or_else(|e: Infallible| match e {});
                Ok::<_, Infallible>(response)
            }
        });
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_timeout)
            .keep_alive(keep_alive)
            .serve_connection(TokioIo::new(stream), hyper_service);
        let connection = graceful.watch(connection);
        connections.spawn(async move {
            let _permit = permit;
            if let Err(e) = connection.await {
                tracing::debug!("a connection ended: {e}");
            }
        });
    }
    on_shutdown();
    drop(listener);
    let open_now = connections.len();
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(limits.shutdown_grace) => {
            tracing::warn!(
                open = connections.len(),
                "shutdown: connections still open after {} s are cut",
                limits.shutdown_grace.as_secs()
            );
        }
    }
    tracing::debug!(open_now, "shutdown: connections wound down");
    connections.shutdown().await;
    Ok(())
}

/// What a connection past the cap gets for any request: 503 naming the limit, then close.
fn busy_router(max: usize) -> Router {
    Router::new().fallback(move || async move {
        let e = ApiError::limited(
            ErrorKind::Unavailable,
            format!("The server serves its most connections at once ({max}): try again shortly"),
            "max_connections",
            max,
        );
        let mut response = e.into_response();
        response.headers_mut().insert(
            axum::http::header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        response
    })
}
