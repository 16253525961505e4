//! `arbor resume`: a tree goes on in a new process, rebuilt from the definition kept in its
//! root record: what waited for decisions (the root's suspended run, and suspended runs of
//! message-mode children nobody awaits), or, when nothing waits, the runs a crash
//! interrupted.

use arbor_core::approval::{self, Suspension};
use arbor_core::registry;
use arbor_protocol::SessionId;
use tokio_util::sync::CancellationToken;

use crate::answers::waiting_at;
use crate::cli::ResumeArgs;
use crate::drive::{Start, View, drive_root};
use crate::fail::Fail;
use crate::render::report::suspension_text;
use crate::store::StoreChoice;
use crate::store::open;
use crate::{answers, owner, render::output, resolve, spec, tree};

/// `arbor resume SESSION`: what waits for decisions goes on: the suspended runs of message-mode
/// children nobody awaits (their answers reach their parents by message), then the suspended
/// root run (or, when only children waited, the root on what they sent it). When the tree
/// waits for no decision but a crash interrupted some of its runs, those runs continue (see
/// [`continue_tree`]).
/// `asking`: the person at the terminal is asked next when the tree stops on calls waiting
/// for approval (see [`crate::commands::resume::resume`]).
pub(crate) async fn resume(
    args: &ResumeArgs,
    asking: Option<&crate::drive::Held>,
) -> Result<Resumed, Fail> {
    let workers = args.workers;
    let args = &args.target;
    let choice = StoreChoice::from_args(false, args.store.store.as_deref())?;
    let store = if workers {
        let store = crate::workers::open_store(&choice, true, "--workers").await?;
        owner::sweep(&store).await?;
        store
    } else {
        open(&args.store).await?
    };
    let root = resolve::session_or_latest(store.as_ref(), args.session.as_deref()).await?;
    let view = View {
        store: &store,
        store_name: choice.name(),
        json: args.store.json,
        quiet: false,
        asking,
        progress: crate::render::live::Progress::Auto,
    };
    let code = resume_at(view, root).await?;
    Ok(Resumed {
        store,
        choice,
        root,
        code,
    })
}

/// A resumed tree that went as far as it could without a person.
pub(crate) struct Resumed {
    /// The store it runs on.
    pub(crate) store: std::sync::Arc<dyn arbor_store::Store>,
    /// Which store that is.
    pub(crate) choice: StoreChoice,
    /// The root session.
    pub(crate) root: SessionId,
    /// The exit code so far.
    pub(crate) code: u8,
}

/// [`resume`] on the store and session given: `arbor resume`, and `arbor run` once the
/// person at the terminal decided.
pub(crate) async fn resume_at(view: View<'_>, id: SessionId) -> Result<u8, Fail> {
    let store = view.store;
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
    // A delete a crash cut short leaves what its child waited on open: nothing resumes it.
    let closed = arbor_core::process::abandon_dead_suspensions(store.as_ref(), root.id)
        .await
        .map_err(Fail::core)?;
    owner::let_go(store.as_ref(), &root, closed).await;
    let own = approval::suspensions(store.as_ref(), id)
        .await
        .map_err(Fail::core)?
        .into_iter()
        .next();
    let detached = arbor_core::process::detached_suspensions(store.as_ref(), id)
        .await
        .map_err(Fail::core)?;
    let (ready, undecided): (Vec<_>, Vec<_>) =
        detached.into_iter().partition(|s| s.pending.is_empty());
    let Some(waiting) = own else {
        // The root waits for no decision: what can go on is the runs a crash interrupted
        // and the decided children nobody awaits.
        return continue_tree(view, &spec, &root, (&ready, &undecided)).await;
    };
    // This process runs the tree now (refused while another live process does).
    let token = CancellationToken::new();
    let _lease = owner::take_over(store, &root, &token).await?;
    let built = tree::build(&spec, store.clone(), token.clone())
        .await
        .map_err(Fail::core)?;
    let mut session = built
        .root
        .open_session(store.clone(), id)
        .await
        .map_err(Fail::core)?;
    if let Some(sup) = &built.supervisor {
        // Attached first, so the resumed children's replies and notices reach it live.
        sup.attach(&mut session);
        resume_children(sup, store.as_ref(), &ready, &undecided).await;
    }
    match drive_root(view, &built, session, Start::Resume(waiting.run_id), token).await {
        Ok(code) => Ok(code),
        Err(fail) => Err(answers::lost_resume(store.as_ref(), id, waiting.run_id, fail).await),
    }
}

