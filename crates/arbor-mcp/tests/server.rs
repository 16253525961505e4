//! The MCP server driven by rmcp's own client over an in-process pipe: the tools and their
//! schemas, a client that gives up on a sync spawn, and two clients deciding one approval
//! at once.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arbor_core::supervisor::{ChildEntry, Ownership, SpawnAgentTool, Supervisor, factory_fn};
use arbor_core::{Agent, SessionRef, Tool, ToolContext, ToolError};
use arbor_mcp::{ArborMcp, FixedRoot, HostedRoot};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::SessionStatus;
use arbor_store::{MemoryStore, SessionQuery, Store};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::RunningService;
use serde_json::{Value, json};

#[derive(Debug, Clone, Default)]
struct Write(Arc<AtomicUsize>);

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct WriteArgs {
    file: String,
}

#[async_trait::async_trait]
impl Tool for Write {
    type Args = WriteArgs;
    type Output = String;
    fn name(&self) -> &str {
        "write"
    }
    fn description(&self) -> &str {
        "writes a file"
    }
    async fn call(&self, args: WriteArgs, _ctx: ToolContext) -> Result<String, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(format!("wrote {}", args.file))
    }
}

struct Tree {
    sup: Supervisor,
    store: Arc<dyn Store>,
    root: HostedRoot,
    writes: Write,
    _session: arbor_core::Session,
}

/// A tree whose root offers `writer` (writes once, then answers) and `sleeper` (hangs),
/// with durable approvals when `approvals`.
async fn tree(approvals: bool) -> Tree {
    tree_with(approvals, arbor_core::supervisor::LimitsInput::default()).await
}

async fn tree_with(approvals: bool, limits: arbor_core::supervisor::LimitsInput) -> Tree {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let writes = Write::default();
    let mut b = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .limits(limits);
    if approvals {
        b = b.durable_approvals("rev-1");
    }
    let w = writes.clone();
    b = b.child(ChildEntry::new(
        "writer",
        factory_fn(move |ctx| {
            let w = w.clone();
            async move {
                Agent::builder(ctx.child_id.clone())
                    .provider(ScriptedProvider::new(Script::new([
                        ScriptedTurn::tool_call("write", json!({"file": "x"})),
                        ScriptedTurn::text("written"),
                    ])))
                    .tool(w)
                    .build()
            }
        }),
    ));
    let sleeper = Agent::builder("sleeper")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn {
            hang: true,
            ..ScriptedTurn::default()
        }])))
        .build()
        .unwrap();
    b = b.child(ChildEntry::agent("sleeper", sleeper));
    let sup = b.build().unwrap();
    let mut session = Agent::builder("lead")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            "-",
        )])))
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .create()
        .await
        .unwrap();
    sup.attach(&mut session);
    let children = vec!["writer".to_owned(), "sleeper".to_owned()];
    let root = HostedRoot::new(
        sup.clone(),
        SessionRef::from(session.record()),
        "lead",
        &children,
        session.inbox().clone(),
        sup.session_token().clone(),
    )
    .unwrap();
    Tree {
        sup,
        store,
        root,
        writes,
        _session: session,
    }
}

/// A client of `root` over an in-process pipe.
async fn client(root: &HostedRoot) -> RunningService<rmcp::RoleClient, ()> {
    let (a, b) = tokio::io::duplex(1 << 16);
    let server = ArborMcp::new(FixedRoot(root.clone()));
    tokio::spawn(async move {
        if let Ok(running) = server.serve(b).await {
            let _ = running.waiting().await;
        }
    });
    ().serve(a).await.unwrap()
}

async fn call(c: &RunningService<rmcp::RoleClient, ()>, name: &str, args: Value) -> CallToolResult {
    let Value::Object(args) = args else {
        panic!("arguments must be an object")
    };
    c.call_tool(CallToolRequestParams::new(name.to_owned()).with_arguments(args))
        .await
        .unwrap()
}

fn structured(r: &CallToolResult) -> Value {
    r.structured_content.clone().unwrap_or(Value::Null)
}

fn text(r: &CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join(" ")
}

#[tokio::test]
async fn the_tools_are_the_root_agents_with_their_closed_schemas() {
    let t = tree(false).await;
    let c = client(&t.root).await;
    let info = c.peer_info().unwrap();
    assert_eq!(info.server_info.as_ref().unwrap().name, "arbor");
    let tools = c.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_eq!(
        names,
        [
            "send_message",
            "spawn_agent",
            "wait_agent",
            "cancel_agent",
            "list_children",
            "rename_child",
            "find_models",
            "list_approvals",
            "decide_approval",
            "read_messages"
        ]
    );
    let model = SpawnAgentTool::for_children(
        t.sup.delegator(),
        &["writer".to_owned(), "sleeper".to_owned()],
    )
    .unwrap();
    let spawn = tools.iter().find(|t| t.name == "spawn_agent").unwrap();
    assert_eq!(
        Value::Object((*spawn.input_schema).clone()),
        arbor_core::DynTool::spec(&model).parameters,
        "the client gets exactly the schema the root's model gets"
    );
    for tool in &tools {
        assert_eq!(
            tool.input_schema.get("additionalProperties"),
            Some(&Value::Bool(false)),
            "{} is closed",
            tool.name
        );
    }
    // An unknown tool is a protocol error, not a tool result.
    let e = c
        .call_tool(CallToolRequestParams::new("rm_rf"))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("unknown tool: rm_rf"), "{e}");
    c.cancel().await.unwrap();
}

