//! What a client's message does to a task: starts one ([`start`]), answers the one that
//! waits ([`reply`]: its decisions recorded, then the tree resumed), or ends one
//! ([`cancel`]).
//!
//! A reply decides what waits, in one of two ways:
//! - a data part `{"decisions": [{"id", "verdict"?, "reason"?, "answer"?}]}`, each as
//!   `POST /v1/sessions/{id}/approvals` takes it;
//! - text: the answer when one question waits; `approve` (`yes`, `allow`, `ok`) or `reject`
//!   (`no`, `deny`) for every call that waits when none is a question.
//!
//! Decisions are recorded once, compare-and-swap, as everywhere: a second reply to calls
//! already decided is refused naming the decision taken.

use std::collections::BTreeMap;
use std::time::Duration;

use arbor_a2a::wire::{Message, RpcError, TaskState, codes};
use arbor_protocol::{ApprovalDecision, DecidedBy, SessionId, SessionStatus, Verdict};

use super::task::{CONTEXT_LABEL, Snapshot, read_message};
use super::{follow, from_api};
use crate::api::approvals::DecisionInput;
use crate::auth::Tenant;
use crate::launcher::StartRun;
use crate::state::AppState;

/// How long a reply waits for the resumed tree to leave its suspension.
const RESUME_WAIT: Duration = Duration::from_secs(5);

fn invalid(message: impl Into<String>) -> RpcError {
    RpcError::new(codes::INVALID_PARAMS, message)
}

/// Starts a root run of `spec` with the message's text as its task.
pub(crate) async fn start(
    state: &AppState,
    tenant: &Tenant,
    spec: &str,
    message: &Message,
) -> Result<SessionId, RpcError> {
    let (text, _) = read_message(message);
    if text.trim().is_empty() {
        return Err(invalid(
            "message.parts must hold text: the task for the spec's root agent",
        ));
    }
    if text.len() > crate::api::runs::MAX_TASK_BYTES {
        return Err(invalid(format!(
            "message.parts: the task is {} bytes; at most {}",
            text.len(),
            crate::api::runs::MAX_TASK_BYTES
        )));
    }
    let mut labels = BTreeMap::new();
    labels.insert("via".to_owned(), "a2a".to_owned());
    if let Some(c) = message.context_id.as_deref().filter(|c| !c.is_empty()) {
        if c.len() > crate::api::runs::MAX_LABEL_BYTES || c.chars().any(char::is_control) {
            return Err(invalid(format!(
                "message.contextId must be 1 to {} bytes without control characters",
                crate::api::runs::MAX_LABEL_BYTES
            )));
        }
        labels.insert(CONTEXT_LABEL.to_owned(), c.to_owned());
    }
    crate::api::runs::launch(
        state,
        tenant,
        StartRun {
            tenant: tenant.0.clone(),
            spec: spec.to_owned(),
            spec_text: None,
            task: Some(text),
            provider: None,
            model: None,
            controls: None,
            root_id: None,
            labels,
            budget: None,
        },
    )
    .await
    .map_err(from_api)
}

/// Records the reply's decisions on what waits at `snap`'s root, then resumes the tree
/// once nothing waits.
pub(crate) async fn reply(
    state: &AppState,
    tenant: &Tenant,
    snap: &Snapshot,
    message: &Message,
) -> Result<(), RpcError> {
    let id = snap.root.id;
    if let Some(c) = message.context_id.as_deref().filter(|c| !c.is_empty())
        && c != snap.context()
    {
        return Err(invalid(format!(
            "message.contextId {c:?} does not match the context {:?} of task {id}",
            snap.context()
        )));
    }
    match snap.state() {
        TaskState::InputRequired => {}
        s if s.is_terminal() => {
            return Err(RpcError::new(
                codes::UNSUPPORTED_OPERATION,
                format!("Task {id} is in terminal state: {s}"),
            ));
        }
        s => {
            return Err(RpcError::new(
                codes::UNSUPPORTED_OPERATION,
                format!(
                    "Task {id} is {s}: it takes a reply only when it asks \
                     (TASK_STATE_INPUT_REQUIRED)"
                ),
            ));
        }
    }
    let decisions = decisions_of(snap, message)?;
    let decided_by = DecidedBy::new(Some(tenant.0.clone()), Some("a2a".to_owned()));
    let (answers, verdicts): (Vec<_>, Vec<_>) = decisions
        .into_iter()
        .map(|(d, answered)| {
            (
                ApprovalDecision {
                    decided_by: Some(decided_by.clone()),
                    ..d
                },
                answered,
            )
        })
        .partition(|(_, answered)| *answered);
    let store = state.store.as_ref();
    for (group, answered) in [(answers, true), (verdicts, false)] {
        if group.is_empty() {
            continue;
        }
        let group: Vec<ApprovalDecision> = group.into_iter().map(|(d, _)| d).collect();
        let recorded = if answered {
            arbor_core::supervisor::answer_at(store, id, &group).await
        } else {
            arbor_core::supervisor::decide_at(store, id, &group).await
        };
        recorded.map_err(|e| invalid(e.to_string()))?;
    }
    state.watcher.follow(id, None);
    let after = follow::read(state, id).await.map_err(from_api)?;
    if after.is_some_and(|s| s.state() == TaskState::InputRequired) {
        // Something still waits: the task asks again.
        return Ok(());
    }
    resume(state, id).await
}

