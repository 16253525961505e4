//! The app: every route mounted on its handler, with the body cap, the timeout, the JSON
//! answers for unknown routes and methods, the request counters, gzip when asked (never on
//! an event stream) and a `tracing` span per request.

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tower_http::compression::CompressionLayer;
use tower_http::trace::TraceLayer;

use crate::api::{
    MAX_BODY_BYTES, REQUEST_TIMEOUT, approvals, events, health, host, listing, runs, sessions,
    tree, work,
};
use crate::error::ApiError;
use crate::state::AppState;

/// Every route, with the body cap, the timeout and the request counters.
pub(crate) fn router(state: AppState) -> Router {
    let mut web = Router::new();
    for (path, source) in crate::web::MODULES {
        web = web.route(path, get(move || async move { crate::web::module(source) }));
    }
    web.route("/", get(crate::web::index))
        .route("/app.js", get(crate::web::script))
        .route("/app.css", get(crate::web::style))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(health::metrics))
        .route("/v1/openapi.json", get(crate::openapi::openapi_json))
        .route("/v1/specs", get(runs::specs))
        .route("/v1/runs", post(runs::start).get(listing::list))
        .route("/v1/runs/{id}/events", get(tree::stream))
        .route("/v1/events", get(crate::api::feed::stream))
        .route("/v1/runs/{id}", get(runs::get))
        .route("/v1/runs/{id}/resume", post(approvals::resume))
        .route(
            "/v1/sessions/{id}/approvals",
            get(approvals::list).post(approvals::decide),
        )
        .route("/v1/sessions/{id}", get(sessions::get).delete(host::delete))
        .route(
            "/v1/sessions/{id}/children",
            get(sessions::children).post(host::spawn),
        )
        .route("/v1/sessions/{id}/messages", post(host::message))
        .route(
            "/v1/sessions/{id}/delegations/{delegation}",
            get(host::wait),
        )
        .route(
            "/v1/sessions/{id}/delegations/{delegation}/cancel",
            post(host::cancel),
        )
        .route(
            "/v1/sessions/{id}/delegations/{delegation}/stop",
            post(host::stop),
        )
        .route("/v1/sessions/{id}/transcript", get(sessions::transcript))
        .route("/v1/sessions/{id}/events", get(events::stream))
        .route("/v1/sessions/{id}/cancel", post(sessions::cancel))
        .route("/v1/sessions/{id}/diff", get(work::diff))
        .route("/v1/sessions/{id}/merge", post(work::merge))
        .route("/v1/sessions/{id}/discard", post(work::discard))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(timeout))
        .layer(middleware::from_fn_with_state(state.clone(), count))
        // gzip for clients that ask (never an event stream: it would be held back).
        .layer(CompressionLayer::new())
        // One `tracing` span per request (method, path, status, latency).
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

async fn not_found() -> ApiError {
    ApiError::not_found("route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        crate::error::ErrorKind::MethodNotAllowed,
        "This route does not take that method",
    )
}

/// A request that has not answered within [`REQUEST_TIMEOUT`] (a body that comes too
/// slowly, say) answers 408 in the one error shape; an event stream is not timed once its
/// headers are out.
async fn timeout(req: Request, next: Next) -> Response {
    match tokio::time::timeout(REQUEST_TIMEOUT, next.run(req)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            crate::error::ErrorKind::Timeout,
            format!(
                "The request took longer than {} s (a body must arrive within it)",
                REQUEST_TIMEOUT.as_secs()
            ),
        )
        .into_response(),
    }
}

async fn count(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let response = next.run(req).await;
    state
        .metrics
        .request(response.status().is_client_error() || response.status().is_server_error());
    response.into_response()
}
