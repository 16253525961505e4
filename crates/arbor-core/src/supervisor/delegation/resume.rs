//! Follow-up runs: a retained child (finished, not deleted) that receives a message runs a
//! new turn on it, in the same session, rebuilt from its transcript when this process does
//! not hold it (after a restart, or from another process such as `arbor send`).
//!
//! The run is a delegation like any other (a slot, the factory, the child's permission and
//! limits, events, counters, a terminal report) but without admission: the child was
//! admitted when it was spawned. Its identity is the one it was given then (the scopes are
//! kept in its record), never re-derived wider.

use tracing::Instrument;

use arbor_protocol::SessionId;

use crate::error::{CoreError, CoreResult};
use crate::supervisor::delegation::pipeline::Registered;
use crate::supervisor::runtime::Supervisor;
use arbor_protocol::Notice;

use crate::supervisor::delegation::admitted::{Ended, Start};
use crate::supervisor::request::{DelegationResult, Mode};
use crate::supervisor::tree::messages::preview;

impl Supervisor {
    /// Starts a follow-up run of `id` in the background if it is idle, retained and has
    /// pending messages. Harmless when it is running (its next turn reads them) or is the
    /// host's.
    pub(crate) fn wake(&self, id: SessionId) {
        if self.live().session_token().is_cancelled()
            || self.live().abandoned().is_cancelled()
            || !self.live().hub().claim_idle(id)
        {
            return;
        }
        self.follow_up(id);
    }

    /// Starts the follow-up of `id`, which its run's end claimed
    /// ([`Hub::end_run_claiming`](crate::supervisor::tree::hub::Hub::end_run_claiming));
    /// released when the supervisor is shutting down.
    fn start_claimed(&self, id: SessionId) {
        if self.live().session_token().is_cancelled() || self.live().abandoned().is_cancelled() {
            self.live().hub().end_run(id);
            return;
        }
        self.follow_up(id);
    }

    /// Runs the follow-up of `id` (claimed: marked running) in the background.
    fn follow_up(&self, id: SessionId) {
        let this = self.clone();
        // Boxed: a follow-up run's state is large, and a task moves its future several times.
        self.live()
            .spawn(crate::supervisor::delegation::delegate::boxed_in_place(
                || {
                    async move {
                match this.resume(id).await {
                    Ok(FollowUp::Ran) => {}
                    Ok(FollowUp::NotOurs) => {
                        // Not one of this supervisor's children (a root its host runs): its
                        // messages wait for the host.
                        this.live().hub().end_run(id);
                    }
                    Ok(FollowUp::RunningElsewhere) => {
                        // Another process runs it: the messages are stored, and its owner (or
                        // whoever runs it next) reads them. Not retried from here.
                        this.live().hub().end_run(id);
                    }
                    Err(e)
                        if e.limit().is_some_and(|l| {
                            l.limit == arbor_protocol::LimitKind::MaxActiveChildren
                        }) =>
                    {
                        // No slot: retried when a delegation ends.
                        this.live().hub().end_run(id);
                        this.live().hub().defer(id);
                    }
                    Err(e) => {
                        // It cannot run (deleted, under a closed parent, its terms no longer
                        // hold): the messages that woke it are dropped once, never retried in
                        // a loop.
                        let why = this.redact(&format!("the follow-up run could not start: {e}"));
                        this.drop_pending(id, &why).await;
                        this.live().hub().end_run(id);
                        tracing::warn!(session = %id, error = %e, "a follow-up run did not start");
                    }
                }
            }
            .in_current_span()
                },
            ));
    }

    /// Drops what waits in the live inbox of `id`, unread, with one durable record of why.
    pub(crate) async fn drop_pending(&self, id: SessionId, why: &str) {
        let Some(inbox) = self.live().hub().inbox(id) else {
            return;
        };
        let dropped = inbox.drain();
        if dropped.is_empty() {
            return;
        }
        let entry = arbor_protocol::EntryKind::InboxDropped {
            ids: dropped.iter().map(|m| m.id.clone()).collect(),
            reason: why.to_owned(),
        };
        let run = arbor_protocol::RunId::new();
        if let Err(e) = self.live().store().append(id, run, &[entry], None).await {
            tracing::warn!(session = %id, error = %e, "could not record dropped messages");
        }
    }

    /// Wakes every idle child with mail whose follow-up could not start before (after a
    /// slot was freed).
    pub(crate) fn wake_waiting(&self) {
        for id in self.live().hub().take_deferred() {
            self.wake(id);
        }
    }

