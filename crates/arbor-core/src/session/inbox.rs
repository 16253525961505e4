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
    queue: Mutex<Queue>,
    notify: Notify,
}

#[derive(Debug, Default)]
struct Queue {
    pending: VecDeque<InboxMessage>,
    /// Places taken by deliveries being stored, counted against the cap with `pending`.
    reserved: usize,
    /// The ids of the last [`SEEN`] messages this inbox held (loaded, delivered or
    /// absorbed), oldest first: a message another process stored is taken in once, never
    /// twice.
    seen: Seen,
}

/// How many message ids an inbox remembers. A stretch of transcript read for mail
/// ([`Inbox::absorb`]) starts where the last one ended, so only deliveries made since then
/// need remembering: at most a few hundred (every pair of sessions is rate-limited to a
/// burst of 3, and at most 32 children are live). Bounded, so a session that lives long
/// and receives without end keeps no more than this.
pub(crate) const SEEN: usize = 1024;

/// The ids an inbox remembers, oldest first, at most [`SEEN`].
#[derive(Debug, Default)]
struct Seen(VecDeque<String>);

impl Seen {
    fn contains(&self, id: &str) -> bool {
        self.0.iter().any(|s| s == id)
    }

    fn insert(&mut self, id: String) {
        if self.0.len() >= SEEN {
            self.0.pop_front();
        }
        self.0.push_back(id);
    }
}

/// A place in an [`Inbox`] taken by [`Inbox::try_reserve`]: fill it with
/// [`push`](Reservation::push), or drop it to give it back.
#[derive(Debug)]
pub struct Reservation<'a> {
    inbox: &'a Inbox,
    live: bool,
}

impl Reservation<'_> {
    /// Puts the (durably stored) message in the place taken.
    pub fn push(mut self, message: InboxMessage) {
        self.live = false;
        {
            let mut q = self.inbox.queue();
            q.reserved = q.reserved.saturating_sub(1);
            q.seen.insert(message.id.clone());
            q.pending.push_back(message);
        }
        self.inbox.wake();
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.live {
            let mut q = self.inbox.queue();
            q.reserved = q.reserved.saturating_sub(1);
        }
    }
}

impl Inbox {
    /// An empty inbox.
    pub fn new() -> Self {
        Self::default()
    }

    /// The messages `entries` received and did not read, in order.
    pub fn from_transcript(entries: &[TranscriptEntry]) -> Self {
        let mut pending: Vec<InboxMessage> = Vec::new();
        let mut seen = Seen::default();
        for entry in entries {
            match &entry.kind {
                EntryKind::InboxReceived { message } => {
                    seen.insert(message.id.clone());
                    pending.push(message.clone());
                }
                EntryKind::InboxRead { ids } | EntryKind::InboxDropped { ids, .. } => {
                    pending.retain(|m| !ids.contains(&m.id))
                }
                _ => {}
            }
        }
        Self {
            queue: Mutex::new(Queue {
                pending: pending.into(),
                reserved: 0,
                seen,
            }),
            notify: Notify::new(),
        }
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake(&self) {
        self.notify.notify_waiters();
        self.notify.notify_one();
    }

    /// Adds a message (already stored durably) and wakes a waiter. Not bounded: deliveries
    /// that must respect a cap take a place first with [`try_reserve`](Self::try_reserve).
    pub fn push(&self, message: InboxMessage) {
        {
            let mut q = self.queue();
            q.seen.insert(message.id.clone());
            q.pending.push_back(message);
        }
        self.wake();
    }

    /// Takes in what `entries` (a stretch of the session's transcript) received that this
    /// inbox never held: messages another process stored while this one runs the session.
    /// Returns how many were taken in.
    pub(crate) fn absorb(&self, entries: &[TranscriptEntry]) -> usize {
        let mut taken = 0;
        {
            let mut q = self.queue();
            for entry in entries {
                match &entry.kind {
                    EntryKind::InboxReceived { message } if !q.seen.contains(&message.id) => {
                        q.seen.insert(message.id.clone());
                        q.pending.push_back(message.clone());
                        taken += 1;
                    }
                    EntryKind::InboxDropped { ids, .. } => {
                        q.pending.retain(|m| !ids.contains(&m.id));
                    }
                    _ => {}
                }
            }
        }
        if taken > 0 {
            self.wake();
        }
        taken
    }

    /// Makes the pending queue what the whole transcript `entries` says: received, and
    /// neither read nor dropped (another process ran the session and read some).
    pub(crate) fn reload(&self, entries: &[TranscriptEntry]) {
        let fresh = Self::from_transcript(entries);
        let Queue { pending, seen, .. } = std::mem::take(&mut *fresh.queue());
        let mut q = self.queue();
        q.pending = pending;
        let known: std::collections::HashSet<String> = q.seen.0.iter().cloned().collect();
        for id in seen.0 {
            if !known.contains(&id) {
                q.seen.insert(id);
            }
        }
    }

    /// Takes a place for one more message if fewer than `max` are pending or being
    /// delivered, in one step (so concurrent deliveries never exceed `max`); otherwise
    /// returns how many are.
    pub fn try_reserve(&self, max: usize) -> Result<Reservation<'_>, usize> {
        let mut q = self.queue();
        let taken = q.pending.len() + q.reserved;
        if taken >= max {
            return Err(taken);
        }
        q.reserved += 1;
        Ok(Reservation {
            inbox: self,
            live: true,
        })
    }

