//! Suspended runs nobody awaits: a message-mode child (its parent went on without it) or a
//! follow-up run on messages that stopped on a call waiting for approval. No caller's run
//! carries their approvals up to the root, so they are decided on the child's own
//! checkpoint ([`approval::decide`]) and resumed here, by [`Supervisor::resume_child`]; the
//! resumed run answers its parent the way its mode says (a reply or a lifecycle notice by
//! message), exactly like a run that never suspended.
//!
//! A suspension is not a terminal event: the parent gets no notice when the child
//! suspends, only when the resumed run ends.

use arbor_protocol::{SessionId, SessionStatus};
use arbor_store::{SessionQuery, Store};

use crate::approval::{self, RunCheckpoint};
use crate::error::{CoreError, CoreResult};
use crate::outcome::Suspension;
use crate::supervisor::delegation::abandoned::AbandonedCalls;
use crate::supervisor::delegation::nested::{DELEGATION_NAMESPACE, Rebuilt, abandon_suspension};
use crate::supervisor::delegation::pipeline::Registered;
use crate::supervisor::request::DelegationResult;
use crate::supervisor::runtime::Supervisor;

/// Whether the run `run` was one nobody awaits (its delegation mapping says so).
async fn is_detached(store: &dyn Store, run: arbor_protocol::RunId) -> CoreResult<bool> {
    Ok(store
        .checkpoint(DELEGATION_NAMESPACE, &run.to_string())
        .await?
        .is_some_and(|m| m.value["detached"].as_bool() == Some(true)))
}

/// Closes the suspensions in the tree of `root` that nobody can resume any more: those of
/// runs nobody awaits whose session was deleted or sits under a deleted ancestor (a deleted
/// child stays dead: nothing of it runs again). Each is closed like an abandoned one (its
/// checkpoint and mapping removed, its own suspended children closed first, a `suspended`
/// record marked `aborted`); returns how many were closed. A delete calls it; it is safe
/// to call again (after a crash cut a delete short, say).
pub async fn close_dead_suspensions(store: &dyn Store, root: SessionId) -> CoreResult<usize> {
    Ok(close_dead(store, root).await?.0)
}

/// [`close_dead_suspensions`], returning the calls the suspensions it closed left
/// unanswered (those a caller's run carries are closed, and handed over, by the delete:
/// [`calls_left_by_delete`](crate::process::calls_left_by_delete)): a process that can reach the providers of the children that made them hands
/// them over ([`ModelProvider::abandon`](arbor_model::ModelProvider::abandon)), so what
/// waits on the other side for an answer (a remote A2A task) is let go of too.
pub async fn abandon_dead_suspensions(
    store: &dyn Store,
    root: SessionId,
) -> CoreResult<Vec<AbandonedCalls>> {
    Ok(close_dead(store, root).await?.1)
}

