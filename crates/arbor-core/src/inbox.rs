//! A session's inbox: messages delivered to it and not yet read by one of its turns.
//!
//! Delivery writes the message durably first (an `inbox_received` transcript entry, see
//! [`arbor_protocol::inbox`]); the [`Inbox`] is the live queue the session's run loop drains
//! at the start of each turn. A reopened session reloads what was received and never read.

use std::collections::VecDeque;
use std::sync::Mutex;

use arbor_protocol::{EntryKind, InboxMessage, TranscriptEntry};
use tokio::sync::Notify;

/// Pending messages of one session, in delivery order. Shared by the session and whoever
/// delivers to it.
#[derive(Debug, Default)]
pub struct Inbox {
    queue: Mutex<VecDeque<InboxMessage>>,
    notify: Notify,
}

impl Inbox {
    /// An empty inbox.
    pub fn new() -> Self {
        Self::default()
    }

    /// The messages `entries` received and did not read, in order.
    pub fn from_transcript(entries: &[TranscriptEntry]) -> Self {
        let mut pending: Vec<InboxMessage> = Vec::new();
        for entry in entries {
            match &entry.kind {
                EntryKind::InboxReceived { message } => pending.push(message.clone()),
                EntryKind::InboxRead { ids } => pending.retain(|m| !ids.contains(&m.id)),
                _ => {}
            }
        }
        Self {
            queue: Mutex::new(pending.into()),
            notify: Notify::new(),
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<InboxMessage>> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a message (already stored durably) and wakes a waiter.
    pub fn push(&self, message: InboxMessage) {
        self.queue().push_back(message);
        self.notify.notify_waiters();
        self.notify.notify_one();
    }

    /// Takes every pending message.
    pub fn drain(&self) -> Vec<InboxMessage> {
        self.queue().drain(..).collect()
    }

    /// How many are pending.
    pub fn len(&self) -> usize {
        self.queue().len()
    }

    /// Whether none is pending.
    pub fn is_empty(&self) -> bool {
        self.queue().is_empty()
    }

    /// Waits until at least one message is pending. Cancel safe.
    pub async fn ready(&self) {
        loop {
            let notified = self.notify.notified();
            if !self.is_empty() {
                return;
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbor_protocol::{Relationship, RunId, Timestamp};

    fn msg(id: &str) -> InboxMessage {
        InboxMessage {
            id: id.into(),
            from: None,
            from_name: "host".into(),
            relationship: Relationship::Host,
            text: id.into(),
            notice: None,
            at: Timestamp(1),
        }
    }

    fn entry(seq: u64, kind: EntryKind) -> TranscriptEntry {
        TranscriptEntry {
            seq,
            at: Timestamp(1),
            run_id: RunId::new(),
            kind,
        }
    }

    #[test]
    fn a_reload_keeps_what_was_received_and_not_read() {
        let entries = [
            entry(1, EntryKind::InboxReceived { message: msg("a") }),
            entry(2, EntryKind::InboxReceived { message: msg("b") }),
            entry(
                3,
                EntryKind::InboxRead {
                    ids: vec!["a".into()],
                },
            ),
            entry(4, EntryKind::InboxReceived { message: msg("c") }),
        ];
        let inbox = Inbox::from_transcript(&entries);
        let ids: Vec<String> = inbox.drain().into_iter().map(|m| m.id).collect();
        assert_eq!(ids, ["b", "c"]);
        assert!(inbox.is_empty());
    }

    #[tokio::test]
    async fn ready_wakes_on_push() {
        let inbox = std::sync::Arc::new(Inbox::new());
        let waiter = tokio::spawn({
            let inbox = inbox.clone();
            async move { inbox.ready().await }
        });
        tokio::task::yield_now().await;
        inbox.push(msg("x"));
        waiter.await.unwrap();
        assert_eq!(inbox.len(), 1);
    }
}
