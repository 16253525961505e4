//! Runs that cross processes, both sides of a [`ChildRunner`]:
//! - the parent's: which delegation's run is handed to the runner ([`Supervisor::remote_child`])
//!   and what its outcome becomes ([`Supervisor::run_remote`]); everything else (admission,
//!   record, counters, events, hooks, the terminal report) stays with the parent;
//! - the worker's: [`Supervisor::run_claimed`] runs a child another process registered, from
//!   its record, under the terms its spawn narrowed to (what [`StoredTerms`](crate::supervisor::delegation::stored::StoredTerms) reads back, `stored.rs`), and a
//!   takeover continues it from its transcript: a turn in progress is asked again, a call
//!   recorded done is not run again, a call in flight is reported interrupted.

use std::sync::Arc;

use arbor_protocol::{ChildOrigin, EventEnvelope, SessionId};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::{CoreError, CoreResult};
use crate::outcome::RunResult;
use crate::session::events::{EventBus, Subscription};
use crate::supervisor::config::limits::{LimitsInput, SupervisorLimits};
use crate::supervisor::config::policy::Report;
use crate::supervisor::config::runner::RemoteChild;
use crate::supervisor::delegation::admitted::{Admitted, ClaimedFrom, Start, Worked};
use crate::supervisor::delegation::pipeline::Registered;
use crate::supervisor::delegation::pump::run_pump;
use crate::supervisor::request::Mode;
use crate::supervisor::runtime::Supervisor;

/// A child run another process registered, claimed to run here.
#[derive(Debug, Clone)]
pub struct ClaimedRun {
    /// The child's session.
    pub session: SessionId,
    /// Its input (a takeover goes on from its transcript instead).
    pub input: String,
    /// The limits its parent's `before` hook left it (narrowing its record's terms).
    pub limits: Option<LimitsInput>,
    /// A run an earlier claim began and did not finish (its worker died): it goes on from
    /// its transcript, never from scratch.
    pub takeover: bool,
    /// The suspended run to resume with its recorded decisions (durable approvals), instead
    /// of a first run.
    pub resume_run: Option<arbor_protocol::RunId>,
    /// The delegation mapping to keep beside a suspension ([`RemoteChild::mapping`]).
    pub mapping: Option<serde_json::Value>,
    /// Where the run's events go (per-token deltas left out), when its parent streams them
    /// ([`RemoteChild::events`]): the worker carries them back.
    pub relay: Option<mpsc::UnboundedSender<EventEnvelope>>,
    /// Cancelled when the run must stop (cancelled at the parent, deleted, the claim lost).
    pub cancel: CancellationToken,
}

impl Supervisor {
    /// The run to hand to the runner, if this delegation's goes elsewhere: a first run of a
    /// sync or joined child with a parent session, outside durable approvals, whose
    /// permission no `before` hook narrowed (a permission cannot travel: such a child runs
    /// here rather than elsewhere with more than it was given).
    pub(crate) fn remote_child(
        &self,
        a: &Admitted,
        limits: SupervisorLimits,
        input: &str,
        narrowed_permission: bool,
    ) -> Option<RemoteChild> {
        self.settings().runner()?;
        let record = a.record.as_ref()?;
        let parent = record.parent_id?;
        // A first run, or a suspended one resumed with its decisions (durable approvals);
        // follow-ups and continued runs run where their supervisor is.
        let handed = a.control.claimed.is_none()
            && !a.control.start.follow_up()
            && a.control.start != Start::Recover;
        if !handed || narrowed_permission || a.terms.mode == Mode::Message {
            return None;
        }
        Some(RemoteChild {
            session: record.id,
            parent,
            root: record.root_id,
            child_id: a.terms.child_id.clone(),
            input: input.to_owned(),
            limits: limits.to_input(),
            max_active: limits.max_active_children,
            cancel: a.control.token.clone(),
            resume_run: a.control.start.resumed_run(),
            mapping: self.mapping_value(a),
            events: None,
        })
    }

