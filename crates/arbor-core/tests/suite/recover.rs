//! A crashed run goes on: a session left `interrupted` continues from its transcript; a
//! tool call in flight at the crash is reported interrupted and never run again; a turn in
//! progress is asked again; a child continues as a delegation and answers its parent.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arbor_core::supervisor::{ChildEntry, DelegationRequest, Ownership, Supervisor, factory_fn};
use arbor_core::{Agent, RunOptions, SessionRef};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{Message, Notice, RunStatus, SessionStatus};
use arbor_store::{MemoryStore, Store};
use serde_json::json;

use super::support::Probe;

fn probe(ms: u64) -> ScriptedTurn {
    ScriptedTurn::tool_call("probe", json!({"ms": ms, "tag": "t"}))
}

/// Runs `f` on a runtime of its own and drops that runtime after `after`: every task on it
/// stops where it stands, as in a crash (nothing finishes, nothing cleans up).
pub(super) fn crash_after<F: std::future::Future<Output = ()> + Send + 'static>(
    after: Duration,
    f: F,
) {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let _ = tokio::time::timeout(after, f).await;
        });
        drop(rt);
    })
    .join()
    .unwrap();
}

#[tokio::test]
async fn an_interrupted_run_continues_and_never_repeats_the_call_in_flight() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let tool = Probe::default();
    let agent = Agent::builder("worker")
        .provider(ScriptedProvider::new(Script::new([
            probe(10_000),
            ScriptedTurn::text("carried on"),
        ])))
        .tool(tool.clone())
        .build()
        .unwrap();
    let id = {
        let (store, agent) = (store.clone(), agent.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        crash_after(Duration::from_millis(100), async move {
            let mut s = agent.session().store(store).create().await.unwrap();
            tx.send(s.id()).unwrap();
            let _ = s.run("work", RunOptions::default()).await;
        });
        rx.recv().unwrap()
    };
    assert_eq!(tool.calls.load(Ordering::SeqCst), 1);
    // The next process sweeps what no process runs any more.
    assert_eq!(store.mark_interrupted().await.unwrap(), [id]);
    let mut s = agent.open_session(store.clone(), id).await.unwrap();
    let state = s.interrupted_state();
    assert_eq!(state.interrupted_calls, ["probe"]);
    let (continued, r) = s.continue_interrupted(RunOptions::default()).await.unwrap();
    assert_eq!(continued, state);
    assert_eq!(r.status, RunStatus::Succeeded);
    assert_eq!(r.text, "carried on");
    assert_eq!(tool.calls.load(Ordering::SeqCst), 1, "never run again");
    let interrupted = s
        .messages()
        .iter()
        .find_map(|m| match m {
            Message::Tool(t) => Some(t.content.clone()),
            _ => None,
        })
        .unwrap();
    assert!(interrupted.starts_with("interrupted:"), "{interrupted}");
    // Only an interrupted session continues.
    let e = s
        .continue_interrupted(RunOptions::default())
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("session {id} was not interrupted (it is succeeded): nothing to continue")
    );
}

#[tokio::test]
async fn a_turn_in_progress_at_the_crash_is_asked_again() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let agent = Agent::builder("worker")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            "answer",
        )
        .with_delay(Duration::from_millis(500))])))
        .build()
        .unwrap();
    let id = {
        let (store, agent) = (store.clone(), agent.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        crash_after(Duration::from_millis(100), async move {
            let mut s = agent.session().store(store).create().await.unwrap();
            tx.send(s.id()).unwrap();
            let _ = s.run("work", RunOptions::default()).await;
        });
        rx.recv().unwrap()
    };
    store.mark_interrupted().await.unwrap();
    let mut s = agent.open_session(store.clone(), id).await.unwrap();
    let (continued, r) = s.continue_interrupted(RunOptions::default()).await.unwrap();
    assert!(continued.turn_redone);
    assert_eq!(r.status, RunStatus::Succeeded);
    assert_eq!(r.text, "answer");
}

