//! A question from any depth (issue 39, item 4): a child given `ask_human` asks the person at
//! the root; its run suspends through the approvals checkpoint (no call of the tree is gated);
//! the question waits at the root beside approvals; it is answered once (compare-and-swap),
//! with a choice when it offers some, or declined; on resume (in this process or a rebuilt
//! one) the answer is the call's result. Rules never answer it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use arbor_core::approval::standing::{CallPattern, StandingLayer};
use arbor_core::supervisor::{
    ChildEntry, Ownership, SpawnAgentTool, Supervisor, decide_at, waiting_at,
};
use arbor_core::tool::ask::{ASK_HUMAN, AskHuman, answer};
use arbor_core::{Agent, DenyReason, RunOptions, Session};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{ApprovalDecision, Message, RunStatus, SessionId, Verdict};
use arbor_store::{MemoryStore, Store};
use serde_json::json;

use super::nested_support::{Write, spawn, write};

fn ask(args: serde_json::Value) -> ScriptedTurn {
    ScriptedTurn::tool_call(ASK_HUMAN, args)
}

/// A tree whose `asker` runs `turns` with `ask_human` and a counted `write`; no call is gated
/// (a definition revision only), unless `configure` says otherwise.
fn tree(
    store: Arc<dyn Store>,
    turns: Vec<ScriptedTurn>,
    configure: impl FnOnce(
        arbor_core::supervisor::SupervisorBuilder,
    ) -> arbor_core::supervisor::SupervisorBuilder,
) -> (Supervisor, Write) {
    let writes = Write::default();
    let asker = Agent::builder("asker")
        .provider(ScriptedProvider::new(Script::new(turns)))
        .tool(writes.clone())
        .dyn_tool(Arc::new(AskHuman::new()))
        .build()
        .unwrap();
    let b = Supervisor::builder(Ownership::user("t", "u"))
        .store(store)
        .definition_revision("rev-1")
        .child(ChildEntry::agent("asker", asker));
    (configure(b).build().unwrap(), writes)
}

async fn root(sup: &Supervisor, store: &Arc<dyn Store>) -> Session {
    root_agent(sup)
        .session()
        .store(store.clone())
        .create()
        .await
        .unwrap()
}

fn root_agent(sup: &Supervisor) -> Agent {
    Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new([
            spawn("asker"),
            ScriptedTurn::text("root done"),
        ])))
        .dyn_tool(Arc::new(SpawnAgentTool::new(sup.delegator())))
        .build()
        .unwrap()
}

fn opts(sup: &Supervisor) -> RunOptions {
    RunOptions::default().with_nested(Arc::new(sup.clone()))
}

/// The asker's session and the tool results its transcript holds for `ask_human`.
async fn answers_read(store: &Arc<dyn Store>, root: SessionId) -> Vec<(String, bool)> {
    let asker = arbor_core::registry::find_child(store.as_ref(), root, "asker")
        .await
        .unwrap();
    store
        .transcript(asker.id, 0, None)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            arbor_protocol::EntryKind::Message {
                message: Message::Tool(r),
            } if r.name == ASK_HUMAN => Some((r.content, r.is_error)),
            _ => None,
        })
        .collect()
}

fn colour() -> Vec<ScriptedTurn> {
    vec![
        ask(json!({"question": "Which colour?", "choices": ["blue", "green"]})),
        ScriptedTurn::text("painted"),
    ]
}

#[tokio::test]
async fn a_childs_question_waits_at_the_root_and_its_answer_is_the_calls_result() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (sup, _) = tree(store.clone(), colour(), |b| b);
    let mut r = root(&sup, &store).await;
    let first = r.run("go", opts(&sup)).await.unwrap();
    assert_eq!(first.status, RunStatus::Suspended, "{:?}", first.error);
    let waiting = waiting_at(store.as_ref(), r.id()).await.unwrap();
    let pending: Vec<_> = waiting.iter().flat_map(|s| s.pending.clone()).collect();
    assert_eq!(pending.len(), 1, "{pending:?}");
    let q = &pending[0];
    assert_eq!(q.tool, ASK_HUMAN);
    assert_eq!(q.path, ["asker"]);
    assert_eq!(q.arguments["question"], "Which colour?");
    // Only an answer among the choices, or a decline, decides it.
    for (bad, field) in [
        (answer(&q.id, "red"), "answer"),
        (ApprovalDecision::new(&q.id, Verdict::AllowOnce), "answer"),
        (
            ApprovalDecision::new(&q.id, Verdict::AllowForRun),
            "verdict",
        ),
    ] {
        let e = decide_at(store.as_ref(), r.id(), &[bad]).await.unwrap_err();
        assert_eq!(e.field(), Some(field), "{e}");
    }
    decide_at(store.as_ref(), r.id(), &[answer(&q.id, "green")])
        .await
        .unwrap();
    // Answered once: a second answer is refused naming the first.
    let e = decide_at(store.as_ref(), r.id(), &[answer(&q.id, "blue")])
        .await
        .unwrap_err();
    assert_eq!(e.deny_reason(), Some(DenyReason::Decided), "{e}");
    assert!(e.to_string().contains("(green)"), "{e}");
    let done = r.resume(first.run_id, opts(&sup)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{:?}", done.error);
    assert_eq!(done.text, "root done");
    assert_eq!(
        answers_read(&store, r.id()).await,
        [("green".to_owned(), false)]
    );
}

