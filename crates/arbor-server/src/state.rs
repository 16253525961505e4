//! What every handler shares ([`AppState`]), and the tenant wall: a session is visible to a
//! tenant only if its tree's root was started for that tenant (`meta.tenant`; trees without
//! one are [`LOCAL_TENANT`]'s).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use arbor_protocol::SessionId;
use arbor_store::{SessionRecord, Store};
use axum::extract::FromRef;

use crate::auth::{Tenant, Tenants, tenant_of_root};
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::launcher::Launcher;
use crate::listen::ServerLimits;
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
    /// The event streams open now.
    pub(crate) streams: Arc<StreamSlots>,
    /// What the server holds at most.
    pub(crate) limits: ServerLimits,
    /// What each tenant may do.
    pub(crate) policies: Arc<crate::policy::TenantPolicies>,
    /// What each tenant's runs use now.
    pub(crate) quotas: Arc<crate::policy::Quotas>,
    /// The tenants' event feeds.
    pub(crate) feed: Arc<crate::feed::Feed>,
    /// Follows the runs this server started, resumed or decided for, into the feed.
    pub(crate) watcher: Arc<crate::feed::Watcher>,
    /// Where tenants' events are posted, and the client that posts them.
    pub(crate) webhooks: Arc<(Vec<crate::webhook::WebhookTarget>, Option<reqwest::Client>)>,
}

/// The event streams open now, in all and by tenant, held to the limits.
#[derive(Debug)]
pub(crate) struct StreamSlots {
    max: usize,
    per_tenant: usize,
    open: Mutex<(usize, HashMap<String, usize>)>,
}

/// One open stream's slot, given back when the stream ends (dropped), exactly once.
#[derive(Debug)]
pub(crate) struct StreamSlot {
    slots: Arc<StreamSlots>,
    tenant: String,
}

impl StreamSlots {
    pub(crate) fn new(limits: &ServerLimits) -> Self {
        Self {
            max: limits.max_streams,
            per_tenant: limits.max_streams_per_tenant,
            open: Mutex::default(),
        }
    }

    /// A slot for one more stream of `tenant`: 429 naming `max_streams_per_tenant` when the
    /// tenant holds its most, 503 naming `max_streams` when the server does.
    pub(crate) fn open(self: &Arc<Self>, tenant: &str) -> ApiResult<StreamSlot> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let mine = open.1.get(tenant).copied().unwrap_or(0);
        if mine >= self.per_tenant {
            return Err(ApiError::limited(
                ErrorKind::Limit,
                format!(
                    "This tenant holds its most event streams open at once ({}): close one",
                    self.per_tenant
                ),
                "max_streams_per_tenant",
                self.per_tenant,
            ));
        }
        if open.0 >= self.max {
            return Err(ApiError::limited(
                ErrorKind::Unavailable,
                format!(
                    "The server holds its most event streams open at once ({}): try again shortly",
                    self.max
                ),
                "max_streams",
                self.max,
            ));
        }
        open.0 += 1;
        *open.1.entry(tenant.to_owned()).or_default() += 1;
        Ok(StreamSlot {
            slots: self.clone(),
            tenant: tenant.to_owned(),
        })
    }

    /// Streams open now: in all, and `tenant`'s.
    #[cfg(test)]
    pub(crate) fn count(&self, tenant: &str) -> (usize, usize) {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        (open.0, open.1.get(tenant).copied().unwrap_or(0))
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self
            .slots
            .open
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        open.0 = open.0.saturating_sub(1);
        if let Some(n) = open.1.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.1.remove(&self.tenant);
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Many threads opening and dropping streams at once never pass either limit, and every
    /// slot is given back exactly once.
    #[test]
    fn stream_slots_never_overshoot_and_come_back_once() {
        let limits = ServerLimits::default()
            .max_streams(6)
            .max_streams_per_tenant(4);
        let slots = Arc::new(StreamSlots::new(&limits));
        let barrier = Arc::new(std::sync::Barrier::new(8));
        let workers: Vec<_> = (0..8)
            .map(|i| {
                let (slots, barrier) = (slots.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let tenant = if i % 2 == 0 { "a" } else { "b" };
                    barrier.wait();
                    let (mut held, mut refused) = (Vec::new(), 0);
                    for n in 0..2000 {
                        match slots.open(tenant) {
                            Ok(slot) => held.push(slot),
                            Err(e) => {
                                refused += 1;
                                let name = e.error.limit.as_ref().map(|l| l.name.clone());
                                assert!(
                                    matches!(
                                        name.as_deref(),
                                        Some("max_streams" | "max_streams_per_tenant")
                                    ),
                                    "{name:?}"
                                );
                            }
                        }
                        let (all, mine) = slots.count(tenant);
                        assert!(all <= 6 && mine <= 4, "{all} open, {mine} of {tenant}");
                        // Six tries between releases: one thread alone passes its
                        // tenant's four, so refusals come whatever the scheduling.
                        if n % 6 == 5 {
                            held.clear();
                        }
                    }
                    refused
                })
            })
            .collect();
        let refused: usize = workers.into_iter().map(|w| w.join().unwrap()).sum();
        assert!(refused > 0, "the limits were never met");
        assert_eq!(slots.count("a"), (0, 0));
        assert_eq!(slots.count("b"), (0, 0));
        // Past the tenant's limit: 429 naming it; past the server's: 503 naming it.
        let a: Vec<_> = (0..4).map(|_| slots.open("a").unwrap()).collect();
        let e = slots.open("a").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Limit);
        let b: Vec<_> = (0..2).map(|_| slots.open("b").unwrap()).collect();
        let e = slots.open("c").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unavailable);
        assert_eq!(e.error.limit.unwrap().name, "max_streams");
        drop((a, b));
        assert_eq!(slots.count("a"), (0, 0));
    }
}
