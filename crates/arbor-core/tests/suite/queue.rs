//! A queue instead of a refusal (issue 39, item 5): past `max_active_children`, a spawn with
//! `on_full: queue` is registered at once as `queued`, listed so, and started in the order it
//! came as slots free; it can be cancelled or deleted while it waits; a full queue is
//! refused naming both limits; the count of live children never passes its cap.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arbor_core::supervisor::{
    AsyncHandle, ChildEntry, DelegationRequest, DeleteChild, LimitsInput, OnFull, Ownership,
    Supervisor, factory_fn,
};
use arbor_core::{Agent, CoreErrorKind, Session, Tool, ToolContext, ToolError};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{LimitKind, SessionStatus};
use arbor_store::SessionQuery;
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Records which child started when, and how many run at once.
#[derive(Debug, Clone, Default)]
struct Mark {
    order: Arc<Mutex<Vec<String>>>,
    live: Arc<AtomicU32>,
    peak: Arc<AtomicU32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct MarkArgs {
    ms: u64,
}

#[async_trait]
impl Tool for Mark {
    type Args = MarkArgs;
    type Output = String;

    fn name(&self) -> &str {
        "mark"
    }

    fn description(&self) -> &str {
        "marks the start, works a while"
    }

    async fn call(&self, args: MarkArgs, ctx: ToolContext) -> Result<String, ToolError> {
        self.order.lock().unwrap().push(ctx.session.id.to_string());
        let now = self.live.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(args.ms)).await;
        self.live.fetch_sub(1, Ordering::SeqCst);
        Ok("marked".to_owned())
    }
}

fn supervisor(mark: &Mark, max_queued: u32, ms: u64) -> Supervisor {
    supervisor_on(
        mark,
        max_queued,
        ms,
        Arc::new(arbor_store::MemoryStore::new()),
    )
}

fn supervisor_on(
    mark: &Mark,
    max_queued: u32,
    ms: u64,
    store: Arc<dyn arbor_store::Store>,
) -> Supervisor {
    let mark = mark.clone();
    Supervisor::builder(Ownership::user("t", "u"))
        .store(store)
        .limits(LimitsInput {
            max_active_children: Some(1),
            ..LimitsInput::default()
        })
        .max_queued(max_queued)
        .child(ChildEntry::new(
            "worker",
            factory_fn(move |ctx| {
                let mark = mark.clone();
                async move {
                    Agent::builder(ctx.child_id.clone())
                        .provider(ScriptedProvider::new(Script::new([
                            ScriptedTurn::tool_call("mark", json!({ "ms": ms })),
                            ScriptedTurn::text("done"),
                        ])))
                        .tool(mark)
                        .build()
                }
            }),
        ))
        .build()
        .unwrap()
}

async fn root(sup: &Supervisor) -> Session {
    let lead = Agent::builder("lead")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            "ok",
        )])))
        .build()
        .unwrap();
    sup.root_session(&lead, |b| b).await.unwrap()
}

async fn queue(sup: &Supervisor, root: &Session, name: &str) -> AsyncHandle {
    sup.delegate_async(
        DelegationRequest::new("worker", "work")
            .name(name)
            .parent(root.as_ref())
            .on_full(OnFull::Queue),
    )
    .await
    .unwrap()
}

async fn status(sup: &Supervisor, h: &AsyncHandle) -> SessionStatus {
    sup.store()
        .session(h.session_id)
        .await
        .unwrap()
        .unwrap()
        .status
}

#[tokio::test]
async fn queued_children_are_listed_and_start_in_the_order_they_came() {
    let mark = Mark::default();
    let sup = supervisor(&mark, 4, 150);
    let root = root(&sup).await;
    let mut handles = Vec::new();
    for name in ["q0", "q1", "q2", "q3"] {
        handles.push(queue(&sup, &root, name).await);
    }
    // One runs; the others are registered and listed as queued.
    for h in &handles[1..] {
        assert_eq!(status(&sup, h).await, SessionStatus::Queued, "{}", h.name);
    }
    let listed = sup
        .store()
        .list_sessions(SessionQuery::Children(root.id()))
        .await
        .unwrap();
    assert_eq!(
        listed
            .iter()
            .filter(|r| r.status == SessionStatus::Queued)
            .count(),
        3
    );
    for h in &handles {
        sup.wait(&h.delegation_id, Default::default())
            .await
            .unwrap();
    }
    let order = mark.order.lock().unwrap().clone();
    let expected: Vec<String> = handles.iter().map(|h| h.session_id.to_string()).collect();
    assert_eq!(order, expected, "first come, first served");
    assert_eq!(mark.peak.load(Ordering::SeqCst), 1, "never two at once");
    for h in &handles {
        assert_eq!(status(&sup, h).await, SessionStatus::Succeeded);
    }
}

