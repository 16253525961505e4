//! Every argument error a supervisor tool returns to a model names the field, the class of
//! the value given and what is accepted, so the model can correct itself; nothing is
//! admitted or counted.

use arbor_core::SecretRedactor;
use arbor_core::supervisor::{
    CancelAgentTool, ChildEntry, ListChildrenTool, Ownership, SendMessageTool, SpawnAgentTool,
    Supervisor, WaitAgentTool,
};
use arbor_core::{Agent, DynTool, SessionRef, ToolContext, ToolError};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::RunId;
use serde_json::{Value, json};

fn supervisor() -> Supervisor {
    let agent = Agent::builder("child")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            "done",
        )])))
        .build()
        .unwrap();
    Supervisor::builder(Ownership::user("t", "u"))
        .child(ChildEntry::agent("research", agent))
        .redactor(SecretRedactor::new(["canary"]))
        .build()
        .unwrap()
}

async fn ctx(sup: &Supervisor) -> ToolContext {
    let record = arbor_store::SessionRecord::new_root("parent", "parent", "scripted");
    sup.store().create_session(&record).await.unwrap();
    ToolContext::new("parent", SessionRef::from(&record), RunId::new(), "c1")
}

async fn refused(tool: &dyn DynTool, sup: &Supervisor, args: Value) -> String {
    match tool.call_json(args, ctx(sup).await).await {
        Err(ToolError::ToModel(m)) => m,
        other => panic!("expected a tool error, got {other:?}"),
    }
}

#[tokio::test]
async fn spawn_agent_errors_name_the_field_the_value_and_what_is_accepted() {
    let sup = supervisor();
    let tool = SpawnAgentTool::new(sup.delegator());
    let cases = [
        (
            json!({"child_id": "research", "input": "x", "lifetime": "forever"}),
            "\"lifetime\" must be one of \"task\", \"session\" (got the string \"forever\")",
        ),
        (
            json!({"child_id": "research", "input": "x", "report": "all"}),
            "\"report\" must be one of \"on-complete\", \"milestones\", \"stream\" (got the \
             string \"all\")",
        ),
        (
            json!({"child_id": "research", "input": "x", "model": 5}),
            "\"model\" must be a string (got the number 5)",
        ),
        (
            json!({"child_id": "research", "input": "x", "temperature": 0.2}),
            "\"temperature\" is not a field of spawn_agent (got the number 0.2); accepted \
             fields: budget, budget_share, child_id, context, controls, input, lifetime, milestone, mode, model, \
             name, on_full, output_retries, output_schema, report, thinking, thread_id",
        ),
        (
            json!({"child_id": "research"}),
            "\"input\" must be a string (got nothing: it is required)",
        ),
        (
            json!({"child_id": "research", "input": "x", "milestone": {"every": 2}}),
            "\"milestone.every\" is not a field of \"milestone\" (got the number 2); accepted \
             fields: every_turns",
        ),
        (
            json!({"child_id": "research", "input": "x", "milestone": {"every_turns": "3"}}),
            "\"milestone.every_turns\" must be an integer from 1 to 64 (got the string \"3\")",
        ),
        (
            json!(["research", "x"]),
            "the arguments must be an object with the fields budget, budget_share, child_id, context, controls, input, \
             lifetime, milestone, mode, model, name, on_full, output_retries, output_schema, report, thinking, \
             thread_id (got an array)",
        ),
        // A quoted value is redacted like every other text the model reads.
        (
            json!({"child_id": "research", "input": "x", "mode": "canary"}),
            "\"mode\" must be one of \"sync\", \"async\", \"message\" (got the string \
             \"[REDACTED]\")",
        ),
    ];
    for (args, expected) in cases {
        assert_eq!(
            refused(&tool, &sup, args.clone()).await,
            format!("invalid arguments for spawn_agent: {expected}"),
            "{args}"
        );
    }
    // Optional fields sent as null count as absent.
    let ok = tool
        .call_json(
            json!({"child_id": "research", "input": "x", "model": null, "lifetime": null}),
            ctx(&sup).await,
        )
        .await;
    assert!(ok.is_ok(), "{ok:?}");
    assert_eq!(
        sup.summary()[0].attempts,
        1,
        "only the valid call was admitted"
    );
}

#[tokio::test]
async fn wait_cancel_send_and_list_errors_name_the_field() {
    let sup = supervisor();
    let wait = WaitAgentTool::new(sup.delegator());
    let cancel = CancelAgentTool::new(sup.delegator());
    let send = SendMessageTool::new(sup.clone());
    let list = ListChildrenTool::new(sup.clone());
    let cases: [(&dyn DynTool, Value, &str); 8] = [
        (
            &wait,
            json!({}),
            "invalid arguments for wait_agent: \"delegation_id\" must be a string (got nothing: \
             it is required)",
        ),
        (
            &wait,
            json!({"delegation_id": 7}),
            "invalid arguments for wait_agent: \"delegation_id\" must be a string (got the \
             number 7)",
        ),
        (
            &cancel,
            json!({"delegation_id": "d", "force": true}),
            "invalid arguments for cancel_agent: \"force\" is not a field of cancel_agent (got \
             the boolean true); accepted fields: delegation_id",
        ),
        (
            &cancel,
            json!(null),
            "invalid arguments for cancel_agent: the arguments must be an object with the \
             fields delegation_id (got null)",
        ),
        (
            &send,
            json!({"to": "parent"}),
            "invalid arguments for send_message: \"text\" must be a string (got nothing: it is \
             required)",
        ),
        (
            &send,
            json!({"to": ["a", "b"], "text": "hi"}),
            "invalid arguments for send_message: \"to\" must be a string (got an array)",
        ),
        (
            &send,
            json!({"to": "parent", "text": "hi", "cc": "x"}),
            "invalid arguments for send_message: \"cc\" is not a field of send_message (got the \
             string \"x\"); accepted fields: text, to",
        ),
        (
            &list,
            json!({"status": "running"}),
            "invalid arguments for list_children: \"status\" is not a field of list_children \
             (got the string \"running\"); accepted fields: none",
        ),
    ];
    for (tool, args, expected) in cases {
        assert_eq!(refused(tool, &sup, args.clone()).await, expected, "{args}");
    }
}
