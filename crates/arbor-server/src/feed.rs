//! The tenant's event feed: what `GET /v1/events` streams and replays.
//!
//! - **The log.** Each tenant's events are numbered from 1 and kept in the store, one
//!   checkpoint each (namespace `arbor.feed.<tenant>`, key the number zero-padded), created
//!   with compare and swap, so servers that share a store number one sequence between them
//!   and a reconnect with `Last-Event-ID` replays exactly what it missed. The newest
//!   [`FEED_KEEP`] are kept.
//! - **What is logged.** A [`Watcher`] follows the runs this server started, resumed or
//!   was asked to decide for (their roots): each change of a root's status is a `run` event;
//!   each call of the tree that comes to wait for a decision is `approval_pending`, and
//!   `approval_decided` once it waits no more. It reads each followed root by key and the
//!   suspended runs' checkpoints once per round ([`WATCH_EVERY`]), and stops following a
//!   root once its run has ended with nothing waiting.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arbor_protocol::{SessionId, SessionStatus, Timestamp};
use arbor_store::{Store, StoreErrorKind};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::tenant_of_root;
use crate::error::{ApiError, ApiResult};

/// The store namespace of a tenant's feed is this followed by the tenant.
pub const FEED_NAMESPACE: &str = "arbor.feed.";
/// Events kept per tenant (older ones are deleted as new ones come).
pub const FEED_KEEP: u64 = 1000;
/// How often the watcher looks at the runs it follows.
pub(crate) const WATCH_EVERY: Duration = Duration::from_millis(250);

/// One thing that happened to a tenant's runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum FeedEvent {
    /// A run's root changed status.
    Run {
        /// The run's root.
        root_id: String,
        /// Its status now (`running`, `suspended`, `succeeded`, …).
        status: String,
        /// The spec it was started from.
        spec: Option<String>,
        /// Its labels.
        labels: BTreeMap<String, String>,
    },
    /// A call of the run's tree waits for a decision.
    ApprovalPending {
        /// The run's root.
        root_id: String,
        /// Where it is decided: `POST /v1/sessions/{session_id}/approvals`.
        session_id: String,
        /// The suspended run there.
        run_id: String,
        /// What a decision there names.
        approval_id: String,
        /// The tool.
        tool: String,
    },
    /// A call waits for a decision no more (it was decided, or its run ended).
    ApprovalDecided {
        /// The run's root.
        root_id: String,
        /// The run that made the call.
        run_id: String,
        /// What the decision named.
        approval_id: String,
    },
}

/// A logged event: its number in the tenant's feed (the SSE id), when, and what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct FeedEntry {
    /// Its number in the tenant's feed, from 1.
    pub seq: u64,
    /// When it was logged (ms since the epoch).
    pub at: Timestamp,
    /// What happened.
    #[serde(flatten)]
    pub event: FeedEvent,
}

impl FeedEvent {
    /// Its type, as the SSE `event:` field names it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Run { .. } => "run",
            Self::ApprovalPending { .. } => "approval_pending",
            Self::ApprovalDecided { .. } => "approval_decided",
        }
    }
}

fn namespace(tenant: &str) -> String {
    format!("{FEED_NAMESPACE}{tenant}")
}

fn key(seq: u64) -> String {
    format!("{seq:020}")
}

/// The tenants' logs in the store.
#[derive(Debug)]
pub(crate) struct Feed {
    store: Arc<dyn Store>,
    /// The last number each tenant's feed used, as this server last saw it.
    last: Mutex<HashMap<String, u64>>,
}

