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
use crate::{answers, output, owner, spec, tree};

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
    let store = crate::inspect::open_to_read(&args.store).await?;
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
    let all = approval::suspensions(store.as_ref(), id)
        .await
        .map_err(Fail::core)?;
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

/// `arbor resume SESSION`: the suspended root run goes on; or, when the tree waits for no
/// decision but a crash interrupted some of its runs, those runs continue (see
/// [`continue_tree`]).
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
    owner::not_run_elsewhere(&root)?;
    let view = View {
        store: &store,
        store_name: choice.name(),
        json: args.store.json,
        quiet: false,
    };
    let Some(waiting) = approval::suspensions(store.as_ref(), id)
        .await
        .map_err(Fail::core)?
        .into_iter()
        .next()
    else {
        return continue_tree(view, &spec, &root).await;
    };
    // This process runs the tree now (refused while another live process does).
    let token = CancellationToken::new();
    let _lease = owner::take_over(&store, &root, &token).await?;
    let built = tree::build(&spec, store.clone(), token.clone()).map_err(Fail::core)?;
    let session = built
        .root
        .open_session(store.clone(), id)
        .await
        .map_err(Fail::core)?;
    match drive_root(view, &built, session, Start::Resume(waiting.run_id), token).await {
        Ok(code) => Ok(code),
        Err(fail) => Err(answers::lost_resume(store.as_ref(), id, waiting.run_id, fail).await),
    }
}

/// Continues the runs of the tree of `root` that a crash interrupted: the root's own run from
/// its transcript (a turn in progress asked again, tool calls in flight reported to the
/// model as interrupted, never run again), and every interrupted message-mode child as a
/// delegation whose answer reaches its parent by message. A sync or async child's caller was
/// itself interrupted (its call is reported interrupted when that caller goes on), so such a
/// child is left `interrupted` and said so. Stderr lists what was continued.
async fn continue_tree(
    view: View<'_>,
    spec: &spec::Spec,
    root: &arbor_store::SessionRecord,
) -> Result<u8, Fail> {
    let store = view.store;
    let sessions = store
        .list_sessions(arbor_store::SessionQuery::Tree(root.id))
        .await
        .map_err(|e| Fail::store(e.to_string()))?;
    let interrupted: Vec<&arbor_store::SessionRecord> = sessions
        .iter()
        .filter(|s| s.status == arbor_protocol::SessionStatus::Interrupted && s.tombstone.is_none())
        .collect();
    // The root's run, and message-mode children (their answers reach their parents by
    // message); a sync or async child's caller is the one that goes on.
    let continuable = interrupted
        .iter()
        .any(|s| s.parent_id.is_none() || s.meta["mode"].as_str() == Some("message"));
    if !continuable {
        let left = if interrupted.is_empty() {
            String::new()
        } else {
            format!(
                " ({} interrupted child(ren) stay so: their callers' calls were closed)",
                interrupted.len()
            )
        };
        return Err(Fail::usage(format!(
            "{} waits for no decision and no run of its tree can go on: nothing to resume{left}",
            root.id
        )));
    }
    let token = CancellationToken::new();
    let _lease = owner::take_over(store, root, &token).await?;
    let built = tree::build(spec, store.clone(), token.clone()).map_err(Fail::core)?;
    let mut session = built
        .root
        .open_session(store.clone(), root.id)
        .await
        .map_err(Fail::core)?;
    let root_interrupted = session.record().status == arbor_protocol::SessionStatus::Interrupted;
    if root_interrupted {
        let state = session.interrupted_state();
        output::err(&format!(
            "continuing {} ({}): {}",
            root.name,
            root.id,
            describe(&state)
        ));
    }
    let mut children = Vec::new();
    if let Some(sup) = &built.supervisor {
        // Attached first, so the continued children's replies and notices reach it live.
        sup.attach(&mut session);
        close_orphaned_suspensions(sup, store, &sessions).await?;
        for child in interrupted.iter().filter(|s| s.parent_id.is_some()) {
            if child.meta["mode"].as_str() == Some("message") {
                output::err(&format!(
                    "continuing {} ({}): its answer goes to its parent by message",
                    child.name, child.id
                ));
                let (sup, id) = (sup.clone(), child.id);
                children.push(tokio::spawn(async move { sup.continue_child(id).await }));
            } else {
                output::err(&format!(
                    "left interrupted: {} ({}): its caller's call is reported interrupted",
                    child.name, child.id
                ));
            }
        }
    }
    if root_interrupted {
        return drive_root(view, &built, session, Start::Continue, token).await;
    }
    for child in children {
        if let Ok(Err(e)) = child.await {
            output::err(&format!("a child could not be continued: {e}"));
        }
    }
    if session.inbox().is_empty() {
        if let Some(sup) = &built.supervisor {
            sup.shutdown().await;
        }
        output::err("nothing waits for the root: done");
        return Ok(0);
    }
    drive_root(view, &built, session, Start::Inbox, token).await
}

