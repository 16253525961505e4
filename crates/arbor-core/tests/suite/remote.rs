//! Children whose runs a runner hands to another process: the parent keeps admission, the
//! record and the terminal report; the worker's supervisor runs the child from its record
//! (`run_claimed`); a takeover goes on from the transcript with no call run twice; a cancel
//! at the parent reaches the worker's run; a child a `before` hook narrowed runs at home.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arbor_core::process::{ClaimedRun, SupervisorProcess};
use arbor_core::supervisor::{
    BeforeDecision, ChildEntry, ChildRunner, DelegationRequest, Outcome, Ownership, RemoteChild,
    RemoteOutcome, Supervisor, before_fn, factory_fn,
};
use arbor_core::{Agent, CoreError, CoreResult, Permission, RunResult, SessionRef};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{Message, RunStatus, SessionStatus};
use arbor_store::{MemoryStore, Store};
use async_trait::async_trait;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use super::support::{Probe, idle_root};

fn probe(ms: u64, tag: &str) -> ScriptedTurn {
    ScriptedTurn::tool_call("probe", json!({"ms": ms, "tag": tag}))
}

/// A supervisor over `store` whose `worker` entry builds its child with `script` and `tool`,
/// counting its factory calls in `built`.
fn supervisor(
    store: &Arc<dyn Store>,
    script: Script,
    tool: Probe,
    built: Arc<AtomicUsize>,
) -> arbor_core::supervisor::SupervisorBuilder {
    Supervisor::builder(Ownership::user("t", "u"))
        .id("tree")
        .store(store.clone())
        .child(ChildEntry::new(
            "worker",
            factory_fn(move |ctx| {
                let (script, tool, built) = (script.clone(), tool.clone(), built.clone());
                async move {
                    built.fetch_add(1, Ordering::SeqCst);
                    Agent::builder(ctx.child_id.clone())
                        .provider(ScriptedProvider::new(script))
                        .tool(tool)
                        .build()
                }
            }),
        ))
}

/// A handed-over run and where its outcome goes.
type Job = (RemoteChild, oneshot::Sender<CoreResult<RunResult>>);

/// A runner that hands each run to the test (a queue, in effect) and waits for its outcome.
#[derive(Debug)]
struct Handoff(mpsc::UnboundedSender<Job>);

#[async_trait]
impl ChildRunner for Handoff {
    async fn run(&self, child: RemoteChild) -> CoreResult<RunResult> {
        let (tx, rx) = oneshot::channel();
        self.0
            .send((child, tx))
            .map_err(|_| CoreError::Supervisor("no worker".into()))?;
        rx.await
            .map_err(|_| CoreError::Supervisor("the worker went away".into()))?
    }
}

fn handoff() -> (Handoff, mpsc::UnboundedReceiver<Job>) {
    let (tx, rx) = mpsc::unbounded_channel();
    (Handoff(tx), rx)
}

/// A delegation of the `worker` entry under `root`, on `input`.
fn under(root: &arbor_core::Session, input: &str) -> DelegationRequest {
    DelegationRequest {
        parent: Some(SessionRef::from(root.record())),
        ..DelegationRequest::new("worker", input)
    }
}

fn claimed(child: &RemoteChild, takeover: bool) -> ClaimedRun {
    ClaimedRun {
        session: child.session,
        input: child.input.clone(),
        limits: Some(child.limits),
        takeover,
        cancel: child.cancel.clone(),
        resume_run: child.resume_run,
        mapping: child.mapping.clone(),
        relay: None,
    }
}

#[tokio::test]
async fn a_child_handed_to_a_runner_runs_on_the_worker_and_is_reported_by_its_parent() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let script = Script::new([probe(1, "seen"), ScriptedTurn::text("child done")]);
    let (tool, home_built, away_built) = (Probe::default(), Arc::default(), Arc::default());
    let (runner, mut queue) = handoff();
    let parent = supervisor(
        &store,
        script.clone(),
        tool.clone(),
        Arc::clone(&home_built),
    )
    .runner(runner)
    .build()
    .unwrap();
    let worker = supervisor(&store, script, tool.clone(), Arc::clone(&away_built))
        .build()
        .unwrap();
    let mut root = idle_root(&store).await;
    parent.attach(&mut root);
    let request = under(&root, "work on this");
    let delegation =
        tokio::spawn(async move { parent.delegate(request).await.map(|r| (r, parent)) });
    let (child, reply) = queue.recv().await.unwrap();
    assert_eq!(child.input, "work on this");
    assert_eq!(child.parent, root.id());
    assert_eq!(child.root, root.id());
    assert_eq!(child.child_id, "worker");
    let record = store.session(child.session).await.unwrap().unwrap();
    assert_eq!(
        record.parent_id,
        Some(root.id()),
        "registered by the parent first"
    );
    let ran = worker.run_claimed(claimed(&child, false)).await;
    // Both sides agree on the outcome's JSON.
    let wire = serde_json::to_value(RemoteOutcome::of(&ran)).unwrap();
    assert_eq!(wire["outcome"], "ran");
    let back: RemoteOutcome = serde_json::from_value(wire).unwrap();
    reply.send(back.into_result(child.session)).unwrap();
    let (done, parent) = delegation.await.unwrap().unwrap();
    assert_eq!(done.result.status, RunStatus::Succeeded);
    assert_eq!(done.result.text, "child done");
    assert_eq!(done.session_id, child.session);
    assert_eq!(home_built.load(Ordering::SeqCst), 0, "never built at home");
    assert_eq!(away_built.load(Ordering::SeqCst), 1);
    assert_eq!(tool.calls.load(Ordering::SeqCst), 1);
    let summary = parent.summary_of("worker").unwrap();
    assert_eq!((summary.attempts, summary.outcome), (1, Outcome::Succeeded));
    let record = store.session(child.session).await.unwrap().unwrap();
    assert_eq!(record.status, SessionStatus::Succeeded);
    assert!(
        record.own_usage.input_tokens > 0,
        "the worker's run wrote its usage"
    );
    // The tree's aggregate holds it: the root's attributed tokens are the child's own.
    let root_now = store.session(root.id()).await.unwrap().unwrap();
    assert_eq!(root_now.attributed_usage, record.own_usage);
}

