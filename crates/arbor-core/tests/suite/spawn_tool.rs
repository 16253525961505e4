use std::time::Duration;

use arbor_core::SecretRedactor;
use arbor_core::supervisor::tools::{HandleStatus, HandleUpdate, ToolReport};
use arbor_core::supervisor::{
    CancelAgentTool, ChildEntry, LimitsInput, Ownership, SpawnAgentTool, Supervisor, WaitAgentTool,
};
use arbor_core::{Agent, DynTool, RunOptions, SessionRef, ToolContext, ToolError};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{Message, RunId, RunStatus};
use serde_json::{Value, json};

fn answers(text: &str) -> Agent {
    Agent::builder("child")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            text,
        )
        .with_usage(7, 3)])))
        .build()
        .unwrap()
}

fn supervisor() -> Supervisor {
    Supervisor::builder(Ownership::user("t", "u"))
        .child(
            ChildEntry::agent("research", answers("secret canary found"))
                .description("reads sources"),
        )
        .child(ChildEntry::agent("write", answers("written")))
        .redactor(SecretRedactor::new(["canary"]))
        .limits(LimitsInput {
            max_active_children: Some(1),
            ..LimitsInput::default()
        })
        .build()
        .unwrap()
}

/// A tool context whose session exists in the supervisor's store.
async fn ctx_in(sup: &Supervisor) -> ToolContext {
    let record = arbor_store::SessionRecord::new_root("parent", "parent", "scripted");
    sup.store().create_session(&record).await.unwrap();
    ToolContext::new("parent", SessionRef::from(&record), RunId::new(), "c1")
}

fn model_error(r: Result<String, ToolError>) -> String {
    match r {
        Err(ToolError::ToModel(m)) => m,
        other => panic!("expected a tool error, got {other:?}"),
    }
}

#[test]
fn the_schema_is_closed_and_lists_only_allowed_children() {
    let sup = supervisor();
    let tool = SpawnAgentTool::new(sup.delegator());
    let p = &tool.spec().parameters;
    assert_eq!(p["additionalProperties"], json!(false));
    assert_eq!(
        p["properties"]["child_id"]["enum"],
        json!(["research", "write"])
    );
    assert_eq!(p["required"], json!(["child_id", "input"]));
    assert_eq!(
        p["properties"]["milestone"]["properties"]["every_turns"]["maximum"],
        64
    );
    assert!(tool.spec().description.contains("research (reads sources)"));
    let only = SpawnAgentTool::for_children(sup.delegator(), &["write".into()]).unwrap();
    assert_eq!(
        only.spec().parameters["properties"]["child_id"]["enum"],
        json!(["write"])
    );
    let err = SpawnAgentTool::for_children(sup.delegator(), &["ghost".into()]).unwrap_err();
    assert_eq!(err.to_string(), "Invalid child id: ghost");
}

