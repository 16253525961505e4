//! Typed child results (issue 39, item 2): an output schema on a catalog entry, a spawn or a
//! session; an answer that does not match is sent back with the errors, then fails the run
//! `invalid_output` naming the path; a matching one reaches the parent as the value.

use std::sync::Arc;

use arbor_core::output::OutputSchema;
use arbor_core::supervisor::tools::ToolReport;
use arbor_core::supervisor::{
    ChildEntry, DelegationRequest, Ownership, SpawnAgentTool, Supervisor,
};
use arbor_core::{Agent, CoreErrorKind, DynTool, RunOptions, SessionRef, ToolContext};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{EntryKind, Message, RunId, RunStatus, StopReason};
use arbor_store::SessionQuery;
use serde_json::{Value, json};

fn person() -> Value {
    json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
        "required": ["name", "age"],
        "additionalProperties": false
    })
}

fn answering(texts: &[&str]) -> Agent {
    Agent::builder("clerk")
        .provider(ScriptedProvider::new(Script::new(
            texts
                .iter()
                .map(|t| ScriptedTurn::text(*t))
                .collect::<Vec<_>>(),
        )))
        .build()
        .unwrap()
}

fn supervisor(entry: ChildEntry) -> Supervisor {
    Supervisor::builder(Ownership::user("t", "u"))
        .child(entry)
        .build()
        .unwrap()
}

async fn parent_ctx(sup: &Supervisor) -> ToolContext {
    let record = arbor_store::SessionRecord::new_root("parent", "parent", "scripted");
    sup.store().create_session(&record).await.unwrap();
    ToolContext::new("parent", SessionRef::from(&record), RunId::new(), "c1")
}

/// The user messages of `session`'s transcript.
async fn user_messages(sup: &Supervisor, session: arbor_protocol::SessionId) -> Vec<String> {
    sup.store()
        .transcript(session, 0, None)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EntryKind::Message {
                message: Message::User { content, .. },
            } => Some(content),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_mismatch_is_sent_back_once_and_the_parent_gets_the_value() {
    let entry = ChildEntry::agent(
        "clerk",
        answering(&["Ada, 36", "```json\n{\"name\": \"Ada\", \"age\": 36}\n```"]),
    )
    .output_schema(OutputSchema::new(person()).unwrap());
    let sup = supervisor(entry);
    let ctx = parent_ctx(&sup).await;
    let spawn = SpawnAgentTool::new(sup.delegator());
    let out = spawn
        .call_json(json!({"child_id": "clerk", "input": "who?"}), ctx)
        .await
        .unwrap();
    let Some(ToolReport::Answer(answer)) = ToolReport::parse(&out) else {
        panic!("expected an answer: {out}");
    };
    assert_eq!(answer.status, RunStatus::Succeeded, "{out}");
    assert_eq!(
        answer.value,
        Some(json!({"name": "Ada", "age": 36})),
        "{out}"
    );
    // The text is the value's JSON, not the fenced answer.
    assert_eq!(
        serde_json::from_str::<Value>(&answer.text).unwrap(),
        json!({"name": "Ada", "age": 36})
    );
    // The child read one correction naming why, in its transcript.
    let child = sup
        .store()
        .list_sessions(SessionQuery::Children(
            sup.store()
                .list_sessions(SessionQuery::Roots)
                .await
                .unwrap()[0]
                .id,
        ))
        .await
        .unwrap()[0]
        .id;
    let users = user_messages(&sup, child).await;
    assert_eq!(users.len(), 2, "{users:?}");
    assert!(
        users[1].starts_with(
            "Your answer does not match the required output schema: /: the answer is not JSON"
        ),
        "{users:?}"
    );
}

#[tokio::test]
async fn corrections_spent_fail_the_child_invalid_output_naming_the_path() {
    let entry = ChildEntry::agent(
        "clerk",
        answering(&[r#"{"name":"Ada"}"#, r#"{"name":"Ada","age":-3}"#]),
    )
    .output_schema(OutputSchema::new(person()).unwrap());
    let sup = supervisor(entry);
    let root = sup.root_session(&answering(&["ok"]), |b| b).await.unwrap();
    let e = sup
        .delegate(DelegationRequest::new("clerk", "who?").parent(root.as_ref()))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::Run, "{e}");
    let text = e.to_string();
    assert!(text.contains("invalid_output: /age: "), "{text}");
    let child = sup
        .store()
        .list_sessions(SessionQuery::Children(root.id()))
        .await
        .unwrap()
        .remove(0);
    let finished: Vec<(RunStatus, StopReason)> = sup
        .store()
        .transcript(child.id, 0, None)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EntryKind::RunFinished {
                status,
                stop_reason,
                ..
            } => Some((status, stop_reason)),
            _ => None,
        })
        .collect();
    assert_eq!(finished, [(RunStatus::Failed, StopReason::InvalidOutput)]);
    // Zero retries fail at the first mismatch.
    let entry = ChildEntry::agent("clerk", answering(&["no", "never read"]))
        .output_schema(OutputSchema::new(person()).unwrap().retries(0).unwrap());
    let sup = supervisor(entry);
    let root = sup.root_session(&answering(&["ok"]), |b| b).await.unwrap();
    let e = sup
        .delegate(DelegationRequest::new("clerk", "who?").parent(root.as_ref()))
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("invalid_output: /: the answer is not JSON"),
        "{e}"
    );
}

