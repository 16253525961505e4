//! The parent's side: a child's run enqueued for a worker, and its outcome awaited.
//!
//! One listener per process ([`Waiters`]) hears `arbor_child_done` and wakes the delegation
//! waiting on that child; every waiter also polls the queue, so a notification lost with a
//! connection only delays. A cancelled delegation flags its run (the worker hears it at its
//! next heartbeat and stops it) and still waits, a bounded time, for the worker's report.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arbor_core::events::EventBus;
use arbor_core::supervisor::{ChildRunner, RemoteChild, RemoteOutcome};
use arbor_core::{CoreError, CoreResult, RunResult};
use arbor_protocol::{EventEnvelope, SessionId};
use arbor_store_postgres::{ChildRun, RunState, Wake, WorkQueue};
use async_trait::async_trait;
use serde_json::json;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How often a waiter polls besides the notifications.
const POLL: Duration = Duration::from_millis(500);

/// The queue and the delegations waiting on it, with the one listener that wakes them.
#[derive(Debug)]
pub(crate) struct Waiters {
    queue: WorkQueue,
    waiting: Mutex<HashMap<SessionId, Arc<Notify>>>,
    listening: tokio::sync::OnceCell<()>,
}

impl Waiters {
    pub(crate) fn new(queue: WorkQueue) -> Self {
        Self {
            queue,
            waiting: Mutex::default(),
            listening: tokio::sync::OnceCell::new(),
        }
    }

    /// The queue.
    pub(crate) fn queue(&self) -> &WorkQueue {
        &self.queue
    }

    /// Starts the listener once (a failure to listen leaves the waiters polling).
    async fn listen(self: &Arc<Self>) {
        let this = Arc::clone(self);
        self.listening
            .get_or_init(|| async move {
                let mut wakeups = match this.queue.listen().await {
                    Ok(w) => w,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot listen for finished child runs; polling");
                        return;
                    }
                };
                let weak = Arc::downgrade(&this);
                tokio::spawn(async move {
                    loop {
                        let wake = wakeups.next(Duration::from_secs(30)).await;
                        let Some(this) = weak.upgrade() else { return };
                        if let Some(Wake::Finished(id) | Wake::Events(id)) = wake
                            && let Some(n) = this.lock().get(&id)
                        {
                            n.notify_one();
                        }
                    }
                });
            })
            .await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SessionId, Arc<Notify>>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Hands a tree's children to the queue; each run names the spec revision (its
/// fingerprint) a worker must build it from.
#[derive(Debug, Clone)]
pub(crate) struct QueueRunner {
    waiters: Arc<Waiters>,
    spec: String,
    /// Tests hold the wait here, between its read of the relayed events and its read of the
    /// run's state, to force what lands in between.
    #[cfg(test)]
    pub(super) between_reads: Option<Arc<tokio::sync::Semaphore>>,
}

impl QueueRunner {
    pub(crate) fn new(waiters: Arc<Waiters>, spec: String) -> Self {
        Self {
            waiters,
            spec,
            #[cfg(test)]
            between_reads: None,
        }
    }
}

/// Removes a waiter however its wait ends.
struct Waiting<'a>(&'a Waiters, SessionId);

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.lock().remove(&self.1);
    }
}

#[async_trait]
impl ChildRunner for QueueRunner {
    async fn run(&self, child: RemoteChild) -> CoreResult<RunResult> {
        let queue = self.waiters.queue();
        let run = ChildRun {
            session: child.session,
            parent: child.parent,
            root: child.root,
            payload: json!({
                "spec": self.spec,
                "input": child.input,
                "limits": child.limits,
                "resume_run": child.resume_run,
                "mapping": child.mapping,
                "stream": child.events.is_some(),
            }),
            max_active: Some(child.max_active),
        };
        queue.enqueue(&run).await?;
        tracing::debug!(child = %child.session, "child run handed to the workers");
        self.wait(child.session, child.events.as_deref(), &child.cancel)
            .await
    }