#[tokio::test]
async fn a_takeover_goes_on_from_the_transcript_and_runs_no_call_twice() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    // One call done, one in flight when the first worker dies, then the answer.
    let script = Script::new([
        probe(1, "first"),
        probe(10_000, "second"),
        ScriptedTurn::text("child done"),
    ]);
    let tool = Probe::default();
    let (runner, mut queue) = handoff();
    let parent = supervisor(&store, script.clone(), tool.clone(), Arc::default())
        .runner(runner)
        .build()
        .unwrap();
    let mut root = idle_root(&store).await;
    parent.attach(&mut root);
    let request = under(&root, "work");
    let delegation = tokio::spawn(async move { parent.delegate(request).await });
    let (child, reply) = queue.recv().await.unwrap();
    // The first worker: its runtime is dropped mid-call, as in a SIGKILL.
    {
        let (store, script, tool, claim) = (
            store.clone(),
            script.clone(),
            tool.clone(),
            claimed(&child, false),
        );
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let first = supervisor(&store, script, tool, Arc::default())
                    .build()
                    .unwrap();
                let _ = tokio::time::timeout(Duration::from_millis(300), first.run_claimed(claim))
                    .await;
            });
            drop(rt);
        })
        .join()
        .unwrap();
    }
    assert_eq!(
        tool.calls.load(Ordering::SeqCst),
        2,
        "the second call was in flight"
    );
    let record = store.session(child.session).await.unwrap().unwrap();
    assert_eq!(record.status, SessionStatus::Running, "nobody finished it");
    // The second worker takes it over.
    let second = supervisor(&store, script, tool.clone(), Arc::default())
        .build()
        .unwrap();
    let ran = second.run_claimed(claimed(&child, true)).await.unwrap();
    assert_eq!(ran.status, RunStatus::Succeeded);
    assert_eq!(ran.text, "child done");
    assert_eq!(tool.calls.load(Ordering::SeqCst), 2, "no call ran twice");
    let transcript = store.transcript(child.session, 0, None).await.unwrap();
    let results: Vec<String> = transcript
        .iter()
        .filter_map(|e| match &e.kind {
            arbor_protocol::EntryKind::Message {
                message: Message::Tool(t),
            } => Some(t.content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 2, "{results:?}");
    assert_eq!(results[0], "first");
    assert!(results[1].starts_with("interrupted:"), "{results:?}");
    reply.send(Ok(ran)).unwrap();
    let done = delegation.await.unwrap().unwrap();
    assert_eq!(done.result.text, "child done");
}

#[tokio::test]
async fn a_cancel_at_the_parent_stops_the_run_on_the_worker() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let script = Script::new([probe(60_000, "long"), ScriptedTurn::text("never")]);
    let tool = Probe::default();
    let (runner, mut queue) = handoff();
    let parent = supervisor(&store, script.clone(), tool.clone(), Arc::default())
        .runner(runner)
        .build()
        .unwrap();
    let worker = supervisor(&store, script, tool.clone(), Arc::default())
        .build()
        .unwrap();
    let mut root = idle_root(&store).await;
    parent.attach(&mut root);
    let handle = parent.delegate_async(under(&root, "work")).await.unwrap();
    let (child, reply) = queue.recv().await.unwrap();
    let away = tokio::spawn(async move { worker.run_claimed(claimed(&child, false)).await });
    while tool.calls.load(Ordering::SeqCst) == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = std::time::Instant::now();
    assert!(parent.cancel(&handle.delegation_id).unwrap());
    let ran = tokio::time::timeout(Duration::from_secs(5), away)
        .await
        .expect("the worker's run stops")
        .unwrap()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_ne!(ran.status, RunStatus::Succeeded);
    let _ = reply.send(Ok(ran));
    let outcome = parent
        .wait(&handle.delegation_id, Default::default())
        .await
        .unwrap();
    assert!(
        matches!(
            outcome,
            arbor_core::supervisor::WaitOutcome::Cancelled { .. }
        ),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_child_whose_permission_a_hook_narrowed_runs_at_home() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let script = Script::new([ScriptedTurn::text("at home")]);
    let (runner, mut queue) = handoff();
    let home_built = Arc::new(AtomicUsize::new(0));
    let parent = supervisor(&store, script, Probe::default(), Arc::clone(&home_built))
        .runner(runner)
        .before(before_fn(|_ctx| async {
            BeforeDecision::Modify {
                input: None,
                limits: None,
                permission: Some(Permission::new(arbor_core::permission::DenyTools::new([
                    "probe",
                ]))),
            }
        }))
        .build()
        .unwrap();
    let mut root = idle_root(&store).await;
    parent.attach(&mut root);
    let done = parent.delegate(under(&root, "work")).await.unwrap();
    assert_eq!(done.result.text, "at home");
    assert_eq!(home_built.load(Ordering::SeqCst), 1);
    assert!(queue.try_recv().is_err(), "nothing was handed over");
}

#[tokio::test]
async fn a_worker_refuses_a_deleted_or_foreign_child() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let worker = supervisor(&store, Script::default(), Probe::default(), Arc::default())
        .build()
        .unwrap();
    let root = idle_root(&store).await;
    let run = |session| ClaimedRun {
        session,
        input: "x".into(),
        limits: None,
        takeover: false,
        cancel: Default::default(),
        resume_run: None,
        mapping: None,
        relay: None,
    };
    // A root is nobody's child here.
    let e = worker.run_claimed(run(root.id())).await.unwrap_err();
    assert!(
        e.to_string()
            .contains("is not a child of supervisor \"tree\""),
        "{e}"
    );
    let e = worker
        .run_claimed(run(arbor_protocol::SessionId::new()))
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Unknown or deleted session");
}

