//! A tool whose every call asks ([`DynTool::requires_approval`]) in a run that gates nothing:
//! only its call waits (the turn's other calls run at once, as they would), a rejection
//! reaches the model, a standing decision lets it through, and the review its tool computed
//! is kept for the person and for the call.

use std::sync::Arc;
use std::sync::Mutex;

use arbor_core::approval::review::{review, reviews_of};
use arbor_core::approval::standing::{CallPattern, StandingLayer};
use arbor_core::{Agent, DynTool, RunOptions, ToolContext, ToolError};
use arbor_model::{Script, ScriptedProvider, ScriptedToolCall, ScriptedTurn, ToolSpec};
use arbor_protocol::{ApprovalDecision, RunStatus, Verdict};
use arbor_store::{MemoryStore, Store};
use async_trait::async_trait;
use serde_json::{Value, json};

use super::support::tool_results;

/// Records the order calls ran in; `asks` tools require approval and offer a review.
#[derive(Debug)]
struct Logged {
    spec: ToolSpec,
    asks: bool,
    log: Arc<Mutex<Vec<String>>>,
    /// What the call saw as its review when it ran.
    seen: Arc<Mutex<Option<Value>>>,
    store: Arc<dyn Store>,
}

impl Logged {
    fn new(name: &str, asks: bool, log: &Arc<Mutex<Vec<String>>>, store: &Arc<dyn Store>) -> Self {
        Self {
            spec: ToolSpec {
                name: name.to_owned(),
                description: "logs its call".to_owned(),
                parameters: json!({"type": "object"}),
            },
            asks,
            log: log.clone(),
            seen: Arc::default(),
            store: store.clone(),
        }
    }
}

#[async_trait]
impl DynTool for Logged {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn exclusive(&self) -> bool {
        false
    }
    fn requires_approval(&self) -> bool {
        self.asks
    }
    async fn review(&self, arguments: &Value, ctx: &ToolContext) -> Option<Value> {
        self.asks
            .then(|| json!({"summary": format!("{} of {}", self.spec.name, arguments), "call": ctx.call_id}))
    }
    async fn call_json(&self, arguments: Value, ctx: ToolContext) -> Result<String, ToolError> {
        let r = review(self.store.as_ref(), ctx.run_id, &ctx.call_id)
            .await
            .map_err(|e| ToolError::Fatal(e.to_string()))?;
        *self.seen.lock().unwrap() = r;
        self.log
            .lock()
            .unwrap()
            .push(format!("{} {}", self.spec.name, arguments));
        Ok(format!("{} done", self.spec.name))
    }
}

fn turn(calls: &[(&str, &str)]) -> ScriptedTurn {
    ScriptedTurn {
        tool_calls: calls
            .iter()
            .map(|(id, name)| ScriptedToolCall {
                id: Some((*id).to_owned()),
                name: (*name).to_owned(),
                arguments: json!({"id": id}),
            })
            .collect(),
        ..ScriptedTurn::default()
    }
}

struct Setup {
    agent: Agent,
    store: Arc<dyn Store>,
    log: Arc<Mutex<Vec<String>>>,
    seen: Arc<Mutex<Option<Value>>>,
}

fn setup() -> Setup {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let log = Arc::new(Mutex::new(Vec::new()));
    let merge = Logged::new("merge", true, &log, &store);
    let seen = merge.seen.clone();
    let note = Logged::new("note", false, &log, &store);
    let b = Agent::builder("lead")
        .provider(ScriptedProvider::new(Script::new(vec![
            turn(&[("n1", "note"), ("m1", "merge"), ("n2", "note")]),
            ScriptedTurn::text("finished"),
        ])))
        .dyn_tool(Arc::new(merge))
        .dyn_tool(Arc::new(note));
    Setup {
        agent: b.build().unwrap(),
        store,
        log,
        seen,
    }
}