#[tokio::test]
async fn a_declined_question_is_an_error_the_model_reads_and_the_turns_other_calls_ran() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut both = write("a");
    both.tool_calls
        .extend(ask(json!({"question": "Ship it?"})).tool_calls);
    let (sup, writes) = tree(store.clone(), vec![both, ScriptedTurn::text("ok")], |b| b);
    let mut r = root(&sup, &store).await;
    let first = r.run("go", opts(&sup)).await.unwrap();
    assert_eq!(first.status, RunStatus::Suspended, "{:?}", first.error);
    // Nothing is gated: the write ran; only the question waits.
    assert_eq!(writes.0.load(Ordering::SeqCst), 1);
    let pending = first.suspension.unwrap().pending;
    assert_eq!(pending.len(), 1);
    decide_at(
        store.as_ref(),
        r.id(),
        &[ApprovalDecision::new(&pending[0].id, Verdict::RejectOnce).with_reason("not yet")],
    )
    .await
    .unwrap();
    let done = r.resume(first.run_id, opts(&sup)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{:?}", done.error);
    assert_eq!(
        writes.0.load(Ordering::SeqCst),
        1,
        "the write did not run again"
    );
    assert_eq!(
        answers_read(&store, r.id()).await,
        [("the person declined to answer: not yet".to_owned(), true)]
    );
}

#[tokio::test]
async fn a_malformed_question_is_an_error_naming_the_field_and_nobody_is_asked() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turns = vec![
        ask(json!({"question": "Pick", "choices": ["a", "a"]})),
        ScriptedTurn::text("gave up"),
    ];
    let (sup, _) = tree(store.clone(), turns, |b| b);
    let mut r = root(&sup, &store).await;
    let done = r.run("go", opts(&sup)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{:?}", done.error);
    assert_eq!(
        answers_read(&store, r.id()).await,
        [(
            "invalid arguments for ask_human: choices[1] repeats \"a\"".to_owned(),
            true
        )]
    );
}

#[tokio::test]
async fn no_standing_decision_and_no_run_wide_verdict_answers_a_question() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turns = vec![
        ask(json!({"question": "First?"})),
        ask(json!({"question": "Second?"})),
        ScriptedTurn::text("asked twice"),
    ];
    // Durable approvals gate every call, and a standing rule allows every tool.
    let (sup, _) = tree(store.clone(), turns, |b| {
        b.durable_approvals("rev-1")
            .standing(StandingLayer::default().allow_always(CallPattern::tool("*")))
    });
    let mut r = root(&sup, &store).await;
    let first = r.run("go", opts(&sup)).await.unwrap();
    // The spawn ran by the standing rule; the question waits.
    assert_eq!(first.status, RunStatus::Suspended, "{:?}", first.error);
    let s = first.suspension.unwrap();
    assert_eq!(s.pending.len(), 1);
    assert_eq!(s.pending[0].tool, ASK_HUMAN);
    decide_at(store.as_ref(), r.id(), &[answer(&s.pending[0].id, "one")])
        .await
        .unwrap();
    let second = r.resume(first.run_id, opts(&sup)).await.unwrap();
    assert_eq!(
        second.status,
        RunStatus::Suspended,
        "the second question waits too"
    );
    let s = second.suspension.unwrap();
    assert_eq!(s.pending[0].arguments["question"], "Second?");
    decide_at(store.as_ref(), r.id(), &[answer(&s.pending[0].id, "two")])
        .await
        .unwrap();
    let done = r.resume(first.run_id, opts(&sup)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{:?}", done.error);
    assert_eq!(
        answers_read(&store, r.id()).await,
        [("one".to_owned(), false), ("two".to_owned(), false)]
    );
}