#[tokio::test]
async fn an_interrupted_child_continues_as_a_delegation_and_answers_its_parent() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let tool = Probe::default();
    let build = |tool: Probe| {
        let script = Script::new([probe(10_000), ScriptedTurn::text("child done")]);
        Supervisor::builder(Ownership::user("t", "u"))
            .store(store.clone())
            .child(ChildEntry::new(
                "worker",
                factory_fn(move |ctx| {
                    let (script, tool) = (script.clone(), tool.clone());
                    async move {
                        Agent::builder(ctx.child_id.clone())
                            .provider(ScriptedProvider::new(script))
                            .tool(tool)
                            .build()
                    }
                }),
            ))
            .build()
            .unwrap()
    };
    let root_agent = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::default()))
        .build()
        .unwrap();
    let (root_id, child_id) = {
        let (sup, store, root_agent) = (build(tool.clone()), store.clone(), root_agent.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        crash_after(Duration::from_millis(150), async move {
            let mut root = root_agent.session().store(store).create().await.unwrap();
            sup.attach(&mut root);
            let req = DelegationRequest {
                parent: Some(SessionRef::from(root.record())),
                name: Some("w".into()),
                ..DelegationRequest::new("worker", "work")
            };
            let handle = sup.spawn(req).await.unwrap();
            tx.send((root.id(), handle.session_id)).unwrap();
            std::future::pending::<()>().await;
        });
        rx.recv().unwrap()
    };
    assert_eq!(tool.calls.load(Ordering::SeqCst), 1);
    store.mark_interrupted().await.unwrap();
    // A new process: a new supervisor, the root reopened and attached.
    let sup = build(tool.clone());
    let mut root = root_agent
        .open_session(store.clone(), root_id)
        .await
        .unwrap();
    sup.attach(&mut root);
    let done = sup.continue_child(child_id).await.unwrap();
    assert_eq!(done.result.status, RunStatus::Succeeded);
    assert_eq!(done.result.text, "child done");
    assert_eq!(tool.calls.load(Ordering::SeqCst), 1, "never run again");
    let child = store.session(child_id).await.unwrap().unwrap();
    assert_eq!(child.status, SessionStatus::Succeeded);
    let notices = root.inbox().drain();
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(matches!(
        notices[0].notice,
        Some(Notice::CompletedWithoutReply { .. })
    ));
    let e = sup.continue_child(child_id).await.unwrap_err();
    assert!(e.to_string().contains("was not interrupted"), "{e}");
}

/// A crash between a suspension's checkpoint and its record's `suspended`: the record says
/// `interrupted`, the checkpoint says calls wait. Continuing the run reports those calls
/// interrupted (never run) and closes the checkpoint: nothing lists the session as waiting
/// afterwards (the crash harness's seed 15 found it left listed).
#[tokio::test]
async fn continuing_a_run_cut_off_while_it_suspended_closes_its_checkpoint() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let tool = Probe::default();
    let agent = Agent::builder("worker")
        .provider(ScriptedProvider::new(Script::new([
            probe(1),
            ScriptedTurn::text("carried on"),
        ])))
        .tool(tool.clone())
        .interrupt_before_tool(true)
        .build()
        .unwrap();
    let mut s = agent.session().store(store.clone()).create().await.unwrap();
    let r = s.run("work", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Suspended);
    let id = s.id();
    assert_eq!(
        arbor_core::approval::suspensions(store.as_ref(), id)
            .await
            .unwrap()
            .len(),
        1
    );
    // The crash: the record never got (or lost) its `suspended`; the sweep finds it running.
    let record = store.session(id).await.unwrap().unwrap();
    let update = arbor_store::SessionUpdate {
        expected_version: Some(record.version),
        ..arbor_store::SessionUpdate::status(SessionStatus::Running)
    };
    store.update_session(id, &update).await.unwrap();
    assert_eq!(store.mark_interrupted().await.unwrap(), [id]);

    let mut s = agent.open_session(store.clone(), id).await.unwrap();
    let (continued, r) = s.continue_interrupted(RunOptions::default()).await.unwrap();
    assert_eq!(continued.interrupted_calls, ["probe"]);
    assert_eq!(r.status, RunStatus::Succeeded);
    assert_eq!(
        tool.calls.load(Ordering::SeqCst),
        0,
        "the waiting call never ran"
    );
    assert!(
        arbor_core::approval::suspensions(store.as_ref(), id)
            .await
            .unwrap()
            .is_empty(),
        "the session is still listed as waiting"
    );
}

