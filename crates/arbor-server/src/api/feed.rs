//! The tenant's one stream (`GET /v1/events`): every run's status change, every call that
//! comes to wait for a decision and every one decided, for the runs this server follows (see
//! [`crate::feed`]), as `event: run | approval_pending | approval_decided`, `id: <seq>`,
//! `data: <the FeedEntry>`. A reconnect with `Last-Event-ID` (or `?since=`) replays what it
//! missed from the store, so no event is lost while it is kept (the newest 1,000) and none
//! is sent twice. The stream goes on until the client leaves or the server shuts down
//! (`event: end`, reason `shutdown`).

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use serde::Deserialize;
use tokio::time::Instant;
use utoipa::IntoParams;

use super::ending::{Closing, Why, end_event};
use crate::auth::Tenant;
use crate::error::{ApiError, ApiResult};
use crate::extract::Params;
use crate::feed::{Feed, FeedEntry};
use crate::state::{AppState, StreamSlot};

/// How often the stream looks for events this server logged.
const POLL: Duration = Duration::from_millis(200);
/// How often it reads the store for events other servers logged.
const READ_EVERY: Duration = Duration::from_secs(2);

/// Where the stream starts.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct FeedQuery {
    /// Replay the events after this one (default: none, only what comes from now on). A
    /// `Last-Event-ID` header wins over it.
    since: Option<u64>,
}

struct Follower {
    feed: Arc<Feed>,
    tenant: String,
    after: u64,
    queued: VecDeque<Event>,
    closing: Closing,
    read_at: Option<Instant>,
    _slot: StreamSlot,
    done: bool,
}

fn entry_event(entry: &FeedEntry) -> Event {
    Event::default()
        .id(entry.seq.to_string())
        .event(entry.event.kind())
        .data(serde_json::to_string(entry).unwrap_or_default())
}

impl Follower {
    async fn next(mut self) -> Option<(Result<Event, Infallible>, Self)> {
        loop {
            if let Some(event) = self.queued.pop_front() {
                return Some((Ok(event), self));
            }
            if self.done {
                return None;
            }
            let due = self.read_at.is_none_or(|t| t.elapsed() >= READ_EVERY)
                || self.feed.known_last(&self.tenant) > self.after;
            if due {
                self.read_at = Some(Instant::now());
                match self.feed.after(&self.tenant, self.after).await {
                    Ok(entries) => {
                        for e in &entries {
                            self.after = e.seq;
                            self.queued.push_back(entry_event(e));
                        }
                    }
                    Err(e) => {
                        tracing::warn!(tenant = %self.tenant, "event feed: {e:?}");
                        return None;
                    }
                }
            }
            if self.closing.over() {
                self.queued.push_back(end_event(None, Why::Shutdown));
                self.done = true;
                continue;
            }
            if self.queued.is_empty() {
                self.closing.pause(POLL).await;
            }
        }
    }
}

/// The tenant's runs' status changes and approvals, live, replayable.
#[utoipa::path(get, path = "/v1/events", operation_id = "feed_events", tag = "runs",
    params(FeedQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "Replay the events after this one")),
    responses(
        (status = 200, description = "`text/event-stream` of FeedEntry: `event` its type (`run`, `approval_pending`, `approval_decided`), `id` its seq", content_type = "text/event-stream", body = FeedEntry),
        (status = 400, body = ApiError), (status = 401, body = ApiError),
        (status = 429, description = "The tenant holds its most streams open (max_streams_per_tenant)", body = ApiError),
        (status = 503, description = "The server holds its most streams open (max_streams)", body = ApiError)))]
pub(crate) async fn stream(
    tenant: Tenant,
    State(state): State<AppState>,
    headers: HeaderMap,
    Params(q): Params<FeedQuery>,
) -> ApiResult<(
    [(&'static str, &'static str); 1],
    Sse<impl Stream<Item = Result<Event, Infallible>>>,
)> {
    let after = match (super::ending::last_event_id(&headers)?, q.since) {
        (Some(n), _) | (None, Some(n)) => n,
        // From now on: after the last event logged.
        (None, None) => state.feed.last(&tenant.0).await?,
    };
    let slot = state.streams.open(&tenant.0)?;
    let follower = Follower {
        feed: state.feed.clone(),
        tenant: tenant.0.clone(),
        after,
        queued: VecDeque::new(),
        closing: Closing::new(state.closing.clone()),
        read_at: None,
        _slot: slot,
        done: false,
    };
    let events = futures::stream::unfold(follower, Follower::next);
    Ok((
        [("x-accel-buffering", "no")],
        Sse::new(events).keep_alive(KeepAlive::default()),
    ))
}
