//! The hub: what this process knows of live sessions in the supervisor's tree, for message
//! delivery and teardown. Everything durable (records, transcripts, inbox entries,
//! tombstones) is in the store; the hub holds only the live parts: each session's inbox
//! queue, whether a run of it is in flight, the token that cancels it, and which sessions
//! were closed.
//!
//! It stays bounded by what is live: a session leaves it when its run ends with nothing
//! pending and nobody else holds its inbox (a delivery reloads the inbox from the
//! transcript), and a pair's rate bucket leaves once it has refilled (a new one is the same).
//! A host's root leaves once the host dropped its session ([`Hub::release_dropped`]), and
//! the ids its close closed once nothing of that tree is live any more. What remains is the
//! roots the host holds, and the ids of deleted sessions (a tombstone in the store guards
//! them too).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use arbor_protocol::SessionId;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use crate::session::inbox::Inbox;

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
    /// Its first run could not start (the factory or the model failed): why. Messages to it
    /// are refused with this, rather than starting the same failing run again.
    pub(crate) start_failure: Option<String>,
    /// Admitted, its first run not begun yet (its hook, its factory): a send waits for the
    /// start, and fails with the startup error if it fails.
    pub(crate) starting: bool,
}

/// What [`Hub::close`] cancelled.
#[derive(Debug, Default)]
pub(crate) struct Closed {
    /// A run of the session itself was in flight (or about to start) and is cancelled.
    pub(crate) own_run: bool,
    /// Live descendants closed with it (their runs cancelled).
    pub(crate) descendants: Vec<SessionId>,
    /// Those of them (closed by this close) whose run was in flight and is cancelled by it.
    pub(crate) running: Vec<SessionId>,
    /// Those of them (closed by this close) live without a run: retained children.
    pub(crate) idle: Vec<SessionId>,
}

/// A bucket idle this long is full again: forgetting it changes nothing.
const BUCKET_REFILL: Duration = Duration::from_secs(3);
/// Buckets kept before the refilled ones are swept.
const BUCKET_SWEEP_AT: usize = 1024;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Hashed with foldhash (seeded per map), not SipHash: every run's start and end looks up
/// the hub.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;
type Set<T> = HashSet<T, foldhash::fast::RandomState>;

#[derive(Debug, Default)]
struct HubState {
    live: Map<SessionId, Live>,
    closed: Set<SessionId>,
    buckets: Map<(Option<SessionId>, SessionId), Bucket>,
    /// Sessions whose follow-up run could not start (no slot, say): retried when a slot
    /// frees. Every other idle session with mail was woken when the mail arrived.
    deferred: Set<SessionId>,
    /// Teardowns whose tombstone could not be written (the store failed): retried after
    /// every run that ends, until one succeeds. Closed already, so nothing of them runs.
    unfinished: Vec<Unfinished>,
    /// Host roots closed, each with the ids its close closed (itself first): forgotten
    /// once the host let go of the root and nothing of the tree is live.
    closed_trees: Map<SessionId, Vec<SessionId>>,
}

/// A teardown to finish: the session and its tombstone's who and why.
#[derive(Debug, Clone)]
pub(crate) struct Unfinished {
    pub(crate) id: SessionId,
    pub(crate) by: String,
    pub(crate) reason: String,
}

/// Forgets the closed host trees whose root the host let go of and nothing of which is live:
/// nothing can start under them in this process any more (a spawn names a parent the host
/// holds; a follow-up needs a live inbox).
fn forget_closed_trees(state: &mut HubState) {
    let HubState {
        live,
        closed,
        closed_trees,
        ..
    } = state;
    closed_trees.retain(|_, ids| {
        let done = ids.iter().all(|id| !live.contains_key(id));
        if done {
            for id in ids.iter() {
                closed.remove(id);
            }
        }
        !done
    });
}

