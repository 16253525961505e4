//! Liveness (`/healthz`), readiness (`/readyz`: the store answers and the server is not
//! draining) and `/metrics`.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;

use crate::error::{ApiError, ErrorKind};
use crate::state::AppState;

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, description = "The process is up", body = String)))]
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

/// The server takes requests: its store answers and it is not shutting down.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses(
        (status = 200, description = "Ready", body = String),
        (status = 503, description = "Draining or the store is down", body = ApiError)))]
pub(crate) async fn readyz(State(state): State<AppState>) -> Result<&'static str, ApiError> {
    if state.draining() {
        return Err(ApiError::new(
            ErrorKind::Unavailable,
            "The server is shutting down",
        ));
    }
    state
        .store
        .list_sessions(arbor_store::SessionQuery::Roots)
        .await
        .map_err(|e| {
            tracing::warn!("readiness: the store failed: {e}");
            ApiError::new(ErrorKind::Unavailable, "The store does not answer")
        })?;
    Ok("ready")
}

/// Prometheus text.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Prometheus exposition text", body = String)))]
pub(crate) async fn metrics(State(state): State<AppState>) -> Result<impl IntoResponse, ApiError> {
    let text = state.metrics.render(state.store.as_ref()).await?;
    Ok((
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    ))
}