/// Strips what only informs the model (descriptions), leaving what is checked.
fn checked_part(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| *k != "description")
                .map(|(k, v)| (k.clone(), checked_part(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The schema is generated from the argument type (schemars): it must accept and refuse
/// exactly what the hand-written schema before it did, field by field.
#[test]
fn the_generated_schema_checks_what_the_hand_written_one_did() {
    let sup = supervisor();
    let tool = SpawnAgentTool::new(sup.delegator());
    let expected = json!({
        "type": "object",
        "properties": {
            "child_id": {"type": "string", "enum": ["research", "write"]},
            "input": {"type": "string"},
            "thread_id": {"type": "string"},
            "name": {"type": "string", "minLength": 1, "maxLength": 64},
            "model": {"type": "string"},
            "thinking": {"type": "string", "enum": ["off", "minimal", "low", "medium", "high", "xhigh", "max"]},
            "mode": {"type": "string", "enum": ["sync", "async", "message"]},
            "lifetime": {"type": "string", "enum": ["task", "session"]},
            "report": {"type": "string", "enum": ["on-complete", "milestones", "stream"]},
            "milestone": {
                "type": "object",
                "properties": {"every_turns": {"type": "integer", "minimum": 1, "maximum": 64}},
                "additionalProperties": false
            },
            "budget_share": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
            "controls": {
                "type": "object",
                "properties": {
                    "temperature": {"type": "number", "minimum": 0, "maximum": 2},
                    "top_p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1},
                    "seed": {"type": "integer", "minimum": 0},
                    "stop": {"type": "array", "items": {"type": "string"}},
                    "max_output_tokens": {"type": "integer", "minimum": 1},
                    "tool_choice": {"type": "string"},
                    "parallel_tool_calls": {"type": "boolean"}
                },
                "additionalProperties": false
            },
            "budget": {
                "type": "object",
                "properties": {
                    "max_tree_tokens": {"type": "integer", "minimum": 1},
                    "max_tree_cost": {"type": "number", "exclusiveMinimum": 0}
                },
                "additionalProperties": false
            },
            "output_schema": {"type": "object", "additionalProperties": true},
            "output_retries": {"type": "integer", "minimum": 0, "maximum": 5},
            "context": {
                "anyOf": [
                    {"type": "string", "enum": ["none", "all"]},
                    {
                        "type": "object",
                        "properties": {"last_turns": {"type": "integer", "minimum": 1, "maximum": 1000}},
                        "required": ["last_turns"],
                        "additionalProperties": false
                    }
                ]
            },
            "on_full": {"type": "string", "enum": ["refuse", "queue"]}
        },
        "required": ["child_id", "input"],
        "additionalProperties": false
    });
    assert_eq!(checked_part(&tool.spec().parameters), expected);
    // Every field the model is shown has a description, on one line.
    let props = tool.spec().parameters["properties"].as_object().unwrap();
    for (name, p) in props {
        let d = p["description"]
            .as_str()
            .unwrap_or_else(|| panic!("{name}: no description"));
        assert!(!d.contains('\n'), "{name}: {d:?}");
    }
}

#[tokio::test]
async fn bad_arguments_are_tool_errors_that_name_the_problem() {
    let sup = supervisor();
    let tool = SpawnAgentTool::new(sup.delegator());
    let e = model_error(
        tool.call_json(
            json!({"child_id": "research", "input": "x", "tools": ["rm"]}),
            ctx_in(&sup).await,
        )
        .await,
    );
    assert_eq!(
        e,
        "invalid arguments for spawn_agent: \"tools\" is not a field of spawn_agent (got an \
         array); accepted fields: budget, budget_share, child_id, context, controls, input, lifetime, milestone, mode, \
         model, name, on_full, output_retries, output_schema, report, thinking, thread_id"
    );
    let e = model_error(
        tool.call_json(
            json!({"child_id": "ghost", "input": "x"}),
            ctx_in(&sup).await,
        )
        .await,
    );
    assert_eq!(
        e,
        "invalid arguments for spawn_agent: \"child_id\" must be one of \"research\", \
         \"write\" (got the string \"ghost\")"
    );
    let e = model_error(
        tool.call_json(
            json!({"child_id": "research", "input": "x", "mode": "later"}),
            ctx_in(&sup).await,
        )
        .await,
    );
    assert_eq!(
        e,
        "invalid arguments for spawn_agent: \"mode\" must be one of \"sync\", \"async\", \
         \"message\" (got the string \"later\")"
    );
    let e = model_error(
        tool.call_json(
            json!({"child_id": "research", "input": "x", "budget_share": 2.0}),
            ctx_in(&sup).await,
        )
        .await,
    );
    assert_eq!(
        e,
        "invalid arguments for spawn_agent: \"budget_share\" must be a number greater than 0 \
         and at most 1 (got the number 2.0)"
    );
    let e = model_error(
        tool.call_json(
            json!({"child_id": "research", "input": "x", "milestone": {"every_turns": 99}}),
            ctx_in(&sup).await,
        )
        .await,
    );
    assert_eq!(
        e,
        "invalid arguments for spawn_agent: \"milestone.every_turns\" must be an integer from \
         1 to 64 (got the number 99)"
    );
    assert_eq!(sup.summary()[0].attempts, 0);
}

#[tokio::test]
async fn sync_spawn_returns_the_redacted_answer() {
    let sup = supervisor();
    let tool = SpawnAgentTool::new(sup.delegator());
    let out = tool
        .call_json(
            json!({"child_id": "research", "input": "look"}),
            ctx_in(&sup).await,
        )
        .await
        .unwrap();
    assert!(!out.contains("canary"), "{out}");
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["status"], "succeeded");
    assert_eq!(v["text"], "secret [REDACTED] found");
    assert_eq!(v["usage"]["total_tokens"], 10);
}

#[tokio::test(start_paused = true)]
async fn async_spawn_wait_and_cancel_through_the_tools() {
    let slow = Agent::builder("child")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            "late",
        )
        .with_delay(Duration::from_secs(5))])))
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .child(ChildEntry::agent("slow", slow))
        .limits(LimitsInput {
            max_active_children: Some(1),
            ..LimitsInput::default()
        })
        .build()
        .unwrap();
    let spawn = SpawnAgentTool::new(sup.delegator());
    let wait = WaitAgentTool::new(sup.delegator());
    let cancel = CancelAgentTool::new(sup.delegator());
    // One tree: every call comes from the same parent session.
    let ctx = ctx_in(&sup).await;
    let out = spawn
        .call_json(
            json!({"child_id": "slow", "input": "x", "mode": "async"}),
            ctx.clone(),
        )
        .await
        .unwrap();
    let handle: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(handle["status"], "running");
    let id = handle["delegation_id"].as_str().unwrap().to_owned();
    // The slot is taken: a second spawn says which limit fired.
    let e = model_error(
        spawn
            .call_json(
                json!({"child_id": "slow", "input": "y", "mode": "async"}),
                ctx.clone(),
            )
            .await,
    );
    assert_eq!(
        e,
        "Active child limit exceeded: max_active_children (maximum 1, observed 2)"
    );
    let done = wait
        .call_json(json!({"delegation_id": id}), ctx.clone())
        .await
        .unwrap();
    let done: Value = serde_json::from_str(&done).unwrap();
    assert_eq!(done["status"], "succeeded");
    assert_eq!(done["text"], "late");
    let c = cancel
        .call_json(json!({"delegation_id": id}), ctx.clone())
        .await
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&c).unwrap()["status"],
        "terminal"
    );
    // Each result is a typed report a host can parse back.
    let ToolReport::Started(started) = ToolReport::parse(&out).unwrap() else {
        panic!("expected a started child: {out}");
    };
    assert_eq!(
        (started.child_id.as_str(), started.status),
        ("slow", HandleStatus::Running)
    );
    assert_eq!(started.delegation_id, id);
    let ToolReport::Answer(answer) = ToolReport::parse(&done.to_string()).unwrap() else {
        panic!("expected an answer: {done}");
    };
    assert_eq!(
        (answer.status, answer.text.as_str()),
        (RunStatus::Succeeded, "late")
    );
    assert_eq!(
        ToolReport::parse(&c),
        Some(ToolReport::Handle(HandleUpdate {
            delegation_id: id.clone(),
            status: HandleStatus::Terminal
        }))
    );
    assert_eq!(ToolReport::parse("Unknown delegation"), None);
    let e = model_error(
        wait.call_json(json!({"delegation_id": "forged"}), ctx.clone())
            .await,
    );
    assert_eq!(e, "Unknown async delegation");
}

