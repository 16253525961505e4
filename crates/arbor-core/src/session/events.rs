//! The event bus of a session.
//!
//! Each session owns one [`EventBus`]. Publishing stamps an event with the session's next
//! sequence number and hands it to every [`Subscription`] at once; each subscription reads
//! at its own pace from a bounded queue. A subscription that falls more than the capacity
//! behind loses the oldest events it had not read, and its next read returns
//! [`AgentEvent::EventsLagged`] with the exact count it missed, before the event it resumes
//! at. Publishing never waits for a subscriber.

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock};

use arbor_protocol::{
    AgentEvent, EventEnvelope, RunId, SessionId, SupervisorEnvelope, SupervisorEvent, Timestamp,
};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::redact::{Redactor, redact_serde};

/// How a [`AgentEvent::ToolExecutionError`] begins when the call did not fail but waits: the
/// run it delegated to stopped on calls waiting for approval (the caller's run suspends
/// next). A display says "suspended", not "error", for it (see [`is_suspended_call`]).
pub const SUSPENDED_CALL: &str = "waiting for approvals of the delegated run";

/// Whether a tool error event's text says the call waits for approvals (see
/// [`SUSPENDED_CALL`]).
pub fn is_suspended_call(error: &str) -> bool {
    error.starts_with(SUSPENDED_CALL)
}

/// An event type a [`Bus`] can carry: it knows its sequence number and how to make the lag
/// marker that stands for `missed` lost events before `next`.
pub trait Sequenced: fmt::Debug + Send + Sync + 'static {
    /// The event's sequence number.
    fn seq(&self) -> u64;
    /// A marker for `missed` lost events, placed before `next` (if known).
    fn lag_marker(missed: u64, next: Option<&Self>) -> Self;
}

impl Sequenced for EventEnvelope {
    fn seq(&self) -> u64 {
        self.seq
    }

    fn lag_marker(missed: u64, next: Option<&Self>) -> Self {
        let (seq, session_id, run_id) = match next {
            Some(n) => (n.seq, n.session_id, n.run_id),
            None => (0, SessionId::new(), RunId::new()),
        };
        EventEnvelope {
            seq,
            at: Timestamp::now(),
            session_id,
            run_id,
            event: AgentEvent::EventsLagged { missed },
        }
    }
}

impl Sequenced for SupervisorEnvelope {
    fn seq(&self) -> u64 {
        self.seq
    }

    fn lag_marker(missed: u64, next: Option<&Self>) -> Self {
        SupervisorEnvelope {
            seq: next.map_or(0, |n| n.seq),
            at: Timestamp::now(),
            event: SupervisorEvent::EventsLagged { missed },
        }
    }
}

/// A sequenced, bounded, multi-subscriber event channel. Cheap to clone; clones share the
/// sequence.
#[derive(Debug)]
pub struct Bus<E: Sequenced> {
    inner: Arc<BusInner<E>>,
}

impl<E: Sequenced> Clone for Bus<E> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

#[derive(Debug)]
struct BusInner<E> {
    // Sequence and send happen under one lock so every subscriber sees events in `seq`
    // order even when concurrent tasks publish at once.
    seq: Mutex<u64>,
    /// Made by the first subscription (or at creation for a retaining bus): a session
    /// nobody watches never allocates the channel's ring.
    sender: OnceLock<broadcast::Sender<Arc<E>>>,
    capacity: usize,
    /// A subscription opened at creation, handed to the first subscriber, so events
    /// published before anyone subscribed are kept (up to the capacity).
    retained: Mutex<Option<broadcast::Receiver<Arc<E>>>>,
    /// Once cancelled, subscriptions end after their queued events.
    closed: CancellationToken,
}

impl<E: Sequenced> Bus<E> {
    /// A bus whose subscriptions hold at most `capacity` unread events (at least 1).
    pub fn new(capacity: usize) -> Self {
        Self::make(capacity, false)
    }

    /// A bus that keeps what is published before the first subscription (up to `capacity`
    /// events, oldest dropped and reported by a lag marker) and hands it to that subscriber.
    pub fn retaining(capacity: usize) -> Self {
        Self::make(capacity, true)
    }

    fn make(capacity: usize, retain: bool) -> Self {
        let capacity = capacity.max(1);
        let sender = OnceLock::new();
        let mut retained = None;
        if retain {
            let (tx, rx) = broadcast::channel(capacity);
            let _ = sender.set(tx);
            retained = Some(rx);
        }
        Self {
            inner: Arc::new(BusInner {
                seq: Mutex::new(0),
                sender,
                capacity,
                retained: Mutex::new(retained),
                closed: CancellationToken::new(),
            }),
        }
    }