/// How many suspensions [`close_dead_suspensions`] closed, and the calls they left
/// unanswered.
async fn close_dead(
    store: &dyn Store,
    root: SessionId,
) -> CoreResult<(usize, Vec<AbandonedCalls>)> {
    let tree = store.list_sessions(SessionQuery::Tree(root)).await?;
    // Deleted sessions and everything below them (tree order: parents first).
    let mut dead = std::collections::HashSet::new();
    for s in &tree {
        if s.tombstone.is_some() || s.parent_id.is_some_and(|p| dead.contains(&p)) {
            dead.insert(s.id);
        }
    }
    let suspended: std::collections::HashSet<SessionId> = tree
        .iter()
        .filter(|s| dead.contains(&s.id) && s.status == SessionStatus::Suspended)
        .map(|s| s.id)
        .collect();
    if suspended.is_empty() {
        return Ok((0, Vec::new()));
    }
    let mut closed = 0;
    let mut abandoned = Vec::new();
    // The dead suspended sessions that still keep a suspended run (closed here when nobody
    // awaits it; a caller's run closes the ones it carries when it resumes).
    let mut kept = std::collections::HashSet::new();
    for c in store.list_checkpoints(approval::RUN_NAMESPACE).await? {
        let Ok(checkpoint) = serde_json::from_value::<RunCheckpoint>(c.value) else {
            continue;
        };
        if !suspended.contains(&checkpoint.session_id) {
            continue;
        }
        if is_detached(store, checkpoint.run_id).await? {
            abandoned.extend(
                abandon_suspension(store, checkpoint.run_id, checkpoint.session_id, 0).await,
            );
            tracing::info!(session = %checkpoint.session_id, run = %checkpoint.run_id, "closed the suspension of a deleted child");
            closed += 1;
        } else {
            kept.insert(checkpoint.session_id);
        }
    }
    // A close that a crash cut short removed the run's checkpoint but left the record
    // `suspended`: nothing can resume it, so it is settled `aborted` like a closed one.
    for s in tree
        .iter()
        .filter(|s| suspended.contains(&s.id) && !kept.contains(&s.id))
    {
        let Some(record) = store.session(s.id).await? else {
            continue;
        };
        if record.status != SessionStatus::Suspended {
            continue;
        }
        let update = arbor_store::SessionUpdate {
            expected_version: Some(record.version),
            ..arbor_store::SessionUpdate::status(SessionStatus::Aborted)
        };
        match store.update_session(s.id, &update).await {
            Ok(_) => {
                tracing::info!(session = %s.id, "settled a deleted child whose suspension a crash left half closed");
                closed += 1;
            }
            // Someone settled it meanwhile: theirs stands.
            Err(arbor_store::StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok((closed, AbandonedCalls::merged(abandoned)))
}

/// The suspended runs below `session` that nobody awaits (see [`Supervisor::resume_child`]),
/// in tree order: what a person deciding at `session` (the root, say) must see beside its
/// own suspension, which carries only the calls of the children its run waits on. Each is
/// decided on its own run ([`approval::decide`] with its `run_id`); its pending calls' paths
/// are relative to its session.
pub async fn detached_suspensions(
    store: &dyn Store,
    session: SessionId,
) -> CoreResult<Vec<Suspension>> {
    let Some(record) = store.session(session).await? else {
        return Ok(Vec::new());
    };
    // The suspended sessions of the store (its status index: never the finished trees),
    // those below `session` in creation order (parents first), none under a deleted one.
    let mut suspended: Vec<_> = store
        .list_sessions(SessionQuery::Status(SessionStatus::Suspended))
        .await?
        .into_iter()
        .filter(|s| s.root_id == record.root_id && s.id != session)
        .collect();
    suspended.sort_by_key(|s| (s.created_at, s.id));
    let mut waiting = Vec::new();
    for s in suspended {
        if live_below(store, &s, session).await? {
            waiting.push(s.id);
        }
    }
    if waiting.is_empty() {
        return Ok(Vec::new());
    }
    let mut found: Vec<Suspension> = Vec::new();
    for c in store.list_checkpoints(approval::RUN_NAMESPACE).await? {
        let Ok(checkpoint) = serde_json::from_value::<RunCheckpoint>(c.value) else {
            continue;
        };
        if !waiting.contains(&checkpoint.session_id) {
            continue;
        }
        if is_detached(store, checkpoint.run_id).await? {
            found.push(Suspension {
                run_id: checkpoint.run_id,
                session_id: checkpoint.session_id,
                version: c.version,
                pending: checkpoint.pending(),
            });
        }
    }
    found.sort_by_key(|s| waiting.iter().position(|w| *w == s.session_id));
    Ok(found)
}

impl Supervisor {
    /// Resumes the suspended run of child `id` that nobody awaits (a message-mode child, or
    /// a follow-up run on messages), once every call it waits on is decided
    /// ([`approval::decide`]). The child is rebuilt under the terms its spawn narrowed to
    /// (its factory and the `before` hook again), its approved calls run exactly once, and
    /// the resumed run ends like any delegation: one terminal report, and its answer (a reply,
    /// or a lifecycle notice) reaches its parent by message. Returns its result, or
    /// [`CoreError::Suspended`] if it stopped on another call.
    ///
    /// Refused (changing nothing) for a session that is not suspended, one with calls still
    /// undecided, a run whose caller's own run carries its approvals (resume that caller:
    /// the root of its tree), and a deleted child or one under a closed or deleted ancestor
    /// (the same `Unknown or deleted session` as an unknown one).
    pub async fn resume_child(&self, id: SessionId) -> CoreResult<DelegationResult> {
        let unknown = || {
            CoreError::denied(
                crate::error::DenyReason::Unknown,
                "Unknown or deleted session".to_owned(),
            )
        };
        let record = self
            .live()
            .store()
            .session(id)
            .await?
            .filter(|r| r.tombstone.is_none() && r.parent_id.is_some())
            .ok_or_else(unknown)?;
        if record.status != SessionStatus::Suspended {
            return Err(CoreError::validation(format!(
                "session {id} is not suspended (it is {}): nothing to resume",
                record.status
            )));
        }
        let store = self.live().store().as_ref();
        let Some(waiting) = approval::suspensions(store, id).await?.into_iter().next() else {
            return Err(CoreError::validation(format!(
                "session {id} keeps no suspended run to resume"
            )));
        };
        if !waiting.pending.is_empty() {
            return Err(CoreError::validation(format!(
                "{} call(s) of session {id} still wait for a decision: decide them first",
                waiting.pending.len()
            )));
        }
        self.check_ancestors(&record).await?;
        self.inbox_of(&record).await?;
        if !self.live().hub().claim_idle(id) {
            return Err(CoreError::validation(format!(
                "session {id} is running in this process"
            )));
        }
        let rebuilt = match self
            .rebuild_suspended(waiting.run_id, id, Vec::new(), true)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                self.live().hub().end_run(id);
                return Err(e);
            }
        };
        let (admitted, mapping_version) = match rebuilt {
            Rebuilt::Ready(admitted, version) => (*admitted, version),
            Rebuilt::Deleted(_) => {
                self.live().hub().end_run(id);
                return Err(unknown());
            }
        };
        let registered = Registered::resumed(self, admitted);
        registered.rejoin();
        tracing::info!(session = %id, run = %waiting.run_id, "resuming a suspended child nobody awaits");
        // Driven inline: the caller awaits it (the drive ends the hub's claim).
        let outcome = registered.drive().await;
        self.settle_resumed(waiting.run_id, id, mapping_version, outcome)
            .await?
    }
}

/// Whether `s` is below `session` with no tombstone on the way (itself included, `session`
/// not): each ancestor read once, at most as deep as the tree.
async fn live_below(
    store: &dyn Store,
    s: &arbor_store::SessionRecord,
    session: SessionId,
) -> CoreResult<bool> {
    if s.tombstone.is_some() {
        return Ok(false);
    }
    let mut up = s.parent_id;
    for _ in 0..=s.depth {
        let Some(id) = up else { return Ok(false) };
        if id == session {
            return Ok(true);
        }
        let Some(parent) = store.session(id).await? else {
            return Ok(false);
        };
        if parent.tombstone.is_some() {
            return Ok(false);
        }
        up = parent.parent_id;
    }
    Ok(false)
}
