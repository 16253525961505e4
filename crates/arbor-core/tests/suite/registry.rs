//! The registry as a model reads it (`list_children`), after a restart; forks start with no
//! children; compaction keeps the registry and measures the context by the session's own
//! prompt.

use std::sync::Arc;

use arbor_core::registry;
use arbor_core::supervisor::{
    ChildEntry, ListChildrenTool, Ownership, SendMessageTool, SpawnAgentTool, Supervisor,
    factory_fn,
};
use arbor_core::{Agent, DynTool, RunOptions, SessionRef, ToolContext};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{RunId, SessionStatus};
use arbor_store::{MemoryStore, Store};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

fn supervisor(store: &Arc<dyn Store>) -> Supervisor {
    let mut b = Supervisor::builder(Ownership::user("t", "u")).store(store.clone());
    for (id, turns) in [
        (
            "worker",
            vec![
                ScriptedTurn::tool_call("send_message", json!({"to": "parent", "text": "done"}))
                    .with_usage(10, 5),
                ScriptedTurn::text("sent").with_usage(10, 5),
            ],
        ),
        (
            "sleeper",
            vec![ScriptedTurn {
                hang: true,
                ..ScriptedTurn::default()
            }],
        ),
    ] {
        let script = Script::new(turns);
        b = b.child(ChildEntry::new(
            id,
            factory_fn(move |ctx| {
                let script = script.clone();
                async move {
                    Agent::builder(ctx.child_id.clone())
                        .provider(ScriptedProvider::new(script))
                        .dyn_tool(Arc::new(SendMessageTool::new(
                            ctx.delegator.supervisor().clone(),
                        )))
                        .build()
                }
            }),
        ));
    }
    b.build().unwrap()
}

fn spawn(child: &str, name: &str) -> ScriptedTurn {
    ScriptedTurn::tool_call(
        "spawn_agent",
        json!({"child_id": child, "name": name, "input": "go", "mode": "message"}),
    )
}

async fn list(tool: &ListChildrenTool, session: SessionRef) -> Value {
    let out = tool
        .call_json(
            json!({}),
            ToolContext {
                agent: "root".into(),
                session,
                run_id: RunId::new(),
                call_id: "c1".into(),
                turn: 1,
                cancel: CancellationToken::new(),
                identity: None,
            },
        )
        .await
        .unwrap();
    serde_json::from_str(&out).unwrap()
}

#[tokio::test]
async fn after_a_restart_list_children_shows_every_child_and_the_interrupted_ones() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let first = supervisor(&store);
    let mut root = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new([
            spawn("worker", "w"),
            spawn("sleeper", "s"),
            spawn("worker", "gone"),
            ScriptedTurn::text("spawned"),
        ])))
        .dyn_tool(Arc::new(SpawnAgentTool::new(first.delegator())))
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .create()
        .await
        .unwrap();
    first.attach(&mut root);
    root.run("go", RunOptions::default()).await.unwrap();
    first.wait_for_mail_or_quiet(root.inbox()).await;
    let gone = registry::find_child(store.as_ref(), root.id(), "gone")
        .await
        .unwrap();
    first
        .delete_child(root.id(), &gone.id.to_string(), "tester", "not needed")
        .await
        .unwrap();
    // The process dies with `s` running; the next one marks it interrupted.
    drop(first);
    store.mark_interrupted().await.unwrap();

    let second = supervisor(&store);
    let tool = ListChildrenTool::new(second.clone());
    let record = store.session(root.id()).await.unwrap().unwrap();
    let seen = list(&tool, SessionRef::from(&record)).await;
    let rows = seen["children"].as_array().unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["w", "s"], "deleted children are not listed");
    assert_eq!(rows[0]["status"], "succeeded");
    assert_eq!(rows[0]["replies"], 1);
    assert_eq!(rows[0]["own_tokens"], 30);
    assert_eq!(rows[0]["mode"], "message");
    assert_eq!(rows[1]["status"], "interrupted");
    assert_eq!(rows[1]["child_id"], "sleeper");
    assert_eq!(
        store
            .session(rows[1]["session_id"].as_str().unwrap().parse().unwrap())
            .await
            .unwrap()
            .unwrap()
            .status,
        SessionStatus::Interrupted
    );
    // A child sees its own (none), not its siblings; unknown arguments are refused.
    let w = registry::find_child(store.as_ref(), root.id(), "w")
        .await
        .unwrap();
    assert_eq!(
        list(&tool, SessionRef::from(&w)).await["children"],
        json!([])
    );
    let e = tool
        .call_json(
            json!({"all": true}),
            ToolContext {
                agent: "root".into(),
                session: SessionRef::from(&record),
                run_id: RunId::new(),
                call_id: "c2".into(),
                turn: 1,
                cancel: CancellationToken::new(),
                identity: None,
            },
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("unknown field `all`"), "{e}");
}
