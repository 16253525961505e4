//! One decision per call. A call waiting for approval is listed at its own session (its
//! `apr_…` id) and at every ancestor whose run carries the suspension up (a `sub_…` id
//! there), and all those ids name one record: the checkpoint of the topmost run that carries
//! the call (the root's, for a sync child). [`decide_at`] routes a decision taken through
//! any of them to that record, where the first decision wins by compare-and-swap and a second
//! one is refused naming it ([`approval::already_decided`]); then it writes the decision
//! into the transcript of the session whose call it decided (who, when, why). What waits at
//! a session ([`waiting_at`]) is read through the same routing, so a call
//! decided through one id is not listed as waiting through another.
//!
//! Deciding records only: nothing runs until the run that holds the record is resumed, and
//! the resume hands the decisions down to the child's own record.

use arbor_protocol::{ApprovalDecision, EntryKind, PendingDecision, RunId, SessionId};
use arbor_store::{Store, StoreError};

use crate::approval::{self, RunCheckpoint};
use crate::error::{CoreError, CoreResult};
use crate::outcome::Suspension;
use crate::supervisor::delegation::nested::DELEGATION_NAMESPACE;

/// How often a decision is tried again when another decision on the same run was recorded
/// between its read and its write (each try reads the record anew, so a decision on the
/// same call is then refused naming the first).
const TRIES: usize = 8;

/// One suspended run's record, as read.
struct Held {
    version: u64,
    checkpoint: RunCheckpoint,
}

/// Where a run's calls are decided: the topmost record that carries them, and how each id
/// of the run reads there.
struct Route {
    top: Held,
    /// `sub_…` wrappings from the run up to the top (innermost first): the child runs.
    through: Vec<RunId>,
}

impl Route {
    /// The id `id` (of the routed run) has at the top.
    fn id_at_top(&self, id: &str) -> String {
        self.through
            .iter()
            .fold(id.to_owned(), |id, run| approval::nested_id(*run, &id))
    }
}

/// Who carries a run's suspension up.
enum Carrier {
    /// Nobody carries it: it is decided on its own record.
    None,
    /// Its caller's suspended run carries it.
    Caller(Box<Held>),
    /// Its caller's run should carry it but holds no record of it yet (it is suspending
    /// this moment, or it stopped before it could).
    Missing,
}

/// The run that carries `checkpoint`'s suspension one level up.
async fn carrier(store: &dyn Store, checkpoint: &RunCheckpoint) -> CoreResult<Carrier> {
    let run = checkpoint.run_id;
    let carried = store
        .checkpoint(DELEGATION_NAMESPACE, &run.to_string())
        .await?
        .is_some_and(|m| m.value["detached"].as_bool() != Some(true));
    if !carried {
        return Ok(Carrier::None);
    }
    let Some(parent) = store
        .session(checkpoint.session_id)
        .await?
        .and_then(|r| r.parent_id)
    else {
        return Ok(Carrier::None);
    };
    for (version, c) in approval::checkpoints_of(store, parent).await? {
        let carries = c.calls.iter().any(|slot| {
            matches!(&slot.state, approval::CallState::Nested { run_id, .. } if *run_id == run)
                || matches!(&slot.state, approval::CallState::InFlight { child: Some((r, _)), .. } if *r == run)
        });
        if carries {
            return Ok(Carrier::Caller(Box::new(Held {
                version,
                checkpoint: c,
            })));
        }
    }
    Ok(Carrier::Missing)
}

/// Follows `held` up to the topmost record that carries it (`None` when a caller that should
/// carry it holds no record of it).
async fn route_up(store: &dyn Store, held: Held) -> CoreResult<Option<Route>> {
    let mut route = Route {
        top: held,
        through: Vec::new(),
    };
    // A tree is at most as deep as its depth cap; the bound only guards a damaged store.
    for _ in 0..=crate::supervisor::SupervisorLimits::HARD.max_depth {
        match carrier(store, &route.top.checkpoint).await? {
            Carrier::None => return Ok(Some(route)),
            Carrier::Missing => return Ok(None),
            Carrier::Caller(parent) => {
                route.through.push(route.top.checkpoint.run_id);
                route.top = *parent;
            }
        }
    }
    Ok(None)
}

