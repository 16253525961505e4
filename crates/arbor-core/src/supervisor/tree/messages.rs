//! Messages between the sessions of a tree: a child's reply to its parent, a parent's
//! follow-up to a retained child, a note between siblings, a host's message, and the
//! runtime's lifecycle notices.
//!
//! A send is checked before anything is written: the body (non-empty, at most
//! [`MAX_MESSAGE_BYTES`]), the target (known, not deleted), family reach for a session
//! sender (parent, siblings and direct children only), the target's pending queue (at most
//! [`MAX_PENDING`]) and the pair's rate (a burst of 3, then 1 per second). Then the message
//! is stored in the target's transcript and handed to its live inbox; an idle retained child
//! is woken for a new turn on it.

use arbor_protocol::{EntryKind, InboxMessage, Notice, Relationship, RunId, SessionId, Timestamp};
use arbor_store::{SessionRecord, SessionUpdate, StoreError};
use serde::Serialize;

use crate::error::{CoreError, CoreResult, LimitInfo};
use crate::session::inbox::{Inbox, Reservation};
use crate::supervisor::runtime::Supervisor;

/// The largest message body, in UTF-8 bytes.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024;
/// The most messages pending in one inbox.
pub const MAX_PENDING: usize = 20;

/// What a send did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Receipt {
    /// The message's id.
    pub id: String,
    /// The target session.
    pub to: SessionId,
    /// The target's name.
    pub to_name: String,
    /// `queued` when the target is in a run (its next turn reads it), `delivered` when the
    /// message starts a new turn or waits for its host.
    pub status: &'static str,
}

/// Who sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sender {
    /// A session of the tree (held to family reach).
    Session(SessionId),
    /// The host: a user, the CLI (reaches any session).
    Host,
}

/// The error every unknown, deleted or foreign target gets.
fn unknown_target() -> CoreError {
    CoreError::denied(
        crate::error::DenyReason::Unknown,
        "Unknown or deleted session".to_owned(),
    )
}

impl Supervisor {
    async fn live_record(&self, id: SessionId) -> CoreResult<SessionRecord> {
        self.live()
            .store()
            .session(id)
            .await?
            .filter(|r| r.tombstone.is_none())
            .ok_or_else(unknown_target)
    }