#[tokio::test]
async fn only_the_asking_call_waits_and_runs_once_when_approved() {
    let s = setup();
    let mut session = s
        .agent
        .session()
        .store(s.store.clone())
        .create()
        .await
        .unwrap();
    let r = session.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Suspended);
    let waiting = r.suspension.clone().unwrap();
    let ids: Vec<_> = waiting.pending.iter().map(|p| p.tool.as_str()).collect();
    assert_eq!(ids, ["merge"], "only the asking call waits");
    assert_eq!(
        *s.log.lock().unwrap(),
        ["note {\"id\":\"n1\"}", "note {\"id\":\"n2\"}"],
        "the calls that do not ask ran; the merge waits"
    );
    // The review is kept for the person, by decision id.
    let reviews = reviews_of(s.store.as_ref(), &waiting.pending)
        .await
        .unwrap();
    assert_eq!(
        reviews[&waiting.pending[0].id],
        json!({"summary": "merge of {\"id\":\"m1\"}", "call": "m1"})
    );

    let done = session
        .approve(
            r.run_id,
            waiting.version,
            &[ApprovalDecision::new(
                waiting.pending[0].id.clone(),
                Verdict::AllowOnce,
            )],
            RunOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(done.text, "finished");
    assert_eq!(
        *s.log.lock().unwrap(),
        [
            "note {\"id\":\"n1\"}",
            "note {\"id\":\"n2\"}",
            "merge {\"id\":\"m1\"}"
        ],
        "each call once"
    );
    assert_eq!(
        s.seen.lock().unwrap().clone(),
        Some(json!({"summary": "merge of {\"id\":\"m1\"}", "call": "m1"})),
        "the call reads what the person saw"
    );
    assert_eq!(
        tool_results(session.messages()),
        ["note done", "merge done", "note done"]
    );
}

#[tokio::test]
async fn a_rejected_asking_call_never_runs_and_the_model_reads_why() {
    let s = setup();
    let mut session = s
        .agent
        .session()
        .store(s.store.clone())
        .create()
        .await
        .unwrap();
    let r = session.run("go", RunOptions::default()).await.unwrap();
    let waiting = r.suspension.clone().unwrap();
    let done = session
        .approve(
            r.run_id,
            waiting.version,
            &[
                ApprovalDecision::new(waiting.pending[0].id.clone(), Verdict::RejectOnce)
                    .with_reason("not this one"),
            ],
            RunOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(
        *s.log.lock().unwrap(),
        ["note {\"id\":\"n1\"}", "note {\"id\":\"n2\"}"],
        "the merge never ran; the others did"
    );
    assert_eq!(
        tool_results(session.messages()),
        [
            "note done",
            "rejected by a reviewer: not this one",
            "note done"
        ]
    );
}

#[tokio::test]
async fn a_standing_allow_lets_the_asking_call_through_without_waiting() {
    let s = setup();
    let layer = StandingLayer::default().allow_always(CallPattern::tool("merge"));
    let mut session = s
        .agent
        .session()
        .store(s.store.clone())
        .meta(json!({ "standing": [layer] }))
        .create()
        .await
        .unwrap();
    let r = session.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Succeeded, "{:?}", r.suspension);
    assert_eq!(s.log.lock().unwrap().len(), 3);
    assert_eq!(
        s.seen.lock().unwrap().clone(),
        Some(json!({"summary": "merge of {\"id\":\"m1\"}", "call": "m1"})),
        "nobody was asked, but what the call acts on was read when it was made"
    );
}

#[tokio::test]
async fn a_call_id_repeated_in_a_later_turn_gets_its_own_review() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let log = Arc::new(Mutex::new(Vec::new()));
    let merge = Logged::new("merge", true, &log, &store);
    let seen = merge.seen.clone();
    let call = |what: &str| ScriptedTurn {
        tool_calls: vec![ScriptedToolCall {
            id: Some("call_1".to_owned()),
            name: "merge".to_owned(),
            arguments: json!({ "what": what }),
        }],
        ..ScriptedTurn::default()
    };
    let agent = Agent::builder("lead")
        .provider(ScriptedProvider::new(Script::new(vec![
            call("first"),
            call("second"),
            ScriptedTurn::text("finished"),
        ])))
        .dyn_tool(Arc::new(merge))
        .build()
        .unwrap();
    let mut session = agent.session().store(store.clone()).create().await.unwrap();
    let mut r = session.run("go", RunOptions::default()).await.unwrap();
    for what in ["first", "second"] {
        let waiting = r.suspension.clone().unwrap();
        let reviews = reviews_of(store.as_ref(), &waiting.pending).await.unwrap();
        let want =
            json!({"summary": format!("merge of {{\"what\":\"{what}\"}}"), "call": "call_1"});
        assert_eq!(
            reviews[&waiting.pending[0].id], want,
            "the person sees this turn's call"
        );
        r = session
            .approve(
                r.run_id,
                waiting.version,
                &[ApprovalDecision::new(
                    waiting.pending[0].id.clone(),
                    Verdict::AllowOnce,
                )],
                RunOptions::default(),
            )
            .await
            .unwrap();
        assert_eq!(
            seen.lock().unwrap().clone(),
            Some(want),
            "and the call reads it"
        );
    }
    assert_eq!(r.status, RunStatus::Succeeded);
    assert_eq!(log.lock().unwrap().len(), 2);
}