#[tokio::test]
async fn the_answer_reaches_the_child_after_a_restart_as_before_one() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (run, root_id) = {
        let (sup, _) = tree(store.clone(), colour(), |b| b);
        let mut r = root(&sup, &store).await;
        let first = r.run("go", opts(&sup)).await.unwrap();
        assert_eq!(first.status, RunStatus::Suspended);
        (first.run_id, r.id())
        // The process ends here: its supervisor and sessions are dropped.
    };
    // Another process answers, and a third rebuilds the tree from the store and resumes.
    let pending = waiting_at(store.as_ref(), root_id).await.unwrap()[0].pending[0].clone();
    decide_at(store.as_ref(), root_id, &[answer(&pending.id, "blue")])
        .await
        .unwrap();
    let (sup, _) = tree(store.clone(), colour(), |b| b);
    let mut r = root_agent(&sup)
        .open_session(store.clone(), root_id)
        .await
        .unwrap();
    let done = r.resume(run, opts(&sup)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{:?}", done.error);
    assert_eq!(
        answers_read(&store, root_id).await,
        [("blue".to_owned(), false)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_people_answering_at_once_one_answer_stands() {
    for round in 0..10 {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let (sup, _) = tree(store.clone(), colour(), |b| b);
        let mut r = root(&sup, &store).await;
        let first = r.run("go", opts(&sup)).await.unwrap();
        let id = first.suspension.unwrap().pending[0].id.clone();
        let person = |said: &'static str| {
            let (store, id, root) = (store.clone(), id.clone(), r.id());
            tokio::spawn(async move { decide_at(store.as_ref(), root, &[answer(&id, said)]).await })
        };
        let (a, b) = (person("blue"), person("green"));
        let (a, b) = (a.await.unwrap(), b.await.unwrap());
        let won = match (&a, &b) {
            (Ok(_), Err(_)) => "blue",
            (Err(_), Ok(_)) => "green",
            other => panic!("round {round}: exactly one answer stands: {other:?}"),
        };
        let done = r.resume(first.run_id, opts(&sup)).await.unwrap();
        assert_eq!(done.status, RunStatus::Succeeded);
        assert_eq!(
            answers_read(&store, r.id()).await,
            [(won.to_owned(), false)]
        );
    }
}

#[tokio::test]
async fn a_root_asks_its_own_question() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut r = Agent::builder("solo")
        .provider(ScriptedProvider::new(Script::new([
            ask(json!({"question": "Name?"})),
            ScriptedTurn::text("hello"),
        ])))
        .dyn_tool(Arc::new(AskHuman::new()))
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .create()
        .await
        .unwrap();
    let first = r.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(first.status, RunStatus::Suspended);
    let s = first.suspension.unwrap();
    assert_eq!(s.pending[0].path, Vec::<String>::new());
    decide_at(store.as_ref(), r.id(), &[answer(&s.pending[0].id, "Ada")])
        .await
        .unwrap();
    let done = r.resume(first.run_id, RunOptions::default()).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{:?}", done.error);
    let said = r.messages().iter().any(|m| {
        matches!(m, Message::Tool(t) if t.name == ASK_HUMAN && t.content == "Ada" && !t.is_error)
    });
    assert!(said, "{:?}", r.messages());
}

#[test]
fn only_arbors_question_tool_may_be_called_ask_human() {
    #[derive(Debug, Clone)]
    struct Impostor;
    #[async_trait::async_trait]
    impl arbor_core::Tool for Impostor {
        type Args = serde_json::Value;
        type Output = String;
        fn name(&self) -> &str {
            ASK_HUMAN
        }
        fn description(&self) -> &str {
            "not a question"
        }
        async fn call(
            &self,
            _: serde_json::Value,
            _: arbor_core::ToolContext,
        ) -> Result<String, arbor_core::ToolError> {
            Ok(String::new())
        }
    }
    let e = Agent::builder("a")
        .provider(ScriptedProvider::new(Script::new([])))
        .tool(Impostor)
        .build()
        .unwrap_err();
    assert!(e.to_string().contains("reserved"), "{e}");
}

/// A model's async child that asks: its caller goes on (`wait_agent` reads that it waits
/// for a person), the question is listed at the root, and once answered the child is resumed
/// on its own and reads the answer.
#[tokio::test]
async fn an_async_childs_question_is_listed_at_the_root_and_resumed_on_its_own() {
    use arbor_core::DynTool;
    use arbor_core::supervisor::WaitAgentTool;
    use arbor_core::supervisor::tools::ToolReport;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (sup, _) = tree(store.clone(), colour(), |b| b);
    let record = arbor_store::SessionRecord::new_root("parent", "parent", "scripted");
    store.create_session(&record).await.unwrap();
    let ctx = arbor_core::ToolContext::new(
        "parent",
        arbor_core::SessionRef::from(&record),
        arbor_protocol::RunId::new(),
        "c1",
    );
    let started = SpawnAgentTool::new(sup.delegator())
        .call_json(
            json!({"child_id": "asker", "name": "asker", "input": "paint", "mode": "async"}),
            ctx.clone(),
        )
        .await
        .unwrap();
    let Some(ToolReport::Started(handle)) = ToolReport::parse(&started) else {
        panic!("a handle: {started}");
    };
    let e = WaitAgentTool::new(sup.delegator())
        .call_json(json!({"delegation_id": handle.delegation_id}), ctx)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("the child waits for a person at the root"),
        "{e}"
    );
    let waiting = waiting_at(store.as_ref(), record.id).await.unwrap();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    let q = waiting[0].pending[0].clone();
    assert_eq!(q.tool, ASK_HUMAN);
    decide_at(store.as_ref(), record.id, &[answer(&q.id, "blue")])
        .await
        .unwrap();
    let done = sup.resume_child(waiting[0].session_id).await.unwrap();
    assert_eq!(done.result.text, "painted");
    // Its caller waiting again reads the answer, not the suspension.
    let again = WaitAgentTool::new(sup.delegator())
        .call_json(
            json!({"delegation_id": handle.delegation_id}),
            arbor_core::ToolContext::new(
                "parent",
                arbor_core::SessionRef::from(&record),
                arbor_protocol::RunId::new(),
                "c2",
            ),
        )
        .await
        .unwrap();
    assert!(again.contains("painted"), "{again}");
    assert_eq!(
        answers_read(&store, record.id).await,
        [("blue".to_owned(), false)]
    );
}

