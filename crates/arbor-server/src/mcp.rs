//! MCP over Streamable HTTP: `/mcp/{spec}` for each spec the launcher offers (and `/mcp`
//! for the default one: the only spec, or the one the builder names). A client stands in for
//! the spec's root agent ([`arbor_mcp`]): each MCP session (protocol 2025-11-25, with
//! `Mcp-Session-Id`) drives a root session of its own, opened on its first call and ended
//! when the session closes; clients that keep no session (2026-07-28) share one root per
//! tenant and spec, kept while the server runs. The bearer token is checked before the MCP
//! service sees the request (the same tenants as `/v1`; the same 401), and the roots are
//! the tenant's, so `/v1` and the web view show them too.
//!
//! An MCP session is its tenant's ([`SessionOwners`]): the tenant a session id was issued to
//! is noted when the `initialize` answer carries it, and another tenant's request naming
//! that id reaches the MCP service with an id no session has, so it gets exactly the answer
//! an unknown id gets (it could end another tenant's session and cancel its root).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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
    // The middleware resolves `/mcp` to this spec.
    let mut checked = state.clone();
    checked.mcp.default = default.clone().filter(|d| specs.contains(d));
    let mut router = Router::new();
    for spec in &specs {
        let service = service(&launcher, spec, &hosts, state);
        router = router.nest_service(&format!("/mcp/{spec}"), service);
    }
    if let Some(spec) = default.filter(|d| specs.contains(d)) {
        router = router.nest_service("/mcp", service(&launcher, &spec, &hosts, state));
    }
    router
        .layer(middleware::from_fn_with_state(checked, authenticate))
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
        owners: state.mcp.owners.clone(),
        state: state.clone(),
    };
    arbor_mcp::http_service(
        ArborMcp::new(roots),
        hosts.to_vec(),
        state.closing.child_token(),
    )
}

/// The header naming an MCP session.
const SESSION_HEADER: &str = "mcp-session-id";

/// An id no MCP session is ever given (rmcp issues UUIDs): what a request naming another
/// tenant's session carries on to the MCP service.
const NO_SESSION: &str = "not-a-session-of-this-tenant";

/// Which tenant each live MCP session was issued to.
#[derive(Debug, Default, Clone)]
pub(crate) struct SessionOwners(Arc<Mutex<HashMap<String, String>>>);

impl SessionOwners {
    /// The tenant `session` was issued to, if it is live.
    fn owner(&self, session: &str) -> Option<String> {
        let owners = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        owners.get(session).cloned()
    }

    fn issued(&self, session: String, tenant: String) {
        let mut owners = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        owners.insert(session, tenant);
    }

    fn closed(&self, session: &str) {
        let mut owners = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        owners.remove(session);
    }
}

/// Checks the bearer token; the tenant rides in the request's extensions, and a session id
/// issued to another tenant is swapped for one no session has.
async fn authenticate(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    let header = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let tenant = match state.tenants.tenant_of(header) {
        Ok(tenant) => tenant,
        Err(e) => return e.into_response(),
    };
    // A spec the tenant's policy does not let it start is not there for it (nor is the
    // default one, for a name that is no spec: `/mcp/{name}` would reach it).
    let specs = state
        .launcher
        .as_ref()
        .map(|l| l.specs())
        .unwrap_or_default();
    if let Some(spec) = spec_of(req.uri().path(), state.mcp.default.as_deref(), &specs)
        && !state.policies.may_start(&tenant, spec)
    {
        return crate::error::ApiError::not_found("route").into_response();
    }
    let owners = &state.mcp.owners;
    let named = req
        .headers()
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let owner = named.as_deref().and_then(|s| owners.owner(s));
    let closing = req.method() == axum::http::Method::DELETE;
    if closing && named.is_some() && owner.as_deref() != Some(tenant.as_str()) {
        // rmcp ends any id it is given (202 even for an unknown one): a session this
        // tenant does not hold is not found, as the MCP service answers on the other
        // methods.
        return (
            axum::http::StatusCode::NOT_FOUND,
            "Not Found: Session not found",
        )
            .into_response();
    }
    if owner.as_ref().is_some_and(|o| *o != tenant) {
        tracing::info!(%tenant, "an MCP request named another tenant's session: answered as an unknown one");
        req.headers_mut().insert(
            SESSION_HEADER,
            axum::http::HeaderValue::from_static(NO_SESSION),
        );
    }
    req.extensions_mut()
        .insert(arbor_mcp::Tenant(tenant.clone()));
    let mut response = next.run(req).await;
    if named.is_none()
        && let Some(issued) = response
            .headers()
            .get(SESSION_HEADER)
            .and_then(|v| v.to_str().ok())
    {
        owners.issued(issued.to_owned(), tenant);
    }
    // A session closed answers 204, as clients expect (rmcp says 202 Accepted).
    if closing && response.status() == axum::http::StatusCode::ACCEPTED {
        *response.status_mut() = axum::http::StatusCode::NO_CONTENT;
        if let Some(session) = &named {
            owners.closed(session);
        }
    }
    response
}

/// The spec an MCP path reaches: `/mcp/{spec}` for one of `specs`, else (`/mcp`, or a name
/// that is no spec) the default one.
fn spec_of<'a>(path: &'a str, default: Option<&'a str>, specs: &[String]) -> Option<&'a str> {
    let named = path
        .strip_prefix("/mcp/")
        .and_then(|rest| rest.split('/').next())
        .filter(|name| specs.iter().any(|s| s == name));
    named.or(default)
}

/// The roots of one spec's MCP clients: one per MCP session, one per tenant for clients
/// that keep none.
#[derive(Debug)]
struct McpRoots {
    launcher: Arc<dyn Launcher>,
    spec: String,
    roots: tokio::sync::Mutex<HashMap<(String, Option<String>), HostedRoot>>,
    owners: SessionOwners,
    /// The tenants' quotas, policies and feed: an MCP client's root counts as a run.
    state: AppState,
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
        let refused = |e: crate::error::ApiError| match e.kind() {
            crate::error::ErrorKind::NotFound => McpError::NotFound(e.error.message),
            crate::error::ErrorKind::Validation => McpError::Validation(e.error.message),
            _ => McpError::Unavailable(e.error.message),
        };
        // The root a client drives is one of the tenant's runs in flight, as its quota says.
        let policy = self.state.policies.of(&tenant);
        let place = self
            .state
            .quotas
            .admit(self.state.store.as_ref(), &tenant, &policy)
            .await
            .map_err(refused)?;
        let root = self
            .launcher
            .open_root(&tenant, &self.spec)
            .await
            .map_err(refused)?;
        place.landed(root.root().id);
        self.state.watcher.follow(root.root().id, None);
        tracing::info!(root = %root.root().id, spec = %self.spec, session = ?caller.session, "an MCP client drives a new root");
        roots.insert(key, root.clone());
        Ok(root)
    }

    async fn session_closed(&self, session: &str) {
        self.owners.closed(session);
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