/// Resumes, together, the decided suspended runs of children nobody awaits; says which
/// were resumed, how each ended, and which still wait for decisions.
pub(crate) async fn resume_children(
    sup: &arbor_core::supervisor::Supervisor,
    store: &dyn arbor_store::Store,
    ready: &[Suspension],
    undecided: &[Suspension],
) {
    let name = |id: SessionId| async move {
        store
            .session(id)
            .await
            .ok()
            .flatten()
            .map_or_else(|| id.to_string(), |r| format!("{} ({id})", r.name))
    };
    for s in undecided {
        output::err(&format!(
            "still waiting: {}: {} call(s) wait for a decision",
            name(s.session_id).await,
            s.pending.len()
        ));
    }
    let mut runs = Vec::new();
    for s in ready {
        output::err(&format!(
            "resuming {}: its answer is in its transcript (a message-mode child's goes to its \
             parent by message)",
            name(s.session_id).await
        ));
        let (sup, child) = (sup.clone(), s.session_id);
        runs.push(tokio::spawn(async move {
            (child, sup.resume_child(child).await)
        }));
    }
    for run in runs {
        match run.await {
            Ok((child, Err(arbor_core::CoreError::Suspended(_)))) => output::err(&format!(
                "{} stopped again on a call waiting for approval",
                name(child).await
            )),
            Ok((child, Err(e))) => {
                output::err(&format!("{} could not be resumed: {e}", name(child).await))
            }
            Ok((_, Ok(_))) | Err(_) => {}
        }
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
    (ready, undecided): (&[Suspension], &[Suspension]),
) -> Result<u8, Fail> {
    let store = view.store;
    let crashed = Crashed::read(store.as_ref(), root, ready, undecided).await?;
    let sessions = &crashed.sessions;
    let interrupted = crashed.interrupted();
    let token = CancellationToken::new();
    let _lease = owner::take_over(store, root, &token).await?;
    let built = tree::build(spec, store.clone(), token.clone())
        .await
        .map_err(Fail::core)?;
    let mut session = built
        .root
        .open_session(store.clone(), root.id)
        .await
        .map_err(Fail::core)?;
    let root_interrupted = session.record().status == arbor_protocol::SessionStatus::Interrupted;
    if root_interrupted {
        output::err(&format!(
            "continuing {} ({}): its run goes on from its transcript",
            root.name, root.id
        ));
    }
    // The sync and async children a crash cut off: what became of them is said once the
    // root's run is over (its calls may wait for them again, through workers).
    let mut with_callers = Vec::new();
    let mut children = Vec::new();
    if let Some(sup) = &built.supervisor {
        // Attached first, so the continued children's replies and notices reach it live.
        sup.attach(&mut session);
        for note in close_orphaned_suspensions(sup, store, sessions).await? {
            output::err(&note);
        }
        for child in interrupted.iter().filter(|s| s.parent_id.is_some()) {
            if child.meta["mode"].as_str() == Some("message") {
                output::err(&format!(
                    "continuing {} ({}): its answer goes to its parent by message",
                    child.name, child.id
                ));
                let (sup, id) = (sup.clone(), child.id);
                children.push(tokio::spawn(async move { sup.continue_child(id).await }));
            } else {
                with_callers.push(child.id);
            }
        }
        resume_children(sup, store.as_ref(), ready, undecided).await;
    }
    if root_interrupted {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let code = drive_root(view, &built, session, Start::Continue(Some(tx)), token).await;
        if let Ok(state) = rx.await {
            output::err(&format!(
                "continued {} ({}): {}",
                root.name,
                root.id,
                describe(&state)
            ));
        }
        say_what_became_of(store.as_ref(), &with_callers).await;
        return code;
    }
    say_what_became_of(store.as_ref(), &with_callers).await;
    for child in children {
        if let Ok(Err(e)) = child.await {
            output::err(&format!("a child could not be continued: {e}"));
        }
    }
    if session.inbox().is_empty() {
        if let Some(sup) = &built.supervisor {
            sup.shutdown().await;
        }
        built.close().await;
        let left = waiting_at(store.as_ref(), root.id).await?;
        if !left.is_empty() {
            let reviews =
                crate::render::report::reviews(store.as_ref(), &left.iter().collect::<Vec<_>>())
                    .await;
            for s in &left {
                output::out(&suspension_text(root.id, s, &reviews));
            }
            return Ok(crate::fail::EXIT_SUSPENDED);
        }
        output::err("nothing waits for the root: done");
        return Ok(0);
    }
    drive_root(view, &built, session, Start::Inbox, token).await
}

/// What a crash left of a tree that waits for no decision: its sessions, and whether any
/// run of it can go on (the root's, a message-mode child's, or a decided child's nobody
/// awaits). What `arbor resume` and the service's resume both read first.
pub(crate) struct Crashed {
    /// Every session of the tree.
    pub(crate) sessions: Vec<arbor_store::SessionRecord>,
}

impl Crashed {
    /// Reads the tree of `root`; refused (usage) when no run of it can go on, saying why.
    pub(crate) async fn read(
        store: &dyn arbor_store::Store,
        root: &arbor_store::SessionRecord,
        ready: &[Suspension],
        undecided: &[Suspension],
    ) -> Result<Self, Fail> {
        let sessions = store
            .list_sessions(arbor_store::SessionQuery::Tree(root.id))
            .await
            .map_err(|e| Fail::store(e.to_string()))?;
        let crashed = Self { sessions };
        let interrupted = crashed.interrupted();
        // The root's run, and message-mode children (their answers reach their parents by
        // message); a sync or async child's caller is the one that goes on.
        let continuable = !ready.is_empty()
            || interrupted
                .iter()
                .any(|s| s.parent_id.is_none() || s.meta["mode"].as_str() == Some("message"));
        if !continuable && !undecided.is_empty() {
            let calls: usize = undecided.iter().map(|s| s.pending.len()).sum();
            return Err(Fail::usage(format!(
                "{calls} call(s) below {} still wait for a decision (see arbor approvals {}): \
                 decide them first, then resume",
                root.id, root.id
            )));
        }
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
                "{} waits for no decision and no run of its tree can go on: nothing to \
                 resume{left}",
                root.id
            )));
        }
        Ok(crashed)
    }

    /// The sessions a crash left `interrupted` (not deleted).
    pub(crate) fn interrupted(&self) -> Vec<&arbor_store::SessionRecord> {
        self.sessions
            .iter()
            .filter(|s| {
                s.status == arbor_protocol::SessionStatus::Interrupted && s.tombstone.is_none()
            })
            .collect()
    }

    /// The message-mode children to continue (their answers reach their parents by
    /// message); the other interrupted children stay so (their callers' calls are reported
    /// interrupted).
    pub(crate) fn message_children(&self) -> Vec<&arbor_store::SessionRecord> {
        self.interrupted()
            .into_iter()
            .filter(|s| s.parent_id.is_some() && s.meta["mode"].as_str() == Some("message"))
            .collect()
    }
}

