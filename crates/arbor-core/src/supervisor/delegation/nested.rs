//! Durable nested approvals, supervisor side: a child run that suspends is not a terminal
//! (no finish event, no `after` hook, no settled counter); its delegation mapping
//! (namespace [`DELEGATION_NAMESPACE`], key = the child's run id) is stored just before the
//! run's suspension is, and the supervisor reports the suspension up, with the child's own decisions attributed to its path. A
//! decision taken at the root comes back through [`NestedResumer::resume_nested`]: the
//! decisions are recorded on the child's checkpoint first (a stale or foreign one fails with
//! nothing published and no hook run), then the child is rebuilt from the mapping (factory,
//! the `before` hook again, which may now deny, the replayed report/milestone/budget policy)
//! and resumed, ending terminal-symmetric with a live delegation.

use std::sync::Arc;
use tracing::Instrument;

use arbor_protocol::{ApprovalDecision, PendingDecision, RunId, RunStatus, SessionId};
use arbor_store::SessionRecord;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::approval;
use crate::error::{CoreError, CoreResult};
use crate::outcome::NestedSuspension;
use crate::session::resumer::{NestedOutcome, NestedResumer};
use crate::supervisor::config::limits::SupervisorLimits;
use crate::supervisor::config::policy::{EffectivePolicy, PolicyInput, Report};
use crate::supervisor::delegation::abandoned::AbandonedCalls;
use crate::supervisor::delegation::admitted::{Admitted, Control, Start, Terms, child_identity};
use crate::supervisor::delegation::answer::finished;
use crate::supervisor::delegation::pipeline::Registered;
use crate::supervisor::delegation::register::admitted_terms;
use crate::supervisor::request::{DelegationResult, Mode};
use crate::supervisor::runtime::{ChildEntry, Supervisor};
use crate::supervisor::tree::handles::CancelReason;
use crate::supervisor::tree::live::ABANDONED;

/// The store namespace of delegation mappings.
pub(crate) const DELEGATION_NAMESPACE: &str = "delegation";

/// What a suspended delegation needs to be rebuilt.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Mapping {
    pub(crate) supervisor_id: String,
    pub(crate) revision: String,
    pub(crate) child_id: String,
    pub(crate) delegation_id: String,
    pub(crate) session_id: SessionId,
    pub(crate) path: Vec<String>,
    pub(crate) parents: Vec<String>,
    pub(crate) depth: u32,
    pub(crate) thread: String,
    /// Redacted.
    pub(crate) input: String,
    pub(crate) report: Report,
    pub(crate) every_turns: Option<u32>,
    pub(crate) budget_share: Option<f64>,
    /// Nobody awaits the run (a message-mode child, a follow-up): resumed by
    /// [`Supervisor::resume_child`], not through a caller's run.
    #[serde(default)]
    pub(crate) detached: bool,
    /// It was a follow-up run (on messages), not the child's first task.
    #[serde(default)]
    pub(crate) follow_up: bool,
    /// The child's reply count when the run began (its notice when it ends tells a silent
    /// first task).
    #[serde(default)]
    pub(crate) replies_at_start: u32,
}

fn unknown_run() -> CoreError {
    CoreError::denied(
        crate::error::DenyReason::Unknown,
        "Unknown delegated run".to_owned(),
    )
}

impl Supervisor {
    /// The mapping a child's run stores beside its suspension (under its run id, before the
    /// suspension itself, so a crash between the two never leaves a suspended child nobody
    /// can rebuild); `None` without durable approvals, where no child run is rebuilt.
    pub(crate) fn mapping_value(&self, a: &Admitted) -> Option<serde_json::Value> {
        let revision = self.settings().revision()?;
        let mapping = Mapping {
            supervisor_id: self.settings().id().to_owned(),
            revision: revision.to_owned(),
            child_id: a.terms.child_id.clone(),
            delegation_id: a.terms.delegation_id.clone(),
            session_id: a.record.as_ref()?.id,
            path: a.terms.path.to_vec(),
            parents: a.terms.parents.to_vec(),
            depth: a.terms.depth,
            thread: a.terms.thread.clone(),
            input: a.terms.input.clone(),
            report: a.terms.policy.report,
            every_turns: a.terms.policy.every_turns,
            budget_share: a.terms.policy.budget_share,
            detached: a.control.detached,
            follow_up: a.control.start.follow_up(),
            replies_at_start: a.replies_at_start,
        };
        match serde_json::to_value(&mapping) {
            Ok(value) => Some(value),
            Err(e) => {
                tracing::warn!(error = %e, "a delegation mapping does not encode");
                None
            }
        }
    }