/// Issue 34: a spawn cut off before its child was registered (the process died between the
/// model's `spawn_agent` call and the child's record) is issued again when the run is
/// continued, so the child runs (once) and the parent reads its answer, instead of being
/// reported interrupted with the child never run.
#[tokio::test]
async fn a_spawn_cut_off_before_its_child_registered_is_issued_again_on_continue() {
    use arbor_store::testing::{Call, FaultStore};
    let mem: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let builds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tree = |store: Arc<dyn Store>| {
        let builds = builds.clone();
        let sup = Supervisor::builder(Ownership::user("t", "u"))
            .store(store)
            .child(ChildEntry::new(
                "worker",
                factory_fn(move |ctx| {
                    builds.fetch_add(1, Ordering::SeqCst);
                    async move {
                        Agent::builder(ctx.child_id.clone())
                            .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
                                "child done",
                            )])))
                            .build()
                    }
                }),
            ))
            .build()
            .unwrap();
        let root = spawning_root(&sup);
        (sup, root)
    };
    let root_id = {
        let hold = FaultStore::new(mem.clone());
        // The child's record is never written: the process dies first.
        let held = hold.arm(
            false,
            |c| matches!(c, Call::Create(r) if r.parent_id.is_some()),
        );
        let store: Arc<dyn Store> = hold.clone();
        let (sup, root_agent) = tree(store.clone());
        let (tx, rx) = std::sync::mpsc::channel();
        crash_after(Duration::from_millis(300), async move {
            let mut root = root_agent.session().store(store).create().await.unwrap();
            tx.send(root.id()).unwrap();
            let _ = root
                .run("go", RunOptions::default().with_nested(Arc::new(sup)))
                .await;
        });
        drop(held);
        rx.recv().unwrap()
    };
    assert!(
        mem.list_sessions(arbor_store::SessionQuery::Children(root_id))
            .await
            .unwrap()
            .is_empty(),
        "nothing was registered before the crash"
    );
    mem.mark_interrupted().await.unwrap();
    let (sup, root_agent) = tree(mem.clone());
    let mut root = root_agent.open_session(mem.clone(), root_id).await.unwrap();
    let (continued, r) = root
        .continue_interrupted(RunOptions::default().with_nested(Arc::new(sup)))
        .await
        .unwrap();
    assert_eq!(
        (
            continued.rejoined_calls.as_slice(),
            continued.interrupted_calls.as_slice()
        ),
        (&["spawn_agent".to_owned()][..], &[][..])
    );
    assert_eq!(
        (r.status, r.text.as_str()),
        (RunStatus::Succeeded, "root done")
    );
    let children = mem
        .list_sessions(arbor_store::SessionQuery::Children(root_id))
        .await
        .unwrap();
    assert_eq!(children.len(), 1, "one child, registered once");
    assert_eq!(children[0].status, SessionStatus::Succeeded);
    assert_eq!(builds.load(Ordering::SeqCst), 1, "it ran once");
    let answer = root
        .messages()
        .iter()
        .find_map(|m| match m {
            Message::Tool(t) if t.name == "spawn_agent" => Some(t.content.clone()),
            _ => None,
        })
        .unwrap();
    assert!(answer.contains("child done"), "{answer}");
}

