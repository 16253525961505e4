//! The live tree of a run, for people and thin clients: `GET /v1/runs/{id}/events`, an SSE
//! stream of whole-tree snapshots
//! (`event: tree`): every session with its state, headline (its task), both token totals,
//! model and times, and every call waiting for a decision. A snapshot is sent at once, then
//! whenever anything in the tree changes. Its `id` is the tree's fingerprint (the sessions'
//! and the waiting checkpoints' versions): a reconnect with `Last-Event-ID` gets a snapshot
//! at once if anything changed meanwhile, so a client that reconnects never misses a state.
//! Once the tree has ended (no session runs, the root's run ended, nothing waits for a
//! decision) the stream sends `event: end` after the last snapshot and closes (see
//! [`super::ending`]).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::SessionId;
use arbor_store::{SessionQuery, Store};
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use serde::Serialize;
use utoipa::ToSchema;

use super::ending::{Closing, Why, end_event, ended};
use super::headline::task_of;
use crate::api::approvals::SuspensionView;
use crate::auth::Tenant;
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::views::SessionView;

/// How often the store is read for changes.
const POLL: Duration = Duration::from_millis(200);

/// One node of a tree snapshot.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct NodeView {
    /// The session.
    #[serde(flatten)]
    pub session: SessionView,
    /// Its task, in one line.
    pub headline: String,
    /// The tools it runs now (the calls its model asked for that have no result yet; empty
    /// when it runs none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub running_tools: Vec<String>,
}

/// A whole tree at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct TreeSnapshot {
    /// The root.
    pub root_id: String,
    /// What changes whenever anything in the tree changes (the event's id).
    pub fingerprint: String,
    /// Every session, in tree order (parents first).
    pub nodes: Vec<NodeView>,
    /// What waits for a decision at the root: its run and the runs below nobody awaits.
    pub approvals: Vec<SuspensionView>,
    /// The tree's budget pools, root first (empty without pools).
    pub pools: Vec<arbor_core::budget::PoolView>,
}

struct Watcher {
    store: Arc<dyn Store>,
    root: SessionId,
    last: Option<String>,
    headlines: HashMap<SessionId, String>,
    /// What each live session runs now.
    tools: super::tree_tools::RunningTools,
    closing: Closing,
    /// Held while the stream is open.
    _slot: crate::state::StreamSlot,
    /// The root's status in the last snapshot read.
    status: Option<arbor_protocol::SessionStatus>,
    done: bool,
}

/// Whether nothing more happens in the tree until something starts it again: no session
/// runs, the root's run ended and no call waits for a decision.
fn tree_ended(snap: &TreeSnapshot, root: SessionId) -> bool {
    snap.approvals.is_empty()
        && snap.nodes.iter().all(|n| !n.session.status.is_live())
        && snap
            .nodes
            .iter()
            .find(|n| n.session.id == root)
            .is_some_and(|root| ended(root.session.status))
}

impl Watcher {
    async fn snapshot(&mut self) -> Result<TreeSnapshot, ApiError> {
        let sessions = self
            .store
            .list_sessions(SessionQuery::Tree(self.root))
            .await?;
        let waiting = arbor_core::supervisor::waiting_at(self.store.as_ref(), self.root).await?;
        let versions: u64 = sessions.iter().map(|s| s.version).sum();
        let decided: u64 = waiting.iter().map(|w| w.version).sum();
        let pending: usize = waiting.iter().map(|w| w.pending.len()).sum();
        let changed = format!("{}.{versions}.{decided}.{pending}", sessions.len());
        // The running sessions' calls in flight, read on from where the last poll stopped.
        self.tools.refresh(self.store.as_ref(), &sessions).await;
        let fingerprint = format!("{changed}.{:x}", self.tools.mark());
        let mut nodes = Vec::with_capacity(sessions.len());
        for s in &sessions {
            let headline = match self.headlines.get(&s.id) {
                Some(h) if !h.is_empty() => h.clone(),
                _ => {
                    let h = task_of(self.store.as_ref(), s.id).await;
                    self.headlines.insert(s.id, h.clone());
                    h
                }
            };
            nodes.push(NodeView {
                session: SessionView::of(s),
                headline,
                running_tools: self.tools.of(s.id),
            });
        }
        let mut approvals = Vec::with_capacity(waiting.len());
        for w in &waiting {
            approvals.push(
                SuspensionView::from(w)
                    .reviewed(w, self.store.as_ref())
                    .await,
            );
        }
        Ok(TreeSnapshot {
            root_id: self.root.to_string(),
            fingerprint,
            nodes,
            approvals,
            pools: arbor_core::budget::pools(self.store.as_ref(), self.root)
                .await
                .map_err(|e| ApiError::internal(&e.to_string()))?,
        })
    }

