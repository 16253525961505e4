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

fn ctx(session: SessionRef) -> ToolContext {
    ToolContext::new("root", session, RunId::new(), "c1")
}

async fn list(tool: &ListChildrenTool, session: SessionRef) -> Value {
    let out = tool.call_json(json!({}), ctx(session)).await.unwrap();
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
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(root.id(), gone.id.to_string())
                .by("tester")
                .reason("not needed"),
        )
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
        .call_json(json!({"all": true}), ctx(SessionRef::from(&record)))
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid arguments for list_children: \"all\" is not a field of list_children (got the \
         boolean true); accepted fields: none"
    );
}

/// A root that delegated to one worker (sync; the worker used 30 tokens and replied), then
/// answered: two provider turns of its own.
async fn parent_with_a_child(store: &Arc<dyn Store>, sup: &Supervisor) -> arbor_core::Session {
    let mut root = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new([
            ScriptedTurn::tool_call(
                "spawn_agent",
                json!({"child_id": "worker", "name": "w", "input": "go"}),
            )
            .with_usage(40_000, 10),
            ScriptedTurn::text("read the reply").with_usage(41_000, 10),
        ])))
        .dyn_tool(Arc::new(SpawnAgentTool::new(sup.delegator())))
        .limits(arbor_core::RunLimits {
            max_tokens: 1_000_000,
            ..arbor_core::RunLimits::DEFAULT
        })
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .create()
        .await
        .unwrap();
    sup.attach(&mut root);
    let r = root.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.text, "read the reply", "{:?} {:?}", r.status, r.error);
    root
}

#[tokio::test]
async fn compaction_keeps_the_registry_and_is_decided_by_the_sessions_own_prompt() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = supervisor(&store);
    let mut root = parent_with_a_child(&store, &sup).await;
    // Children's usage raises the bill, not the context.
    let record = store.session(root.id()).await.unwrap().unwrap();
    assert_eq!(record.attributed_usage.total_tokens, 30);
    assert_eq!(root.context_tokens(), 41_000);
    assert!(!root.needs_compaction(200_000, 0.8));
    assert!(root.needs_compaction(50_000, 0.8));

    let before = root.messages().to_vec();
    let kept = root.compact("The worker replied: done.", 2).await.unwrap();
    assert_eq!(kept, 2);
    assert_eq!(root.messages().len(), 3);
    assert_eq!(
        root.messages()[0].text(),
        "[Summary of the earlier conversation]\n\nThe worker replied: done."
    );
    assert_eq!(&root.messages()[1..], &before[before.len() - 2..]);
    assert!(
        root.compact("  ", 2).await.is_err(),
        "a summary is required"
    );

    // The registry and the totals are the host's: untouched.
    let kids = registry::children(store.as_ref(), root.id(), false)
        .await
        .unwrap();
    assert_eq!(kids.len(), 1);
    assert_eq!(kids[0].name, "w");
    let after = store.session(root.id()).await.unwrap().unwrap();
    assert_eq!(after.aggregate_usage(), record.aggregate_usage());

    // A reopened session sees the compacted conversation, and goes on from it.
    let agent = root.agent().clone();
    let messages = root.messages().to_vec();
    let id = root.id();
    drop(root);
    let mut again = agent.open_session(store.clone(), id).await.unwrap();
    assert_eq!(again.messages(), &messages[..]);
    // The scripted model picks its turn by the assistant messages it is shown: after the
    // compaction it is shown one (the kept answer), so it plays its second turn again.
    let r = again.run("and now?", RunOptions::default()).await.unwrap();
    assert_eq!(r.text, "read the reply");
    assert_eq!(again.messages().len(), 5);
    let kinds: Vec<&str> = store
        .transcript(id, 0, None)
        .await
        .unwrap()
        .iter()
        .map(|e| e.kind.kind_name())
        .filter(|k| *k == "compacted")
        .collect();
    assert_eq!(kinds, ["compacted"]);
}