#[tokio::test]
async fn a_child_that_may_ask_needs_a_definition_revision_to_be_resumed_under() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let asker = Agent::builder("asker")
        .provider(ScriptedProvider::new(Script::new(colour())))
        .dyn_tool(Arc::new(AskHuman::new()))
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .child(ChildEntry::agent("asker", asker))
        .build()
        .unwrap();
    let mut r = root(&sup, &store).await;
    let done = r.run("go", opts(&sup)).await.unwrap();
    // Loud, not a question nobody could ever answer.
    assert_eq!(done.status, RunStatus::Failed);
    let error = done.error.unwrap_or_default();
    assert!(
        error.contains("has the tool \"ask_human\", but its supervisor has no definition revision"),
        "{error}"
    );
    assert!(waiting_at(store.as_ref(), r.id()).await.unwrap().is_empty());
}

/// A tool that fails its run.
#[derive(Debug, Clone)]
struct Boom;

#[async_trait::async_trait]
impl arbor_core::Tool for Boom {
    type Args = serde_json::Value;
    type Output = String;
    fn name(&self) -> &str {
        "boom"
    }
    fn description(&self) -> &str {
        "fails the run"
    }
    async fn call(
        &self,
        _: serde_json::Value,
        _: arbor_core::ToolContext,
    ) -> Result<String, arbor_core::ToolError> {
        Err(arbor_core::ToolError::Fatal("the disk is gone".into()))
    }
}

#[tokio::test]
async fn a_call_that_fails_the_run_beside_a_question_ends_it_and_nothing_waits() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut turn = ScriptedTurn::tool_call("boom", json!({}));
    turn.tool_calls
        .extend(ask(json!({"question": "Go on?"})).tool_calls);
    let mut r = Agent::builder("solo")
        .provider(ScriptedProvider::new(Script::new([
            turn,
            ScriptedTurn::text("went on"),
        ])))
        .tool(Boom)
        .dyn_tool(Arc::new(AskHuman::new()))
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .create()
        .await
        .unwrap();
    let done = r.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(done.status, RunStatus::Failed, "{:?}", done.suspension);
    assert!(
        done.error
            .as_deref()
            .unwrap_or_default()
            .contains("the disk is gone"),
        "{:?}",
        done.error
    );
    assert!(waiting_at(store.as_ref(), r.id()).await.unwrap().is_empty());
    let not_asked = r.messages().iter().any(|m| {
        matches!(m, Message::Tool(t) if t.name == ASK_HUMAN && t.is_error
            && t.content.starts_with("not run: the run stopped"))
    });
    assert!(not_asked, "{:?}", r.messages());
}