    /// Hands the run to the runner and takes its outcome as this delegation's work; the
    /// events it relays go through this delegation's pump when its policy streams them.
    pub(crate) async fn run_remote(
        &self,
        a: &Admitted,
        mut child: RemoteChild,
        origin: &ChildOrigin,
        limits: SupervisorLimits,
    ) -> Worked {
        let Some(runner) = self.settings().runner().cloned() else {
            return Worked::Error(CoreError::Supervisor(
                "no runner to hand the child's run to".to_owned(),
            ));
        };
        let session_id = child.session;
        // Live here as if it ran here: a delete or cancel reaches its token, and deliveries
        // see it running (the store holds them; its worker takes them in).
        let hub = self.live().hub();
        hub.register(
            session_id,
            Some(child.parent),
            std::sync::Arc::new(crate::session::inbox::Inbox::new()),
            false,
        );
        // Marked running with the delegation's token unless it is already (a closed session
        // cancels the token instead).
        hub.start_run(session_id, &a.control.token);
        // Handed over: it starts elsewhere, and what is sent meanwhile waits in the store.
        hub.started(session_id);
        if a.control.token.is_cancelled() {
            return Worked::Error(self.cancel_error(a));
        }
        self.mark_queued(a).await;
        let ran = if a.terms.policy.report == Report::OnComplete {
            runner.run(child).await
        } else {
            let bus = Arc::new(EventBus::new(session_id, EVENT_BUFFER));
            let sub = bus.subscribe();
            child.events = Some(bus);
            let stop = CancellationToken::new();
            let pump = run_pump(
                self,
                origin.clone(),
                a.terms.policy,
                limits,
                sub,
                stop.clone(),
            );
            let run = async {
                let r = runner.run(child).await;
                stop.cancel();
                r
            };
            tokio::join!(run, pump).0
        };
        // What was delivered here meanwhile went to the store, and the run elsewhere read
        // what it could: what waits now is what the transcript says.
        if let Some(inbox) = self.live().hub().inbox(session_id)
            && let Ok(entries) = self.live().store().transcript(session_id, 0, None).await
        {
            inbox.reload(&entries);
        }
        match ran {
            Ok(result) => Worked::Ran {
                session_id,
                name: a.name.clone(),
                result: Box::new(result),
            },
            Err(_) if a.control.token.is_cancelled() => Worked::Error(self.cancel_error(a)),
            Err(e) => Worked::Error(self.redact_error(e)),
        }
    }

    /// Takes into the live inbox of `session` (a child this process runs) the messages other
    /// processes stored for it since transcript position `after`, which moves on; returns
    /// how many were taken in. A worker calls it while it runs a claimed child, so a message
    /// sent from any host reaches the run's next turn. Each message is taken in once.
    pub(crate) async fn collect_mail(
        &self,
        session: SessionId,
        after: &mut u64,
    ) -> CoreResult<usize> {
        let Some(inbox) = self.live().hub().inbox(session) else {
            return Ok(0);
        };
        let entries = self
            .live()
            .store()
            .transcript(session, *after, None)
            .await?;
        if let Some(last) = entries.last() {
            *after = last.seq;
        }
        Ok(inbox.absorb(&entries))
    }

