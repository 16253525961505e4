//! A stop that says what it stopped (issue 39, item 6): cancelling a child by its handle,
//! from the host or from a parent's model (`cancel_agent`), and deleting it, report the
//! descendants whose runs ended with it (their ids, names, depth and the state each was
//! in), each exactly once when a cancel and a delete race.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arbor_core::supervisor::tools::ToolReport;
use arbor_core::supervisor::{
    CancelAgentTool, ChildEntry, DelegationRequest, DeleteChild, Ownership, SpawnAgentTool,
    Supervisor, WaitOutcome, factory_fn,
};
use arbor_core::{Agent, DynTool, SessionRef, Tool, ToolContext, ToolError};
use arbor_model::{Script, ScriptedProvider, ScriptedToolCall, ScriptedTurn};
use arbor_protocol::{RunId, SessionStatus};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Works until its call is cancelled; counts the calls that started.
#[derive(Debug, Clone, Default)]
struct Working(Arc<AtomicUsize>);

#[derive(Debug, Deserialize, JsonSchema)]
struct NoArgs {}

#[async_trait]
impl Tool for Working {
    type Args = NoArgs;
    type Output = String;

    fn name(&self) -> &str {
        "work"
    }

    fn description(&self) -> &str {
        "works until stopped"
    }

    async fn call(&self, _args: NoArgs, ctx: ToolContext) -> Result<String, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        ctx.cancel.cancelled().await;
        Err(ToolError::ToModel("stopped".to_owned()))
    }
}

/// A supervisor whose `mid` child spawns `leaves` sync children named `leaf-N` in one turn
/// (its calls run concurrently), each of which works until stopped.
fn tree(leaves: usize) -> (Supervisor, Working) {
    let working = Working::default();
    let leaf_tool = working.clone();
    let spawns = ScriptedTurn {
        tool_calls: (0..leaves)
            .map(|i| ScriptedToolCall {
                id: None,
                name: "spawn_agent".to_owned(),
                arguments: json!({"child_id": "leaf", "name": format!("leaf-{i}"), "input": "work"}),
            })
            .collect(),
        ..ScriptedTurn::default()
    };
    let calls = if leaves == 0 {
        vec![ScriptedTurn::text("mid done").with_delay(Duration::from_secs(30))]
    } else {
        vec![spawns, ScriptedTurn::text("mid done")]
    };
    let mid_script = Script::new(calls);
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .child(ChildEntry::new(
            "mid",
            factory_fn(move |ctx| {
                let script = mid_script.clone();
                async move {
                    Agent::builder("mid")
                        .provider(ScriptedProvider::new(script))
                        .dyn_tool(Arc::new(SpawnAgentTool::new(ctx.delegator.clone())))
                        .build()
                }
            }),
        ))
        .child(ChildEntry::new(
            "leaf",
            factory_fn(move |_ctx| {
                let tool = leaf_tool.clone();
                async move {
                    Agent::builder("leaf")
                        .provider(ScriptedProvider::new(Script::new([
                            ScriptedTurn::tool_call("work", json!({})),
                            ScriptedTurn::text("leaf done"),
                        ])))
                        .tool(tool)
                        .build()
                }
            }),
        ))
        .build()
        .unwrap();
    (sup, working)
}