impl Feed {
    pub(crate) fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            last: Mutex::default(),
        }
    }

    /// The tenant's events after `seq`, oldest first.
    pub(crate) async fn after(&self, tenant: &str, seq: u64) -> ApiResult<Vec<FeedEntry>> {
        let mut out = Vec::new();
        for c in self.store.list_checkpoints(&namespace(tenant)).await? {
            let Ok(n) = c.key.parse::<u64>() else {
                continue;
            };
            if n <= seq {
                continue;
            }
            if let Ok(entry) = serde_json::from_value::<FeedEntry>(c.value) {
                out.push(entry);
            }
        }
        out.sort_by_key(|e| e.seq);
        Ok(out)
    }

    /// The last number this server saw the tenant's feed use (0: none).
    pub(crate) fn known_last(&self, tenant: &str) -> u64 {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tenant)
            .copied()
            .unwrap_or(0)
    }

    /// The last number the tenant's feed used (0: none yet), read from the store.
    pub(crate) async fn last(&self, tenant: &str) -> ApiResult<u64> {
        let stored = self
            .store
            .list_checkpoints(&namespace(tenant))
            .await?
            .iter()
            .filter_map(|c| c.key.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        Ok(stored)
    }

    /// The last number the tenant's feed used (0: none yet).
    async fn last_seq(&self, tenant: &str) -> ApiResult<u64> {
        let known = self
            .last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(tenant)
            .copied();
        match known {
            Some(n) => Ok(n),
            None => self.last(tenant).await,
        }
    }

    /// Logs `event` for `tenant`: its number.
    pub(crate) async fn append(&self, tenant: &str, event: FeedEvent) -> ApiResult<u64> {
        let ns = namespace(tenant);
        let mut next = self.last_seq(tenant).await? + 1;
        for _ in 0..64 {
            let entry = FeedEntry {
                seq: next,
                at: Timestamp::now(),
                event: event.clone(),
            };
            let value = serde_json::to_value(&entry).map_err(|e| ApiError::internal(&e))?;
            match self.store.put_checkpoint(&ns, &key(next), &value, 0).await {
                Ok(_) => {
                    self.last
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(tenant.to_owned(), next);
                    if next % 100 == 0 && next > FEED_KEEP {
                        self.trim(tenant, next - FEED_KEEP).await;
                    }
                    return Ok(next);
                }
                // Another server took the number: go on after it.
                Err(e) if e.kind() == StoreErrorKind::Conflict => next += 1,
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::new(
            crate::error::ErrorKind::Conflict,
            "The tenant's feed changed too often to append to: try again",
        ))
    }

    /// Deletes the tenant's events up to `upto`.
    async fn trim(&self, tenant: &str, upto: u64) {
        let ns = namespace(tenant);
        let Ok(all) = self.store.list_checkpoints(&ns).await else {
            return;
        };
        for c in all {
            if c.key.parse::<u64>().is_ok_and(|n| n <= upto)
                && let Err(e) = self.store.delete_checkpoint(&ns, &c.key, c.version).await
            {
                tracing::debug!(%tenant, "feed: an old event was not deleted: {e}");
            }
        }
    }
}

/// What the watcher knows of one followed root.
#[derive(Debug, Default)]
struct Followed {
    status: Option<SessionStatus>,
    /// The calls of its tree that wait, by `session/call id`.
    pending: HashMap<String, Call>,
}

/// Follows roots and logs what changes (see the module's doc).
#[derive(Debug)]
pub(crate) struct Watcher {
    feed: Arc<Feed>,
    followed: Mutex<HashMap<SessionId, Followed>>,
}

impl Watcher {
    pub(crate) fn new(feed: Arc<Feed>) -> Self {
        Self {
            feed,
            followed: Mutex::default(),
        }
    }

    /// Follows `root` from now on, its status known to be `seen` (a change from it is
    /// logged; none: its status now is logged too).
    pub(crate) fn follow(&self, root: SessionId, seen: Option<SessionStatus>) {
        let mut followed = self.followed.lock().unwrap_or_else(PoisonError::into_inner);
        followed.entry(root).or_insert_with(|| Followed {
            status: seen,
            pending: HashMap::new(),
        });
    }

    /// Looks at every followed root until `closing`, then once more (the runs a shutdown
    /// cancels end `aborted` in the feed too).
    pub(crate) async fn run(self: Arc<Self>, closing: tokio_util::sync::CancellationToken) {
        loop {
            let stopping = closing.is_cancelled();
            if let Err(e) = self.round().await {
                tracing::warn!("feed: a round failed: {e:?}");
            }
            if stopping {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(WATCH_EVERY) => {}
                () = closing.cancelled() => {
                    // Let the cancelled runs write their end first.
                    tokio::time::sleep(WATCH_EVERY * 4).await;
                }
            }
        }
    }

    /// One look at every followed root.
    pub(crate) async fn round(&self) -> ApiResult<()> {
        let roots: Vec<SessionId> = self
            .followed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .copied()
            .collect();
        if roots.is_empty() {
            return Ok(());
        }
        let store = &self.feed.store;
        let waiting = pending_by_root(store.as_ref(), &roots).await?;
        for root in roots {
            let Some(record) = store.session(root).await? else {
                self.unfollow(root);
                continue;
            };
            let tenant = tenant_of_root(&record).to_owned();
            let (changed, arrived, left) = {
                let mut followed = self.followed.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(f) = followed.get_mut(&root) else {
                    continue;
                };
                let changed = (f.status != Some(record.status)).then_some(record.status);
                f.status = Some(record.status);
                let now = waiting.get(&root).cloned().unwrap_or_default();
                let arrived: Vec<Call> = now
                    .iter()
                    .filter(|(k, _)| !f.pending.contains_key(*k))
                    .map(|(_, c)| c.clone())
                    .collect();
                let left: Vec<Call> = f
                    .pending
                    .iter()
                    .filter(|(k, _)| !now.contains_key(*k))
                    .map(|(_, c)| c.clone())
                    .collect();
                f.pending = now;
                (changed, arrived, left)
            };
            if let Some(status) = changed {
                let labels =
                    serde_json::from_value(record.meta["labels"].clone()).unwrap_or_default();
                let event = FeedEvent::Run {
                    root_id: root.to_string(),
                    status: status.as_str().to_owned(),
                    spec: record.meta["spec"].as_str().map(str::to_owned),
                    labels,
                };
                self.feed.append(&tenant, event).await?;
            }
            for c in arrived {
                let event = FeedEvent::ApprovalPending {
                    root_id: root.to_string(),
                    session_id: c.session_id,
                    run_id: c.run_id,
                    approval_id: c.approval_id,
                    tool: c.tool,
                };
                self.feed.append(&tenant, event).await?;
            }
            for c in left {
                let event = FeedEvent::ApprovalDecided {
                    root_id: root.to_string(),
                    run_id: c.run_id,
                    approval_id: c.approval_id,
                };
                self.feed.append(&tenant, event).await?;
            }
            let ended = crate::api::ending::ended(record.status) && !waiting.contains_key(&root);
            if ended {
                self.unfollow(root);
            }
        }
        Ok(())
    }

    fn unfollow(&self, root: SessionId) {
        self.followed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&root);
    }
}

