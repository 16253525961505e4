//! What a running supervisor shares between its delegations: the [`Live`] part of its
//! state (store, session token, slots, reserved names, event bus, task tracker, hub, and
//! the counters and handles behind one lock). Its fields are private; the rest of the
//! supervisor reaches them through the methods here.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard};

use arbor_protocol::SupervisorEnvelope;
use arbor_store::Store;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::session::events::Bus;
use crate::supervisor::config::names::Reservations;
use crate::supervisor::tree::handles::Handles;
use crate::supervisor::tree::hub::Hub;
use crate::supervisor::tree::slots::Slots;
use crate::supervisor::tree::summary::Summary;

/// What a task or delegation of an abandoned supervisor ends with (never written anywhere).
pub(crate) const ABANDONED: &str =
    "the supervisor was abandoned: nothing more of its runs is written";

/// The counters and the async handles, changed together under one lock.
pub(crate) struct State {
    pub(crate) summary: Summary,
    pub(crate) handles: Handles,
}

/// The shared, changing part of a supervisor.
pub(crate) struct Live {
    store: Arc<dyn Store>,
    session_token: CancellationToken,
    slots: Arc<Slots>,
    /// Requested names being registered (in-process guard; the store guards across).
    names: Arc<Reservations>,
    bus: Bus<SupervisorEnvelope>,
    /// Set once a task watches for the session's end (to close the event stream).
    watching: AtomicBool,
    /// Cancelled when the supervisor is dropped: its watcher stops.
    dropped: CancellationToken,
    /// Cancelled when the host abandons the supervisor ([`Supervisor::abandon_runs`]): its tasks
    /// are dropped where they stand, writing nothing more.
    ///
    /// [`Supervisor::abandon_runs`]: crate::Supervisor::abandon_runs
    abandoned: CancellationToken,
    state: Mutex<State>,
    tracker: TaskTracker,
    hub: Hub,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.dropped.cancel();
    }
}

impl Live {
    /// A fresh live part for `child_ids`, its event bus retaining `capacity` events.
    pub(crate) fn new(
        store: Arc<dyn Store>,
        session_token: CancellationToken,
        child_ids: &[String],
        capacity: usize,
    ) -> Self {
        Self {
            store,
            session_token,
            slots: Arc::new(Slots::default()),
            names: Arc::default(),
            bus: Bus::retaining(capacity),
            watching: AtomicBool::new(false),
            dropped: CancellationToken::new(),
            abandoned: CancellationToken::new(),
            state: Mutex::new(State {
                summary: Summary::new(child_ids),
                handles: Handles::new(capacity),
            }),
            tracker: TaskTracker::new(),
            hub: Hub::default(),
        }
    }

    /// The store children's sessions are kept in.
    pub(crate) fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The token whose cancellation ends every child.
    pub(crate) fn session_token(&self) -> &CancellationToken {
        &self.session_token
    }

    /// Live children across the tree.
    pub(crate) fn slots(&self) -> &Arc<Slots> {
        &self.slots
    }

    /// Requested names being registered.
    pub(crate) fn names(&self) -> &Arc<Reservations> {
        &self.names
    }

    /// The supervisor's event bus.
    pub(crate) fn bus(&self) -> &Bus<SupervisorEnvelope> {
        &self.bus
    }

    /// Whether a task already watches for the session's end.
    pub(crate) fn watching(&self) -> &AtomicBool {
        &self.watching
    }

    /// Cancelled when the supervisor is dropped.
    pub(crate) fn dropped(&self) -> &CancellationToken {
        &self.dropped
    }

    /// Cancelled when the host abandoned the supervisor.
    pub(crate) fn abandoned(&self) -> &CancellationToken {
        &self.abandoned
    }

    /// Spawns `fut` as a tracked task that is dropped where it stands, at its next poll, once
    /// the supervisor is abandoned (its output then `None`).
    pub(crate) fn spawn<F>(&self, fut: F) -> tokio::task::JoinHandle<Option<F::Output>>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tracker
            .spawn(unless_abandoned(self.abandoned.clone(), fut))
    }

    /// The tasks of every delegation (waited for at shutdown).
    pub(crate) fn tracker(&self) -> &TaskTracker {
        &self.tracker
    }

    /// The sessions this process runs.
    pub(crate) fn hub(&self) -> &Hub {
        &self.hub
    }

    /// The counters and handles. Every critical section is short and never panics midway.
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `fut`, unless `abandoned` is cancelled first: then it is dropped where it stands, at its
/// next poll, and the output is `None`.
pub(crate) async fn unless_abandoned<F: Future>(
    abandoned: CancellationToken,
    fut: F,
) -> Option<F::Output> {
    tokio::select! {
        biased;
        () = abandoned.cancelled() => None,
        out = fut => Some(out),
    }
}
