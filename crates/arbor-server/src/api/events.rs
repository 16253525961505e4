//! A session's events over SSE (`GET /v1/sessions/{id}/events`): every transcript entry, in
//! order, as `event: <its type>`, `id: <its sequence number>`, `data: <the entry as JSON>`;
//! and `event: status` (no id) whenever the session's status changes. The store is the
//! source, so a reconnect with `Last-Event-ID` (or `?since=`) replays exactly what was
//! missed: no event is lost or sent twice, whichever process wrote it, and a slow client
//! only falls behind, never past a gap. Once the session's run has ended and its last
//! entries are out, the stream sends `event: end` and closes (see [`super::ending`]); a
//! client following the session's next run reconnects with `Last-Event-ID`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::{SessionId, SessionStatus, TranscriptEntry};
use arbor_store::Store;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use serde::Deserialize;
use utoipa::IntoParams;

use super::ending::{Closing, Why, end_event, ended};
use crate::auth::Tenant;
use crate::error::{ApiError, ApiResult};
use crate::extract::Params;
use crate::state::AppState;

/// How often the store is read for new entries.
const POLL: Duration = Duration::from_millis(100);
/// Entries read from the store at once.
const BATCH: usize = 200;

/// Where a stream starts.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct SinceQuery {
    /// Replay the entries after this sequence number (default 0: all of them). A
    /// `Last-Event-ID` header wins over it.
    since: Option<u64>,
}

struct Cursor {
    store: Arc<dyn Store>,
    session: SessionId,
    after: u64,
    status: Option<SessionStatus>,
    queued: VecDeque<Event>,
    closing: Closing,
    /// Held while the stream is open.
    _slot: crate::state::StreamSlot,
    /// The last read found the run ended: one more read of the transcript, and if it
    /// finds nothing new the stream ends.
    ending: bool,
    done: bool,
}

fn entry_event(entry: &TranscriptEntry) -> Event {
    let data = serde_json::to_string(entry).unwrap_or_default();
    let kind = serde_json::to_value(entry)
        .ok()
        .and_then(|v| v["kind"].as_str().map(str::to_owned))
        .unwrap_or_else(|| "entry".to_owned());
    Event::default()
        .id(entry.seq.to_string())
        .event(kind)
        .data(data)
}

impl Cursor {
    /// The next event: queued first, else what the store has since, else waits a poll.
    async fn next(mut self) -> Option<(Result<Event, Infallible>, Self)> {
        loop {
            if let Some(event) = self.queued.pop_front() {
                return Some((Ok(event), self));
            }
            if self.done {
                return None;
            }
            let fresh = match self
                .store
                .transcript(self.session, self.after, Some(BATCH))
                .await
            {
                Ok(entries) => {
                    for e in &entries {
                        self.after = e.seq;
                        self.queued.push_back(entry_event(e));
                    }
                    !entries.is_empty()
                }
                Err(e) => {
                    tracing::warn!(session = %self.session, "event stream: the store failed: {e}");
                    return None;
                }
            };
            if let Ok(Some(record)) = self.store.session(self.session).await {
                if self.status != Some(record.status) {
                    self.status = Some(record.status);
                    self.queued.push_back(
                        Event::default().event("status").data(
                            serde_json::json!({"status": record.status.as_str()}).to_string(),
                        ),
                    );
                }
                if !ended(record.status) {
                    self.ending = false;
                } else if self.ending && !fresh {
                    self.queued
                        .push_back(end_event(Some(record.status), Why::Finished));
                    self.done = true;
                    continue;
                } else {
                    // Entries written before the status changed may have landed after
                    // this read of the transcript: read it once more before ending.
                    self.ending = true;
                    continue;
                }
            }
            if self.closing.over() {
                self.queued.push_back(end_event(self.status, Why::Shutdown));
                self.done = true;
                continue;
            }
            if self.queued.is_empty() {
                self.closing.pause(POLL).await;
            }
        }
    }
}

/// A session's transcript entries and status changes, live, resumable.
#[utoipa::path(get, path = "/v1/sessions/{id}/events", operation_id = "session_events", tag = "sessions",
    params(("id" = String, Path, description = "The session"), SinceQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this entry")),
    responses(
        (status = 200, description = "`text/event-stream`: `id` = the entry's sequence number", content_type = "text/event-stream", body = String),
        (status = 400, body = ApiError), (status = 401, body = ApiError),
        (status = 404, description = "Unknown or foreign", body = ApiError),
        (status = 429, description = "The tenant holds its most streams open (max_streams_per_tenant)", body = ApiError),
        (status = 503, description = "The server holds its most streams open (max_streams)", body = ApiError)))]
pub(crate) async fn stream(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
    Params(q): Params<SinceQuery>,
) -> ApiResult<(
    [(&'static str, &'static str); 1],
    Sse<impl Stream<Item = Result<Event, Infallible>>>,
)> {
    let record = state.visible(&tenant, &id).await?;
    let slot = state.streams.open(&tenant.0)?;
    let after = super::ending::last_event_id(&headers)?.unwrap_or(q.since.unwrap_or(0));
    let cursor = Cursor {
        store: state.store.clone(),
        session: record.id,
        after,
        status: None,
        queued: VecDeque::new(),
        closing: Closing::new(state.closing.clone()),
        _slot: slot,
        ending: false,
        done: false,
    };
    let events = futures::stream::unfold(cursor, Cursor::next);
    Ok((
        // A reverse proxy passes each event on at once (nginx buffers by default).
        [("x-accel-buffering", "no")],
        Sse::new(events).keep_alive(KeepAlive::default()),
    ))
}