#[tokio::test]
async fn a_spawn_names_its_schema_and_a_bad_one_is_refused_before_anything_is_written() {
    let sup = supervisor(ChildEntry::agent("clerk", answering(&["[1, 2, 3]"])));
    let ctx = parent_ctx(&sup).await;
    let spawn = SpawnAgentTool::new(sup.delegator());
    let schema = json!({"type": "array", "items": {"type": "integer"}});
    assert!(
        spawn.spec().parameters["properties"]["output_schema"].is_object(),
        "the tool offers output_schema"
    );
    let out = spawn
        .call_json(
            json!({"child_id": "clerk", "input": "count", "output_schema": schema}),
            ctx.clone(),
        )
        .await
        .unwrap();
    let Some(ToolReport::Answer(answer)) = ToolReport::parse(&out) else {
        panic!("expected an answer: {out}");
    };
    assert_eq!(answer.value, Some(json!([1, 2, 3])), "{out}");

    let before = sup
        .store()
        .list_sessions(SessionQuery::Children(ctx.session.id))
        .await
        .unwrap()
        .len();
    for (args, says) in [
        (
            json!({"child_id": "clerk", "input": "x", "output_schema": {"type": 12}}),
            "output_schema: is not a valid JSON Schema",
        ),
        (
            json!({"child_id": "clerk", "input": "x", "output_schema": {}, "output_retries": 9}),
            "output_retries",
        ),
        (
            json!({"child_id": "clerk", "input": "x", "output_retries": 1}),
            "output_retries: only with output_schema",
        ),
    ] {
        let e = spawn
            .call_json(args.clone(), ctx.clone())
            .await
            .unwrap_err();
        assert!(e.to_string().contains(says), "{args}: {e}");
    }
    let after = sup
        .store()
        .list_sessions(SessionQuery::Children(ctx.session.id))
        .await
        .unwrap()
        .len();
    assert_eq!(before, after, "a refused spawn writes nothing");
}