#[tokio::test]
async fn a_full_queue_is_refused_naming_both_limits_before_anything_is_written() {
    let mark = Mark::default();
    let sup = supervisor(&mark, 1, 300);
    let root = root(&sup).await;
    queue(&sup, &root, "running").await;
    queue(&sup, &root, "waiting").await;
    let e = sup
        .delegate_async(
            DelegationRequest::new("worker", "work")
                .name("refused")
                .parent(root.as_ref())
                .on_full(OnFull::Queue),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::Limit);
    let info = e.limit().unwrap();
    assert_eq!(
        (info.limit, info.maximum, info.observed),
        (LimitKind::MaxQueued, 1, 2)
    );
    assert!(
        e.to_string()
            .contains("max_active_children: maximum 1, observed 2"),
        "{e}"
    );
    // Without asking to queue, the plain refusal.
    let e = sup
        .delegate_async(DelegationRequest::new("worker", "work").parent(root.as_ref()))
        .await
        .unwrap_err();
    assert_eq!(e.limit().unwrap().limit, LimitKind::MaxActiveChildren);
    let names: Vec<String> = sup
        .store()
        .list_sessions(SessionQuery::Children(root.id()))
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[tokio::test]
async fn a_queued_child_can_be_cancelled_or_deleted_and_never_runs() {
    let mark = Mark::default();
    let sup = supervisor(&mark, 4, 200);
    let root = root(&sup).await;
    let first = queue(&sup, &root, "first").await;
    let cancelled = queue(&sup, &root, "cancelled").await;
    let deleted = queue(&sup, &root, "deleted").await;
    let last = queue(&sup, &root, "last").await;
    assert!(
        sup.cancel_reported(&cancelled.delegation_id, None)
            .await
            .unwrap()
            .running
    );
    sup.delete_child(
        DeleteChild::new(root.id(), "deleted")
            .by("host")
            .reason("not needed"),
    )
    .await
    .unwrap();
    for h in [&first, &last] {
        sup.wait(&h.delegation_id, Default::default())
            .await
            .unwrap();
    }
    let order = mark.order.lock().unwrap().clone();
    assert_eq!(
        order,
        [first.session_id.to_string(), last.session_id.to_string()],
        "the two that gave up never ran"
    );
    assert_eq!(status(&sup, &last).await, SessionStatus::Succeeded);
    let gone = sup
        .store()
        .session(deleted.session_id)
        .await
        .unwrap()
        .unwrap();
    // It never ran: its tombstone says aborted, not queued.
    assert_eq!(gone.tombstone.unwrap().final_status, SessionStatus::Aborted);
    let c = status(&sup, &cancelled).await;
    assert!(
        c != SessionStatus::Queued && c != SessionStatus::Succeeded,
        "{c}"
    );
    assert_eq!(sup.active_children(), 0);
}

/// Many spawns asking to queue at once, on two threads: each runs exactly once, never two
/// at a time, and every slot and place is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_queued_spawns_each_run_once_and_never_overshoot() {
    let mark = Mark::default();
    let sup = supervisor(&mark, 64, 5);
    let root = Arc::new(root(&sup).await);
    let tasks: Vec<_> = (0..24)
        .map(|i| {
            let (sup, root) = (sup.clone(), root.clone());
            tokio::spawn(async move {
                let h = queue(&sup, &root, &format!("c{i}")).await;
                sup.wait(&h.delegation_id, Default::default())
                    .await
                    .unwrap();
                h.session_id
            })
        })
        .collect();
    let mut ids = Vec::new();
    for t in tasks {
        ids.push(t.await.unwrap().to_string());
    }
    let mut order = mark.order.lock().unwrap().clone();
    assert_eq!(mark.peak.load(Ordering::SeqCst), 1);
    order.sort();
    ids.sort();
    assert_eq!(order, ids, "each ran exactly once");
    assert_eq!(sup.active_children(), 0);
}

/// A model's `spawn_agent` with `on_full: queue` past the cap: its handle says `queued`, and
/// `wait_agent` later gives the child's answer.
#[tokio::test]
async fn a_models_queued_spawn_says_queued_and_answers_later() {
    use arbor_core::DynTool;
    use arbor_core::supervisor::tools::{HandleStatus, ToolReport};
    use arbor_core::supervisor::{SpawnAgentTool, WaitAgentTool};
    let mark = Mark::default();
    let sup = supervisor(&mark, 4, 100);
    let record = arbor_store::SessionRecord::new_root("parent", "parent", "scripted");
    sup.store().create_session(&record).await.unwrap();
    let ctx = arbor_core::ToolContext::new(
        "parent",
        arbor_core::SessionRef::from(&record),
        arbor_protocol::RunId::new(),
        "c1",
    );
    let spawn = SpawnAgentTool::new(sup.delegator());
    let args = json!({"child_id": "worker", "input": "work", "mode": "async", "on_full": "queue"});
    let first = spawn.call_json(args.clone(), ctx.clone()).await.unwrap();
    let second = spawn.call_json(args, ctx.clone()).await.unwrap();
    let (Some(ToolReport::Started(a)), Some(ToolReport::Started(b))) =
        (ToolReport::parse(&first), ToolReport::parse(&second))
    else {
        panic!("expected two handles: {first} {second}");
    };
    assert_eq!(
        (a.status, b.status),
        (HandleStatus::Running, HandleStatus::Queued)
    );
    let wait = WaitAgentTool::new(sup.delegator());
    let done = wait
        .call_json(json!({"delegation_id": b.delegation_id}), ctx)
        .await
        .unwrap();
    assert!(done.contains("\"status\":\"succeeded\""), "{done}");
}

