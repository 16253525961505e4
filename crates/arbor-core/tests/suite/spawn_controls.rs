//! Model controls per spawn: checked at admission (out of range, or not carried by the child's
//! provider, refused naming the control, before any record or call), laid over the child's
//! agent's own, kept in its record (`meta.controls`) and forced onto every run of it; and
//! the model's `controls` argument of `spawn_agent`, whose schema leaves out `extra`.

use std::sync::Arc;

use arbor_core::supervisor::{
    ChildEntry, DelegationRequest, Ownership, Sender, SpawnAgentTool, Supervisor,
};
use arbor_core::{Agent, CoreErrorKind, DynTool, SessionRef, ToolContext, ToolError};
use arbor_model::{ScriptedTurn, Wire};
use arbor_protocol::RunId;
use arbor_store::{MemoryStore, SessionQuery, SessionRecord, Store};
use serde_json::{Value, json};

use super::wire_support::{OnWire, controls, on_wire};

fn on(wire: Wire) -> OnWire {
    on_wire(
        wire,
        vec![ScriptedTurn::text("first"), ScriptedTurn::text("second")],
    )
}

/// `writer` runs on the Chat Completions wire with controls of its own; `claude` on the
/// Messages wire.
fn supervisor(store: &Arc<dyn Store>, writer: &OnWire, claude: &OnWire) -> Supervisor {
    let agent = |name: &str, p: &OnWire, c: Option<Value>| {
        let mut b = Agent::builder(name).provider(p.clone()).model("m");
        if let Some(c) = c {
            b = b.controls(controls(c));
        }
        b.build().unwrap()
    };
    Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .child(ChildEntry::agent(
            "writer",
            agent(
                "writer",
                writer,
                Some(json!({"temperature": 0.9, "top_p": 0.5})),
            ),
        ))
        .child(ChildEntry::agent("claude", agent("claude", claude, None)))
        .build()
        .unwrap()
}

async fn parent(store: &Arc<dyn Store>) -> SessionRecord {
    let record = SessionRecord::new_root("parent", "parent", "scripted");
    store.create_session(&record).await.unwrap();
    record
}

#[tokio::test]
async fn spawn_controls_lie_over_the_agents_and_hold_for_every_run_of_the_child() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (writer, claude) = (on(Wire::OpenAi), on(Wire::Anthropic));
    let sup = supervisor(&store, &writer, &claude);
    let p = parent(&store).await;
    let asked = controls(json!({"temperature": 0.1, "seed": 3}));
    let handle = sup
        .spawn(
            DelegationRequest::new("writer", "draft")
                .parent(SessionRef::from(&p))
                .controls(asked.clone()),
        )
        .await
        .unwrap();
    sup.wait_for_mail_or_quiet(&arbor_core::inbox::Inbox::new())
        .await;
    // The spawn's fields win; the agent's own fill the rest.
    let merged = controls(json!({"temperature": 0.1, "top_p": 0.5, "seed": 3}));
    assert_eq!(*writer.seen.lock().unwrap(), [Some(merged.clone())]);
    let record = store.session(handle.session_id).await.unwrap().unwrap();
    assert_eq!(
        record.meta["controls"],
        json!({"temperature": 0.1, "seed": 3})
    );
    // A later run of the same child (a message to it) keeps them.
    sup.send_message(Sender::Host, handle.session_id, "again")
        .await
        .unwrap();
    sup.wait_for_mail_or_quiet(&arbor_core::inbox::Inbox::new())
        .await;
    assert_eq!(
        *writer.seen.lock().unwrap(),
        [Some(merged.clone()), Some(merged)]
    );
    // Without controls, the agent's own are sent.
    sup.delegate(DelegationRequest::new("writer", "plain").parent(SessionRef::from(&p)))
        .await
        .unwrap();
    assert_eq!(
        writer.seen.lock().unwrap()[2],
        Some(controls(json!({"temperature": 0.9, "top_p": 0.5})))
    );
}

