//! MCP over Streamable HTTP: `/mcp/{spec}` for each spec the launcher offers (and `/mcp`
//! for the default one: the only spec, or the one the builder names). A client stands in for
//! the spec's root agent ([`arbor_mcp`]): each MCP session (protocol 2025-11-25, with
//! `Mcp-Session-Id`) drives a root session of its own, opened on its first call and ended
//! when the session closes; clients that keep no session (2026-07-28) share one root per
//! tenant and spec, kept while the server runs. The bearer token is checked before the MCP
//! service sees the request (the same tenants as `/v1`; the same 401), and the roots are
//! the tenant's, so `/v1` and the web view show them too.

use std::collections::HashMap;
use std::sync::Arc;

use arbor_mcp::{ArborMcp, Caller, HostedRoot, McpError, McpResult, RootSource};
use async_trait::async_trait;
use axum::Router;
use axum::extract::{Request, State};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};

use crate::launcher::Launcher;
use crate::state::AppState;

/// The `Host` names MCP always answers to.
const LOOPBACK: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// The MCP routes of the launcher's specs, behind the tenant check.
pub(crate) fn router(state: &AppState) -> Router {
    let Some(launcher) = state.launcher.clone() else {
        return Router::new();
    };
    let specs = launcher.specs();
    let mut hosts: Vec<String> = LOOPBACK.iter().map(|h| (*h).to_owned()).collect();
    hosts.extend(state.mcp.hosts.iter().cloned());
    let default = state
        .mcp
        .default
        .clone()
        .or_else(|| (specs.len() == 1).then(|| specs[0].clone()));
    let mut router = Router::new();
    for spec in &specs {
        let service = service(&launcher, spec, &hosts, state);
        router = router.nest_service(&format!("/mcp/{spec}"), service);
    }
    if let Some(spec) = default.filter(|d| specs.contains(d)) {
        router = router.nest_service("/mcp", service(&launcher, &spec, &hosts, state));
    }
    router
        .layer(middleware::from_fn_with_state(state.clone(), authenticate))
        .layer(tower_http::trace::TraceLayer::new_for_http())
}

fn service(
    launcher: &Arc<dyn Launcher>,
    spec: &str,
    hosts: &[String],
    state: &AppState,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    ArborMcp,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    let roots = McpRoots {
        launcher: launcher.clone(),
        spec: spec.to_owned(),
        roots: tokio::sync::Mutex::default(),
    };
    arbor_mcp::http_service(
        ArborMcp::new(roots),
        hosts.to_vec(),
        state.closing.child_token(),
    )
}

/// Checks the bearer token; the tenant rides in the request's extensions.
async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let header = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match state.tenants.tenant_of(header) {
        Ok(tenant) => {
            req.extensions_mut().insert(arbor_mcp::Tenant(tenant));
            let closing = req.method() == axum::http::Method::DELETE;
            let mut response = next.run(req).await;
            // A session closed answers 204, as clients expect (rmcp says 202 Accepted).
            if closing && response.status() == axum::http::StatusCode::ACCEPTED {
                *response.status_mut() = axum::http::StatusCode::NO_CONTENT;
            }
            response
        }
        Err(e) => e.into_response(),
    }
}

/// The roots of one spec's MCP clients: one per MCP session, one per tenant for clients
/// that keep none.
#[derive(Debug)]
struct McpRoots {
    launcher: Arc<dyn Launcher>,
    spec: String,
    roots: tokio::sync::Mutex<HashMap<(String, Option<String>), HostedRoot>>,
}

#[async_trait]
impl RootSource for McpRoots {
    async fn root(&self, caller: &Caller) -> McpResult<HostedRoot> {
        let Some(tenant) = caller.tenant.clone() else {
            return Err(McpError::NotFound("Unknown caller".to_owned()));
        };
        let key = (tenant.clone(), caller.session.clone());
        // Held while a root opens: two first calls of one session open one root.
        let mut roots = self.roots.lock().await;
        if let Some(root) = roots.get(&key) {
            if !root.token().is_cancelled() {
                return Ok(root.clone());
            }
            roots.remove(&key);
        }
        let root = self
            .launcher
            .open_root(&tenant, &self.spec)
            .await
            .map_err(|e| match e.kind() {
                crate::error::ErrorKind::NotFound => McpError::NotFound(e.error.message),
                crate::error::ErrorKind::Validation => McpError::Validation(e.error.message),
                _ => McpError::Unavailable(e.error.message),
            })?;
        tracing::info!(root = %root.root().id, spec = %self.spec, session = ?caller.session, "an MCP client drives a new root");
        roots.insert(key, root.clone());
        Ok(root)
    }

    async fn session_closed(&self, session: &str) {
        let mut roots = self.roots.lock().await;
        roots.retain(|(_, s), root| {
            if s.as_deref() == Some(session) {
                root.token().cancel();
                false
            } else {
                true
            }
        });
    }
}
