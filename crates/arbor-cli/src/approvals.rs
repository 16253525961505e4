//! `arbor approvals`, `approve`, `reject` and `resume`: the human side of durable approvals,
//! each in its own process. Deciding only records the decision (nothing runs); `resume`
//! rebuilds the tree from the definition kept in the root record and lets the suspended run
//! go on, the approved calls running exactly once.

use arbor_core::approval::{self, Suspension};
use arbor_core::registry;
use arbor_protocol::{ApprovalDecision, SessionId, Verdict};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::cli::{DecideArgs, SessionArgs};
use crate::fail::Fail;
use crate::inspect::{open, session_id};
use crate::run::{Start, View, drive_root};
use crate::store::StoreChoice;
use crate::{output, owner, spec, tree};

/// A suspension as JSON.
pub(crate) fn suspension_json(s: &Suspension) -> Value {
    json!({
        "run_id": s.run_id,
        "session_id": s.session_id,
        "version": s.version,
        "pending": s.pending,
    })
}

/// A suspension as lines for a person.
pub(crate) fn suspension_text(session: SessionId, s: &Suspension) -> String {
    let mut out = format!(
        "suspended: {} call(s) wait for a decision (run {}, version {})",
        s.pending.len(),
        s.run_id,
        s.version
    );
    for p in &s.pending {
        let path = if p.path.is_empty() {
            "root".to_owned()
        } else {
            p.path.join(" > ")
        };
        out.push_str(&format!(
            "\n  {}  {path}: {} {}",
            p.id,
            p.tool,
            output::one_line(&p.arguments.to_string())
        ));
    }
    out.push_str(&format!(
        "\ndecide with: arbor approve {session} ID... (or arbor reject), then: arbor resume {session}"
    ));
    out
}

/// `arbor approvals SESSION`.
pub(crate) async fn list(args: SessionArgs) -> Result<u8, Fail> {
    let store = open(&args.store).await?;
    let id = session_id(&args.session)?;
    registry::session(store.as_ref(), id)
        .await
        .map_err(Fail::core)?;
    let all = approval::suspensions(store.as_ref(), id)
        .await
        .map_err(Fail::core)?;
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
    let store = open(&args.store).await?;
    let id = session_id(&args.session)?;
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
    // The run whose pending decisions hold the first id (one error for any unknown id).
    let all = approval::suspensions(store.as_ref(), id)
        .await
        .map_err(Fail::core)?;
    let Some(target) = all
        .iter()
        .find(|s| s.pending.iter().any(|p| Some(&p.id) == args.ids.first()))
    else {
        return Err(Fail::usage(approval::unknown_approval().to_string()));
    };
    let left = approval::decide(store.as_ref(), target.run_id, target.version, &decisions)
        .await
        .map_err(|e| match e.kind() {
            // An unknown id is bad input, like an unknown session.
            arbor_core::CoreErrorKind::Denied => Fail::usage(e.to_string()),
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

/// `arbor resume SESSION`: the suspended root run goes on.
pub(crate) async fn resume(args: SessionArgs) -> Result<u8, Fail> {
    let choice = StoreChoice::from_args(false, args.store.store.as_deref())?;
    let store = open(&args.store).await?;
    let id = session_id(&args.session)?;
    let root = registry::session(store.as_ref(), id)
        .await
        .map_err(Fail::core)?;
    let Some(spec) = spec::Spec::from_definition(&root.meta["definition"]).map_err(Fail::usage)?
    else {
        return Err(Fail::usage(format!(
            "session {} keeps no definition to rebuild its agents from",
            root.id
        )));
    };
    let Some(waiting) = approval::suspensions(store.as_ref(), id)
        .await
        .map_err(Fail::core)?
        .into_iter()
        .next()
    else {
        return Err(Fail::usage(format!("{id} waits for no decision")));
    };
    let token = CancellationToken::new();
    let built = tree::build(&spec, store.clone(), token.clone()).map_err(Fail::core)?;
    // This process runs the tree now.
    let mut meta = root.meta.clone();
    meta["owner"] = owner::current();
    store
        .update_session(
            id,
            &arbor_store::SessionUpdate {
                meta: Some(meta),
                ..arbor_store::SessionUpdate::default()
            },
        )
        .await
        .map_err(|e| Fail::store(e.to_string()))?;
    let session = built
        .root
        .open_session(store.clone(), id)
        .await
        .map_err(Fail::core)?;
    let view = View {
        store: &store,
        store_name: choice.name(),
        json: args.store.json,
        quiet: false,
    };
    drive_root(view, &built, session, Start::Resume(waiting.run_id), token).await
}