#[tokio::test]
async fn a_policy_that_halts_on_a_question_stops_a_gated_run() {
    use arbor_core::permission::{Decision, PermissionRequest, policy_fn};
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut turn = write("a");
    turn.tool_calls
        .extend(ask(json!({"question": "May I?"})).tool_calls);
    let mut r = Agent::builder("solo")
        .provider(ScriptedProvider::new(Script::new([
            turn,
            ScriptedTurn::text("went on"),
        ])))
        .tool(Write::default())
        .dyn_tool(Arc::new(AskHuman::new()))
        .policy(policy_fn(|req: &PermissionRequest<'_>| {
            if req.tool == ASK_HUMAN {
                Decision::Halt {
                    reason: "no questions in batch mode".into(),
                }
            } else {
                Decision::Allow
            }
        }))
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .create()
        .await
        .unwrap();
    let done = r
        .run("go", RunOptions::default().with_approvals())
        .await
        .unwrap();
    assert_ne!(done.status, RunStatus::Suspended, "{:?}", done.suspension);
    assert!(
        done.error
            .as_deref()
            .unwrap_or_default()
            .contains("no questions in batch mode"),
        "{:?} {:?}",
        done.status,
        done.error
    );
    assert!(waiting_at(store.as_ref(), r.id()).await.unwrap().is_empty());
}

/// An answer names a question: given for a call waiting for approval, it is refused and
/// decides nothing (an answer never approves a tool call).
#[tokio::test]
async fn an_answer_to_a_call_waiting_for_approval_is_refused() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (sup, writes) = tree(
        store.clone(),
        vec![write("a"), ScriptedTurn::text("written")],
        |b| b.durable_approvals("rev-1"),
    );
    let mut r = root(&sup, &store).await;
    let first = r.run("go", opts(&sup)).await.unwrap();
    let id = first.suspension.unwrap().pending[0].id.clone();
    let e = arbor_core::supervisor::answer_at(store.as_ref(), r.id(), &[answer(&id, "no")])
        .await
        .unwrap_err();
    assert_eq!(e.field(), Some("answer"), "{e}");
    assert!(
        e.to_string()
            .contains("a call of \"write\" waiting for approval"),
        "{e}"
    );
    // Still waiting, undecided: a rejection is still possible.
    let waiting = waiting_at(store.as_ref(), r.id()).await.unwrap();
    assert_eq!(waiting[0].pending.len(), 1);
    decide_at(
        store.as_ref(),
        r.id(),
        &[ApprovalDecision::new(&id, Verdict::RejectOnce)],
    )
    .await
    .unwrap();
    let done = r.resume(first.run_id, opts(&sup)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(writes.0.load(Ordering::SeqCst), 0, "the write never ran");
}

/// In a gated turn, a call a standing rule runs at once fails the run: the question beside it
/// is not asked, and nothing of the turn waits.
#[tokio::test]
async fn a_gated_call_that_fails_the_run_beside_a_question_ends_it_without_asking() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut turn = ScriptedTurn::tool_call("boom", json!({}));
    turn.tool_calls
        .extend(ask(json!({"question": "Go on?"})).tool_calls);
    let asker = Agent::builder("asker")
        .provider(ScriptedProvider::new(Script::new([
            turn,
            ScriptedTurn::text("went on"),
        ])))
        .tool(Boom)
        .dyn_tool(Arc::new(AskHuman::new()))
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .durable_approvals("rev-1")
        .standing(StandingLayer::default().allow_always(CallPattern::tool("boom")))
        .child(ChildEntry::agent("asker", asker))
        .build()
        .unwrap();
    let mut r = root(&sup, &store).await;
    let done = r.run("go", opts(&sup)).await.unwrap();
    assert_ne!(done.status, RunStatus::Suspended, "{:?}", done.suspension);
    assert!(waiting_at(store.as_ref(), r.id()).await.unwrap().is_empty());
    let read = answers_read(&store, r.id()).await;
    assert_eq!(read.len(), 1, "{read:?}");
    assert!(
        read[0].0.starts_with("not run: the run stopped"),
        "{read:?}"
    );
}
