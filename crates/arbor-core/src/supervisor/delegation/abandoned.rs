//! The calls a closed suspension leaves unanswered for good (its child deleted, or the run
//! that carried it ended) and their hand-over to the providers that made them
//! ([`ModelProvider::abandon`](arbor_model::ModelProvider::abandon)): a provider that keeps
//! work waiting on its side for an answer (a remote A2A agent's task in `input-required`)
//! lets go of it instead of waiting forever.

use arbor_protocol::{SessionId, SessionStatus};

use crate::approval::{self, CallState, RunCheckpoint};
use crate::error::CoreResult;
use crate::supervisor::runtime::Supervisor;

/// The calls of one closed suspension that will never get their answers: the session whose
/// run made them and their ids (as its provider produced them).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AbandonedCalls {
    /// The session whose run made the calls.
    pub session_id: SessionId,
    /// The calls' ids, in the order the run made them.
    pub call_ids: Vec<String>,
}

impl AbandonedCalls {
    /// The calls of `checkpoint`, whose results its provider will never read now (the
    /// run does not go on): waiting for a decision, decided, cut off mid-call, or run with
    /// a result not delivered yet. A call resuming or running a child's delegation is not
    /// one of them: the child's own run reports its calls. `None` when there are none.
    pub(crate) fn of(checkpoint: &RunCheckpoint) -> Option<Self> {
        let call_ids: Vec<String> = checkpoint
            .calls
            .iter()
            .filter(|slot| {
                !matches!(
                    slot.state,
                    CallState::Nested { .. } | CallState::InFlight { child: Some(_), .. }
                )
            })
            .map(|slot| slot.call.id.clone())
            .collect();
        (!call_ids.is_empty()).then_some(Self {
            session_id: checkpoint.session_id,
            call_ids,
        })
    }

    /// `all` with one entry per session, each call once (a suspension may be reached both
    /// through its caller's and on its own).
    pub fn merged(all: Vec<Self>) -> Vec<Self> {
        let mut out: Vec<Self> = Vec::with_capacity(all.len());
        for a in all {
            match out.iter_mut().find(|o| o.session_id == a.session_id) {
                Some(o) => {
                    for id in a.call_ids {
                        if !o.call_ids.contains(&id) {
                            o.call_ids.push(id);
                        }
                    }
                }
                None => out.push(a),
            }
        }
        out
    }
}

/// The calls waiting in the suspended runs of `child` and of its descendants not deleted
/// before (`tree` is its tree, parents first, read before the delete): what a delete of
/// `child` leaves unanswered for good, whether a run waits on its own or under its caller's
/// suspended run (which closes it only when it goes on). Read before the tombstone is
/// written, handed over after ([`ModelProvider::abandon`](arbor_model::ModelProvider::abandon)),
/// once per delete.
pub async fn calls_left_by_delete(
    store: &dyn arbor_store::Store,
    tree: &[arbor_store::SessionRecord],
    child: SessionId,
) -> CoreResult<Vec<AbandonedCalls>> {
    let mut under = std::collections::HashSet::new();
    let mut suspended = std::collections::HashSet::new();
    for r in tree {
        let inside = r.id == child || r.parent_id.is_some_and(|p| under.contains(&p));
        // A descendant deleted before: its own delete handed its calls over.
        if !inside || r.tombstone.is_some() {
            continue;
        }
        under.insert(r.id);
        if r.status == SessionStatus::Suspended {
            suspended.insert(r.id);
        }
    }
    if suspended.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for c in store.list_checkpoints(approval::RUN_NAMESPACE).await? {
        let Ok(checkpoint) = serde_json::from_value::<RunCheckpoint>(c.value) else {
            continue;
        };
        if suspended.contains(&checkpoint.session_id) {
            out.extend(AbandonedCalls::of(&checkpoint));
        }
    }
    Ok(AbandonedCalls::merged(out))
}

impl Supervisor {
    /// Hands each of `abandoned` to the provider of the child that made its calls (the
    /// provider its catalog entry was given: [`ChildEntry::preflight_with`], or
    /// [`ChildEntry::agent`]'s). Best effort: what fails is logged.
    ///
    /// [`ChildEntry::preflight_with`]: crate::supervisor::ChildEntry::preflight_with
    /// [`ChildEntry::agent`]: crate::supervisor::ChildEntry::agent
    pub(crate) async fn let_go(&self, abandoned: Vec<AbandonedCalls>) {
        self.hand_over(abandoned, false).await;
    }

    /// [`let_go`](Self::let_go) for what a caller's run closed as it ended: the calls of a
    /// deleted session are left out (its delete handed them over).
    pub(crate) async fn let_go_live(&self, abandoned: Vec<AbandonedCalls>) {
        self.hand_over(abandoned, true).await;
    }

    async fn hand_over(&self, abandoned: Vec<AbandonedCalls>, skip_deleted: bool) {
        let store = self.live().store().as_ref();
        for a in abandoned {
            let record = match store.session(a.session_id).await {
                Ok(Some(r)) if skip_deleted && r.tombstone.is_some() => continue,
                Ok(Some(r)) => r,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(session = %a.session_id, error = %e, "could not read whose calls were abandoned");
                    continue;
                }
            };
            let Some(provider) = record.meta["child_id"]
                .as_str()
                .and_then(|id| self.catalog().get(id))
                .and_then(|(_, entry)| entry.preflight.clone())
            else {
                continue;
            };
            if let Err(e) = provider.abandon(&a.call_ids).await {
                tracing::warn!(session = %a.session_id, provider = provider.name(), error = %e, "a provider could not let go of abandoned calls");
            }
        }
    }
}