#[tokio::test]
async fn another_trees_model_cannot_wait_on_or_cancel_a_delegation() {
    let slow = Agent::builder("slow")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            "mine",
        )
        .with_delay(Duration::from_millis(200))])))
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .child(ChildEntry::agent("slow", slow))
        .build()
        .unwrap();
    let spawn = SpawnAgentTool::new(sup.delegator());
    let wait = WaitAgentTool::new(sup.delegator());
    let cancel = CancelAgentTool::new(sup.delegator());
    let (mine, theirs) = (ctx_in(&sup).await, ctx_in(&sup).await);
    let out = spawn
        .call_json(
            json!({"child_id": "slow", "input": "x", "mode": "async"}),
            mine.clone(),
        )
        .await
        .unwrap();
    let id = serde_json::from_str::<Value>(&out).unwrap()["delegation_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The other tree gets exactly what a forged id gets, and changes nothing.
    for tool in [&wait as &dyn DynTool, &cancel] {
        let e = model_error(
            tool.call_json(json!({"delegation_id": id}), theirs.clone())
                .await,
        );
        assert_eq!(e, "Unknown async delegation");
    }
    let done = wait
        .call_json(json!({"delegation_id": id}), mine)
        .await
        .unwrap();
    let done: Value = serde_json::from_str(&done).unwrap();
    assert_eq!(
        (done["status"].as_str(), done["text"].as_str()),
        (Some("succeeded"), Some("mine")),
        "the foreign cancel did not reach it"
    );
}

#[tokio::test]
async fn a_parent_model_delegates_through_spawn_agent() {
    let sup = supervisor();
    let parent = Agent::builder("parent")
        .provider(ScriptedProvider::new(Script::new([
            ScriptedTurn::tool_call(
                "spawn_agent",
                json!({"child_id": "write", "input": "draft it"}),
            ),
            ScriptedTurn::text("the child wrote it"),
        ])))
        .dyn_tool(std::sync::Arc::new(SpawnAgentTool::new(sup.delegator())))
        .build()
        .unwrap();
    let mut session = parent
        .session()
        .store(sup.store().clone())
        .create()
        .await
        .unwrap();
    let r = session
        .run("write something", RunOptions::default())
        .await
        .unwrap();
    assert_eq!(r.status, RunStatus::Succeeded);
    let tool_result = session
        .messages()
        .iter()
        .find_map(|m| match m {
            Message::Tool(t) => Some(t.content.clone()),
            _ => None,
        })
        .unwrap();
    let v: Value = serde_json::from_str(&tool_result).unwrap();
    assert_eq!(v["text"], "written");
    // The child's session is recorded under the parent's.
    let children = sup
        .store()
        .list_sessions(arbor_store::SessionQuery::Children(session.id()))
        .await
        .unwrap();
    assert_eq!(children.len(), 1);
    assert!(
        children[0].name.starts_with("subagent-draft-it-"),
        "a readable default name: {}",
        children[0].name
    );
    assert_eq!(children[0].depth, 1);
}