    async fn next(mut self) -> Option<(Result<Event, Infallible>, Self)> {
        loop {
            if self.done {
                return None;
            }
            if self.closing.over() {
                self.done = true;
                return Some((Ok(end_event(self.status, Why::Shutdown)), self));
            }
            match self.snapshot().await {
                Ok(snap) => {
                    self.status = snap
                        .nodes
                        .iter()
                        .find(|n| n.session.id == self.root)
                        .map(|n| n.session.status);
                    if self.last.as_deref() != Some(snap.fingerprint.as_str()) {
                        self.last = Some(snap.fingerprint.clone());
                        let event = Event::default()
                            .id(snap.fingerprint.clone())
                            .event("tree")
                            .data(serde_json::to_string(&snap).unwrap_or_default());
                        return Some((Ok(event), self));
                    }
                    // The client has this state (it was sent, or named by Last-Event-ID).
                    if tree_ended(&snap, self.root) {
                        self.done = true;
                        return Some((Ok(end_event(self.status, Why::Finished)), self));
                    }
                    self.closing.pause(POLL).await;
                }
                Err(e) => {
                    tracing::warn!(root = %self.root, "tree stream: {e}");
                    return None;
                }
            }
        }
    }
}

/// Whole-tree snapshots of a run, at once and on every change.
#[utoipa::path(get, path = "/v1/runs/{id}/events", operation_id = "run_events", tag = "runs",
    params(("id" = String, Path, description = "The root session"),
        ("Last-Event-ID" = Option<String>, Header, description = "The fingerprint last seen")),
    responses(
        (status = 200, description = "`text/event-stream` of `tree` events, each a TreeSnapshot", content_type = "text/event-stream", body = TreeSnapshot),
        (status = 401, body = ApiError),
        (status = 404, description = "Unknown, foreign or not a root", body = ApiError),
        (status = 429, description = "The tenant holds its most streams open (max_streams_per_tenant)", body = ApiError),
        (status = 503, description = "The server holds its most streams open (max_streams)", body = ApiError)))]
pub(crate) async fn stream(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> ApiResult<(
    [(&'static str, &'static str); 1],
    Sse<impl Stream<Item = Result<Event, Infallible>>>,
)> {
    let root = state.visible(&tenant, &id).await?;
    if root.parent_id.is_some() {
        return Err(ApiError::not_found("run"));
    }
    let slot = state.streams.open(&tenant.0)?;
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let watcher = Watcher {
        store: state.store.clone(),
        root: root.id,
        last,
        headlines: HashMap::new(),
        tools: super::tree_tools::RunningTools::default(),
        closing: Closing::new(state.closing.clone()),
        _slot: slot,
        status: None,
        done: false,
    };
    let events = futures::stream::unfold(watcher, Watcher::next);
    Ok((
        // A reverse proxy passes each event on at once (nginx buffers by default).
        [("x-accel-buffering", "no")],
        Sse::new(events).keep_alive(KeepAlive::default()),
    ))
}
