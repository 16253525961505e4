//! `arbor approvals`, `approve` and `reject`: the human side of durable approvals, each in its
//! own process. Deciding only records the decision (nothing runs); `arbor resume`
//! ([`crate::resume`]) rebuilds the tree from the definition kept in the root record and lets
//! the suspended runs go on, the approved calls running exactly once.

use arbor_core::DenyReason;
use arbor_core::registry;
use arbor_protocol::{ApprovalDecision, Verdict};
use serde_json::{Value, json};

use crate::answers::waiting_at;
use crate::cli::{DecideArgs, SessionArgs};
use crate::fail::Fail;
use crate::render::report::{suspension_json, suspension_text};
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
    if args.store.json {
        let rows: Vec<Value> = all.iter().map(suspension_json).collect();
        output::out(&json!({ "session_id": id, "suspensions": rows }).to_string());
    } else if all.is_empty() {
        output::out(&format!("{id} waits for no decision"));
    } else {
        for s in &all {
            output::out(&suspension_text(id, s));
        }
    }
    Ok(0)
}

/// `arbor approve` / `arbor reject`: records decisions on the session's suspended run.
pub(crate) async fn decide(args: DecideArgs, allow: bool) -> Result<u8, Fail> {
    answers::check_reason(args.reason.as_deref())?;
    let store = open(&args.store).await?;
    let id = resolve::session(store.as_ref(), &args.session).await?;
    registry::session(store.as_ref(), id)
        .await
        .map_err(Fail::core)?;
    let verdict = match (allow, args.for_run) {
        (true, false) => Verdict::AllowOnce,
        (true, true) => Verdict::AllowForRun,
        (false, false) => Verdict::RejectOnce,
        (false, true) => Verdict::RejectForRun,
    };
    let all = waiting_at(store.as_ref(), id).await?;
    // Each id may be a unique prefix of a waiting one.
    let waiting_ids: Vec<&str> = all
        .iter()
        .flat_map(|s| s.pending.iter().map(|p| p.id.as_str()))
        .collect();
    let ids: Vec<String> = args
        .ids
        .iter()
        .map(|a| resolve::approval(waiting_ids.iter().copied(), a))
        .collect::<Result<_, _>>()?;
    let decisions: Vec<ApprovalDecision> = ids
        .iter()
        .map(|a| ApprovalDecision {
            id: a.clone(),
            verdict,
            reason: args.reason.clone(),
            decided_by: Some(crate::tree::local_decider()),
        })
        .collect();
    // One record per call, whichever id names it: a call decided already is refused naming
    // the decision; a forged id gets the one unknown-approval error.
    let left = arbor_core::supervisor::decide_at(store.as_ref(), id, &decisions)
        .await
        .map_err(|e| match e.kind() {
            // Nothing waits there at all: say so rather than that the id is unknown.
            arbor_core::CoreErrorKind::Denied
                if all.is_empty() && e.deny_reason() == Some(DenyReason::Unknown) =>
            {
                Fail::usage(format!(
                    "{id} waits for no decision (its run is over or never suspended)"
                ))
            }
            // An unknown or decided id, or an argument over a limit, is bad input, like an
            // unknown session.
            arbor_core::CoreErrorKind::Denied | arbor_core::CoreErrorKind::Limit => {
                Fail::usage(e.to_string())
            }
            _ => Fail::core(e),
        })?;
    if args.store.json {
        output::out(&suspension_json(&left).to_string());
    } else if left.pending.is_empty() {
        output::out(&format!(
            "every call is decided; go on with: arbor resume {id}"
        ));
    } else {
        output::out(&suspension_text(id, &left));
    }
    Ok(0)
}
