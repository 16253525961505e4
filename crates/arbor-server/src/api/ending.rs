//! How an event stream ends: once what it follows has ended (a session's run, a whole
//! tree) it sends `event: end` (`{"status", "reason"}`) and closes, so a client reading it
//! to the end is never held; and when the server shuts down it keeps following for a short
//! grace ([`SHUTDOWN_GRACE`]) so the runs the shutdown cancels are seen ending `aborted`,
//! then sends `end` whatever the state (`reason: "shutdown"`).

use std::time::Duration;

use arbor_protocol::SessionStatus;
use axum::response::sse::Event;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How long a stream keeps following after a shutdown began.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// Whether a session with this status has nothing more to say until something starts it
/// again (a message, a resume): its run ended. A suspended run waits for decisions and
/// goes on; an idle or queued session has not run yet.
pub(crate) fn ended(status: SessionStatus) -> bool {
    !matches!(
        status,
        SessionStatus::Idle
            | SessionStatus::Queued
            | SessionStatus::Running
            | SessionStatus::Suspended
    )
}

/// Why a stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Why {
    /// What it follows ended.
    Finished,
    /// The server shuts down.
    Shutdown,
}

/// The last event of a stream: the status of what it followed (none if it was never read)
/// and why it ends.
pub(crate) fn end_event(status: Option<SessionStatus>, why: Why) -> Event {
    let reason = match why {
        Why::Finished => "finished",
        Why::Shutdown => "shutdown",
    };
    let status = status.map(|s| s.as_str());
    Event::default()
        .event("end")
        .data(serde_json::json!({"status": status, "reason": reason}).to_string())
}

/// A stream's view of the server's shutdown.
#[derive(Debug)]
pub(crate) struct Closing {
    token: CancellationToken,
    deadline: Option<Instant>,
}

impl Closing {
    pub(crate) fn new(token: CancellationToken) -> Self {
        Self {
            token,
            deadline: None,
        }
    }

    /// Whether the shutdown's grace is over: the stream must end now.
    pub(crate) fn over(&mut self) -> bool {
        if !self.token.is_cancelled() {
            return false;
        }
        let deadline = *self
            .deadline
            .get_or_insert_with(|| Instant::now() + SHUTDOWN_GRACE);
        Instant::now() >= deadline
    }

    /// Waits `poll`, or less when a shutdown begins meanwhile.
    pub(crate) async fn pause(&self, poll: Duration) {
        if self.token.is_cancelled() {
            tokio::time::sleep(poll).await;
        } else {
            tokio::select! {
                () = tokio::time::sleep(poll) => {}
                () = self.token.cancelled() => {}
            }
        }
    }
}

/// The `Last-Event-ID` a client resumes after, if it sent one (400 naming the header when it
/// is not an event's number).
pub(crate) fn last_event_id(
    headers: &axum::http::HeaderMap,
) -> crate::error::ApiResult<Option<u64>> {
    headers
        .get("last-event-id")
        .map(|v| {
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .ok_or_else(|| {
                    crate::error::ApiError::field(
                        "Last-Event-ID",
                        "Last-Event-ID must be an event's id (a number)",
                    )
                })
        })
        .transpose()
}