    async fn rejoin(
        &self,
        session: SessionId,
        cancel: CancellationToken,
    ) -> Option<CoreResult<RunResult>> {
        match self.waiters.queue().state(session).await {
            Ok(None) => None,
            Err(e) => Some(Err(e.into())),
            Ok(Some(_)) => {
                tracing::info!(child = %session, "waiting again for a child run handed over before");
                Some(self.wait(session, None, &cancel).await)
            }
        }
    }
}

impl QueueRunner {
    /// Waits for the outcome of `session`'s handed-over run, publishing the events it
    /// relays on `events`; after `cancel`, flags the run and waits a bounded time more.
    async fn wait(
        &self,
        session: SessionId,
        events: Option<&EventBus>,
        cancel: &CancellationToken,
    ) -> CoreResult<RunResult> {
        let queue = self.waiters.queue();
        self.waiters.listen().await;
        let notify = Arc::new(Notify::new());
        self.waiters.lock().insert(session, Arc::clone(&notify));
        let _waiting = Waiting(&self.waiters, session);
        // After a cancel, the worker hears it within a heartbeat; past this, the delegation
        // ends without its report (the run is flagged, and stops when a worker holds it).
        let mut gave_up_at = None;
        let mut relayed = 0;
        loop {
            relayed = publish_relayed(queue, session, events, relayed).await?;
            #[cfg(test)]
            if let Some(gate) = &self.between_reads
                && let Ok(permit) = gate.acquire().await
            {
                permit.forget();
            }
            match queue.state(session).await? {
                Some((RunState::Done | RunState::Failed, Some(outcome))) => {
                    // The worker relays every event before it reports: what it relayed
                    // after the read above is read now, so the pump has every one before
                    // the outcome ends the delegation.
                    publish_relayed(queue, session, events, relayed).await?;
                    let outcome: RemoteOutcome = serde_json::from_value(outcome).map_err(|e| {
                        CoreError::Supervisor(format!(
                            "the worker's report of child {session} cannot be read: {e}"
                        ))
                    })?;
                    if events.is_some()
                        && let Err(e) = queue.forget_events(session).await
                    {
                        tracing::debug!(error = %e, "could not forget a run's relayed events");
                    }
                    return outcome.into_result(session);
                }
                Some((RunState::Cancelled, _)) => {
                    return Err(CoreError::Supervisor(
                        "cancelled before a worker claimed it".to_owned(),
                    ));
                }
                Some(_) => {}
                None => {
                    return Err(CoreError::Supervisor(format!(
                        "the child run {session} left the queue"
                    )));
                }
            }
            if cancel.is_cancelled() && gave_up_at.is_none() {
                tracing::info!(child = %session, "the delegation was cancelled: flagging its run");
                queue.cancel(session).await?;
                gave_up_at = Some(tokio::time::Instant::now() + super::DEFAULT_LEASE);
            }
            if let Some(at) = gave_up_at
                && tokio::time::Instant::now() >= at
            {
                return Err(CoreError::Supervisor(
                    "cancelled; the worker did not report in time".to_owned(),
                ));
            }
            tokio::select! {
                () = notify.notified() => {}
                () = tokio::time::sleep(POLL) => {}
                () = cancel.cancelled(), if gave_up_at.is_none() => {}
            }
        }
    }
}

/// Publishes on `events` what `session`'s run relayed after position `after`; returns the
/// new position.
async fn publish_relayed(
    queue: &WorkQueue,
    session: SessionId,
    events: Option<&EventBus>,
    mut after: u64,
) -> CoreResult<u64> {
    let Some(bus) = events else {
        return Ok(after);
    };
    for (seq, event) in queue.events_after(session, after).await? {
        after = seq;
        match serde_json::from_value::<EventEnvelope>(event) {
            Ok(e) => {
                bus.publish(e.run_id, e.event);
            }
            Err(e) => tracing::debug!(error = %e, "a relayed event does not read"),
        }
    }
    Ok(after)
}