    /// Runs `id` on its pending messages, unless it is not a child of this supervisor or a
    /// run of it is live in another process.
    async fn resume(&self, id: SessionId) -> CoreResult<FollowUp> {
        Ok(match self.rerun(id, false, None).await? {
            Rerun::Ran(_) => FollowUp::Ran,
            Rerun::NotOurs => FollowUp::NotOurs,
            Rerun::RunningElsewhere => FollowUp::RunningElsewhere,
        })
    }

    /// Continues the interrupted run of the child `id` (its process died mid-run) from its
    /// transcript, as a delegation of this supervisor under the terms its spawn narrowed to:
    /// a turn in progress is asked again, tool calls in flight are reported to the model as
    /// interrupted and never run again (see [`Session::continue_interrupted`]). Its answer
    /// reaches its parent the way its mode says (a message-mode child's reply or notice).
    ///
    /// [`Session::continue_interrupted`]: crate::Session::continue_interrupted
    pub async fn continue_child(&self, id: SessionId) -> CoreResult<DelegationResult> {
        self.continue_child_for(id, None).await
    }

    /// [`continue_child`](Self::continue_child) for a caller that waits on it (its continued
    /// call rejoining it): cancelling `caller` cancels the child's run too.
    pub(crate) async fn continue_child_for(
        &self,
        id: SessionId,
        caller: Option<tokio_util::sync::CancellationToken>,
    ) -> CoreResult<DelegationResult> {
        let unknown = || {
            CoreError::denied(
                crate::error::DenyReason::Unknown,
                "Unknown or deleted session".to_owned(),
            )
        };
        let record = self.live_child(id).await?;
        if record.status != arbor_protocol::SessionStatus::Interrupted {
            return Err(CoreError::validation(format!(
                "session {id} was not interrupted (it is {}): nothing to continue",
                record.status
            )));
        }
        self.inbox_of(&record).await?;
        if !self.live().hub().claim_idle(id) {
            return Err(CoreError::validation(format!(
                "session {id} is running in this process"
            )));
        }
        match self.rerun(id, true, caller).await {
            Ok(Rerun::Ran(outcome)) => *outcome,
            Ok(Rerun::NotOurs) => {
                self.live().hub().end_run(id);
                Err(unknown())
            }
            Ok(Rerun::RunningElsewhere) => {
                self.live().hub().end_run(id);
                Err(CoreError::validation(format!(
                    "session {id} is running in another process"
                )))
            }
            Err(e) => {
                self.live().hub().end_run(id);
                Err(e)
            }
        }
    }

    pub(crate) async fn live_child(&self, id: SessionId) -> CoreResult<arbor_store::SessionRecord> {
        self.live()
            .store()
            .session(id)
            .await?
            .filter(|r| r.tombstone.is_none())
            .ok_or_else(|| {
                CoreError::denied(
                    crate::error::DenyReason::Unknown,
                    "Unknown or deleted session".to_owned(),
                )
            })
    }

    /// Runs the child `id` again: on its pending messages, or (`recover`) continuing its
    /// interrupted run. The caller has claimed it in the hub.
    async fn rerun(
        &self,
        id: SessionId,
        recover: bool,
        caller: Option<tokio_util::sync::CancellationToken>,
    ) -> CoreResult<Rerun> {
        let sup = self;
        let record = self.live_child(id).await?;
        let Some(terms) = self.stored_terms(&record)? else {
            return Ok(Rerun::NotOurs);
        };
        self.check_ancestors(&record).await?;
        let limits = terms.limits;
        // A follow-up waits for no one: without a slot it stays pending, and is retried
        // when a delegation ends.
        let slot = sup.live().slots().reserve(limits.max_active_children)?;
        // The run lease: the session's status goes to `running` compare-and-swap, refused
        // when a run of it is live elsewhere (another process) or it was deleted since.
        let Some(record) = self.take_lease(record).await? else {
            return Ok(Rerun::RunningElsewhere);
        };
        // A child a crash caught queued never started: it starts now, on its task. One that
        // never started and kept no task has nothing to go on from.
        let queued = if recover {
            self.queued_task(&record).await?
        } else {
            None
        };
        if recover && queued.is_none() && !self.ever_started(record.id).await? {
            return Err(CoreError::validation(format!(
                "session {id} never started and keeps no task to go on from: nothing to continue"
            )));
        }
        let start = match (&queued, recover) {
            (Some(_), _) => Start::Fresh,
            (None, true) => Start::Recover,
            (None, false) => Start::FollowUp,
        };
        // A sync child continued for the call that waits on it is carried by that call: a
        // suspension of it waits with the caller's run, as before the crash.
        let carried = caller.is_some() && record.meta["mode"] == "sync";
        let mut admitted = self
            .rebuilt(terms, record, limits, slot, queued.unwrap_or_default())
            .await?;
        admitted.control.start = start;
        // A follow-up or a continued run nobody awaits answers the way its mode says.
        admitted.control.detached = !carried;
        // A caller waiting on it: its cancel reaches the run (which stays under the
        // supervisor's session token too), for as long as the run goes.
        let link = caller.map(|caller| {
            let run = admitted.control.token.clone();
            tokio::spawn(async move {
                caller.cancelled().await;
                run.cancel();
            })
        });
        let registered = Registered::resumed(self, admitted);
        registered.begin();
        // Drive inline: this is already the background task (or the host's call).
        let outcome = registered.drive().await;
        if let Some(link) = link {
            link.abort();
        }
        Ok(Rerun::Ran(Box::new(outcome)))
    }

