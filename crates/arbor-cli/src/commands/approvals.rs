//! `arbor approvals`, `approve`, `reject` and `answer`: the human side of durable approvals
//! and of agents' questions (`ask_human`), each in its own process. Deciding only records the decision (nothing runs); `arbor resume`
//! ([`crate::resume`]) rebuilds the tree from the definition kept in the root record and lets
//! the suspended runs go on, the approved calls running exactly once.

use arbor_core::DenyReason;
use arbor_core::registry;
use arbor_core::tool::ask::MAX_ANSWER_BYTES;
use arbor_protocol::{ApprovalDecision, Verdict};
use serde_json::{Value, json};

use crate::answers::waiting_at;
use crate::cli::{AnswerArgs, DecideArgs, SessionArgs};
use crate::fail::Fail;
use crate::render::report::{reviews, suspension_json, suspension_text};
use crate::store::open;
use crate::{answers, render::output, resolve};

/// `arbor approvals SESSION`.
pub(crate) async fn list(args: SessionArgs) -> Result<u8, Fail> {
    let store = crate::store::open_to_read(&args.store).await?;
    let id = resolve::session_or_latest(store.as_ref(), args.session.as_deref()).await?;
    registry::session(store.as_ref(), id)
        .await
        .map_err(Fail::core)?;
    let all = waiting_at(store.as_ref(), id).await?;
    let reviews = reviews(store.as_ref(), &all.iter().collect::<Vec<_>>()).await;
    if args.store.json {
        let rows: Vec<Value> = all.iter().map(|s| suspension_json(s, &reviews)).collect();
        output::out(&json!({ "session_id": id, "suspensions": rows }).to_string());
    } else if all.is_empty() {
        output::out(&format!("{id} waits for no decision"));
    } else {
        for s in &all {
            output::out(&suspension_text(id, s, &reviews));
        }
    }
    Ok(0)
}

/// `arbor approve` / `arbor reject`: records decisions on the session's suspended run.
pub(crate) async fn decide(args: DecideArgs, allow: bool) -> Result<u8, Fail> {
    answers::check_reason(args.reason.as_deref())?;
    let verdict = match (allow, args.for_run) {
        (true, false) => Verdict::AllowOnce,
        (true, true) => Verdict::AllowForRun,
        (false, false) => Verdict::RejectOnce,
        (false, true) => Verdict::RejectForRun,
    };
    let reason = args.reason.clone();
    record(&args.store, &args.session, &args.ids, false, |id| {
        ApprovalDecision {
            id,
            verdict,
            reason: reason.clone(),
            decided_by: Some(crate::tree::local_decider()),
        }
    })
    .await
}

/// `arbor answer SESSION ID ANSWER`: answers a question (`ask_human`) waiting under the
/// session; the answer is the call's result when the run resumes.
pub(crate) async fn answer(args: AnswerArgs) -> Result<u8, Fail> {
    if args.answer.trim().is_empty() || args.answer.len() > MAX_ANSWER_BYTES {
        return Err(Fail::usage(format!(
            "ANSWER is {} bytes; an answer is 1 to {MAX_ANSWER_BYTES} bytes, not blank",
            args.answer.len()
        )));
    }
    let text = args.answer.clone();
    record(
        &args.store,
        &args.session,
        std::slice::from_ref(&args.id),
        true,
        |id| ApprovalDecision {
            decided_by: Some(crate::tree::local_decider()),
            ..arbor_core::tool::ask::answer(id, text.clone())
        },
    )
    .await
}

/// Records the decisions `decision` makes for each of `ids` (unique prefixes of waiting ids)
/// on the session's suspended run, and prints what still waits.
async fn record(
    store_args: &crate::cli::StoreArgs,
    session: &str,
    ids: &[String],
    answers: bool,
    decision: impl Fn(String) -> ApprovalDecision,
) -> Result<u8, Fail> {
    let store = open(store_args).await?;
    let id = resolve::session(store.as_ref(), session).await?;
    registry::session(store.as_ref(), id)
        .await
        .map_err(Fail::core)?;
    let all = waiting_at(store.as_ref(), id).await?;
    // Each id may be a unique prefix of a waiting one.
    let waiting_ids: Vec<&str> = all
        .iter()
        .flat_map(|s| s.pending.iter().map(|p| p.id.as_str()))
        .collect();
    let decisions: Vec<ApprovalDecision> = ids
        .iter()
        .map(|a| resolve::approval(waiting_ids.iter().copied(), a).map(&decision))
        .collect::<Result<_, _>>()?;
    // One record per call, whichever id names it: a call decided already is refused naming
    // the decision; a forged id gets the one unknown-approval error.
    let recorded = if answers {
        arbor_core::supervisor::answer_at(store.as_ref(), id, &decisions).await
    } else {
        arbor_core::supervisor::decide_at(store.as_ref(), id, &decisions).await
    };
    let left = recorded.map_err(|e| match e.kind() {
        // Nothing waits there at all: say so rather than that the id is unknown.
        arbor_core::CoreErrorKind::Denied
            if all.is_empty() && e.deny_reason() == Some(DenyReason::Unknown) =>
        {
            Fail::usage(format!(
                "{id} waits for no decision (its run is over or never suspended)"
            ))
        }
        // A question takes an answer: say how to give one.
        arbor_core::CoreErrorKind::Validation if e.field() == Some("answer") => Fail::usage(
            format!("{e}; a question is answered with: arbor answer {id} ID ANSWER"),
        ),
        // An unknown or decided id, an argument over a limit, or a decision that does
        // not fit the call, is bad input, like an unknown session.
        arbor_core::CoreErrorKind::Denied
        | arbor_core::CoreErrorKind::Limit
        | arbor_core::CoreErrorKind::Validation => Fail::usage(e.to_string()),
        _ => Fail::core(e),
    })?;
    let reviews = reviews(store.as_ref(), &[&left]).await;
    if store_args.json {
        output::out(&suspension_json(&left, &reviews).to_string());
    } else if left.pending.is_empty() {
        output::out(&format!(
            "every call is decided; go on with: arbor resume {id}"
        ));
    } else {
        output::out(&suspension_text(id, &left, &reviews));
    }
    Ok(0)
}