/// `suspension` as it stands once decisions taken through its ancestors' ids are counted:
/// a call decided at the root is no longer listed as waiting at the child.
pub(crate) async fn as_routed(store: &dyn Store, suspension: Suspension) -> CoreResult<Suspension> {
    let Some((version, checkpoint)) = approval::load(store, suspension.run_id).await? else {
        return Ok(suspension);
    };
    let Some(route) = route_up(
        store,
        Held {
            version,
            checkpoint,
        },
    )
    .await?
    else {
        return Ok(suspension);
    };
    if route.through.is_empty() {
        return Ok(suspension);
    }
    let waiting = route.top.checkpoint.pending();
    let pending: Vec<PendingDecision> = suspension
        .pending
        .into_iter()
        .filter(|p| {
            let id = route.id_at_top(&p.id);
            waiting.iter().any(|w| w.id == id)
        })
        .collect();
    Ok(Suspension {
        pending,
        ..suspension
    })
}

/// What waits for a decision at `id`: its own suspended run, then the suspended runs below it
/// that nobody awaits (message-mode children that stopped on a call), each decided on its
/// own run; their calls' paths are made relative to `id`, like those a run carries up. A
/// call made by a session that was deleted, or sits under a deleted one, is not listed:
/// nothing of it runs again, and deciding it is refused as unknown.
pub async fn waiting_at(
    store: &dyn arbor_store::Store,
    id: SessionId,
) -> CoreResult<Vec<Suspension>> {
    let mut all = waiting_with_dead(store, id).await?;
    let mut dead = Dead::default();
    for s in &mut all {
        let mut live = Vec::with_capacity(s.pending.len());
        for p in std::mem::take(&mut s.pending) {
            if !dead.made_by_dead(store, &p).await? {
                live.push(p);
            }
        }
        s.pending = live;
    }
    Ok(all)
}

/// Which sessions were deleted or sit under a deleted one, remembered for one listing.
#[derive(Default)]
struct Dead(std::collections::HashMap<SessionId, bool>);

impl Dead {
    /// Whether the session that made `p` was deleted or sits under a deleted one (a call of
    /// a record from before sessions were kept with calls is taken as live).
    async fn made_by_dead(&mut self, store: &dyn Store, p: &PendingDecision) -> CoreResult<bool> {
        let Some(start) = p.session_id else {
            return Ok(false);
        };
        let mut chain = Vec::new();
        let mut next = Some(start);
        let mut verdict = false;
        // A tree is at most as deep as its depth cap; the bound only guards a damaged store.
        for _ in 0..=crate::supervisor::SupervisorLimits::HARD.max_depth {
            let Some(id) = next else { break };
            if let Some(known) = self.0.get(&id) {
                verdict = *known;
                break;
            }
            chain.push(id);
            match store.session(id).await? {
                Some(r) if r.tombstone.is_some() => {
                    verdict = true;
                    break;
                }
                Some(r) => next = r.parent_id,
                None => break,
            }
        }
        for id in chain {
            self.0.insert(id, verdict);
        }
        Ok(verdict)
    }
}