    /// A child's run suspended (its mapping stored before its suspension): describe the
    /// suspension for the caller, with the child's own calls attributed to its path.
    pub(crate) async fn suspended(
        &self,
        a: &Admitted,
        run_id: RunId,
        session_id: SessionId,
        pending: Vec<PendingDecision>,
    ) -> CoreError {
        if self.settings().revision().is_none() {
            return CoreError::Supervisor(
                "a child suspended, but its supervisor has no definition revision to resume it \
                 under (durable_approvals or definition_revision)"
                    .to_owned(),
            );
        }
        let pending = pending
            .into_iter()
            .map(|mut p| {
                if p.path.is_empty() {
                    p.path = a.terms.path.to_vec();
                }
                p
            })
            .collect();
        CoreError::Suspended(Box::new(NestedSuspension {
            run_id,
            session_id,
            pending,
        }))
    }

    async fn mapping(&self, run_id: RunId) -> CoreResult<(u64, Mapping, usize)> {
        let c = self
            .live()
            .store()
            .checkpoint(DELEGATION_NAMESPACE, &run_id.to_string())
            .await?
            .ok_or_else(unknown_run)?;
        let mapping: Mapping = serde_json::from_value(c.value).map_err(|_| unknown_run())?;
        let entry = self
            .catalog()
            .get(&mapping.child_id)
            .map(|(i, _)| i)
            .filter(|_| mapping.supervisor_id == self.settings().id())
            .ok_or_else(unknown_run)?;
        Ok((c.version, mapping, entry))
    }
}

/// Whether the child's record still says it waits for approval (its resume failed before
/// its run moved on).
async fn still_suspended(store: &dyn arbor_store::Store, session_id: SessionId) -> bool {
    matches!(
        store.session(session_id).await,
        Ok(Some(r)) if r.status == arbor_protocol::SessionStatus::Suspended
    )
}

fn deleted_text(name: &str) -> String {
    format!(
        "the child \"{name}\" was deleted while it waited for approval; its call did not finish"
    )
}

/// A suspended child rebuilt for its resume.
pub(crate) enum Rebuilt {
    /// Ready to drive, with its mapping's version.
    Ready(Box<Admitted>, u64),
    /// Deleted while it waited: its suspension is closed; why, for its caller.
    Deleted(String),
}

/// The terms a suspended child resumes under: what its spawn narrowed to (request limits and
/// budget share included), or, for a record from before admission stored its terms, the
/// mapping's policy replayed.
fn resumed_terms(
    sup: &Supervisor,
    entry: &ChildEntry,
    record: &SessionRecord,
    mapping: &Mapping,
) -> CoreResult<(SupervisorLimits, EffectivePolicy)> {
    if record.meta.get("limits").is_some() {
        return admitted_terms(sup, entry, record);
    }
    let replay = PolicyInput {
        report: Some(mapping.report),
        every_turns: mapping.every_turns,
        budget_share: mapping.budget_share,
        ..PolicyInput::default()
    };
    let policy = entry
        .policy
        .narrow(&replay, sup.settings().child_events())?;
    let mut limits = sup.settings().limits().narrow(&entry.limits)?;
    if let Some(share) = policy.budget_share {
        limits = limits.narrow(&limits.scaled(share).to_input())?;
    }
    Ok((limits, policy))
}

/// The scopes a child's record keeps (its identity's, as admission narrowed them).
fn scopes_of(record: &SessionRecord) -> Option<std::collections::BTreeSet<String>> {
    record.meta["scopes"].as_array().map(|a| {
        a.iter()
            .filter_map(|s| s.as_str().map(str::to_owned))
            .collect()
    })
}

