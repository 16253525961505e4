//! The hub: what this process knows of live sessions in the supervisor's tree, for message
//! delivery and teardown. Everything durable (records, transcripts, inbox entries,
//! tombstones) is in the store; the hub holds only the live parts: each session's inbox
//! queue, whether a run of it is in flight, the token that cancels it, and which sessions
//! were closed.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use arbor_protocol::SessionId;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use crate::inbox::Inbox;

/// Messages per second between one sender and one target, and the burst allowed.
pub(crate) const RATE_PER_SECOND: f64 = 1.0;
/// The burst: messages a pair may send at once.
pub(crate) const RATE_BURST: f64 = 3.0;

/// One live session.
#[derive(Debug)]
pub(crate) struct Live {
    pub(crate) inbox: Arc<Inbox>,
    pub(crate) parent: Option<SessionId>,
    /// A run of it is in flight, or about to start.
    pub(crate) running: bool,
    /// Cancels its current run (and what hangs under it).
    pub(crate) token: Option<CancellationToken>,
    /// Attached by the host (a root): the runtime never starts its runs.
    pub(crate) host_owned: bool,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

#[derive(Debug, Default)]
struct HubState {
    live: HashMap<SessionId, Live>,
    closed: HashSet<SessionId>,
    buckets: HashMap<(Option<SessionId>, SessionId), Bucket>,
    /// Sessions whose follow-up run could not start (no slot, say): retried when a slot
    /// frees. Every other idle session with mail was woken when the mail arrived.
    deferred: HashSet<SessionId>,
}

/// See the module docs.
#[derive(Debug, Default)]
pub(crate) struct Hub {
    state: Mutex<HubState>,
    /// Notified whenever a run ends.
    pub(crate) changed: tokio::sync::Notify,
}

impl Hub {
    fn lock(&self) -> MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The live inbox of `id`, if the hub has one.
    pub(crate) fn inbox(&self, id: SessionId) -> Option<Arc<Inbox>> {
        self.lock().live.get(&id).map(|l| l.inbox.clone())
    }

    /// Registers `id` with `inbox` unless it is registered already; returns the inbox in
    /// use (the first registration wins, so deliveries and the session share one queue).
    pub(crate) fn register(
        &self,
        id: SessionId,
        parent: Option<SessionId>,
        inbox: Arc<Inbox>,
        host_owned: bool,
    ) -> Arc<Inbox> {
        let mut state = self.lock();
        let live = state.live.entry(id).or_insert(Live {
            inbox,
            parent,
            running: false,
            token: None,
            host_owned,
        });
        live.inbox.clone()
    }

    /// Marks a run of `id` started under `token`; `false` if one is in flight already.
    pub(crate) fn start_run(&self, id: SessionId, token: &CancellationToken) -> bool {
        let mut state = self.lock();
        match state.live.get_mut(&id) {
            Some(live) if live.running && live.token.is_some() => false,
            Some(live) => {
                live.running = true;
                live.token = Some(token.clone());
                true
            }
            None => true,
        }
    }

    /// Claims `id` for a follow-up run: `true` when it is registered, idle and not the
    /// host's, and is now marked running.
    pub(crate) fn claim_idle(&self, id: SessionId) -> bool {
        let mut state = self.lock();
        if state.closed.contains(&id) {
            return false;
        }
        match state.live.get_mut(&id) {
            Some(live) if !live.running && !live.host_owned => {
                live.running = true;
                live.token = None;
                true
            }
            _ => false,
        }
    }

    /// Marks the run of `id` over; returns whether messages wait in its inbox.
    pub(crate) fn end_run(&self, id: SessionId) -> bool {
        let mail = {
            let mut state = self.lock();
            match state.live.get_mut(&id) {
                Some(live) => {
                    live.running = false;
                    live.token = None;
                    !live.inbox.is_empty()
                }
                None => false,
            }
        };
        self.changed.notify_waiters();
        mail
    }

    /// Whether any run the runtime started is in flight.
    pub(crate) fn any_running(&self) -> bool {
        self.lock()
            .live
            .values()
            .any(|l| l.running && !l.host_owned)
    }

    /// Whether a run of `id` is in flight.
    pub(crate) fn is_running(&self, id: SessionId) -> bool {
        self.lock().live.get(&id).is_some_and(|l| l.running)
    }

    /// Remembers that a follow-up run of `id` could not start.
    pub(crate) fn defer(&self, id: SessionId) {
        self.lock().deferred.insert(id);
    }

    /// Takes the deferred sessions that are still idle, not the host's, not closed and have
    /// pending messages (to wake when a slot frees). Costs nothing when none was deferred.
    pub(crate) fn take_deferred(&self) -> Vec<SessionId> {
        let mut state = self.lock();
        if state.deferred.is_empty() {
            return Vec::new();
        }
        let deferred = std::mem::take(&mut state.deferred);
        deferred
            .into_iter()
            .filter(|id| {
                !state.closed.contains(id)
                    && state
                        .live
                        .get(id)
                        .is_some_and(|l| !l.running && !l.host_owned && !l.inbox.is_empty())
            })
            .collect()
    }

    /// Closes `id` and every live descendant: their runs are cancelled, they are never
    /// started again, and no child can be spawned under them. Returns the descendants
    /// closed (not `id` itself).
    pub(crate) fn close(&self, id: SessionId) -> Vec<SessionId> {
        let mut state = self.lock();
        let mut closing = vec![id];
        let mut out = Vec::new();
        while let Some(next) = closing.pop() {
            if !state.closed.insert(next) && next != id {
                continue;
            }
            let children: Vec<SessionId> = state
                .live
                .iter()
                .filter(|(_, l)| l.parent == Some(next))
                .map(|(c, _)| *c)
                .collect();
            if let Some(live) = state.live.get_mut(&next)
                && let Some(token) = live.token.take()
            {
                token.cancel();
            }
            for child in children {
                out.push(child);
                closing.push(child);
            }
        }
        out
    }

    /// Whether `id` was closed.
    pub(crate) fn is_closed(&self, id: SessionId) -> bool {
        self.lock().closed.contains(&id)
    }

    /// Takes one message token of the pair `from → to`; on refusal, how long until one is
    /// available.
    pub(crate) fn take_token(
        &self,
        from: Option<SessionId>,
        to: SessionId,
    ) -> Result<(), Duration> {
        let now = Instant::now();
        let mut state = self.lock();
        let bucket = state.buckets.entry((from, to)).or_insert(Bucket {
            tokens: RATE_BURST,
            at: now,
        });
        let elapsed = now.duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * RATE_PER_SECOND).min(RATE_BURST);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - bucket.tokens) / RATE_PER_SECOND;
            Err(Duration::from_secs_f64(wait))
        }
    }

    /// Gives back a token taken for a delivery that then failed.
    pub(crate) fn refund_token(&self, from: Option<SessionId>, to: SessionId) {
        if let Some(bucket) = self.lock().buckets.get_mut(&(from, to)) {
            bucket.tokens = (bucket.tokens + 1.0).min(RATE_BURST);
        }
    }
}