/// Issue 34: an async child's handle dies with the process that held it. When the parent's
/// run is continued in another process, its `wait_agent` on that handle rejoins the child
/// from the store (here: ended, its answer read from its transcript) instead of failing
/// with an unknown handle.
#[tokio::test]
async fn wait_agent_on_a_handle_that_died_rejoins_the_child_from_the_store() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let tool = Probe::default();
    let tree = |tool: Probe| {
        let sup = Supervisor::builder(Ownership::user("t", "u"))
            .store(store.clone())
            .child(ChildEntry::new(
                "worker",
                factory_fn(move |ctx| async move {
                    Agent::builder(ctx.child_id.clone())
                        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
                            "child done",
                        )])))
                        .build()
                }),
            ))
            .build()
            .unwrap();
        let root = Agent::builder("root")
            .provider(ScriptedProvider::new(Script::new([
                ScriptedTurn::tool_call(
                    "spawn_agent",
                    json!({"child_id": "worker", "name": "w", "input": "work", "mode": "async"}),
                ),
                probe(10_000),
                ScriptedTurn::tool_call(
                    "wait_agent",
                    json!({"delegation_id": "${call_1_1.delegation_id}"}),
                ),
                ScriptedTurn::text("root done"),
            ])))
            .dyn_tools(sup.delegator().tools())
            .tool(tool)
            .build()
            .unwrap();
        (sup, root)
    };
    let root_id = {
        let (sup, root_agent) = tree(tool.clone());
        let store = store.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        crash_after(Duration::from_millis(400), async move {
            let mut root = root_agent.session().store(store).create().await.unwrap();
            sup.attach(&mut root);
            tx.send(root.id()).unwrap();
            let _ = root
                .run("go", RunOptions::default().with_nested(Arc::new(sup)))
                .await;
        });
        rx.recv().unwrap()
    };
    let children = store
        .list_sessions(arbor_store::SessionQuery::Children(root_id))
        .await
        .unwrap();
    assert_eq!(children.len(), 1);
    assert_eq!(
        children[0].status,
        SessionStatus::Succeeded,
        "it ended before the crash"
    );
    store.mark_interrupted().await.unwrap();
    let (sup, root_agent) = tree(tool.clone());
    let mut root = root_agent
        .open_session(store.clone(), root_id)
        .await
        .unwrap();
    sup.attach(&mut root);
    let (_, r) = root
        .continue_interrupted(RunOptions::default().with_nested(Arc::new(sup)))
        .await
        .unwrap();
    assert_eq!(
        (r.status, r.text.as_str()),
        (RunStatus::Succeeded, "root done")
    );
    let waited = root
        .messages()
        .iter()
        .find_map(|m| match m {
            Message::Tool(t) if t.name == "wait_agent" => Some(t.clone()),
            _ => None,
        })
        .unwrap();
    assert!(!waited.is_error, "{waited:?}");
    assert!(waited.content.contains("child done"), "{waited:?}");
    assert_eq!(
        tool.calls.load(Ordering::SeqCst),
        1,
        "the probe in flight never ran again"
    );
}

/// A sync child cut off by the same crash as its caller (issue 39, item 7): continuing the
/// caller's run rejoins the child, which goes on in this process from its transcript (its
/// call in flight reported interrupted, never run again); the caller reads its answer
/// instead of an interruption.
#[tokio::test]
async fn a_continued_caller_rejoins_its_interrupted_sync_child_here() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let tool = Probe::default();
    let tree = |tool: Probe| {
        rejoin_tree(
            &store,
            tool,
            Script::new([probe(10_000), ScriptedTurn::text("child done")]),
        )
    };
    let root_id = crashed_with_its_child_in_flight(&store, tree(tool.clone()));
    assert_eq!(
        tool.calls.load(Ordering::SeqCst),
        1,
        "the child's call was in flight"
    );
    let interrupted = store.mark_interrupted().await.unwrap();
    assert_eq!(
        interrupted.len(),
        2,
        "the root and its child: {interrupted:?}"
    );
    // A new process.
    let (sup, root_agent) = tree(tool.clone());
    let mut root = root_agent
        .open_session(store.clone(), root_id)
        .await
        .unwrap();
    let (continued, r) = root
        .continue_interrupted(RunOptions::default().with_nested(Arc::new(sup)))
        .await
        .unwrap();
    assert_eq!(r.status, RunStatus::Succeeded, "{:?}", r.error);
    assert_eq!(r.text, "root done");
    assert_eq!(continued.rejoined_calls.len(), 1, "{continued:?}");
    assert!(continued.interrupted_calls.is_empty(), "{continued:?}");
    let answer = root
        .messages()
        .iter()
        .find_map(|m| match m {
            Message::Tool(t) => Some(t.content.clone()),
            _ => None,
        })
        .unwrap();
    assert!(answer.contains("child done"), "{answer}");
    assert_eq!(tool.calls.load(Ordering::SeqCst), 1, "never run again");
    let child = store
        .list_sessions(arbor_store::SessionQuery::Children(root_id))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(child.status, SessionStatus::Succeeded);
}