/// Closes the suspensions nothing will resume: those of a sync or async child whose caller
/// was interrupted (the crash came while its call waited for approval, before the caller's
/// own run could suspend on it) or that was itself interrupted. Its caller's call is
/// reported interrupted when the caller goes on, so the call it waited on never runs; the
/// child's checkpoint is closed the way a run ending without resuming its children closes
/// theirs (a `suspended` record becomes `aborted`), and no approval is listed for it.
/// Message-mode children are not touched: their parents never waited on them.
/// Returns what it closed, as lines for a person.
pub(crate) async fn close_orphaned_suspensions(
    sup: &arbor_core::supervisor::Supervisor,
    store: &std::sync::Arc<dyn arbor_store::Store>,
    sessions: &[arbor_store::SessionRecord],
) -> Result<Vec<String>, Fail> {
    let mut notes = Vec::new();
    use arbor_core::process::NestedResumer;
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
            notes.push(format!(
                "closed the suspension of {} ({}): {calls} call(s) waiting for approval never \
                 run; its caller's call is reported interrupted",
                child.name, child.id
            ));
        }
    }
    Ok(notes)
}

/// What a continuation did, from what it closed (not what was predicted before it ran).
fn describe(state: &arbor_core::Continued) -> String {
    if state.already_answered {
        return "its answer was in; the run ended".to_owned();
    }
    let mut parts = Vec::new();
    if !state.rejoined_calls.is_empty() {
        parts.push(format!(
            "{} call(s) in flight got their results ({}): children waited for again, or \
             effects recorded done",
            state.rejoined_calls.len(),
            state.rejoined_calls.join(", ")
        ));
    }
    if !state.interrupted_calls.is_empty() {
        parts.push(format!(
            "{} call(s) in flight reported interrupted ({}), never run again",
            state.interrupted_calls.len(),
            state.interrupted_calls.join(", ")
        ));
    }
    if state.turn_redone || parts.is_empty() {
        parts.push("the turn in progress was asked again".to_owned());
    }
    parts.join("; ")
}

/// Says, from the store, what became of the sync and async children a crash cut off: still
/// `interrupted` (their callers' calls were reported interrupted), or gone on with their
/// callers (waited for again, through workers).
async fn say_what_became_of(store: &dyn arbor_store::Store, children: &[SessionId]) {
    for id in children {
        let Ok(Some(child)) = store.session(*id).await else {
            continue;
        };
        if child.status == arbor_protocol::SessionStatus::Interrupted {
            output::err(&format!(
                "left interrupted: {} ({}): its caller's call was reported interrupted",
                child.name, child.id
            ));
        } else {
            output::err(&format!(
                "{} ({}) went on with its caller: {}",
                child.name, child.id, child.status
            ));
        }
    }
}