    /// A copy of every pending message, leaving them pending (a host looking before it
    /// decides to run the session on them).
    pub fn peek(&self) -> Vec<InboxMessage> {
        self.queue().pending.iter().cloned().collect()
    }

    /// Takes every pending message.
    pub fn drain(&self) -> Vec<InboxMessage> {
        self.queue().pending.drain(..).collect()
    }

    /// How many are pending.
    pub fn len(&self) -> usize {
        self.queue().pending.len()
    }

    /// Whether none is pending.
    pub fn is_empty(&self) -> bool {
        self.queue().pending.is_empty()
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

    #[test]
    fn absorbing_takes_in_each_stored_message_once() {
        let inbox =
            Inbox::from_transcript(&[entry(1, EntryKind::InboxReceived { message: msg("a") })]);
        // Read by the session since; "a" is in another stretch again, and "b" is new.
        assert_eq!(inbox.drain().len(), 1);
        let stretch = [
            entry(1, EntryKind::InboxReceived { message: msg("a") }),
            entry(2, EntryKind::InboxReceived { message: msg("b") }),
        ];
        assert_eq!(inbox.absorb(&stretch), 1);
        assert_eq!(inbox.absorb(&stretch), 0, "taken in once");
        let ids: Vec<String> = inbox.peek().into_iter().map(|m| m.id).collect();
        assert_eq!(ids, ["b"]);
        // A reload follows the transcript: read elsewhere, it is no longer pending.
        inbox.reload(&[
            stretch[0].clone(),
            stretch[1].clone(),
            entry(
                3,
                EntryKind::InboxRead {
                    ids: vec!["a".into(), "b".into()],
                },
            ),
        ]);
        assert!(inbox.is_empty());
        assert_eq!(inbox.absorb(&stretch), 0);
    }

    #[test]
    fn reservations_count_against_the_cap_until_filled_or_dropped() {
        let inbox = Inbox::new();
        inbox.push(msg("a"));
        let r1 = inbox.try_reserve(3).unwrap();
        let r2 = inbox.try_reserve(3).unwrap();
        assert_eq!(inbox.try_reserve(3).unwrap_err(), 3);
        drop(r2);
        r1.push(msg("b"));
        assert_eq!(inbox.len(), 2);
        let r3 = inbox.try_reserve(3).unwrap();
        assert_eq!(inbox.try_reserve(3).unwrap_err(), 3);
        drop(r3);
        assert!(inbox.try_reserve(3).is_ok());
    }

    #[test]
    fn concurrent_reservations_never_exceed_the_cap() {
        let inbox = std::sync::Arc::new(Inbox::new());
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let inbox = inbox.clone();
                std::thread::spawn(move || {
                    for i in 0..100 {
                        if let Ok(r) = inbox.try_reserve(20) {
                            r.push(msg(&format!("{t}-{i}")));
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(inbox.len(), 20);
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

    #[test]
    fn an_inbox_that_lives_long_remembers_a_bounded_number_of_ids() {
        let inbox = Inbox::new();
        for i in 0..(SEEN + 500) {
            inbox.push(msg(&format!("m{i}")));
            let _ = inbox.drain();
        }
        assert_eq!(inbox.queue().seen.0.len(), SEEN);
        // The recent ones are still known: a stretch holding them takes nothing in.
        let recent: Vec<TranscriptEntry> = (500..SEEN + 500)
            .map(|i| {
                entry(
                    i as u64,
                    EntryKind::InboxReceived {
                        message: msg(&format!("m{i}")),
                    },
                )
            })
            .collect();
        assert_eq!(inbox.absorb(&recent), 0);
        assert_eq!(inbox.absorb(&recent), 0);
        // A reload of a long transcript keeps the bound too.
        let long: Vec<TranscriptEntry> = (0..3 * SEEN)
            .map(|i| {
                entry(
                    i as u64,
                    EntryKind::InboxReceived {
                        message: msg(&format!("r{i}")),
                    },
                )
            })
            .collect();
        inbox.reload(&long);
        assert_eq!(inbox.queue().seen.0.len(), SEEN);
        assert!(inbox.queue().seen.contains(&format!("r{}", 3 * SEEN - 1)));
    }
}