/// How a resumed run answers: a detached run the way its mode says (a message-mode child by
/// message); a nested one answers its caller's resumed call.
fn resumed_mode(detached: bool, record: &SessionRecord) -> Mode {
    if !detached {
        return Mode::Sync;
    }
    match record.meta["mode"].as_str() {
        Some("sync") => Mode::Sync,
        Some("async") => Mode::Async,
        _ => Mode::Message,
    }
}

impl Supervisor {
    /// Rebuilds the suspended run `run_id` of child `session_id` from its mapping, after
    /// recording `decisions` on its checkpoint: the terms its spawn narrowed to, its identity,
    /// a slot. `detached` resumes a run nobody awaits (see [`Supervisor::resume_child`]); it
    /// is refused for a run whose caller's own run carries its approvals.
    pub(crate) async fn rebuild_suspended(
        &self,
        run_id: RunId,
        session_id: SessionId,
        decisions: Vec<ApprovalDecision>,
        detached: bool,
    ) -> CoreResult<Rebuilt> {
        let sup = self;
        let Some(revision) = &sup.settings().revision() else {
            return Err(CoreError::validation(
                "Nested-run resume requires durable approvals and a definition revision",
            ));
        };
        let (mapping_version, mapping, entry_index) = self.mapping(run_id).await?;
        if mapping.session_id != session_id {
            return Err(unknown_run());
        }
        if detached && !mapping.detached {
            return Err(CoreError::validation(format!(
                "the suspended run of session {session_id} is carried by its caller's run: \
                 resume the caller's run (the root of its tree) instead"
            )));
        }
        if &mapping.revision != revision {
            return Err(CoreError::validation(format!(
                "the child was suspended under definition revision {:?}, this supervisor runs \
                 {revision:?}: refusing to resume it on another definition",
                mapping.revision
            )));
        }
        let store = sup.live().store().as_ref();
        let entry = sup.catalog().entry(entry_index).ok_or_else(unknown_run)?;
        let record = store.session(session_id).await?.ok_or_else(unknown_run)?;
        if record.tombstone.is_some() {
            // Deleted while it waited: the decisions have nothing to resume, and the parent's
            // call fails so the parent goes on (rather than waiting on it forever).
            // Its delete handed its calls over.
            abandon_suspension(store, run_id, session_id, 0).await;
            return Ok(Rebuilt::Deleted(deleted_text(&record.name)));
        }
        let (limits, policy) = resumed_terms(sup, entry, &record, &mapping)?;
        let identity = child_identity(
            sup.settings().identity().cloned(),
            scopes_of(&record).as_ref(),
        )?;
        let slot = sup.live().slots().reserve(limits.max_active_children)?;
        let parent = match record.parent_id {
            Some(p) => store.session(p).await?.map(|r| (&r).into()),
            None => None,
        };
        // Record the decisions once every check that can refuse the rebuild has passed (so a
        // refusal leaves the child's decisions undecided, for the root to send again), and
        // before anything is published or any hook runs (so a stale or forged decision
        // fails with nothing seen).
        let waiting = approval::suspension(store, run_id).await?;
        // Decisions a failed earlier resume already recorded are not recorded twice.
        let fresh: Vec<ApprovalDecision> = decisions
            .into_iter()
            .filter(|d| waiting.pending.iter().any(|p| p.id == d.id))
            .collect();
        if !fresh.is_empty() {
            approval::decide(store, run_id, waiting.version, &fresh).await?;
        }
        let mode = resumed_mode(detached, &record);
        let admitted = Admitted {
            terms: Terms {
                entry: entry_index,
                child_id: mapping.child_id.clone(),
                delegation_id: mapping.delegation_id.clone(),
                depth: mapping.depth,
                path: Arc::from(mapping.path.clone()),
                parents: Arc::from(mapping.parents.clone()),
                sync_chain: 1, // its callers are not known here: its own slot only
                input: mapping.input.clone(),
                limits,
                policy,
                thread: mapping.thread.clone(),
                model: (!record.model.is_empty()).then(|| record.model.clone()),
                thinking: None, // kept in the record's meta, which the run reads
                controls: None,
                budget: None,
                output: None,
                fork: crate::session::fork::ForkContext::None,
                mode,
                parent,
                spawned_by: None,
                spawn_call: None,
                identity,
            },
            name: record.name.clone(),
            requested_name: None,
            replies_at_start: if detached {
                mapping.replies_at_start
            } else {
                record.replies
            },
            record: Some(record),
            control: Control {
                // Linked only to the session: no caller waits on a resumed child.
                token: sup.live().session_token().child_token(),
                reason: CancelReason::default(),
                caller: None,
                slot: crate::supervisor::tree::slots::SlotCell::held(slot),
                start: Start::Resume {
                    run: run_id,
                    follow_up: detached && mapping.follow_up,
                },
                detached,
                claimed: None,
            },
        };
        Ok(Rebuilt::Ready(Box::new(admitted), mapping_version))
    }