/// A child its continued caller rejoins runs under that caller: cancelling the caller's
/// continued run cancels the child's too, rather than leaving it to run on alone.
#[tokio::test]
async fn cancelling_a_continued_caller_cancels_the_child_it_continued() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let tool = Probe::default();
    // After the crash its next turn is slow: the cancel comes first.
    let script = Script::new([
        probe(10_000),
        ScriptedTurn::text("child done").with_delay(Duration::from_secs(30)),
    ]);
    let tree = |tool: Probe| rejoin_tree(&store, tool, script.clone());
    let root_id = crashed_with_its_child_in_flight(&store, tree(tool.clone()));
    store.mark_interrupted().await.unwrap();
    let (sup, root_agent) = tree(tool.clone());
    let mut root = root_agent
        .open_session(store.clone(), root_id)
        .await
        .unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    let later = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        later.cancel();
    });
    let started = std::time::Instant::now();
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        root.continue_interrupted(
            RunOptions::default()
                .with_nested(Arc::new(sup))
                .with_cancel(cancel),
        ),
    )
    .await
    .expect("the cancel ended the continued run");
    assert!(started.elapsed() < Duration::from_secs(10));
    if let Ok((_, r)) = r {
        assert_ne!(r.status, RunStatus::Succeeded, "{:?}", r.text);
    }
    let child = store
        .list_sessions(arbor_store::SessionQuery::Children(root_id))
        .await
        .unwrap()
        .remove(0);
    assert_ne!(
        child.status,
        SessionStatus::Running,
        "the child stopped too"
    );
    assert_ne!(child.status, SessionStatus::Succeeded, "it did not run on");
}

/// A durable tree whose root spawns one sync `worker` child (named `w`) playing `script`
/// with the probe `tool`.
fn rejoin_tree(store: &Arc<dyn Store>, tool: Probe, script: Script) -> (Supervisor, Agent) {
    tree_of(store, tool, script, false)
}

/// [`rejoin_tree`]; with `asks`, the worker may also ask the person at the root
/// (`ask_human`), and children may suspend (a definition revision).
pub(super) fn tree_of(
    store: &Arc<dyn Store>,
    tool: Probe,
    script: Script,
    asks: bool,
) -> (Supervisor, Agent) {
    let mut b = Supervisor::builder(Ownership::user("t", "u")).store(store.clone());
    if asks {
        b = b.definition_revision("rev-1");
    }
    let sup = b
        .child(ChildEntry::new(
            "worker",
            factory_fn(move |ctx| {
                let (script, tool) = (script.clone(), tool.clone());
                async move {
                    let b = Agent::builder(ctx.child_id.clone())
                        .provider(ScriptedProvider::new(script))
                        .tool(tool);
                    let b = if asks {
                        b.dyn_tool(Arc::new(arbor_core::tool::ask::AskHuman::new()))
                    } else {
                        b
                    };
                    b.build()
                }
            }),
        ))
        .build()
        .unwrap();
    let root = spawning_root(&sup);
    (sup, root)
}

/// A root that spawns one sync `worker` (named `w`) of `sup`, then answers "root done".
fn spawning_root(sup: &Supervisor) -> Agent {
    use arbor_core::supervisor::SpawnAgentTool;
    Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new([
            ScriptedTurn::tool_call(
                "spawn_agent",
                json!({"child_id": "worker", "name": "w", "input": "work"}),
            ),
            ScriptedTurn::text("root done"),
        ])))
        .dyn_tool(Arc::new(SpawnAgentTool::new(sup.delegator())))
        .build()
        .unwrap()
}

/// Runs the root of `(sup, root_agent)` on `store` until a crash 200 ms in (its child's call
/// in flight); the root's id.
pub(super) fn crashed_with_its_child_in_flight(
    store: &Arc<dyn Store>,
    (sup, root_agent): (Supervisor, Agent),
) -> arbor_protocol::SessionId {
    let store = store.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    crash_after(Duration::from_millis(200), async move {
        let mut root = root_agent.session().store(store).create().await.unwrap();
        tx.send(root.id()).unwrap();
        let _ = root
            .run("go", RunOptions::default().with_nested(Arc::new(sup)))
            .await;
    });
    rx.recv().unwrap()
}