/// [`Hub::start_run`] on the locked state.
fn start_run_in(state: &mut HubState, id: SessionId, token: &CancellationToken) -> bool {
    if state.closed.contains(&id) {
        token.cancel();
        return false;
    }
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
            start_failure: None,
            starting: false,
        });
        live.inbox.clone()
    }

    /// [`start_run`](Self::start_run) for a child's first run, marking it about to start
    /// (see [`Live::starting`]) under the same lock: admission takes the hub once.
    pub(crate) fn start_first_run(&self, id: SessionId, token: &CancellationToken) -> bool {
        let mut state = self.lock();
        let started = start_run_in(&mut state, id, token);
        if let Some(live) = state.live.get_mut(&id) {
            live.starting = true;
        }
        started
    }

    /// The first run of `id` began (or was handed to another process): sends stop waiting.
    pub(crate) fn started(&self, id: SessionId) {
        let was = self
            .lock()
            .live
            .get_mut(&id)
            .is_some_and(|live| std::mem::replace(&mut live.starting, false));
        if was {
            self.changed.notify_waiters();
        }
    }

    /// Whether the first run of `id` is about to start.
    pub(crate) fn is_starting(&self, id: SessionId) -> bool {
        self.lock().live.get(&id).is_some_and(|l| l.starting)
    }

    /// Marks a run of `id` started under `token`; `false` if one is in flight already. A
    /// closed (deleted) session's token is cancelled at once: whatever was about to run
    /// under it stops before its first turn, whichever of the delete and the start came
    /// first.
    pub(crate) fn start_run(&self, id: SessionId, token: &CancellationToken) -> bool {
        start_run_in(&mut self.lock(), id, token)
    }

    /// Cancels the run of `id` in flight, if one is (its task-lifetime descendants end with
    /// it); `false` when none is.
    pub(crate) fn cancel_run(&self, id: SessionId) -> bool {
        let state = self.lock();
        match state.live.get(&id) {
            Some(Live {
                running: true,
                token: Some(token),
                ..
            }) => {
                token.cancel();
                true
            }
            _ => false,
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

    /// Marks the run of `id` over; returns whether messages wait in its inbox. A session
    /// with nothing pending, whose inbox nobody else holds, leaves the hub (a later delivery
    /// reloads its inbox from its transcript).
    pub(crate) fn end_run(&self, id: SessionId) -> bool {
        let mail = self.end(id, false).0;
        self.changed.notify_waiters();
        mail
    }

    /// [`end_run`](Self::end_run) that, when messages wait and a follow-up may start (not
    /// the host's, not closed), keeps `id` marked running for it in the same step: `true`
    /// then, and the caller starts it. Wakes no waiter: the caller
    /// [`announce`](Self::announce)s once it has started what else goes on, so a waiter for
    /// quiet never sees the gap between a run's end and its follow-up.
    pub(crate) fn end_run_claiming(&self, id: SessionId) -> bool {
        self.end(id, true).1
    }

    /// Ends the run of `id`: whether mail waits, and whether its follow-up was claimed
    /// (`claim`).
    fn end(&self, id: SessionId, claim: bool) -> (bool, bool) {
        let mut state = self.lock();
        let sweep = !state.closed_trees.is_empty();
        let closed = state.closed.contains(&id);
        let (mail, idle, claimed) = match state.live.get_mut(&id) {
            Some(live) => {
                live.running = false;
                live.token = None;
                live.starting = false;
                let mail = !live.inbox.is_empty();
                let idle = !mail
                    && !live.host_owned
                    && live.start_failure.is_none()
                    && Arc::strong_count(&live.inbox) == 1;
                let claimed = claim && mail && !live.host_owned && !closed;
                live.running = claimed;
                (mail, idle, claimed)
            }
            None => (false, false, false),
        };
        if idle {
            state.live.remove(&id);
            state.deferred.remove(&id);
        }
        if sweep {
            forget_closed_trees(&mut state);
        }
        (mail, claimed)
    }

    /// Wakes whoever waits for a change of what runs ([`end_run_claiming`](Self::end_run_claiming)).
    pub(crate) fn announce(&self) {
        self.changed.notify_waiters();
    }

    /// Remembers that the first run of `id` could not start, and why.
    pub(crate) fn set_start_failure(&self, id: SessionId, why: String) {
        if let Some(live) = self.lock().live.get_mut(&id) {
            live.start_failure = Some(why);
            live.starting = false;
        }
        self.changed.notify_waiters();
    }

    /// Why the first run of `id` could not start, if it could not.
    pub(crate) fn start_failure(&self, id: SessionId) -> Option<String> {
        self.lock()
            .live
            .get(&id)
            .and_then(|l| l.start_failure.clone())
    }

    /// Sessions the hub holds (running, host-owned, with mail, or failed to start).
    pub(crate) fn len(&self) -> usize {
        self.lock().live.len()
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
    /// started again, and no child can be spawned under them. Says what it cancelled.
    pub(crate) fn close(&self, id: SessionId) -> Closed {
        let mut state = self.lock();
        let own_run = state.live.get(&id).is_some_and(|l| l.running);
        let host_root = state.live.get(&id).is_some_and(|l| l.host_owned);
        let mut closing = vec![id];
        let mut out = Vec::new();
        let mut newly = Vec::new();
        while let Some(next) = closing.pop() {
            if !state.closed.insert(next) && next != id {
                continue;
            }
            newly.push(next);
            for (child, _) in state.live.iter().filter(|(_, l)| l.parent == Some(next)) {
                out.push(*child);
                closing.push(*child);
            }
        }
        // Read before any token is cancelled (a cancel reaches a task-lifetime child's run
        // through its caller's token): a run whose token a racing cancel reached first is
        // that cancel's to report.
        let (mut running, mut idle) = (Vec::new(), Vec::new());
        let fresh: Set<SessionId> = newly.iter().copied().collect();
        for child in out.iter().filter(|c| fresh.contains(c)) {
            match state.live.get(child) {
                Some(l) if !l.running => idle.push(*child),
                Some(l) if l.token.as_ref().is_none_or(|t| !t.is_cancelled()) => {
                    running.push(*child);
                }
                _ => {}
            }
        }
        for next in &newly {
            if let Some(live) = state.live.get_mut(next)
                && let Some(token) = live.token.take()
            {
                token.cancel();
            }
        }
        if host_root {
            let mut ids = Vec::with_capacity(out.len() + 1);
            ids.push(id);
            ids.extend(out.iter().copied());
            state.closed_trees.insert(id, ids);
        }
        Closed {
            own_run,
            descendants: out,
            running,
            idle,
        }
    }

    /// Cancels `token`, the run of `id`, under the hub's lock, and returns the runs in
    /// flight under `id` the cancel stopped: those whose token it cancelled (a task-lifetime
    /// child's token is a child of its caller's, so the cancel reaches it before it
    /// returns). Under the lock, a close or another cancel racing it reports each run once.
    pub(crate) fn cancel_under(&self, id: SessionId, token: &CancellationToken) -> Vec<SessionId> {
        let state = self.lock();
        let mut before = Vec::new();
        let mut next = vec![id];
        while let Some(parent) = next.pop() {
            for (child, live) in state.live.iter().filter(|(_, l)| l.parent == Some(parent)) {
                next.push(*child);
                if let Some(t) = live
                    .token
                    .as_ref()
                    .filter(|t| live.running && !t.is_cancelled())
                {
                    before.push((*child, t.clone()));
                }
            }
        }
        token.cancel();
        before
            .into_iter()
            .filter(|(_, t)| t.is_cancelled())
            .map(|(c, _)| c)
            .collect()
    }

    /// Lets go of the host's roots whose session the host dropped (nothing but the hub
    /// holds their inbox; their mail is in their transcript, and reopening one attaches it
    /// again), and forgets the closed trees nothing of which is live any more. Returns how
    /// many roots it let go of.
    pub(crate) fn release_dropped(&self) -> usize {
        let mut state = self.lock();
        let dropped: Vec<SessionId> = state
            .live
            .iter()
            .filter(|(_, l)| l.host_owned && !l.running && Arc::strong_count(&l.inbox) == 1)
            .map(|(id, _)| *id)
            .collect();
        for id in &dropped {
            state.live.remove(id);
            state.deferred.remove(id);
        }
        forget_closed_trees(&mut state);
        dropped.len()
    }

    /// Closed ids the hub remembers.
    pub(crate) fn closed_len(&self) -> usize {
        self.lock().closed.len()
    }

    /// Remembers a teardown whose tombstone could not be written.
    pub(crate) fn unfinished(&self, cleanup: Unfinished) {
        let mut state = self.lock();
        if !state.unfinished.iter().any(|u| u.id == cleanup.id) {
            state.unfinished.push(cleanup);
        }
    }

    /// Takes the unfinished teardowns (to retry them).
    pub(crate) fn take_unfinished(&self) -> Vec<Unfinished> {
        std::mem::take(&mut self.lock().unfinished)
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
        if state.buckets.len() >= BUCKET_SWEEP_AT {
            state
                .buckets
                .retain(|_, b| now.duration_since(b.at) < BUCKET_REFILL);
        }
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

    /// Rate buckets held, for tests of their bound.
    #[cfg(test)]
    pub(crate) fn buckets(&self) -> usize {
        self.lock().buckets.len()
    }

    /// Gives back a token taken for a delivery that then failed.
    pub(crate) fn refund_token(&self, from: Option<SessionId>, to: SessionId) {
        if let Some(bucket) = self.lock().buckets.get_mut(&(from, to)) {
            bucket.tokens = (bucket.tokens + 1.0).min(RATE_BURST);
        }
    }
}

#[cfg(test)]
#[path = "hub_tests.rs"]
mod tests;