    /// Runs the child `claimed.session`, which another process admitted and registered, here:
    /// built by this supervisor's catalog entry for it, under the terms its record keeps (the
    /// claim's limits narrowing them), inside its tree (its path and depth from the record),
    /// until it ends, its timeout fires or `claimed.cancel` is cancelled. A takeover goes on
    /// from the transcript. What the parent reports (events, counters, hooks, notices) is
    /// the parent's business: nothing of it happens here.
    ///
    /// Fails with `Denied(Unknown)` for a deleted or unknown session (or one under a deleted
    /// ancestor), and `Validation` for a child this supervisor's catalog does not hold.
    pub(crate) async fn run_claimed(&self, claimed: ClaimedRun) -> CoreResult<RunResult> {
        let record = self.live_child(claimed.session).await?;
        let Some(terms) = self.stored_terms(&record)? else {
            return Err(CoreError::validation(format!(
                "session {} is not a child of supervisor \"{}\" (its catalog has no entry \
                 for it)",
                record.id,
                self.settings().id()
            )));
        };
        self.check_ancestors(&record).await?;
        // The worker before finished the run and died before reporting it: its end is in
        // the transcript, and that is the outcome (nothing runs again).
        if claimed.takeover
            && let Some(done) = finished_run(self.live().store().as_ref(), record.id).await?
        {
            return Ok(done);
        }
        // A takeover of a run that never began (its worker died before the first write)
        // starts it; one that began goes on from its transcript.
        let recover = claimed.takeover
            && claimed.resume_run.is_none()
            && matches!(
                record.status,
                arbor_protocol::SessionStatus::Running | arbor_protocol::SessionStatus::Interrupted
            );
        let limits = match &claimed.limits {
            Some(l) => terms.limits.narrow(l)?,
            None => terms.limits,
        };
        let slot = self.live().slots().reserve(limits.max_active_children)?;
        let mut admitted = self
            .rebuilt(terms, record, limits, slot, self.redact(&claimed.input))
            .await?;
        admitted.control.caller = Some(claimed.cancel);
        admitted.control.start = match claimed.resume_run {
            Some(run) => Start::Resume {
                run,
                follow_up: false,
            },
            None if recover => Start::Recover,
            None => Start::Fresh,
        };
        admitted.control.claimed = Some(ClaimedFrom {
            mapping: claimed.mapping,
            relay: claimed.relay,
        });
        let registered = Registered::resumed(self, admitted);
        registered.begin();
        match registered.run().await.here() {
            Worked::Ran { result, .. } => Ok(*result),
            Worked::Rejected(reason) => {
                Err(CoreError::denied(crate::error::DenyReason::Hook, reason))
            }
            Worked::Error(e) => Err(e),
        }
    }
}

impl Supervisor {
    /// [`NestedResumer::rejoin`](crate::NestedResumer::rejoin): the sync child that call
    /// `call_id` of `session`'s run `run` started (its record names the call), waited for
    /// through the runner when it was handed over, or read from its transcript when its run
    /// had ended; its answer as the call reads it.
    pub(crate) async fn rejoin_call(
        &self,
        session: SessionId,
        run: arbor_protocol::RunId,
        call_id: &str,
        tool: &str,
        cancel: &CancellationToken,
    ) -> CoreResult<Option<crate::session::resumer::NestedOutcome>> {
        if tool != "spawn_agent" {
            return Ok(None);
        }
        let children = self
            .live()
            .store()
            .list_sessions(arbor_store::SessionQuery::Children(session))
            .await?;
        let Some(child) = children.into_iter().find(|c| {
            c.meta["spawn_call"] == call_id && c.spawned_by.is_some_and(|s| s.run_id == run)
        }) else {
            return Ok(None);
        };
        // A joined child's handle died with the process that held it: only a sync call
        // waits for its child's answer.
        if child.meta["mode"] != "sync" || child.tombstone.is_some() {
            return Ok(None);
        }
        let Some(result) = self.wait_again(&child, cancel).await? else {
            return Ok(None);
        };
        let outcome = match result {
            Ok(r) if r.status == arbor_protocol::RunStatus::Succeeded => {
                crate::session::resumer::NestedOutcome::Completed(
                    crate::supervisor::delegation::answer::finished(
                        &self.delegator(),
                        &delegation_result(&child, r),
                    ),
                )
            }
            Ok(r) if r.status == arbor_protocol::RunStatus::Suspended => return Ok(None),
            Ok(r) => crate::session::resumer::NestedOutcome::Failed(
                self.redact(
                    r.error
                        .as_deref()
                        .unwrap_or("the delegated run did not succeed"),
                ),
            ),
            // Continued here, it suspended (it asked, or waits for approval): the caller's
            // call waits with it, as it would have before the crash.
            Err(CoreError::Suspended(waits)) => return Err(CoreError::Suspended(waits)),
            Err(e) => crate::session::resumer::NestedOutcome::Failed(self.redact(&e.to_string())),
        };
        tracing::info!(parent = %session, child = %child.id, "a cut-off call rejoined its child");
        Ok(Some(outcome))
    }
}