/// The calls waiting for a decision in the trees of `roots`, by root and by the session and
/// call id that made them (a caller's suspension carries its children's calls too: each
/// call once, named as the run that made it names it). One read of the suspended runs'
/// checkpoints finds the roots with something waiting; only those are asked what waits, as
/// a decision sees it (a call decided through any of its ids waits no more).
async fn pending_by_root(store: &dyn Store, roots: &[SessionId]) -> ApiResult<Pending> {
    let wanted: HashSet<SessionId> = roots.iter().copied().collect();
    let waiting: HashSet<SessionId> = crate::suspended::suspended_runs(store)
        .await?
        .into_iter()
        .filter_map(|s| s.root.map(|(root, _)| root))
        .filter(|r| wanted.contains(r))
        .collect();
    let mut out: Pending = HashMap::new();
    for root in waiting {
        let calls = out.entry(root).or_default();
        for s in arbor_core::supervisor::waiting_at(store, root).await? {
            for p in &s.pending {
                let maker = p.session_id.unwrap_or(s.session_id);
                let own = maker == s.session_id;
                let key = format!("{maker}/{}", p.call_id);
                // The run that made the call names it best; a caller's copy only if none.
                if own || !calls.contains_key(&key) {
                    calls.insert(
                        key,
                        Call {
                            approval_id: p.id.clone(),
                            session_id: s.session_id.to_string(),
                            run_id: s.run_id.to_string(),
                            tool: p.tool.clone(),
                        },
                    );
                }
            }
        }
    }
    Ok(out)
}

/// A call waiting for a decision, as the feed names it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Call {
    approval_id: String,
    session_id: String,
    run_id: String,
    tool: String,
}

/// By root, by `session/call id`.
type Pending = HashMap<SessionId, HashMap<String, Call>>;