    /// After a resumed suspended run: suspended again, it keeps its mapping; a child that
    /// could not be rebuilt (its factory failed, say) still waits with its decisions kept
    /// (the error is returned, so a later resume can finish it); terminal (or rejected
    /// before it ran), nothing of its suspension is resumed again and its mapping has
    /// served. Returns the outcome to report (`Err` of the outer result only for a store
    /// failure while settling).
    pub(crate) async fn settle_resumed(
        &self,
        run_id: RunId,
        session_id: SessionId,
        mapping_version: u64,
        outcome: CoreResult<DelegationResult>,
    ) -> CoreResult<CoreResult<DelegationResult>> {
        let store = self.live().store().as_ref();
        match outcome {
            Err(CoreError::Suspended(again)) => Ok(Err(CoreError::Suspended(again))),
            Err(e) if still_suspended(store, session_id).await => Err(e),
            other => {
                if approval::load(store, run_id).await?.is_some() {
                    self.abandon(run_id, session_id, 0).await;
                }
                let _ = store
                    .delete_checkpoint(
                        DELEGATION_NAMESPACE,
                        &run_id.to_string(),
                        self.mapping(run_id).await.map_or(mapping_version, |m| m.0),
                    )
                    .await;
                Ok(other)
            }
        }
    }
}

#[async_trait]
impl NestedResumer for Supervisor {
    async fn resume_nested(
        &self,
        run_id: RunId,
        session_id: SessionId,
        decisions: Vec<ApprovalDecision>,
    ) -> CoreResult<NestedOutcome> {
        let sup = self;
        let (admitted, mapping_version) = match self
            .rebuild_suspended(run_id, session_id, decisions, false)
            .await?
        {
            Rebuilt::Ready(admitted, version) => (*admitted, version),
            Rebuilt::Deleted(why) => return Ok(NestedOutcome::Failed(why)),
        };
        let registered = Registered::resumed(self, admitted);
        registered.rejoin();
        // The drive runs as its own task, so a parent resume that is cancelled or times out
        // still leaves the child exactly one terminal report; the guard cancels the child
        // when that happens.
        let guard = registered.admitted().control.token.clone().drop_guard();
        let task = sup
            .live()
            .spawn(crate::supervisor::delegation::delegate::boxed_in_place(
                || registered.drive().in_current_span(),
            ));
        let outcome = match task.await {
            Ok(Some(outcome)) => outcome,
            // Abandoned: nothing more is written (this future is dropped with the rest).
            Ok(None) => return Err(CoreError::Supervisor(ABANDONED.to_owned())),
            Err(e) => Err(CoreError::Supervisor(format!(
                "delegation task failed: {e}"
            ))),
        };
        guard.disarm();
        match self
            .settle_resumed(run_id, session_id, mapping_version, outcome)
            .await?
        {
            Err(CoreError::Suspended(again)) => Ok(NestedOutcome::Suspended(again.pending)),
            // The same result the parent's delegate call gives when nothing suspends.
            Ok(r) if r.result.status == RunStatus::Succeeded => {
                Ok(NestedOutcome::Completed(finished(&self.delegator(), &r)))
            }
            Ok(r) => Ok(NestedOutcome::Failed(
                self.redact(
                    r.result
                        .error
                        .as_deref()
                        .unwrap_or("the delegated run did not succeed"),
                ),
            )),
            Err(e) => Ok(NestedOutcome::Failed(self.redact(&e.to_string()))),
        }
    }