/// A queued child a crash caught before it started is not lost: continued in another
/// process, it starts on the task it was queued with (it was kept in its record), and its
/// answer is its own.
#[tokio::test]
async fn a_queued_child_a_crash_caught_starts_on_its_task_when_continued() {
    let store: Arc<dyn arbor_store::Store> = Arc::new(arbor_store::MemoryStore::new());
    let mark = Mark::default();
    let (first, second) = {
        let (store, mark) = (store.clone(), mark.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let ids = rt.block_on(async {
                let sup = supervisor_on(&mark, 4, 60_000, store);
                let root = root(&sup).await;
                let a = queue(&sup, &root, "first").await;
                let b = queue(&sup, &root, "second").await;
                tokio::time::sleep(Duration::from_millis(200)).await;
                (a.session_id, b.session_id)
            });
            // The process dies: its runs stop where they are.
            drop(rt);
            ids
        })
        .join()
        .unwrap()
    };
    let status = |id| {
        let store = store.clone();
        async move { store.session(id).await.unwrap().unwrap().status }
    };
    assert_eq!(status(first).await, SessionStatus::Running);
    assert_eq!(status(second).await, SessionStatus::Queued);
    // The sweep of a restart: both interrupted.
    store.mark_interrupted().await.unwrap();
    store
        .update_session(
            second,
            &arbor_store::SessionUpdate::status(SessionStatus::Interrupted),
        )
        .await
        .unwrap();
    let mark = Mark::default();
    let sup = supervisor_on(&mark, 4, 10, store.clone());
    let done = sup.continue_child(second).await.unwrap();
    assert_eq!(done.result.text, "done");
    assert_eq!(status(second).await, SessionStatus::Succeeded);
    assert_eq!(
        mark.order.lock().unwrap().clone(),
        [second.to_string()],
        "it ran, once, on its own task"
    );
    let task = store
        .transcript(second, 0, None)
        .await
        .unwrap()
        .into_iter()
        .find_map(|e| match e.kind {
            arbor_protocol::EntryKind::Message {
                message: arbor_protocol::Message::User { content },
            } => Some(content),
            _ => None,
        });
    assert_eq!(task.as_deref(), Some("work"));
    // The one that ran goes on from its transcript, as before.
    let recovered = sup.continue_child(first).await.unwrap();
    assert_eq!(recovered.result.text, "done");
}

/// A sync spawn that would queue behind slots only its own waiting callers hold can never
/// start: it is refused at once (a limit the model reads), where with one slot more it runs.
#[tokio::test]
async fn a_sync_spawn_that_would_wait_on_its_own_callers_slots_is_refused() {
    use arbor_core::supervisor::SpawnAgentTool;
    for max in [1u32, 2] {
        let outer = ChildEntry::new(
            "outer",
            factory_fn(|ctx| async move {
                Agent::builder(ctx.child_id.clone())
                    .provider(ScriptedProvider::new(Script::new([
                        ScriptedTurn::tool_call(
                            "spawn_agent",
                            json!({"child_id": "inner", "input": "go", "on_full": "queue"}),
                        ),
                        ScriptedTurn::text("outer done"),
                    ])))
                    .dyn_tool(Arc::new(SpawnAgentTool::new(ctx.delegator.clone())))
                    .build()
            }),
        );
        let inner = ChildEntry::agent(
            "inner",
            Agent::builder("inner")
                .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
                    "inner done",
                )])))
                .build()
                .unwrap(),
        );
        let sup = Supervisor::builder(Ownership::user("t", "u"))
            .limits(LimitsInput {
                max_active_children: Some(max),
                ..LimitsInput::default()
            })
            .child(outer)
            .child(inner)
            .build()
            .unwrap();
        let root = root(&sup).await;
        let done = tokio::time::timeout(
            Duration::from_secs(10),
            sup.delegate(DelegationRequest::new("outer", "work").parent(root.as_ref())),
        )
        .await
        .expect("never waits forever")
        .unwrap();
        assert_eq!(done.result.text, "outer done");
        let outer_id = done.session_id;
        let said: Vec<String> = sup
            .store()
            .transcript(outer_id, 0, None)
            .await
            .unwrap()
            .into_iter()
            .filter_map(|e| match e.kind {
                arbor_protocol::EntryKind::Message {
                    message: arbor_protocol::Message::Tool(r),
                } => Some(r.content),
                _ => None,
            })
            .collect();
        assert_eq!(said.len(), 1, "{said:?}");
        if max == 1 {
            assert!(
                said[0].contains("queueing would wait forever: all 1 slot(s)"),
                "{said:?}"
            );
        } else {
            assert!(said[0].contains("inner done"), "{said:?}");
        }
    }
}