/// [`waiting_at`] before the calls of deleted sessions are left out.
async fn waiting_with_dead(
    store: &dyn arbor_store::Store,
    id: SessionId,
) -> CoreResult<Vec<Suspension>> {
    let mut all = Vec::new();
    // A call its caller's run carries up is decided once, through whichever id: what was
    // decided through an ancestor's id no longer waits here.
    for s in approval::suspensions(store, id).await? {
        all.push(as_routed(store, s).await?);
    }
    let detached = super::detached::detached_suspensions(store, id).await?;
    if detached.is_empty() {
        return Ok(all);
    }
    let path_of = |meta: &serde_json::Value| -> Vec<String> {
        meta["path"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let base = match store.session(id).await {
        Ok(Some(r)) => path_of(&r.meta),
        _ => Vec::new(),
    };
    for mut s in detached {
        let below = match store.session(s.session_id).await {
            Ok(Some(r)) => path_of(&r.meta),
            _ => Vec::new(),
        };
        let relative: Vec<String> = below
            .strip_prefix(base.as_slice())
            .unwrap_or(below.as_slice())
            .to_vec();
        for p in &mut s.pending {
            let mut full = relative.clone();
            full.append(&mut p.path);
            p.path = full;
        }
        all.push(s);
    }
    Ok(all)
}

/// The suspended runs whose ids can be decided at `at`: its own, then those below it that
/// nobody awaits.
async fn decidable_at(store: &dyn Store, at: SessionId) -> CoreResult<Vec<Held>> {
    let mut out: Vec<Held> = approval::checkpoints_of(store, at)
        .await?
        .into_iter()
        .map(|(version, checkpoint)| Held {
            version,
            checkpoint,
        })
        .collect();
    for s in super::detached::detached_suspensions(store, at).await? {
        if let Some((version, checkpoint)) = approval::load(store, s.run_id).await? {
            out.push(Held {
                version,
                checkpoint,
            });
        }
    }
    Ok(out)
}

/// Records `decisions` taken at session `at`, each naming a call by any id it is listed
/// under there (a root lists its children's calls as `sub_…`, a child its own as `apr_…`),
/// all of them calls of one run. Each `decided_by` says who (the surface sets it); the record
/// stamps when.
///
/// The decisions are recorded on the one record of those calls, compare-and-swap: the first
/// decision on a call wins, and a second (through the same id or another) is refused with
/// [`crate::DenyReason::Decided`], naming the first: what, who, when and why. A batch applies
/// whole or not at all. Each recorded decision is written into the transcript of the session
/// whose call it decided (a `decision` entry). Returns what still waits on the run, as `at`
/// lists it. Unknown, foreign and forged ids get the one unknown-approval error; a run being
/// resumed refuses decisions until it suspends again.
pub async fn decide_at(
    store: &dyn Store,
    at: SessionId,
    decisions: &[ApprovalDecision],
) -> CoreResult<Suspension> {
    decide_checked(store, at, decisions, false).await
}

/// [`decide_at`] for answers to questions (`ask_human`), each built with
/// [`answer`](crate::tool::ask::answer): an id that names a call waiting for approval rather
/// than a question is refused (`Validation`, field `answer`) before anything is recorded, so
/// an answer never approves a tool call.
pub async fn answer_at(
    store: &dyn Store,
    at: SessionId,
    answers: &[ApprovalDecision],
) -> CoreResult<Suspension> {
    decide_checked(store, at, answers, true).await
}

async fn decide_checked(
    store: &dyn Store,
    at: SessionId,
    decisions: &[ApprovalDecision],
    answers: bool,
) -> CoreResult<Suspension> {
    let Some(first) = decisions.first() else {
        return Err(CoreError::validation("no decisions given"));
    };
    let mut last = None;
    for _ in 0..TRIES {
        match try_decide(store, at, first, decisions, answers).await {
            Err(CoreError::Store(StoreError::Conflict { expected, actual })) => {
                // Another decision on the run landed between the read and the write: read
                // again (a decision on the same call is then refused naming it).
                last = Some(StoreError::Conflict { expected, actual });
            }
            other => return other,
        }
    }
    Err(last.map_or_else(
        || CoreError::Conflict("the run's approvals kept changing; decide again".to_owned()),
        |e| {
            CoreError::Conflict(format!(
                "the run's approvals kept changing while this was decided ({e}); decide again"
            ))
        },
    ))
}

async fn try_decide(
    store: &dyn Store,
    at: SessionId,
    first: &ApprovalDecision,
    decisions: &[ApprovalDecision],
    answers: bool,
) -> CoreResult<Suspension> {
    let held = decidable_at(store, at).await?;
    let names = |h: &Held, id: &str| {
        h.checkpoint.pending().iter().any(|p| p.id == id) || h.checkpoint.decided(id).is_some()
    };
    // The run the first id names; every other id must name a call of the same run.
    let Some(index) = held.iter().position(|h| names(h, &first.id)) else {
        // Nothing waits on it: a call of `at` decided and run since is refused naming its
        // decision (from the transcript); anything else is unknown.
        return Err(match written_decision(store, at, &first.id).await? {
            Some(d) => approval::already_decided(&d),
            None => approval::unknown_approval(),
        });
    };
    for d in decisions {
        if !names(&held[index], &d.id) {
            return Err(if held.iter().any(|h| names(h, &d.id)) {
                CoreError::validation("decisions in one request must all be on calls of one run")
            } else {
                approval::unknown_approval()
            });
        }
    }
    // A call of a deleted session (or one under it) never runs: unknown, as it is unlisted.
    let mut dead = Dead::default();
    let pending = held[index].checkpoint.pending();
    for d in decisions {
        if let Some(p) = pending.iter().find(|p| p.id == d.id) {
            if dead.made_by_dead(store, p).await? {
                return Err(approval::unknown_approval());
            }
            if answers && p.tool != crate::approval::question::ASK_HUMAN {
                return Err(CoreError::invalid(
                    "answer",
                    format!(
                        "an answer is for a question (ask_human); this is a call of {:?} \
                         waiting for approval: approve or reject it",
                        p.tool
                    ),
                ));
            }
        }
    }
    let holder = held
        .into_iter()
        .nth(index)
        .ok_or_else(approval::unknown_approval)?;
    let holder_run = holder.checkpoint.run_id;
    let holder_session = holder.checkpoint.session_id;
    let Some(route) = route_up(store, holder).await? else {
        return Err(CoreError::validation(
            "this call's run is carried by its caller's run, which holds no record of it yet \
             (it is suspending, or it stopped before it could): decide at the root once it \
             lists the call",
        ));
    };
    let at_top: Vec<ApprovalDecision> = decisions
        .iter()
        .map(|d| ApprovalDecision {
            id: route.id_at_top(&d.id),
            ..d.clone()
        })
        .collect();
    let Route { top, .. } = route;
    let waiting = top.checkpoint.pending();
    let mut checkpoint = top.checkpoint;
    checkpoint.decide(&at_top)?;
    let top_run = checkpoint.run_id;
    // Stale (another decision on the run landed meanwhile): the store's `Conflict`, tried
    // again by the caller.
    approval::put(store, &checkpoint, top.version).await?;
    // Recorded: now into the transcripts of the calls' sessions. The record is what counts;
    // a transcript that cannot be written is logged, not a reason to undo the decision.
    for d in &at_top {
        let Some(p) = waiting.iter().find(|p| p.id == d.id) else {
            continue;
        };
        write_down(store, p, d, top_run).await;
    }
    tracing::info!(session = %at, run = %holder_run, top = %top_run, decisions = decisions.len(), "decisions recorded");
    // What still waits on the run, as `at` lists it.
    let listed = waiting_at(store, at).await?;
    Ok(listed
        .into_iter()
        .find(|s| s.run_id == holder_run)
        .unwrap_or(Suspension {
            run_id: holder_run,
            session_id: holder_session,
            version: 0,
            pending: Vec::new(),
        }))
}

/// The decision the transcript of `at` records on its own call `id`, if any.
async fn written_decision(
    store: &dyn Store,
    at: SessionId,
    id: &str,
) -> CoreResult<Option<ApprovalDecision>> {
    if !id.starts_with("apr_") {
        return Ok(None);
    }
    let entries = store.transcript(at, 0, None).await?;
    Ok(entries.into_iter().find_map(|e| match e.kind {
        EntryKind::Decision {
            approval_id,
            verdict,
            reason,
            tenant,
            by,
            ..
        } if approval_id == id => Some(ApprovalDecision {
            id: approval_id,
            verdict,
            reason,
            decided_by: Some(arbor_protocol::DecidedBy {
                tenant,
                by,
                at: e.at,
            }),
        }),
        _ => None,
    }))
}

/// Writes decision `d` on pending call `p` into the transcript of the session that made it.
async fn write_down(store: &dyn Store, p: &PendingDecision, d: &ApprovalDecision, top: RunId) {
    let (Some(session), run) = (p.session_id, p.run_id.unwrap_or(top)) else {
        tracing::warn!(call = %p.call_id, "a decision's call names no session; not written to a transcript");
        return;
    };
    let by = d.decided_by.clone().unwrap_or_default();
    let entry = EntryKind::Decision {
        approval_id: approval::own_id(run, &p.call_id),
        call_id: p.call_id.clone(),
        tool: p.tool.clone(),
        verdict: d.verdict,
        reason: d.reason.clone(),
        tenant: by.tenant,
        by: by.by,
    };
    if let Err(e) = store.append(session, run, &[entry], None).await {
        tracing::warn!(%session, error = %e, "a decision could not be written to its call's transcript");
    }
}