    /// Sends `text` from `from` to the session `to`. See the module docs for the checks.
    pub async fn send_message(
        &self,
        from: Sender,
        to: SessionId,
        text: &str,
    ) -> CoreResult<Receipt> {
        let text = self.redact(text.trim());
        if text.is_empty() {
            return Err(CoreError::validation("message must not be empty"));
        }
        if text.len() > MAX_MESSAGE_BYTES {
            return Err(CoreError::limit_error(
                format!("Message exceeds {MAX_MESSAGE_BYTES} bytes"),
                Some(LimitInfo {
                    limit: arbor_protocol::LimitKind::MaxMessageBytes,
                    maximum: MAX_MESSAGE_BYTES as u64,
                    observed: text.len() as u64,
                }),
            ));
        }
        let target = self.live_record(to).await?;
        let (sender, relationship) = match from {
            Sender::Host => (None, Relationship::Host),
            Sender::Session(id) => {
                let sender = self.live_record(id).await?;
                // Another tree's session is as unknown as one that never existed: the answer
                // must not tell a model what exists elsewhere.
                if sender.root_id != target.root_id {
                    return Err(unknown_target());
                }
                let relationship = reach(&sender, &target)?;
                (Some(sender), relationship)
            }
        };
        // A child admitted a moment ago may still be starting (its hook, its factory): the
        // send waits for its first run to begin, and fails with its startup error if it
        // does not.
        self.wait_started(to).await;
        if let Some(why) = self.live().hub().start_failure(to) {
            // Another run now would fail the same way: say so rather than start it.
            return Err(CoreError::denied(
                crate::error::DenyReason::Unreachable,
                format!(
                    "\"{}\" could not start ({why}); it takes no messages: spawn a new child",
                    target.name
                ),
            ));
        }
        let inbox = self.inbox_of(&target).await?;
        // The check and the place it grants are one step: concurrent sends never exceed it.
        let place = inbox.try_reserve(MAX_PENDING).map_err(|taken| {
            CoreError::limit_error(
                format!(
                    "The inbox of \"{}\" is full ({MAX_PENDING} pending messages); retry later",
                    target.name
                ),
                Some(LimitInfo {
                    limit: arbor_protocol::LimitKind::MaxPendingMessages,
                    maximum: MAX_PENDING as u64,
                    observed: taken as u64 + 1,
                }),
            )
        })?;
        let from_id = sender.as_ref().map(|s| s.id);
        if let Err(wait) = self.live().hub().take_token(from_id, to) {
            return Err(CoreError::limit_error(
                format!(
                    "Agent messaging rate limit exceeded; retry after {}ms",
                    wait.as_millis().max(1)
                ),
                Some(LimitInfo {
                    limit: arbor_protocol::LimitKind::MessagesPerSecond,
                    maximum: 1,
                    observed: 2,
                }),
            ));
        }
        let message = InboxMessage {
            id: format!("msg_{}", RunId::new().as_uuid().simple()),
            from: from_id,
            from_name: sender
                .as_ref()
                .map_or_else(|| "host".to_owned(), |s| s.name.clone()),
            relationship,
            text,
            notice: None,
            at: Timestamp::now(),
        };
        if let Err(e) = self.deliver(&target, place, message.clone()).await {
            self.live().hub().refund_token(from_id, to);
            return Err(e);
        }
        if let Some(sender) = &sender
            && relationship == Relationship::Child
        {
            self.count_reply(sender.id).await?;
        }
        let status = if self.live().hub().is_running(to) {
            "queued"
        } else {
            "delivered"
        };
        // Not held past here: a follow-up that ends at once on another thread must find the
        // inbox free, or its session would stay tracked (see the hub's bound).
        drop(inbox);
        self.wake(to);
        Ok(Receipt {
            id: message.id,
            to,
            to_name: target.name,
            status,
        })
    }

    /// Waits while the first run of `id` is about to start (bounded by the supervisor's
    /// delegation timeout, and by its session's end).
    async fn wait_started(&self, id: SessionId) {
        let hub = self.live().hub();
        let bound = std::time::Duration::from_millis(self.settings().limits().timeout_ms);
        let wait = async {
            loop {
                let changed = hub.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if !hub.is_starting(id) {
                    return;
                }
                changed.await;
            }
        };
        tokio::select! {
            _ = tokio::time::timeout(bound, wait) => {}
            () = self.live().session_token().cancelled() => {}
        }
    }

    /// The inbox deliveries to `target` go to: its live one, or one loaded from its
    /// transcript (what it received and never read) and registered for it.
    pub(crate) async fn inbox_of(
        &self,
        target: &SessionRecord,
    ) -> CoreResult<std::sync::Arc<Inbox>> {
        if let Some(inbox) = self.live().hub().inbox(target.id) {
            return Ok(inbox);
        }
        let entries = self.live().store().transcript(target.id, 0, None).await?;
        let inbox = std::sync::Arc::new(Inbox::from_transcript(&entries));
        Ok(self
            .live()
            .hub()
            .register(target.id, target.parent_id, inbox, false))
    }

    /// Stores `message` in the target's transcript, then queues it in the place taken in its
    /// live inbox.
    async fn deliver(
        &self,
        target: &SessionRecord,
        place: Reservation<'_>,
        message: InboxMessage,
    ) -> CoreResult<()> {
        self.live()
            .store()
            .append(
                target.id,
                RunId::new(),
                &[EntryKind::InboxReceived {
                    message: message.clone(),
                }],
                None,
            )
            .await?;
        place.push(message);
        Ok(())
    }

