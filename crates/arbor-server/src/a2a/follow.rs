//! Following a task: its snapshot read from the store ([`read`]), read until it settles
//! ([`settled`], for a blocking `SendMessage`), and streamed ([`stream`]: each change of
//! state as a status update, the answer as an artifact before `COMPLETED`, the stream closed
//! once the task ends or asks, as the SDKs expect).
//!
//! The store is read every [`POLL`], as the tree stream of `/v1` reads it; a stream holds one
//! of the tenant's stream slots while it is open, and ends when the server shuts down (after
//! the grace the others keep).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use arbor_a2a::wire::{RpcResponse, StreamEvent, StreamResponse, TaskState};
use arbor_protocol::{SessionId, SessionStatus};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

use super::settles;
use super::task::Snapshot;
use crate::api::approvals::SuspensionView;
use crate::api::ending::Closing;
use crate::error::ApiResult;
use crate::state::AppState;

/// How often the store is read for changes.
const POLL: Duration = Duration::from_millis(100);

/// The task of root `root` now (`None`: it is gone).
pub(crate) async fn read(state: &AppState, root: SessionId) -> ApiResult<Option<Snapshot>> {
    let Some(record) = state.store.session(root).await? else {
        return Ok(None);
    };
    let waiting = if record.status == SessionStatus::Suspended {
        arbor_core::supervisor::waiting_at(state.store.as_ref(), root)
            .await?
            .iter()
            .map(SuspensionView::from)
            .collect()
    } else {
        Vec::new()
    };
    let live = state
        .launcher
        .as_ref()
        .is_some_and(|l| l.supervisor(root).is_some());
    Ok(Some(Snapshot {
        root: record,
        waiting,
        live,
    }))
}

/// The task once it ends or asks (or the server shuts down).
pub(crate) async fn settled(state: &AppState, root: SessionId) -> ApiResult<Option<Snapshot>> {
    let mut closing = Closing::new(state.closing.clone());
    loop {
        let snap = read(state, root).await?;
        match &snap {
            Some(s) if !settles(s.state()) && !closing.over() => closing.pause(POLL).await,
            _ => return Ok(snap),
        }
    }
}

struct Follower {
    state: AppState,
    root: SessionId,
    /// The JSON-RPC request its items answer (none over HTTP+JSON: bare items).
    envelope: Option<Value>,
    /// The first item is the whole task (a new task, a subscription), else a status update.
    whole_first: bool,
    last: Option<(TaskState, String)>,
    queue: VecDeque<StreamEvent>,
    closing: Closing,
    done: bool,
    _slot: crate::state::StreamSlot,
}

impl Follower {
    async fn next(mut self) -> Option<(Result<Event, Infallible>, Self)> {
        loop {
            if let Some(item) = self.queue.pop_front() {
                let item = serde_json::to_value(StreamResponse::of(item)).unwrap_or(Value::Null);
                let data = match &self.envelope {
                    Some(id) => serde_json::to_string(&RpcResponse::result(id.clone(), item)),
                    None => serde_json::to_string(&item),
                }
                .unwrap_or_default();
                return Some((Ok(Event::default().data(data)), self));
            }
            if self.done {
                return None;
            }
            let snap = match read(&self.state, self.root).await {
                Ok(Some(s)) => s,
                Ok(None) | Err(_) => return None,
            };
            self.observe(&snap);
            if self.queue.is_empty() {
                if self.closing.over() {
                    return None;
                }
                self.closing.pause(POLL).await;
            }
        }
    }

    /// Queues what changed since the last snapshot.
    fn observe(&mut self, snap: &Snapshot) {
        let state = snap.state();
        // What waits is part of the state: a new question while still waiting is news.
        let key = (
            state,
            snap.waiting
                .iter()
                .flat_map(|s| s.pending.iter().map(|p| p.id.as_str()))
                .collect::<Vec<_>>()
                .join(","),
        );
        let first = self.last.is_none();
        if self.last.as_ref() == Some(&key) {
            return;
        }
        self.last = Some(key);
        if first && self.whole_first {
            self.queue.push_back(StreamEvent::Task(snap.task()));
        } else {
            if state == TaskState::Completed
                && let Some(a) = snap.artifact_update()
            {
                self.queue.push_back(StreamEvent::Artifact(a));
            }
            self.queue
                .push_back(StreamEvent::Status(snap.status_update()));
        }
        if settles(state) {
            self.done = true;
        }
    }
}

/// The task of `root` as an SSE stream: JSON-RPC responses to request `envelope`, or bare
/// items (HTTP+JSON).
pub(crate) fn stream(
    state: AppState,
    slot: crate::state::StreamSlot,
    envelope: Option<Value>,
    root: SessionId,
    whole_first: bool,
) -> Response {
    let follower = Follower {
        closing: Closing::new(state.closing.clone()),
        state,
        root,
        envelope,
        whole_first,
        last: None,
        queue: VecDeque::new(),
        done: false,
        _slot: slot,
    };
    let events = futures::stream::unfold(follower, Follower::next);
    (
        [("x-accel-buffering", "no"), ("cache-control", "no-store")],
        Sse::new(events).keep_alive(KeepAlive::default()),
    )
        .into_response()
}
