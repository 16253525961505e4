//! A secret never leaves the supervisor: not through its events, the sink, the after hook,
//! the model-facing tools, the child's stored transcript or session record, not even when it
//! contains characters JSON escapes.

use std::sync::{Arc, Mutex};

use arbor_core::SecretRedactor;
use arbor_core::supervisor::{
    AfterHook, ChildEntry, ChildEventSink, Completion, DelegationRequest, Ownership, Report,
    SpawnAgentTool, Supervisor,
};
use arbor_core::{Agent, DynTool, SessionRef, ToolContext};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{RunId, SupervisorEnvelope};
use arbor_store::SessionQuery;
use async_trait::async_trait;
use serde_json::json;

const SECRET: &str = "tok\"en\\canary";

#[derive(Debug, Default, Clone)]
struct Sink(Arc<Mutex<Vec<String>>>);

impl ChildEventSink for Sink {
    fn send(&self, event: &SupervisorEnvelope) {
        self.0
            .lock()
            .unwrap()
            .push(serde_json::to_string(event).unwrap());
    }
}

#[derive(Debug, Default, Clone)]
struct After(Arc<Mutex<Vec<String>>>);

#[async_trait]
impl AfterHook for After {
    async fn after(&self, c: &Completion) -> Result<(), arbor_core::supervisor::HookError> {
        self.0
            .lock()
            .unwrap()
            .push(format!("{} {:?}", c.text, c.error));
        Ok(())
    }
}

fn leaks(text: &str) -> bool {
    let escaped = serde_json::to_string(SECRET).unwrap();
    text.contains(SECRET) || text.contains(escaped.trim_matches('"')) || text.contains("canary")
}

#[tokio::test]
async fn a_secret_with_json_escapes_never_leaves_through_any_channel() {
    let talker = Agent::builder("talker")
        .provider(ScriptedProvider::new(Script::new([
            ScriptedTurn::tool_call("echo", json!({ "text": format!("say {SECRET}") })),
            ScriptedTurn::text(format!("the answer is {SECRET}")),
        ])))
        .tool(arbor_core::builtin::Echo)
        .build()
        .unwrap();
    let failer = Agent::builder("failer")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn {
            fail: Some(format!("provider said {SECRET}")),
            ..ScriptedTurn::default()
        }])))
        .build()
        .unwrap();
    let sink = Sink::default();
    let after = After::default();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .child(ChildEntry::agent("talker", talker))
        .child(ChildEntry::agent("failer", failer))
        .child_events(true)
        .child_event_sink(sink.clone())
        .after(after.clone())
        .redactor(SecretRedactor::new([SECRET]))
        .build()
        .unwrap();
    let mut sub = sup.subscribe();

    let mut req = DelegationRequest::new("talker", format!("use {SECRET}"));
    req.name = Some(format!("named {SECRET}"));
    req.policy.report = Some(Report::Stream);
    let ok = sup.delegate(req).await.unwrap();
    assert!(ok.result.text.contains("the answer is"));
    let failed = sup
        .delegate(DelegationRequest::new("failer", "x"))
        .await
        .unwrap_err();
    assert!(!leaks(&failed.to_string()), "{failed}");

    // The model-facing tool, including a serde error that would quote the bad value.
    let spawn = SpawnAgentTool::new(sup.delegator());
    let record = arbor_store::SessionRecord::new_root("parent", "parent", "scripted");
    sup.store().create_session(&record).await.unwrap();
    let ctx = ToolContext::new("parent", SessionRef::from(&record), RunId::new(), "c1");
    let out = spawn
        .call_json(json!({"child_id": "talker", "input": SECRET}), ctx.clone())
        .await
        .unwrap();
    assert!(!leaks(&out), "{out}");
    let bad = spawn
        .call_json(
            json!({"child_id": "talker", "input": 1, "mode": SECRET}),
            ctx,
        )
        .await
        .unwrap_err();
    assert!(!leaks(&bad.to_string()), "{bad}");

    let mut seen = 0;
    while let Some(e) = sub.try_recv() {
        let json = serde_json::to_string(&*e).unwrap();
        assert!(!leaks(&json), "supervisor event leaks: {json}");
        seen += 1;
    }
    assert!(seen > 10, "only {seen} events");
    let sunk = sink.0.lock().unwrap().clone();
    assert!(!sunk.is_empty());
    for json in &sunk {
        assert!(!leaks(json), "sink leaks: {json}");
    }
    for text in after.0.lock().unwrap().iter() {
        assert!(!leaks(text), "after hook leaks: {text}");
    }

    // The store: every session record and every transcript entry.
    let store = sup.store();
    let sessions = store.list_sessions(SessionQuery::Roots).await.unwrap();
    assert!(sessions.len() >= 3);
    for s in &sessions {
        let record = serde_json::to_string(s).unwrap();
        assert!(!leaks(&record), "session record leaks: {record}");
        let entries = store.transcript(s.id, 0, None).await.unwrap();
        for entry in entries {
            let json = serde_json::to_string(&entry).unwrap();
            assert!(!leaks(&json), "transcript leaks: {json}");
        }
    }
    assert!(sessions.iter().any(|s| s.name == "named [REDACTED]"));
}