/// A client that gives up on a sync spawn (its request is cancelled) cancels the child: its
/// run ends aborted, its slot is released once, and nothing keeps running.
#[tokio::test]
async fn a_client_giving_up_on_a_sync_spawn_cancels_the_child() {
    let t = tree(false).await;
    let c = client(&t.root).await;
    let args = json!({"child_id": "sleeper", "input": "sleep", "name": "dozy"});
    let Value::Object(args) = args else {
        unreachable!()
    };
    let gave_up = tokio::time::timeout(
        Duration::from_millis(300),
        c.call_tool(CallToolRequestParams::new("spawn_agent").with_arguments(args)),
    )
    .await;
    assert!(gave_up.is_err(), "the sleeper never answers");
    assert_eq!(
        t.sup.active_children(),
        1,
        "it was running when the client gave up"
    );
    // The cancellation reaches the server, which cancels the child.
    let mut status = SessionStatus::Running;
    for _ in 0..200 {
        let kids = t
            .store
            .list_sessions(SessionQuery::Children(t.root.root().id))
            .await
            .unwrap();
        status = kids[0].status;
        if status == SessionStatus::Aborted && t.sup.active_children() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(status, SessionStatus::Aborted);
    assert_eq!(t.sup.active_children(), 0, "its slot is released");
    // The tree goes on: a new spawn is admitted and answers.
    let r = call(
        &c,
        "spawn_agent",
        json!({"child_id": "writer", "input": "w"}),
    )
    .await;
    assert_eq!(structured(&r)["status"], "succeeded", "{r:?}");
    c.cancel().await.unwrap();
}

/// Two clients decide the one call a child waits on, at the same moment: one decision is
/// recorded and resumes the child, the other is refused; the approved call runs exactly once.
#[tokio::test]
async fn two_clients_deciding_one_approval_at_once_run_it_exactly_once() {
    let t = tree(true).await;
    let (a, b) = (client(&t.root).await, client(&t.root).await);
    let r = call(
        &a,
        "spawn_agent",
        json!({"child_id": "writer", "input": "w"}),
    )
    .await;
    let s = structured(&r);
    assert_eq!(s["status"], "suspended", "{r:?}");
    assert_eq!(s["pending"][0]["tool"], "write");
    let delegation = s["delegation_id"].as_str().unwrap().to_owned();
    let id = s["pending"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 0);

    let decide = json!({"decisions": [{"id": id, "verdict": "allow_once"}]});
    let (ra, rb) = tokio::join!(
        call(&a, "decide_approval", decide.clone()),
        call(&b, "decide_approval", decide.clone())
    );
    let wins: Vec<&CallToolResult> = [&ra, &rb]
        .into_iter()
        .filter(|r| r.is_error != Some(true))
        .collect();
    assert_eq!(wins.len(), 1, "one decision wins: {ra:?} {rb:?}");
    assert_eq!(structured(wins[0])["resumed"]["delegation_id"], delegation);
    let lost = if ra.is_error == Some(true) { &ra } else { &rb };
    assert!(!text(lost).is_empty(), "the other is told why: {lost:?}");

    let r = call(&b, "wait_agent", json!({"delegation_id": delegation})).await;
    assert_eq!(structured(&r)["status"], "succeeded", "{r:?}");
    assert_eq!(structured(&r)["text"], "written");
    assert_eq!(
        t.writes.0.load(Ordering::SeqCst),
        1,
        "the approved call ran once"
    );
    // Deciding it again changes nothing.
    let again = call(&a, "decide_approval", decide).await;
    assert_eq!(again.is_error, Some(true));
    assert_eq!(text(&again), "Unknown approval");
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 1);
    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
}

/// A limit that refuses a spawn is a tool error naming the limit, its maximum and what was
/// observed; nothing is started.
#[tokio::test]
async fn a_limit_that_refuses_a_spawn_is_a_tool_error_naming_it() {
    let limits = arbor_core::supervisor::LimitsInput {
        max_active_children: Some(1),
        ..Default::default()
    };
    let t = tree_with(false, limits).await;
    let c = client(&t.root).await;
    let r = call(
        &c,
        "spawn_agent",
        json!({"child_id": "sleeper", "input": "sleep", "mode": "async"}),
    )
    .await;
    assert_eq!(structured(&r)["status"], "running", "{r:?}");
    let r = call(
        &c,
        "spawn_agent",
        json!({"child_id": "writer", "input": "w"}),
    )
    .await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let text = text(&r);
    assert!(
        text.starts_with("Active child limit exceeded") && text.contains("max_active_children"),
        "{text}"
    );
    assert_eq!(
        t.sup.active_children(),
        1,
        "the refused child never started"
    );
    let kids = t
        .store
        .list_sessions(SessionQuery::Children(t.root.root().id))
        .await
        .unwrap();
    assert_eq!(kids.len(), 1, "nothing was registered for it");
    c.cancel().await.unwrap();
}