async fn resume(state: &AppState, root: SessionId) -> Result<(), RpcError> {
    let launcher = state.launcher.as_ref().ok_or_else(|| {
        RpcError::new(
            codes::UNSUPPORTED_OPERATION,
            "This server cannot resume runs",
        )
    })?;
    launcher.resume(root).await.map_err(from_api)?;
    // The stream that follows must not read the suspension the reply ended.
    let deadline = tokio::time::Instant::now() + RESUME_WAIT;
    while tokio::time::Instant::now() < deadline {
        match state.store.session(root).await {
            Ok(Some(r)) if r.status == SessionStatus::Suspended => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            _ => break,
        }
    }
    Ok(())
}

/// The decisions a reply makes, each with whether it is an answer.
fn decisions_of(
    snap: &Snapshot,
    message: &Message,
) -> Result<Vec<(ApprovalDecision, bool)>, RpcError> {
    let (text, data) = read_message(message);
    if let Some(data) = data {
        let list = data
            .get("decisions")
            .cloned()
            .ok_or_else(|| invalid("message.parts: a data part must be {\"decisions\": [...]}"))?;
        let inputs: Vec<DecisionInput> = serde_json::from_value(list)
            .map_err(|e| invalid(format!("message.parts: decisions: {e}")))?;
        if inputs.is_empty() {
            return Err(invalid("message.parts: decisions must hold at least one"));
        }
        return inputs
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let (verdict, reason) =
                    crate::api::approvals::checked(i, d).map_err(|e| invalid(e.error.message))?;
                Ok((
                    ApprovalDecision {
                        id: d.id.clone(),
                        verdict,
                        reason,
                        decided_by: None,
                    },
                    d.answer.is_some(),
                ))
            })
            .collect();
    }
    let text = text.trim();
    let pending: Vec<&crate::api::approvals::PendingView> =
        snap.waiting.iter().flat_map(|s| s.pending.iter()).collect();
    if let [only] = pending.as_slice()
        && only.question.is_some()
    {
        let (verdict, reason) =
            arbor_core::approval::question::decision_parts(None, None, Some(text))
                .map_err(|(_, why)| invalid(format!("message.parts: {why}")))?;
        return Ok(vec![(
            ApprovalDecision {
                id: only.id.clone(),
                verdict,
                reason,
                decided_by: None,
            },
            true,
        )]);
    }
    if pending.iter().any(|p| p.question.is_some()) {
        return Err(invalid(
            "message.parts: several calls wait, among them questions: reply with a data part \
             {\"decisions\": [{\"id\", \"answer\"}, {\"id\", \"verdict\"}]} naming each",
        ));
    }
    let verdict = match text.to_ascii_lowercase().as_str() {
        "approve" | "approved" | "yes" | "y" | "allow" | "ok" => Verdict::AllowOnce,
        "reject" | "rejected" | "no" | "n" | "deny" => Verdict::RejectOnce,
        _ => {
            return Err(invalid(format!(
                "message.parts: {text:?} is not a decision: reply \"approve\" or \"reject\" \
                 (for every call that waits), or with a data part {{\"decisions\": [...]}}"
            )));
        }
    };
    Ok(pending
        .iter()
        .map(|p| {
            (
                ApprovalDecision {
                    id: p.id.clone(),
                    verdict,
                    reason: None,
                    decided_by: None,
                },
                false,
            )
        })
        .collect())
}

/// Cancels the task's run and waits (up to `wait`) for it to end. A task that waits for
/// input has no run going on: every call that waits is rejected (none of them runs), the
/// tree is resumed and its run cancelled at once.
pub(crate) async fn cancel(
    state: &AppState,
    tenant: &Tenant,
    snap: Snapshot,
    wait: Duration,
) -> Result<Snapshot, RpcError> {
    let root = snap.root.id;
    let launcher = state.launcher.as_ref().ok_or_else(|| {
        RpcError::new(
            codes::UNSUPPORTED_OPERATION,
            "This server cannot cancel runs",
        )
    })?;
    if snap.state() == TaskState::InputRequired {
        let decided_by = DecidedBy::new(Some(tenant.0.clone()), Some("a2a".to_owned()));
        for s in &snap.waiting {
            let decisions: Vec<ApprovalDecision> = s
                .pending
                .iter()
                .map(|p| ApprovalDecision {
                    id: p.id.clone(),
                    verdict: Verdict::RejectOnce,
                    reason: Some("the task was cancelled (A2A CancelTask)".to_owned()),
                    decided_by: Some(decided_by.clone()),
                })
                .collect();
            // A call decided meanwhile keeps its decision.
            let _ = arbor_core::supervisor::decide_at(state.store.as_ref(), root, &decisions).await;
        }
        launcher.resume(root).await.map_err(from_api)?;
    }
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        let now = follow::read(state, root).await.map_err(from_api)?;
        match now {
            Some(s) if s.state().is_terminal() => return Ok(s),
            Some(s) if tokio::time::Instant::now() >= deadline => return Ok(s),
            Some(_) => {
                // The run may not be going on yet (a resume starting it): asked again.
                let _ = launcher.cancel(root, root).await;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            None => return Err(RpcError::new(codes::TASK_NOT_FOUND, "Task not found")),
        }
    }
}