#[tokio::test]
async fn a_fork_is_a_root_with_the_conversation_and_no_children() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = supervisor(&store);
    let source = parent_with_a_child(&store, &sup).await;
    let fork = source.fork(Some("what-if")).await.unwrap();
    assert_eq!(fork.messages(), source.messages());
    let record = fork.record().clone();
    assert_eq!(
        (record.parent_id, record.depth, record.root_id),
        (None, 0, fork.id())
    );
    assert_eq!(record.name, "what-if");
    assert_eq!(record.meta["forked_from"], source.id().to_string());
    assert_eq!(record.own_usage.total_tokens, 0, "nothing is billed twice");
    assert_eq!(fork.context_tokens(), source.context_tokens());
    // The children stay with the source.
    assert!(
        registry::children(store.as_ref(), fork.id(), false)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        registry::children(store.as_ref(), source.id(), false)
            .await
            .unwrap()
            .len(),
        1
    );
    // Reopened, the fork has the same conversation.
    let again = source
        .agent()
        .open_session(store.clone(), fork.id())
        .await
        .unwrap();
    assert_eq!(again.messages(), source.messages());
    let e = source.fork(Some(&"x".repeat(65))).await.unwrap_err();
    assert_eq!(e.kind(), arbor_core::CoreErrorKind::Validation);
}

/// Saves a document: an artifact.
#[derive(Debug, Clone)]
struct Save;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct SaveArgs {
    name: String,
}

#[async_trait::async_trait]
impl arbor_core::Tool for Save {
    type Args = SaveArgs;
    type Output = String;
    fn name(&self) -> &str {
        "save"
    }
    fn description(&self) -> &str {
        "saves a document"
    }
    fn writes_artifact(&self) -> bool {
        true
    }
    async fn call(
        &self,
        args: SaveArgs,
        _ctx: ToolContext,
    ) -> Result<String, arbor_core::ToolError> {
        if args.name.is_empty() {
            return Err(arbor_core::ToolError::ToModel("a name is required".into()));
        }
        Ok(format!("saved {}", args.name))
    }
}

#[tokio::test]
async fn a_child_that_wrote_an_artifact_is_no_silent_no_op() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut b = Supervisor::builder(Ownership::user("t", "u")).store(store.clone());
    for (id, turns) in [
        (
            "writer",
            vec![
                // A failed save is no artifact; the second one is.
                ScriptedTurn::tool_call("save", json!({"name": ""})),
                ScriptedTurn::tool_call("save", json!({"name": "report.md"})),
                ScriptedTurn::text("saved it"),
            ],
        ),
        ("idler", vec![ScriptedTurn::text("thought about it")]),
    ] {
        let script = Script::new(turns);
        b = b.child(ChildEntry::new(
            id,
            factory_fn(move |ctx| {
                let script = script.clone();
                async move {
                    Agent::builder(ctx.child_id.clone())
                        .provider(ScriptedProvider::new(script))
                        .tool(Save)
                        .build()
                }
            }),
        ));
    }
    let sup = b.build().unwrap();
    let mut root = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new([
            spawn("writer", "w"),
            spawn("idler", "i"),
            ScriptedTurn::text("spawned"),
        ])))
        .dyn_tool(Arc::new(SpawnAgentTool::new(sup.delegator())))
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .create()
        .await
        .unwrap();
    sup.attach(&mut root);
    root.run("go", RunOptions::default()).await.unwrap();
    while sup.active_children() > 0 {
        sup.wait_for_mail_or_quiet(root.inbox()).await;
        root.inbox().drain();
    }
    let rows = registry::children(store.as_ref(), root.id(), false)
        .await
        .unwrap();
    let w = rows.iter().find(|r| r.name == "w").unwrap();
    let i = rows.iter().find(|r| r.name == "i").unwrap();
    assert_eq!((w.replies, w.artifacts, w.silent), (0, 1, false));
    assert_eq!((i.replies, i.artifacts, i.silent), (0, 0, true));
    let tree = registry::tree(store.as_ref(), root.id()).await.unwrap();
    assert_eq!(registry::silent_count(&tree), 1);
    let listed = list(&ListChildrenTool::new(sup.clone()), root.as_ref()).await;
    assert_eq!(listed["children"][0]["artifacts"], 1);
}
