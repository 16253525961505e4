//! What every handler shares ([`AppState`]), and the tenant wall: a session is visible to a
//! tenant only if its tree's root was started for that tenant (`meta.tenant`; trees without
//! one are [`LOCAL_TENANT`]'s).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arbor_protocol::SessionId;
use arbor_store::{SessionRecord, Store};
use axum::extract::FromRef;

use crate::auth::{LOCAL_TENANT, Tenant, Tenants};
use crate::error::{ApiError, ApiResult};
use crate::launcher::Launcher;
use crate::metrics::Metrics;

/// The server's shared state.
#[derive(Debug, Clone)]
pub struct AppState {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) launcher: Option<Arc<dyn Launcher>>,
    pub(crate) tenants: Tenants,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) draining: Arc<AtomicBool>,
    /// Cancelled when the server shuts down: event streams end, so their connections close
    /// and the shutdown does not wait on them.
    pub(crate) closing: tokio_util::sync::CancellationToken,
    /// Where MCP is mounted and which hosts it answers to.
    pub(crate) mcp: McpConfig,
}

/// Where MCP is mounted, and which hosts it answers to (see `mcp.rs`).
#[derive(Debug, Clone, Default)]
pub(crate) struct McpConfig {
    /// `Host` names accepted besides the loopback ones (DNS-rebinding protection).
    pub(crate) hosts: Vec<String>,
    /// The spec `/mcp` serves (default: the only one).
    pub(crate) default: Option<String>,
    /// The tenant each live MCP session was issued to.
    pub(crate) owners: crate::mcp::SessionOwners,
}

impl FromRef<AppState> for Tenants {
    fn from_ref(state: &AppState) -> Self {
        state.tenants.clone()
    }
}

/// The tenant a root record was started for.
pub(crate) fn tenant_of_root(root: &SessionRecord) -> &str {
    root.meta["tenant"].as_str().unwrap_or(LOCAL_TENANT)
}

impl AppState {
    /// Whether the server is shutting down (it admits no new run).
    pub(crate) fn draining(&self) -> bool {
        self.draining.load(Ordering::Acquire)
    }

    /// The session `id` if `tenant` may see it; an unknown id and a foreign one get the same
    /// `not_found`.
    pub(crate) async fn visible(&self, tenant: &Tenant, id: &str) -> ApiResult<SessionRecord> {
        let not_found = || ApiError::not_found("session");
        let id: SessionId = id.parse().map_err(|_| not_found())?;
        let record = self.store.session(id).await?.ok_or_else(not_found)?;
        let owner = if record.root_id == record.id {
            tenant_of_root(&record).to_owned()
        } else {
            let root = self
                .store
                .session(record.root_id)
                .await?
                .ok_or_else(not_found)?;
            tenant_of_root(&root).to_owned()
        };
        if owner != tenant.0 {
            return Err(not_found());
        }
        Ok(record)
    }
}