/// A blank input is refused over MCP as over `/v1` (one check, at admission), naming
/// `input`; nothing is registered for it.
#[tokio::test]
async fn a_spawn_with_a_blank_input_is_a_tool_error_naming_input() {
    let t = tree(false).await;
    let c = client(&t.root).await;
    for input in ["", "   "] {
        let r = call(
            &c,
            "spawn_agent",
            json!({"child_id": "writer", "input": input}),
        )
        .await;
        assert_eq!(r.is_error, Some(true), "{r:?}");
        let text = text(&r);
        assert!(text.contains("input must not be blank"), "{text}");
    }
    let kids = t
        .store
        .list_sessions(SessionQuery::Children(t.root.root().id))
        .await
        .unwrap();
    assert!(kids.is_empty(), "nothing was registered: {kids:?}");
    c.cancel().await.unwrap();
}

/// An MCP client's spawn takes the child's model controls: one out of range is a tool error
/// naming it; a good one is kept in the child's record (`meta.controls`).
#[tokio::test]
async fn a_spawn_takes_controls_and_refuses_a_bad_one_by_name() {
    let t = tree(false).await;
    let c = client(&t.root).await;
    let r = call(
        &c,
        "spawn_agent",
        json!({"child_id": "writer", "input": "x", "controls": {"top_p": 2}}),
    )
    .await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert!(text(&r).contains("controls.top_p"), "{}", text(&r));
    let r = call(
        &c,
        "spawn_agent",
        json!({"child_id": "writer", "input": "x", "mode": "async",
               "controls": {"temperature": 0.2, "seed": 5}}),
    )
    .await;
    assert_eq!(r.is_error, Some(false), "{r:?}");
    let kids = t
        .store
        .list_sessions(SessionQuery::Children(t.root.root().id))
        .await
        .unwrap();
    assert_eq!(kids.len(), 1, "{kids:?}");
    assert_eq!(
        kids[0].meta["controls"],
        json!({"temperature": 0.2, "seed": 5})
    );
    c.cancel().await.unwrap();
}

/// One decision per call across surfaces: a call decided through MCP's `decide_approval`
/// cannot be decided again through the library (the CLI's and `/v1`'s path), and the refusal
/// names the MCP client's decision; a call decided elsewhere first is refused over MCP,
/// naming that decision.
#[tokio::test]
async fn a_call_decided_over_mcp_is_not_decided_again_elsewhere_and_the_other_way_round() {
    use arbor_protocol::{ApprovalDecision, DecidedBy, Verdict};
    for mcp_first in [true, false] {
        let t = tree(true).await;
        let c = client(&t.root).await;
        let r = call(
            &c,
            "spawn_agent",
            json!({"child_id": "writer", "input": "w"}),
        )
        .await;
        let s = structured(&r);
        assert_eq!(s["status"], "suspended", "{r:?}");
        let id = s["pending"][0]["id"].as_str().unwrap().to_owned();
        let child = t
            .store
            .list_sessions(SessionQuery::Children(t.root.root().id))
            .await
            .unwrap()[0]
            .id;
        let elsewhere = || {
            let d = ApprovalDecision {
                decided_by: Some(DecidedBy::new(Some("acme".into()), Some("carol".into()))),
                ..ApprovalDecision::new(id.clone(), Verdict::RejectOnce).with_reason("no")
            };
            let store = t.store.clone();
            async move { arbor_core::supervisor::decide_at(store.as_ref(), child, &[d]).await }
        };
        let over_mcp = json!({"decisions": [{"id": id, "verdict": "allow_once"}]});
        if mcp_first {
            let r = call(&c, "decide_approval", over_mcp).await;
            assert_ne!(r.is_error, Some(true), "{r:?}");
            let e = elsewhere().await.unwrap_err();
            assert_eq!(e.deny_reason(), Some(arbor_core::DenyReason::Decided));
            assert!(
                e.to_string()
                    .starts_with("This call was already decided: allow_once by mcp client"),
                "{e}"
            );
        } else {
            elsewhere().await.unwrap();
            let r = call(&c, "decide_approval", over_mcp).await;
            assert_eq!(r.is_error, Some(true), "{r:?}");
            assert!(
                text(&r).starts_with(
                    "This call was already decided: reject_once by carol (tenant acme) on "
                ),
                "{r:?}"
            );
        }
        // Over MCP, a decision that leaves nothing waiting resumes the child: the allowed
        // call ran once; the rejected one never.
        let ran = if mcp_first {
            let r = call(
                &c,
                "wait_agent",
                json!({"delegation_id": s["delegation_id"]}),
            )
            .await;
            assert_eq!(structured(&r)["status"], "succeeded", "{r:?}");
            1
        } else {
            0
        };
        assert_eq!(t.writes.0.load(Ordering::SeqCst), ran);
        c.cancel().await.unwrap();
    }
}