    /// One more reply counted on the sender's record (compare-and-swap, retried).
    async fn count_reply(&self, id: SessionId) -> CoreResult<()> {
        for _ in 0..16 {
            let record = self.live_record(id).await?;
            let update = SessionUpdate {
                expected_version: Some(record.version),
                replies: Some(record.replies.saturating_add(1)),
                ..SessionUpdate::default()
            };
            match self.live().store().update_session(id, &update).await {
                Ok(_) => return Ok(()),
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(CoreError::Supervisor(format!(
            "could not count the reply of session {id}: its record kept changing"
        )))
    }

    /// Sends a lifecycle notice about `child` to its parent. Notices bypass the rate limit
    /// but count against the inbox cap like any message: a parent whose inbox is full does
    /// not get it (it is logged, and the child's registry row still tells how it ended).
    /// Nothing is sent to a closed or deleted parent.
    pub(crate) async fn notify_parent(&self, child: &SessionRecord, notice: Notice) {
        let Some(parent_id) = child.parent_id else {
            return;
        };
        if self.live().hub().is_closed(parent_id) {
            return;
        }
        let Ok(parent) = self.live_record(parent_id).await else {
            return;
        };
        let text = match &notice {
            Notice::CompletedWithoutReply { preview } => format!(
                "Child {} ({}) completed without sending a reply.{}",
                child.name,
                child.id,
                preview
                    .as_deref()
                    .map(|p| format!(" Last text: {p}"))
                    .unwrap_or_default()
            ),
            Notice::Failed { error } => {
                format!("Child {} ({}) failed: {error}", child.name, child.id)
            }
            Notice::Cancelled { reason } => format!(
                "Child {} ({}) was cancelled{}.",
                child.name,
                child.id,
                reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            ),
            other => format!("Child {} ({}): {other:?}", child.name, child.id),
        };
        let message = InboxMessage {
            id: format!("msg_{}", RunId::new().as_uuid().simple()),
            from: Some(child.id),
            from_name: child.name.clone(),
            relationship: Relationship::Child,
            text: self.redact(&text),
            notice: Some(notice),
            at: Timestamp::now(),
        };
        let delivered = match self.inbox_of(&parent).await {
            Ok(inbox) => match inbox.try_reserve(MAX_PENDING) {
                Ok(place) => self.deliver(&parent, place, message).await,
                Err(taken) => Err(CoreError::limit_error(
                    format!("the parent's inbox is full ({taken} pending messages)"),
                    Some(LimitInfo {
                        limit: arbor_protocol::LimitKind::MaxPendingMessages,
                        maximum: MAX_PENDING as u64,
                        observed: taken as u64 + 1,
                    }),
                )),
            },
            Err(e) => Err(e),
        };
        match delivered {
            Ok(()) => self.wake(parent_id),
            Err(e) => {
                tracing::warn!(parent = %parent_id, error = %e, "a lifecycle notice was not delivered")
            }
        }
    }
}

/// How `target` relates to `sender`, if it is within reach: its parent, a sibling, or a
/// direct child.
fn reach(sender: &SessionRecord, target: &SessionRecord) -> CoreResult<Relationship> {
    if sender.id == target.id {
        return Err(CoreError::validation("A session cannot message itself"));
    }
    if sender.parent_id == Some(target.id) {
        // The sender is the target's child.
        return Ok(Relationship::Child);
    }
    if target.parent_id == Some(sender.id) {
        return Ok(Relationship::Parent);
    }
    if sender.parent_id.is_some() && sender.parent_id == target.parent_id {
        return Ok(Relationship::Sibling);
    }
    Err(CoreError::denied(
        crate::error::DenyReason::Unreachable,
        "Agent reach is limited to parent, siblings, and children".to_owned(),
    ))
}

/// A text's first 160 characters with runs of whitespace collapsed.
pub(crate) fn preview(text: &str) -> Option<String> {
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.is_empty() {
        return None;
    }
    let mut out: String = collapsed.chars().take(160).collect();
    if collapsed.chars().count() > 160 {
        out.push('…');
    }
    Some(out)
}