    /// The task of a child registered queued that never started (no run of it began): what
    /// a continuation starts it on. `None` for one that ran, or that kept no task.
    pub(crate) async fn queued_task(
        &self,
        record: &arbor_store::SessionRecord,
    ) -> CoreResult<Option<String>> {
        let Some(task) = record.meta[crate::supervisor::config::child_meta::QUEUED_INPUT].as_str()
        else {
            return Ok(None);
        };
        Ok((!self.ever_started(record.id).await?).then(|| task.to_owned()))
    }

    /// Whether a run of `session` ever began (its transcript holds a `run_started`, after
    /// however many messages or renames reached it first).
    pub(crate) async fn ever_started(&self, session: SessionId) -> CoreResult<bool> {
        Ok(self
            .live()
            .store()
            .transcript(session, 0, None)
            .await?
            .iter()
            .any(|e| matches!(e.kind, arbor_protocol::EntryKind::RunStarted { .. })))
    }

    /// Refuses a follow-up under a closed or deleted ancestor (its teardown reached it even
    /// if this process no longer held it live).
    pub(crate) async fn check_ancestors(
        &self,
        record: &arbor_store::SessionRecord,
    ) -> CoreResult<()> {
        let gone = || {
            CoreError::denied(
                crate::error::DenyReason::Unknown,
                "Unknown or deleted session".to_owned(),
            )
        };
        if self.live().hub().is_closed(record.id) {
            return Err(gone());
        }
        let mut next = record.parent_id;
        // Depth is bounded by the hard cap; the bound guards against a corrupt cycle.
        for _ in 0..=crate::supervisor::config::limits::SupervisorLimits::HARD.max_depth {
            let Some(id) = next else {
                return Ok(());
            };
            if self.live().hub().is_closed(id) {
                return Err(gone());
            }
            let ancestor = self.live().store().session(id).await?.ok_or_else(gone)?;
            if ancestor.tombstone.is_some() {
                return Err(gone());
            }
            next = ancestor.parent_id;
        }
        Ok(())
    }

