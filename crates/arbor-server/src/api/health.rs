//! Liveness (`/healthz`), readiness (`/readyz`: the store answers one keyed read and the
//! server is not draining; neither says anything about tenants) and `/metrics` (see
//! [`crate::metrics`] for who sees what).

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;

use crate::error::{ApiError, ErrorKind};
use crate::metrics::Scope;
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
    // One read by key, whatever the store holds (a fresh id: no session has it).
    state
        .store
        .session(arbor_protocol::SessionId::new())
        .await
        .map_err(|e| {
            tracing::warn!("readiness: the store failed: {e}");
            ApiError::new(ErrorKind::Unavailable, "The store does not answer")
        })?;
    Ok("ready")
}

/// Prometheus text: with tokens configured, a tenant's token sees its own series, an
/// operator's every tenant's and the process's own; an open server shows everything.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses(
        (status = 200, description = "Prometheus exposition text", body = String),
        (status = 401, description = "Tokens are configured and none was given", body = ApiError)))]
pub(crate) async fn metrics(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<impl IntoResponse, ApiError> {
    let scope = if state.tenants.is_open() {
        Scope::All
    } else {
        let header = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let tenant = state.tenants.tenant_of(header)?;
        if state.tenants.is_operator(&tenant) {
            Scope::All
        } else {
            Scope::Tenant(tenant)
        }
    };
    exposition(&state, &scope).await
}

/// Every series, unauthenticated: what the separate metrics address serves
/// ([`Server::metrics_router`](crate::Server::metrics_router)).
pub(crate) async fn all_metrics(
    State(state): State<AppState>,
) -> Result<impl IntoResponse, ApiError> {
    exposition(&state, &Scope::All).await
}

async fn exposition(state: &AppState, scope: &Scope) -> Result<axum::response::Response, ApiError> {
    let text = state.metrics.render(state.store.as_ref(), scope).await?;
    Ok((
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response())
}