/// Closes the suspensions nothing will resume: those of a sync or async child whose caller
/// was interrupted (the crash came while its call waited for approval, before the caller's
/// own run could suspend on it) or that was itself interrupted. Its caller's call is
/// reported interrupted when the caller goes on, so the call it waited on never runs; the
/// child's checkpoint is closed the way a run ending without resuming its children closes
/// theirs (a `suspended` record becomes `aborted`), and no approval is listed for it.
/// Message-mode children are not touched: their parents never waited on them.
async fn close_orphaned_suspensions(
    sup: &arbor_core::supervisor::Supervisor,
    store: &std::sync::Arc<dyn arbor_store::Store>,
    sessions: &[arbor_store::SessionRecord],
) -> Result<(), Fail> {
    use arbor_core::NestedResumer;
    use arbor_protocol::SessionStatus;

    let interrupted = |id: Option<SessionId>| {
        sessions
            .iter()
            .any(|p| Some(p.id) == id && p.status == SessionStatus::Interrupted)
    };
    for child in sessions.iter().filter(|s| {
        s.parent_id.is_some()
            && s.tombstone.is_none()
            && s.meta["mode"].as_str() != Some("message")
            && (s.status == SessionStatus::Interrupted
                || (s.status == SessionStatus::Suspended && interrupted(s.parent_id)))
    }) {
        let waiting = approval::suspensions(store.as_ref(), child.id)
            .await
            .map_err(Fail::core)?;
        let calls: usize = waiting.iter().map(|w| w.pending.len()).sum();
        for w in &waiting {
            sup.abandon_nested(w.run_id, child.id).await;
        }
        if waiting.is_empty() && child.status == SessionStatus::Suspended {
            // A close cut short by a crash (its checkpoint gone, its record not yet marked).
            let update = arbor_store::SessionUpdate {
                expected_version: Some(child.version),
                ..arbor_store::SessionUpdate::status(SessionStatus::Aborted)
            };
            match store.update_session(child.id, &update).await {
                Ok(_) | Err(arbor_store::StoreError::Conflict { .. }) => {}
                Err(e) => return Err(Fail::store(e.to_string())),
            }
        }
        if !waiting.is_empty() || child.status == SessionStatus::Suspended {
            output::err(&format!(
                "closed the suspension of {} ({}): {calls} call(s) waiting for approval never \
                 run; its caller's call is reported interrupted",
                child.name, child.id
            ));
        }
    }
    Ok(())
}

fn describe(state: &arbor_core::Continued) -> String {
    if state.already_answered {
        "its answer was in; the run ends".to_owned()
    } else if !state.interrupted_calls.is_empty() {
        format!(
            "{} call(s) in flight reported interrupted ({}), never run again",
            state.interrupted_calls.len(),
            state.interrupted_calls.join(", ")
        )
    } else {
        "the turn in progress is asked again".to_owned()
    }
}
