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
use arbor_protocol::{ApprovalDecision, DecidedBy, SessionId, Verdict};

use super::task::{CONTEXT_LABEL, Snapshot, read_message};
use super::{follow, from_api};
use crate::api::approvals::DecisionInput;
use crate::auth::Tenant;
use crate::error::ErrorKind;
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
/// once nothing waits. A task whose decisions are all recorded but whose tree did not
/// resume (a resume refused for a moment) takes any reply as a retry of the resume.
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
        TaskState::Working if snap.decided() => return resume(state, id).await,
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
    let decided_by = DecidedBy::new(Some(tenant.0.clone()), Some("a2a".to_owned()));
    let decisions = decisions_of(snap, message)?
        .into_iter()
        .map(|(d, answered)| {
            let d = ApprovalDecision {
                decided_by: Some(decided_by.clone()),
                ..d
            };
            (d, answered)
        })
        .collect();
    record(state, snap, decisions).await?;
    state.watcher.follow(id, None);
    let after = follow::read(state, id).await.map_err(from_api)?;
    if after.is_some_and(|s| s.state() == TaskState::InputRequired) {
        // Something still waits: the task asks again.
        return Ok(());
    }
    resume(state, id).await
}

/// Records `decisions`, one batch per suspended run their ids are in and per kind (the
/// runtime takes one run's calls at a time; answers go to questions only, as `POST
/// /v1/sessions/{id}/approvals` records them). Every id is checked against what waits
/// before anything is written; a decision the runtime refuses (decided meanwhile, not
/// fitting its call) is `-32602` with its reason.
async fn record(
    state: &AppState,
    snap: &Snapshot,
    decisions: Vec<(ApprovalDecision, bool)>,
) -> Result<(), RpcError> {
    let mut batches: Vec<((String, bool), Vec<ApprovalDecision>)> = Vec::new();
    for (d, answered) in decisions {
        let Some(run) = snap
            .waiting
            .iter()
            .find(|s| s.pending.iter().any(|p| p.id == d.id))
            .map(|s| s.run_id.clone())
        else {
            return Err(invalid(format!(
                "message.parts: decisions: {:?} names no call that waits (Unknown approval)",
                d.id
            )));
        };
        let key = (run, answered);
        match batches.iter_mut().find(|(k, _)| *k == key) {
            Some((_, batch)) => batch.push(d),
            None => batches.push((key, vec![d])),
        }
    }
    let store = state.store.as_ref();
    for ((_, answers), batch) in batches {
        let recorded = if answers {
            arbor_core::supervisor::answer_at(store, snap.root.id, &batch).await
        } else {
            arbor_core::supervisor::decide_at(store, snap.root.id, &batch).await
        };
        recorded.map_err(|e| {
            let e = crate::error::ApiError::from(e);
            match e.kind() {
                ErrorKind::Validation | ErrorKind::Conflict | ErrorKind::NotFound => {
                    invalid(e.error.message)
                }
                _ => RpcError::new(codes::INTERNAL_ERROR, e.error.message),
            }
        })?;
    }
    Ok(())
}

/// Resumes the tree, retrying a refusal for a moment (another request running or hosting
/// it); a tree already going on again (resumed by a concurrent reply) is resumed.
async fn resume(state: &AppState, root: SessionId) -> Result<(), RpcError> {
    let launcher = state.launcher.as_ref().ok_or_else(|| {
        RpcError::new(
            codes::UNSUPPORTED_OPERATION,
            "This server cannot resume runs",
        )
    })?;
    let deadline = tokio::time::Instant::now() + RESUME_WAIT;
    loop {
        let Some(e) = launcher.resume(root).await.err() else {
            return Ok(());
        };
        // Going on again, or asking again (a concurrent reply resumed it meanwhile): done.
        match follow::read(state, root).await {
            Ok(Some(now)) if !now.decided() => return Ok(()),
            Ok(None) => return Ok(()),
            _ => {}
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(RpcError::new(
                codes::INTERNAL_ERROR,
                format!(
                    "the decisions are recorded, but the tree could not be resumed ({}); \
                     reply again (any text) to retry",
                    e.error.message
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
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
/// input (or for its resume) has no run going on: every call that waits is rejected (none
/// of them runs), the tree resumed and its run cancelled at once; a tree that stops to ask
/// again meanwhile is answered the same way, until it ends or `wait` is over.
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
    let decided_by = DecidedBy::new(Some(tenant.0.clone()), Some("a2a".to_owned()));
    let deadline = tokio::time::Instant::now() + wait;
    let mut now = snap;
    loop {
        if now.state() == TaskState::InputRequired || now.decided() {
            for s in &now.waiting {
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
                let _ =
                    arbor_core::supervisor::decide_at(state.store.as_ref(), root, &decisions).await;
            }
            // Refused for a moment (another request holds the tree): tried again below.
            let _ = launcher.resume(root).await;
        }
        // The run may not be going on yet (a resume starting it): asked again each time.
        let _ = launcher.cancel(root, root).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        now = follow::read(state, root)
            .await
            .map_err(from_api)?
            .ok_or_else(|| RpcError::new(codes::TASK_NOT_FOUND, "Task not found"))?;
        if now.state().is_terminal() || tokio::time::Instant::now() >= deadline {
            return Ok(now);
        }
    }
}
