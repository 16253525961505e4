//! `arbor approvals`, `approve` and `reject`: the human side of durable approvals, each in its
//! own process. Deciding only records the decision (nothing runs); `arbor resume`
//! ([`crate::resume`]) rebuilds the tree from the definition kept in the root record and lets
//! the suspended runs go on, the approved calls running exactly once.

use arbor_core::approval::{self, Suspension};
use arbor_core::registry;
use arbor_protocol::{ApprovalDecision, SessionId, Verdict};
use serde_json::{Value, json};

use crate::cli::{DecideArgs, SessionArgs};
use crate::fail::Fail;
use crate::inspect::{open, session_id};
use crate::report::{suspension_json, suspension_text};
use crate::{answers, output};

/// What waits for a decision at `id`: its own suspended run, then the suspended runs below it
/// that nobody awaits (message-mode children that stopped on a call), each decided on its
/// own run; their calls' paths are made relative to `id`, like those a run carries up.
pub(crate) async fn waiting_at(
    store: &dyn arbor_store::Store,
    id: SessionId,
) -> Result<Vec<Suspension>, Fail> {
    let mut all = approval::suspensions(store, id).await.map_err(Fail::core)?;
    let detached = arbor_core::supervisor::detached_suspensions(store, id)
        .await
        .map_err(Fail::core)?;
    if detached.is_empty() {
        return Ok(all);
    }
    let path_of = |meta: &Value| -> Vec<String> {
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

/// `arbor approvals SESSION`.
pub(crate) async fn list(args: SessionArgs) -> Result<u8, Fail> {
    let store = crate::inspect::open_to_read(&args.store).await?;
    let id = session_id(&args.session)?;
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
    let id = session_id(&args.session)?;
    let store = open(&args.store).await?;
    registry::session(store.as_ref(), id)
        .await
        .map_err(Fail::core)?;
    let verdict = match (allow, args.for_run) {
        (true, false) => Verdict::AllowOnce,
        (true, true) => Verdict::AllowForRun,
        (false, false) => Verdict::RejectOnce,
        (false, true) => Verdict::RejectForRun,
    };
    let decisions: Vec<ApprovalDecision> = args
        .ids
        .iter()
        .map(|a| ApprovalDecision {
            id: a.clone(),
            verdict,
            reason: args.reason.clone(),
        })
        .collect();
    let all = waiting_at(store.as_ref(), id).await?;
    // Every id must be pending; one that is not is explained (decided already, or nothing
    // waits), a forged one gets the one unknown-approval error.
    for wanted in &args.ids {
        if !all
            .iter()
            .any(|s| s.pending.iter().any(|p| &p.id == wanted))
        {
            return Err(answers::not_pending(store.as_ref(), id, &all, wanted).await?);
        }
    }
    // The run whose pending decisions hold the first id.
    let Some(target) = all
        .iter()
        .find(|s| s.pending.iter().any(|p| Some(&p.id) == args.ids.first()))
    else {
        return Err(Fail::usage(approval::unknown_approval().to_string()));
    };
    let left = approval::decide(store.as_ref(), target.run_id, target.version, &decisions)
        .await
        .map_err(|e| match e.kind() {
            // An unknown id or an argument over a limit is bad input, like an unknown session.
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