impl Supervisor {
    /// A new child handed to the workers' queue is listed `queued` until a worker starts
    /// its run, as one waiting for a slot here is: only over the record as admission wrote
    /// it (a worker that started it already moved it on, and wins).
    async fn mark_queued(&self, a: &Admitted) {
        let Some(record) = a.record.as_ref().filter(|r| {
            a.control.start == Start::Fresh && r.status == arbor_protocol::SessionStatus::Idle
        }) else {
            return;
        };
        let update = arbor_store::SessionUpdate {
            expected_version: Some(record.version),
            live_only: true,
            ..arbor_store::SessionUpdate::status(arbor_protocol::SessionStatus::Queued)
        };
        if let Err(e) = self.live().store().update_session(record.id, &update).await {
            tracing::debug!(child = %record.id, error = %e, "not marked queued (it moved on)");
        }
    }

    /// The run of `child`, whose caller's process died: waited for again through the runner
    /// when it was handed to a worker, read from its transcript when it had ended, or (its
    /// own run cut off by the same crash, `interrupted`) continued here and waited for.
    /// `None` when none of these can say (it runs in another process, say).
    async fn wait_again(
        &self,
        child: &arbor_store::SessionRecord,
        cancel: &CancellationToken,
    ) -> CoreResult<Option<CoreResult<RunResult>>> {
        let waited = match self.settings().runner() {
            Some(runner) => runner.rejoin(child.id, cancel.clone()).await,
            None => None,
        };
        Ok(match waited {
            Some(r) => Some(r),
            None if matches!(
                child.status,
                arbor_protocol::SessionStatus::Succeeded | arbor_protocol::SessionStatus::Failed
            ) =>
            {
                finished_run(self.live().store().as_ref(), child.id)
                    .await?
                    .map(Ok)
            }
            None if child.status == arbor_protocol::SessionStatus::Interrupted => {
                self.continue_for_caller(child, cancel).await
            }
            None => None,
        })
    }

    /// Continues `child`'s interrupted run here for the caller that waits for it again: its
    /// result, or `None` when it cannot be continued here (it was continued or deleted
    /// meanwhile, or runs elsewhere).
    async fn continue_for_caller(
        &self,
        child: &arbor_store::SessionRecord,
        cancel: &CancellationToken,
    ) -> Option<CoreResult<RunResult>> {
        // One that never started holds no task to go on from (its caller's call is reported
        // interrupted, as before), unless it was queued: it starts on the task it kept.
        let started = self.ever_started(child.id).await.ok()?;
        let queued = child.meta[crate::supervisor::config::child_meta::QUEUED_INPUT].is_string();
        if !started && !queued {
            return None;
        }
        tracing::info!(child = %child.id, "continuing an interrupted child for its caller");
        // In a task of its own (its continuation may rejoin a child of its own the same way),
        // so a caller dropped mid-wait (its run cancelled) does not drop the child's run with
        // it: the caller's cancel reaches the run, which ends as runs do.
        let (sup, id, caller) = (self.clone(), child.id, cancel.clone());
        let continued =
            tokio::spawn(async move { sup.continue_child_for(id, Some(caller)).await }).await;
        let continued = continued.unwrap_or_else(|e| {
            Err(CoreError::Supervisor(format!(
                "the continuation of child {id} panicked: {e}"
            )))
        });
        match continued {
            Ok(r) => Some(Ok(r.result)),
            Err(CoreError::Run { result, .. }) => Some(Ok(*result)),
            // Not here (continued or deleted meanwhile, running elsewhere), or no slot for it
            // now: it stays resumable, and the call is reported interrupted.
            Err(e)
                if matches!(
                    e.kind(),
                    crate::CoreErrorKind::Validation
                        | crate::CoreErrorKind::Denied
                        | crate::CoreErrorKind::Limit
                ) =>
            {
                tracing::info!(child = %child.id, error = %e, "an interrupted child could not be continued here");
                None
            }
            Err(e) => Some(Err(e)),
        }
    }