#[tokio::test]
async fn a_bad_or_uncarried_spawn_control_is_refused_by_name_before_anything_runs() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (writer, claude) = (on(Wire::OpenAi), on(Wire::Anthropic));
    let sup = supervisor(&store, &writer, &claude);
    let p = parent(&store).await;
    let ask = |child: &str, c: Value| {
        DelegationRequest::new(child, "go")
            .parent(SessionRef::from(&p))
            .controls(controls(c))
    };
    let e = sup
        .delegate(ask("writer", json!({"temperature": 3.0})))
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind(), e.field(), e.to_string().as_str()),
        (
            CoreErrorKind::Validation,
            Some("controls.temperature"),
            "controls.temperature: temperature 3 is not 0 to 2"
        )
    );
    let e = sup
        .delegate(ask("writer", json!({"extra": {"tools": []}})))
        .await
        .unwrap_err();
    assert_eq!(e.field(), Some("controls.extra"));
    // The Messages wire has no seed: refused, never dropped.
    let e = sup
        .delegate(ask("claude", json!({"seed": 1})))
        .await
        .unwrap_err();
    assert_eq!(
        (e.field(), e.to_string().as_str()),
        (
            Some("controls.seed"),
            "controls.seed: child \"claude\" runs on provider \"on-wire\", which cannot carry \
             seed (the Anthropic API has no seed)"
        )
    );
    // Refused at admission: no record, no call.
    assert!(
        store
            .list_sessions(SessionQuery::Children(p.id))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(writer.seen.lock().unwrap().is_empty());
    assert!(claude.seen.lock().unwrap().is_empty());
    // A tool the child does not have cannot be required: its agent is not built, no call.
    let e = sup
        .delegate(ask("writer", json!({"tool_choice": {"tool": "grep"}})))
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("tool_choice names the tool \"grep\", which agent \"writer\" does not have"),
        "{e}"
    );
    assert!(writer.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn spawn_agent_takes_controls_from_the_model_but_not_extra() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (writer, claude) = (on(Wire::OpenAi), on(Wire::Anthropic));
    let sup = supervisor(&store, &writer, &claude);
    let p = parent(&store).await;
    let tool = SpawnAgentTool::new(sup.delegator());
    let schema = &tool.spec().parameters["properties"]["controls"];
    let mut keys: Vec<&str> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "max_output_tokens",
            "parallel_tool_calls",
            "seed",
            "stop",
            "temperature",
            "tool_choice",
            "top_p"
        ]
    );
    assert_eq!(schema["additionalProperties"], false);
    let ctx = || ToolContext::new("parent", SessionRef::from(&p), RunId::new(), "c1");
    let refused = |r: Result<String, ToolError>| match r {
        Err(ToolError::ToModel(m)) => m,
        other => panic!("expected a tool error, got {other:?}"),
    };
    let e = refused(
        tool.call_json(
            json!({"child_id": "writer", "input": "x", "controls": {"extra": {"a": 1}}}),
            ctx(),
        )
        .await,
    );
    assert!(e.contains("controls.extra"), "{e}");
    let e = refused(
        tool.call_json(
            json!({"child_id": "writer", "input": "x", "controls": {"temperature": 5}}),
            ctx(),
        )
        .await,
    );
    assert!(e.contains("controls.temperature"), "{e}");
    let out = tool
        .call_json(
            json!({"child_id": "writer", "input": "x",
                   "controls": {"temperature": 0, "tool_choice": "none", "stop": ["END"]}}),
            ctx(),
        )
        .await
        .unwrap();
    assert!(out.contains("first"), "{out}");
    assert_eq!(
        writer.seen.lock().unwrap()[0],
        Some(controls(json!({
            "temperature": 0.0, "top_p": 0.5, "tool_choice": "none", "stop": ["END"]
        })))
    );
}