    /// A new subscription; it receives events published from now on (the first
    /// subscription of a [retaining](Self::retaining) bus also gets what came before).
    pub fn subscribe(&self) -> Subscription<E> {
        let retained = self
            .inner
            .retained
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        Subscription {
            rx: retained.unwrap_or_else(|| self.sender().subscribe()),
            pending: None,
            closed: self.inner.closed.clone(),
        }
    }

    /// Ends every subscription once it has read what is queued; later subscriptions end at
    /// once. Publishing still counts sequence numbers but nobody receives.
    pub fn close(&self) {
        self.inner.closed.cancel();
        drop(
            self.inner
                .retained
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        );
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.is_cancelled()
    }

    /// How many subscriptions are open.
    pub fn subscriber_count(&self) -> usize {
        self.inner.sender.get().map_or(0, |s| s.receiver_count())
    }

    fn sender(&self) -> &broadcast::Sender<Arc<E>> {
        self.inner
            .sender
            .get_or_init(|| broadcast::channel(self.inner.capacity).0)
    }

    /// Publishes the event `make` builds from the next sequence number; returns that number.
    /// `make` runs only when someone listens (or `always` is set) and must not block.
    pub fn publish_with(&self, always: bool, make: impl FnOnce(u64) -> E) -> (u64, Option<Arc<E>>) {
        let mut seq = self.inner.seq.lock().unwrap_or_else(|p| p.into_inner());
        *seq += 1;
        let sender = self.inner.sender.get().filter(|s| s.receiver_count() > 0);
        if always || sender.is_some() {
            let event = Arc::new(make(*seq));
            if let Some(sender) = sender {
                // Fails only when every subscriber is gone, which is fine.
                let _ = sender.send(event.clone());
            }
            return (*seq, Some(event));
        }
        (*seq, None)
    }
}

/// Publishes a session's events.
#[derive(Debug, Clone)]
pub struct EventBus {
    session_id: SessionId,
    bus: Bus<EventEnvelope>,
    redactor: Option<Arc<dyn Redactor>>,
}

impl EventBus {
    /// A bus whose subscriptions hold at most `capacity` unread events (at least 1).
    pub fn new(session_id: SessionId, capacity: usize) -> Self {
        Self {
            session_id,
            bus: Bus::new(capacity),
            redactor: None,
        }
    }

    /// The same bus, redacting every event's strings before anyone sees it.
    #[must_use]
    pub fn with_redactor(mut self, redactor: Option<Arc<dyn Redactor>>) -> Self {
        self.redactor = redactor;
        self
    }

    /// A new subscription; it receives events published from now on.
    pub fn subscribe(&self) -> Subscription {
        self.bus.subscribe()
    }

    /// How many subscriptions are open.
    pub fn subscriber_count(&self) -> usize {
        self.bus.subscriber_count()
    }

    /// Publishes one event of `run` and returns its sequence number.
    pub fn publish(&self, run_id: RunId, event: AgentEvent) -> u64 {
        let session_id = self.session_id;
        let redactor = self.redactor.as_deref();
        self.bus
            .publish_with(false, |seq| {
                let event = match redactor.map(|r| redact_serde(r, &event)) {
                    None | Some(Ok(None)) => event,
                    Some(Ok(Some(clean))) => clean,
                    // An event that cannot be redacted safely is replaced, never leaked.
                    Some(Err(_)) => AgentEvent::EventsLagged { missed: 1 },
                };
                EventEnvelope {
                    seq,
                    at: Timestamp::now(),
                    session_id,
                    run_id,
                    event,
                }
            })
            .0
    }
}

/// One subscriber's view of a bus.
#[derive(Debug)]
pub struct Subscription<E: Sequenced = EventEnvelope> {
    rx: broadcast::Receiver<Arc<E>>,
    pending: Option<Arc<E>>,
    closed: CancellationToken,
}