#[tokio::test]
async fn a_catalog_entry_fixes_its_schema_against_a_spawns_other_one() {
    let entry = ChildEntry::agent("clerk", answering(&[r#"{"name":"Ada","age":1}"#]))
        .output_schema(OutputSchema::new(person()).unwrap());
    let sup = supervisor(entry);
    let root = sup.root_session(&answering(&["ok"]), |b| b).await.unwrap();
    let e = sup
        .delegate(
            DelegationRequest::new("clerk", "who?")
                .parent(root.as_ref())
                .output_schema(OutputSchema::new(json!({"type": "string"})).unwrap()),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::Validation);
    assert_eq!(e.field(), Some("output_schema"));
    assert_eq!(
        e.to_string(),
        "output_schema: the catalog entry of clerk fixes its output schema"
    );
    // The same schema is no conflict.
    let r = sup
        .delegate(
            DelegationRequest::new("clerk", "who?")
                .parent(root.as_ref())
                .output_schema(OutputSchema::new(person()).unwrap()),
        )
        .await
        .unwrap();
    assert_eq!(r.output, Some(json!({"name": "Ada", "age": 1})));
}

#[tokio::test]
async fn a_sessions_schema_is_kept_in_its_record_and_checked_after_a_reopen() {
    let store: Arc<dyn arbor_store::Store> = Arc::new(arbor_store::MemoryStore::new());
    let agent = answering(&[r#"{"name":"Ada","age":36}"#, "not json", "still not"]);
    let mut session = agent
        .session()
        .store(store.clone())
        .output_schema(OutputSchema::new(person()).unwrap())
        .create()
        .await
        .unwrap();
    let r = session.run("who?", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Succeeded);
    assert_eq!(r.text, r#"{"age":36,"name":"Ada"}"#);
    // Reopened (as after a restart): the schema still holds.
    let mut reopened = agent.open_session(store, session.id()).await.unwrap();
    let r = reopened.run("again", RunOptions::default()).await.unwrap();
    assert_eq!(
        (r.status, r.stop_reason),
        (RunStatus::Failed, StopReason::InvalidOutput)
    );
    assert!(
        r.error
            .as_deref()
            .unwrap_or_default()
            .starts_with("invalid_output: /: the answer is not JSON"),
        "{:?}",
        r.error
    );
}

#[tokio::test]
async fn a_value_over_the_parents_cap_is_left_to_the_cut_text() {
    let numbers: Vec<u32> = (0..40).collect();
    let entry = ChildEntry::agent(
        "clerk",
        answering(&[&serde_json::to_string(&numbers).unwrap()]),
    )
    .output_schema(OutputSchema::new(json!({"type": "array"})).unwrap())
    .limits(arbor_core::supervisor::LimitsInput {
        max_result_bytes: Some(64),
        ..Default::default()
    });
    let sup = supervisor(entry);
    let ctx = parent_ctx(&sup).await;
    let out = SpawnAgentTool::new(sup.delegator())
        .call_json(json!({"child_id": "clerk", "input": "count"}), ctx)
        .await
        .unwrap();
    let Some(ToolReport::Answer(answer)) = ToolReport::parse(&out) else {
        panic!("expected an answer: {out}");
    };
    assert_eq!(answer.status, RunStatus::Succeeded);
    assert_eq!(answer.value, None, "{out}");
    assert!(answer.text.contains("[truncated:"), "{out}");
}

/// The corrections a run sent back hold across its suspension: resumed (here after a
/// question it asked), it does not get its corrections again.
#[tokio::test]
async fn a_resumed_run_counts_on_from_the_corrections_it_sent_back() {
    use arbor_core::tool::ask::{ASK_HUMAN, AskHuman, answer};
    let store: Arc<dyn arbor_store::Store> = Arc::new(arbor_store::MemoryStore::new());
    let mut s = Agent::builder("clerk")
        .provider(ScriptedProvider::new(Script::new([
            ScriptedTurn::text("Ada, 36"),
            ScriptedTurn::tool_call(ASK_HUMAN, json!({"question": "Her age?"})),
            ScriptedTurn::text("still not JSON"),
            ScriptedTurn::text(r#"{"name": "Ada", "age": 36}"#),
        ])))
        .dyn_tool(Arc::new(AskHuman::new()))
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .output_schema(OutputSchema::new(person()).unwrap())
        .create()
        .await
        .unwrap();
    let first = s.run("who?", RunOptions::default()).await.unwrap();
    assert_eq!(first.status, RunStatus::Suspended, "{:?}", first.error);
    let id = first.suspension.unwrap().pending[0].id.clone();
    arbor_core::supervisor::answer_at(store.as_ref(), s.id(), &[answer(&id, "36")])
        .await
        .unwrap();
    let done = s.resume(first.run_id, RunOptions::default()).await.unwrap();
    // Its one correction was spent before the suspension: the next mismatch ends it.
    assert_eq!(done.status, RunStatus::Failed, "{:?}", done.text);
    assert_eq!(done.stop_reason, StopReason::InvalidOutput);
}

/// A run a crash cut off after it had sent a correction back: the run that continues it
/// counts on from that correction rather than getting its output retries again.
#[tokio::test]
async fn a_run_continued_after_a_crash_counts_on_from_the_corrections_it_sent_back() {
    use std::time::Duration;
    let store: Arc<dyn arbor_store::Store> = Arc::new(arbor_store::MemoryStore::new());
    let tool = super::support::Probe::default();
    let script = Script::new([
        ScriptedTurn::text("Ada, 36"),
        ScriptedTurn::tool_call("probe", json!({"ms": 10_000, "tag": "t"})),
        ScriptedTurn::text("still not JSON"),
        ScriptedTurn::text(r#"{"name": "Ada", "age": 36}"#),
    ]);
    let agent = |tool: super::support::Probe| {
        Agent::builder("clerk")
            .provider(ScriptedProvider::new(script.clone()))
            .tool(tool)
            .build()
            .unwrap()
    };
    let (tx, rx) = std::sync::mpsc::channel();
    let (first, for_crash) = (agent(tool.clone()), store.clone());
    super::recover::crash_after(Duration::from_millis(300), async move {
        let mut s = first
            .session()
            .store(for_crash)
            .output_schema(OutputSchema::new(person()).unwrap())
            .create()
            .await
            .unwrap();
        tx.send(s.id()).unwrap();
        let _ = s.run("who?", RunOptions::default()).await;
    });
    let id = rx.recv().unwrap();
    store.mark_interrupted().await.unwrap();
    let mut s = agent(tool).open_session(store.clone(), id).await.unwrap();
    let (_, done) = s.continue_interrupted(RunOptions::default()).await.unwrap();
    // Its one correction was spent before the crash: the next mismatch ends it.
    assert_eq!(done.status, RunStatus::Failed, "{:?}", done.text);
    assert_eq!(done.stop_reason, StopReason::InvalidOutput);
}