    /// `wait_agent` on a handle that died with the process that held it (its caller's run
    /// was continued in another process): the async child `delegation_id` of `caller` is
    /// found in the store and rejoined, waited for again through the runner or read from
    /// its transcript once ended. `None` when no such child can be rejoined.
    pub(crate) async fn rejoin_handle(
        &self,
        caller: SessionId,
        delegation_id: &str,
        cancel: &CancellationToken,
    ) -> CoreResult<Option<crate::supervisor::DelegationResult>> {
        let children = self
            .live()
            .store()
            .list_sessions(arbor_store::SessionQuery::Children(caller))
            .await?;
        let Some(child) = children.into_iter().find(|c| {
            c.meta["delegation_id"] == delegation_id
                && c.meta["mode"] == "async"
                && c.tombstone.is_none()
        }) else {
            return Ok(None);
        };
        match self.wait_again(&child, cancel).await? {
            Some(Ok(r)) if r.status != arbor_protocol::RunStatus::Suspended => {
                tracing::info!(parent = %caller, child = %child.id, "a handle that died was rejoined from the store");
                Ok(Some(delegation_result(&child, r)))
            }
            Some(Err(e)) => Err(e),
            _ => Ok(None),
        }
    }
}

/// A finished child's run as its delegation's result.
fn delegation_result(
    child: &arbor_store::SessionRecord,
    result: RunResult,
) -> crate::supervisor::DelegationResult {
    crate::supervisor::DelegationResult {
        delegation_id: child.meta["delegation_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        child_id: child.meta["child_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        session_id: child.id,
        name: child.name.clone(),
        output: crate::output::value_of(&child.meta, &result),
        result,
    }
}

/// The result of the last run of `session` when the transcript ends with its end.
async fn finished_run(
    store: &dyn arbor_store::Store,
    session: SessionId,
) -> CoreResult<Option<RunResult>> {
    use arbor_protocol::{EntryKind, Message};
    let entries = store.transcript(session, 0, None).await?;
    let Some(last) = entries.last() else {
        return Ok(None);
    };
    let EntryKind::RunFinished {
        status,
        stop_reason,
        usage,
        breach,
        error,
    } = &last.kind
    else {
        return Ok(None);
    };
    let run = last.run_id;
    let of_run = || entries.iter().filter(|e| e.run_id == run);
    let messages = of_run().filter_map(|e| match &e.kind {
        EntryKind::Message { message } => Some(message),
        _ => None,
    });
    let cost_micros = of_run().fold(0u64, |sum, e| match &e.kind {
        EntryKind::Cost { micros, .. } => sum.saturating_add(*micros),
        _ => sum,
    });
    let (mut text, mut turns, mut tool_calls) = (String::new(), 0u32, 0u32);
    for m in messages {
        if let Message::Assistant {
            content,
            tool_calls: calls,
            ..
        } = m
        {
            turns = turns.saturating_add(1);
            tool_calls = tool_calls.saturating_add(u32::try_from(calls.len()).unwrap_or(0));
            text.clone_from(content);
        }
    }
    Ok(Some(RunResult {
        session_id: session,
        run_id: run,
        status: *status,
        stop_reason: *stop_reason,
        text,
        usage: *usage,
        cost_micros,
        breach: *breach,
        error: error.clone(),
        turns,
        tool_calls,
        suspension: None,
        attribution: None,
    }))
}

/// How many relayed events wait for the pump before the oldest are dropped (a lag marker
/// says so).
const EVENT_BUFFER: usize = 256;

/// Forwards a claimed run's events to `relay` until `stop` (then what is left), without
/// per-token deltas (no pump projects them).
pub(crate) async fn forward(
    mut sub: Subscription<EventEnvelope>,
    relay: mpsc::UnboundedSender<EventEnvelope>,
    stop: CancellationToken,
) {
    let send = |e: &EventEnvelope| {
        if !matches!(e.event, arbor_protocol::AgentEvent::MessageDelta { .. }) {
            let _ = relay.send(e.clone());
        }
    };
    loop {
        tokio::select! {
            biased;
            e = sub.recv() => match e {
                Some(e) => send(&e),
                None => return,
            },
            () = stop.cancelled() => {
                while let Some(e) = sub.try_recv() {
                    send(&e);
                }
                return;
            }
        }
    }
}