    async fn rejoin(
        &self,
        session: SessionId,
        run: RunId,
        call_id: &str,
        tool: &str,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> CoreResult<Option<NestedOutcome>> {
        self.rejoin_call(session, run, call_id, tool, cancel).await
    }

    async fn nested_gone(
        &self,
        run_id: RunId,
        session_id: SessionId,
    ) -> CoreResult<Option<String>> {
        let Ok((_, mapping, _)) = self.mapping(run_id).await else {
            return Ok(None);
        };
        if mapping.session_id != session_id {
            return Ok(None);
        }
        let record = self.live().store().session(session_id).await?;
        match record {
            Some(r) if r.tombstone.is_some() => {
                // Its delete handed its calls over.
                abandon_suspension(self.live().store().as_ref(), run_id, session_id, 0).await;
                Ok(Some(deleted_text(&r.name)))
            }
            _ => Ok(None),
        }
    }

    async fn abandon_nested(&self, run_id: RunId, session_id: SessionId) {
        self.abandon(run_id, session_id, 0).await;
    }
}

impl Supervisor {
    /// Closes a child's suspension nobody will resume (its parent's run ended, or it was
    /// deleted): see [`abandon_suspension`]; the calls it left unanswered go to their
    /// providers ([`Supervisor::let_go`]).
    fn abandon(
        &self,
        run_id: RunId,
        session_id: SessionId,
        depth: usize,
    ) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(async move {
            let abandoned =
                abandon_suspension(self.live().store().as_ref(), run_id, session_id, depth).await;
            self.let_go_live(abandoned).await;
        })
    }
}

/// Closes the suspended run `run_id` of `session_id` that nobody will resume: its own
/// suspended children first, then its checkpoint and mapping; a `suspended` record is marked
/// `aborted`. Only the store is touched. Returns the calls it left unanswered, the deepest
/// children's first.
pub(crate) fn abandon_suspension(
    store: &dyn arbor_store::Store,
    run_id: RunId,
    session_id: SessionId,
    depth: usize,
) -> futures::future::BoxFuture<'_, Vec<AbandonedCalls>> {
    Box::pin(async move {
        let mut abandoned = Vec::new();
        if depth > approval::MAX_PATH {
            return abandoned;
        }
        if let Ok(Some((version, checkpoint))) = approval::load(store, run_id).await {
            if checkpoint.session_id != session_id {
                return abandoned;
            }
            for slot in &checkpoint.calls {
                if let approval::CallState::Nested {
                    run_id: child_run,
                    session_id: child,
                    ..
                } = &slot.state
                {
                    abandoned
                        .extend(abandon_suspension(store, *child_run, *child, depth + 1).await);
                }
            }
            match store
                .delete_checkpoint(approval::RUN_NAMESPACE, &run_id.to_string(), version)
                .await
            {
                Ok(()) => abandoned.extend(AbandonedCalls::of(&checkpoint)),
                Err(e) => {
                    tracing::warn!(run = %run_id, error = %e, "could not close an abandoned suspension");
                }
            }
        }
        let key = run_id.to_string();
        if let Ok(Some(c)) = store.checkpoint(DELEGATION_NAMESPACE, &key).await {
            let _ = store
                .delete_checkpoint(DELEGATION_NAMESPACE, &key, c.version)
                .await;
        }
        if let Ok(Some(record)) = store.session(session_id).await
            && record.status == arbor_protocol::SessionStatus::Suspended
        {
            let update = arbor_store::SessionUpdate {
                expected_version: Some(record.version),
                ..arbor_store::SessionUpdate::status(arbor_protocol::SessionStatus::Aborted)
            };
            let _ = store.update_session(session_id, &update).await;
        }
        abandoned
    })
}