impl<E: Sequenced> Subscription<E> {
    /// The next event, a lag marker when events were missed, or `None` once the bus is gone
    /// and every event was read.
    ///
    /// Cancel safe: dropping the future loses nothing.
    pub async fn recv(&mut self) -> Option<Arc<E>> {
        if let Some(next) = self.pending.take() {
            return Some(next);
        }
        if self.closed.is_cancelled() {
            return self.try_recv();
        }
        let closed = self.closed.clone();
        tokio::select! {
            biased;
            r = self.rx.recv() => match r {
                Ok(event) => Some(event),
                Err(broadcast::error::RecvError::Closed) => None,
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    Some(self.lag_marker(missed).await)
                }
            },
            // Closed while waiting: hand out whatever arrived meanwhile, then end.
            _ = closed.cancelled() => self.try_recv(),
        }
    }

    /// Like [`recv`](Self::recv) without waiting: `None` when nothing is ready.
    pub fn try_recv(&mut self) -> Option<Arc<E>> {
        if let Some(next) = self.pending.take() {
            return Some(next);
        }
        match self.rx.try_recv() {
            Ok(event) => Some(event),
            Err(broadcast::error::TryRecvError::Lagged(missed)) => {
                let next = self.rx.try_recv().ok();
                Some(self.marker_before(missed, next))
            }
            Err(_) => None,
        }
    }

    async fn lag_marker(&mut self, missed: u64) -> Arc<E> {
        // The marker carries the sequence number of the event it precedes, so read that
        // event now and hand it out on the next call.
        match self.rx.recv().await {
            Ok(event) => self.marker_before(missed, Some(event)),
            Err(broadcast::error::RecvError::Closed) => self.marker_before(missed, None),
            // More were lost while we looked: they add to the same gap.
            Err(broadcast::error::RecvError::Lagged(more)) => {
                self.marker_before(missed + more, None)
            }
        }
    }

    fn marker_before(&mut self, missed: u64, next: Option<Arc<E>>) -> Arc<E> {
        let marker = E::lag_marker(missed, next.as_deref());
        self.pending = next;
        Arc::new(marker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn slow_subscriber_gets_a_lag_marker_with_the_exact_count() {
        let session = SessionId::new();
        let run = RunId::new();
        let bus = EventBus::new(session, 4);
        let mut fast = bus.subscribe();
        let mut slow = bus.subscribe();
        for turn in 1..=10 {
            bus.publish(run, AgentEvent::TurnStarted { turn });
            // The fast subscriber keeps up.
            let e = fast.recv().await.unwrap();
            assert_eq!(e.event, AgentEvent::TurnStarted { turn });
        }
        // The slow one only has room for the last 4: it missed 6.
        let marker = slow.recv().await.unwrap();
        assert_eq!(marker.event, AgentEvent::EventsLagged { missed: 6 });
        assert_eq!(marker.seq, 7);
        let mut seen = Vec::new();
        while let Some(e) = slow.try_recv() {
            seen.push(e.seq);
        }
        assert_eq!(seen, vec![7, 8, 9, 10]);
        drop(bus);
        assert!(slow.recv().await.is_none());
    }

    #[tokio::test]
    async fn an_unwatched_bus_counts_sequence_numbers_and_a_late_subscriber_starts_after_them() {
        let bus = EventBus::new(SessionId::new(), 8);
        let run = RunId::new();
        assert_eq!(bus.subscriber_count(), 0);
        assert_eq!(bus.publish(run, AgentEvent::TurnStarted { turn: 1 }), 1);
        assert_eq!(bus.publish(run, AgentEvent::TurnStarted { turn: 2 }), 2);
        let mut sub = bus.subscribe();
        assert_eq!(bus.subscriber_count(), 1);
        assert!(sub.try_recv().is_none());
        assert_eq!(bus.publish(run, AgentEvent::TurnStarted { turn: 3 }), 3);
        let e = sub.recv().await.unwrap();
        assert_eq!((e.seq, &e.event), (3, &AgentEvent::TurnStarted { turn: 3 }));
        // A retaining bus keeps what came before its first subscriber.
        let retaining: Bus<EventEnvelope> = Bus::retaining(8);
        let (seq, _) = retaining.publish_with(false, |seq| EventEnvelope {
            seq,
            at: Timestamp::now(),
            session_id: SessionId::new(),
            run_id: run,
            event: AgentEvent::TurnStarted { turn: 1 },
        });
        assert_eq!(seq, 1);
        assert_eq!(retaining.subscribe().try_recv().unwrap().seq, 1);
    }

    #[tokio::test]
    async fn try_recv_reports_lag_too() {
        let bus = EventBus::new(SessionId::new(), 2);
        let mut sub = bus.subscribe();
        let run = RunId::new();
        for turn in 1..=5 {
            bus.publish(run, AgentEvent::TurnStarted { turn });
        }
        let marker = sub.try_recv().unwrap();
        assert_eq!(marker.event, AgentEvent::EventsLagged { missed: 3 });
        assert_eq!(sub.try_recv().unwrap().seq, 4);
        assert_eq!(sub.try_recv().unwrap().seq, 5);
        assert!(sub.try_recv().is_none());
    }

    #[tokio::test]
    async fn sequence_counts_even_without_subscribers() {
        let bus = EventBus::new(SessionId::new(), 8);
        let run = RunId::new();
        assert_eq!(bus.publish(run, AgentEvent::TurnStarted { turn: 1 }), 1);
        let mut sub = bus.subscribe();
        assert_eq!(bus.publish(run, AgentEvent::TurnStarted { turn: 2 }), 2);
        assert_eq!(sub.recv().await.unwrap().seq, 2);
    }
}