/// Waits until `n` leaves work.
async fn leaves_working(working: &Working, n: usize) {
    for _ in 0..800 {
        if working.0.load(Ordering::SeqCst) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the leaves never started working");
}

async fn parent_ctx(sup: &Supervisor) -> ToolContext {
    let record = arbor_store::SessionRecord::new_root("parent", "parent", "scripted");
    sup.store().create_session(&record).await.unwrap();
    ToolContext::new("parent", SessionRef::from(&record), RunId::new(), "c1")
}

#[tokio::test]
async fn cancel_agent_reports_the_descendants_whose_runs_ended_with_the_child() {
    let (sup, working) = tree(2);
    let ctx = parent_ctx(&sup).await;
    let spawn = SpawnAgentTool::new(sup.delegator());
    let out = spawn
        .call_json(
            json!({"child_id": "mid", "input": "go", "mode": "async"}),
            ctx.clone(),
        )
        .await
        .unwrap();
    let started: serde_json::Value = serde_json::from_str(&out).unwrap();
    let id = started["delegation_id"].as_str().unwrap().to_owned();
    leaves_working(&working, 2).await;

    let cancel = CancelAgentTool::new(sup.delegator());
    let text = cancel
        .call_json(json!({"delegation_id": id}), ctx.clone())
        .await
        .unwrap();
    let Some(ToolReport::Cancel(report)) = ToolReport::parse(&text) else {
        panic!("expected a cancel report: {text}");
    };
    assert_eq!(report.delegation_id, id);
    assert_eq!(
        serde_json::to_value(report.status).unwrap(),
        json!("cancelling")
    );
    let stopped: Vec<(&str, u32, SessionStatus)> = report
        .stopped
        .iter()
        .map(|s| (s.name.as_str(), s.depth, s.was))
        .collect();
    assert_eq!(
        stopped,
        [
            ("leaf-0", 2, SessionStatus::Running),
            ("leaf-1", 2, SessionStatus::Running)
        ],
        "{text}"
    );
    // The ids are the leaves' sessions, under the cancelled child.
    let mid = started["session_id"].as_str().unwrap();
    for s in &report.stopped {
        let record = sup.store().session(s.session_id).await.unwrap().unwrap();
        assert_eq!(record.parent_id.unwrap().to_string(), mid);
    }
    // Each ended aborted; the cancel is the child's outcome.
    let outcome = sup.wait(&id, Default::default()).await.unwrap();
    assert!(
        matches!(outcome, WaitOutcome::Cancelled { .. }),
        "{outcome:?}"
    );
    for s in &report.stopped {
        let mut status = SessionStatus::Running;
        for _ in 0..400 {
            status = sup
                .store()
                .session(s.session_id)
                .await
                .unwrap()
                .unwrap()
                .status;
            if status != SessionStatus::Running {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(status, SessionStatus::Aborted, "{}", s.name);
    }
    // A second cancel stops nothing more: the plain handle update, no list.
    let again = cancel
        .call_json(json!({"delegation_id": id}), ctx.clone())
        .await
        .unwrap();
    assert!(
        matches!(ToolReport::parse(&again), Some(ToolReport::Handle(_))),
        "{again}"
    );
}

#[tokio::test]
async fn a_cancel_with_nothing_under_the_child_reads_as_before() {
    let (sup, working) = tree(0);
    let _ = working;
    let root = Agent::builder("lead")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            "ok",
        )])))
        .build()
        .unwrap();
    let session = sup.root_session(&root, |b| b).await.unwrap();
    let handle = sup
        .delegate_async(DelegationRequest::new("mid", "go").parent(session.as_ref()))
        .await
        .unwrap();
    let cancelled = sup
        .cancel_reported(&handle.delegation_id, None)
        .await
        .unwrap();
    assert_eq!(cancelled.session_id, handle.session_id);
    assert!(cancelled.stopped.is_empty(), "{cancelled:?}");
    // Unknown handles get the one unknown answer.
    let e = sup.cancel_reported("forged", None).await.unwrap_err();
    assert_eq!(e.to_string(), "Unknown async delegation");
}

#[tokio::test]
async fn deleting_a_child_reports_the_running_descendants_it_stopped() {
    let (sup, working) = tree(2);
    let root = Agent::builder("lead")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            "ok",
        )])))
        .build()
        .unwrap();
    let session = sup.root_session(&root, |b| b).await.unwrap();
    let handle = sup
        .delegate_async(
            DelegationRequest::new("mid", "go")
                .name("middle")
                .parent(session.as_ref()),
        )
        .await
        .unwrap();
    leaves_working(&working, 2).await;
    let deleted = sup
        .delete_child(
            DeleteChild::new(session.id(), "middle")
                .by("host")
                .reason("not needed"),
        )
        .await
        .unwrap();
    assert!(deleted.run_cancelled);
    assert_eq!(deleted.session_id, handle.session_id);
    let stopped: Vec<(&str, u32, SessionStatus)> = deleted
        .stopped
        .iter()
        .map(|s| (s.name.as_str(), s.depth, s.was))
        .collect();
    assert_eq!(
        stopped,
        [
            ("leaf-0", 2, SessionStatus::Running),
            ("leaf-1", 2, SessionStatus::Running)
        ]
    );
    // The same descendants the older `cancelled` list names.
    let mut ids: Vec<_> = deleted.stopped.iter().map(|s| s.session_id).collect();
    let mut cancelled = deleted.cancelled.clone();
    ids.sort();
    cancelled.sort();
    assert_eq!(ids, cancelled);
}

/// A cancel and a delete of the same child, raced many times: every descendant whose run
/// ended is reported by exactly one of them, never by both and never by neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_racing_a_delete_reports_each_stopped_descendant_once() {
    for round in 0..20 {
        let (sup, working) = tree(3);
        let root = Agent::builder("lead")
            .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
                "ok",
            )])))
            .build()
            .unwrap();
        let session = sup.root_session(&root, |b| b).await.unwrap();
        let handle = sup
            .delegate_async(
                DelegationRequest::new("mid", "go")
                    .name("middle")
                    .parent(session.as_ref()),
            )
            .await
            .unwrap();
        leaves_working(&working, 3).await;
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let (s1, b1, did) = (sup.clone(), barrier.clone(), handle.delegation_id.clone());
        let cancel = tokio::spawn(async move {
            b1.wait().await;
            s1.cancel_reported(&did, Some("raced")).await.unwrap()
        });
        let (s2, b2, parent) = (sup.clone(), barrier.clone(), session.id());
        let delete = tokio::spawn(async move {
            b2.wait().await;
            s2.delete_child(
                DeleteChild::new(parent, "middle")
                    .by("host")
                    .reason("raced"),
            )
            .await
            .unwrap()
        });
        let (cancelled, deleted) = (cancel.await.unwrap(), delete.await.unwrap());
        let mut all: Vec<_> = cancelled
            .stopped
            .iter()
            .chain(deleted.stopped.iter())
            .map(|s| s.name.clone())
            .collect();
        all.sort();
        assert_eq!(
            all,
            ["leaf-0", "leaf-1", "leaf-2"],
            "round {round}: cancel {:?}, delete {:?}",
            cancelled.stopped,
            deleted.stopped
        );
    }
}