    /// Takes the run lease of `record`: `None` when a run of it is live elsewhere, or it is
    /// suspended (waiting for approval: what woke it waits for its resume).
    async fn take_lease(
        &self,
        mut record: arbor_store::SessionRecord,
    ) -> CoreResult<Option<arbor_store::SessionRecord>> {
        for _ in 0..16 {
            // Running elsewhere, or suspended (its resume runs it, then reads what waits).
            // Queued: its first run waits for a slot here, and starts it.
            if matches!(
                record.status,
                arbor_protocol::SessionStatus::Running
                    | arbor_protocol::SessionStatus::Suspended
                    | arbor_protocol::SessionStatus::Queued
            ) {
                return Ok(None);
            }
            let update = arbor_store::SessionUpdate {
                expected_version: Some(record.version),
                ..crate::session::run::running_update()
            };
            match self.live().store().update_session(record.id, &update).await {
                Ok(updated) => return Ok(Some(updated)),
                Err(arbor_store::StoreError::Conflict { .. }) => {
                    record = self
                        .live()
                        .store()
                        .session(record.id)
                        .await?
                        .ok_or_else(|| {
                            CoreError::denied(
                                crate::error::DenyReason::Unknown,
                                "Unknown or deleted session",
                            )
                        })?;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(CoreError::Supervisor(format!(
            "could not start a follow-up run of session {}: its record kept changing",
            record.id
        )))
    }

    /// After a registered child's run: the parent's lifecycle notice (message mode), then
    /// the session is idle again, and whatever waits is woken: the child itself if mail
    /// arrived during its last turn, and any child that waited for the slot just freed.
    pub(crate) async fn after_run(
        &self,
        record: &arbor_store::SessionRecord,
        outcome: &CoreResult<DelegationResult>,
        ended: Ended,
    ) {
        if !ended.started {
            // The run never began, so it read nothing: what waits for it is dropped once
            // (another run now would fail the same way, at once, forever). A first run that
            // could not start is remembered, and later messages to it are refused.
            let why = match outcome {
                Err(e) => self.redact(&e.to_string()),
                Ok(_) => "the run did not start".to_owned(),
            };
            if !ended.follow_up && !ended.host_aborted {
                self.live().hub().set_start_failure(record.id, why.clone());
            }
            self.drop_pending(record.id, &format!("the run could not start: {why}"))
                .await;
        }
        // A suspension is not terminal: the parent hears of the run when its resume ends.
        let suspended = matches!(outcome, Err(CoreError::Suspended(_)));
        if ended.mode == Mode::Message && !suspended && !self.live().session_token().is_cancelled()
        {
            let current = self.live().store().session(record.id).await.ok().flatten();
            let deleted = self.live().hub().is_closed(record.id)
                || current.as_ref().is_none_or(|r| r.tombstone.is_some());
            let replies = current.as_ref().map_or(0, |r| r.replies);
            // Exactly one notice per run, whether a delete raced it or not.
            let notice = match outcome {
                Ok(r) if r.result.status == arbor_protocol::RunStatus::Succeeded => (!ended
                    .follow_up
                    && replies == ended.replies_at_start)
                    .then(|| Notice::CompletedWithoutReply {
                        preview: preview(&self.redact(&r.result.text)),
                    }),
                Ok(r) => Some(Notice::Failed {
                    error: self.redact(r.result.error.as_deref().unwrap_or("run denied")),
                }),
                Err(_) if deleted && ended.host_aborted => Some(Notice::Cancelled {
                    reason: Some("Deleted by its parent".to_owned()),
                }),
                Err(e) if ended.host_aborted => Some(Notice::Cancelled {
                    reason: Some(e.to_string()),
                }),
                Err(e) => Some(Notice::Failed {
                    error: e.to_string(),
                }),
            };
            if let Some(notice) = notice {
                self.notify_parent(record, notice).await;
            }
        }
        if ended.revoked {
            self.revoke(record).await;
        }
        // Teardowns a store failure left unfinished are tried again now.
        self.retry_cleanups().await;
        // Its follow-up (mail waits) is claimed as the run ends, in one step, and the
        // deferred ones before anyone waiting for quiet hears of it: the tree is never
        // quiet in between.
        if self.live().hub().end_run_claiming(record.id) {
            self.start_claimed(record.id);
        }
        self.wake_waiting();
        self.live().hub().announce();
    }

    /// Releases a child cancelled through its handle: closed (nothing of it starts again)
    /// and tombstoned `revoked` by the host; its transcript stays.
    async fn revoke(&self, record: &arbor_store::SessionRecord) {
        self.live().hub().close(record.id);
        let current = match self.live().store().session(record.id).await {
            Ok(Some(r)) if r.tombstone.is_none() => r,
            Ok(_) => return,
            Err(_) => record.clone(),
        };
        if let Err(e) = crate::registry::write_tombstone(
            self.live().store().as_ref(),
            &current,
            "host",
            "revoked",
        )
        .await
        {
            tracing::warn!(child = %record.id, error = %e, "could not revoke a cancelled child; retried later");
            self.live()
                .hub()
                .unfinished(crate::supervisor::tree::hub::Unfinished {
                    id: record.id,
                    by: "host".to_owned(),
                    reason: "revoked".to_owned(),
                });
        }
    }
}

/// What a rerun did.
enum Rerun {
    Ran(Box<CoreResult<DelegationResult>>),
    NotOurs,
    RunningElsewhere,
}

/// What a wake-up did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FollowUp {
    /// A follow-up ran.
    Ran,
    /// Not one of this supervisor's children.
    NotOurs,
    /// A run of it is live elsewhere.
    RunningElsewhere,
}