#[tokio::test]
async fn a_streaming_childs_events_relayed_from_the_worker_reach_the_parents_stream() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let script = Script::new([probe(1, "seen"), ScriptedTurn::text("child done")]);
    let (runner, mut queue) = handoff();
    let stream = arbor_core::supervisor::PolicyInput {
        report: Some(arbor_core::supervisor::Report::Stream),
        ..Default::default()
    };
    let build = |script: Script| {
        Supervisor::builder(Ownership::user("t", "u"))
            .id("tree")
            .store(store.clone())
            // A relay delivers in bursts: room for all of them in one rate window.
            .limits(arbor_core::supervisor::LimitsInput {
                max_child_events_per_second: Some(100),
                ..Default::default()
            })
            .child(
                ChildEntry::new(
                    "worker",
                    factory_fn(move |ctx| {
                        let script = script.clone();
                        async move {
                            Agent::builder(ctx.child_id.clone())
                                .provider(ScriptedProvider::new(script))
                                .tool(Probe::default())
                                .build()
                        }
                    }),
                )
                .policy(stream),
            )
    };
    let parent = build(script.clone()).runner(runner).build().unwrap();
    let worker = build(script).build().unwrap();
    let mut events = parent.subscribe();
    let mut root = idle_root(&store).await;
    parent.attach(&mut root);
    let request = under(&root, "work");
    let delegation = tokio::spawn(async move { parent.delegate(request).await });
    let (child, reply) = queue.recv().await.unwrap();
    let bus = child
        .events
        .clone()
        .expect("a streaming child's events are relayed");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let claim = ClaimedRun {
        relay: Some(tx),
        ..claimed(&child, false)
    };
    let ran = worker.run_claimed(claim).await;
    // The worker's side of the relay: what the run published, deltas left out.
    let mut relayed = Vec::new();
    while let Ok(e) = rx.try_recv() {
        relayed.push(e.event.type_name().to_owned());
        bus.publish(e.run_id, e.event);
    }
    assert!(
        !relayed.contains(&"message_delta".to_owned()),
        "{relayed:?}"
    );
    assert!(
        relayed.contains(&"tool_execution_started".to_owned()),
        "{relayed:?}"
    );
    reply.send(ran).unwrap();
    delegation.await.unwrap().unwrap();
    let mut seen = Vec::new();
    while let Some(e) = events.try_recv() {
        if let arbor_protocol::SupervisorEvent::DelegationChildEvent { child_event, .. } = &e.event
        {
            seen.push(child_event.event.type_name().to_owned());
        }
    }
    for expected in [
        "run_started",
        "tool_execution_started",
        "tool_execution_finished",
        "run_finished",
    ] {
        assert!(
            seen.iter().any(|t| t == expected),
            "{expected} not relayed: {seen:?}"
        );
    }
}
