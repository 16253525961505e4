//! Durable approvals of one run: a gated call waits for a decision, runs exactly once when
//! allowed, and gets the rejection when rejected; decisions are compare-and-swap batches; a
//! run-wide decision holds for later calls of the same tool.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arbor_core::approval::{self, MAX_REASON_BYTES};
use arbor_core::{Agent, CoreErrorKind, RunOptions, Tool, ToolContext, ToolError};
use arbor_model::{Script, ScriptedProvider, ScriptedToolCall, ScriptedTurn};
use arbor_protocol::{ApprovalDecision, EntryKind, RunStatus, SessionStatus, Verdict};
use arbor_store::{MemoryStore, Store};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::support::tool_results;

/// A side effect that counts how often it ran.
#[derive(Debug, Clone)]
struct Effect {
    name: &'static str,
    runs: Arc<AtomicUsize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct EffectArgs {
    what: String,
}

#[async_trait]
impl Tool for Effect {
    type Args = EffectArgs;
    type Output = String;
    fn name(&self) -> &str {
        self.name
    }
    fn description(&self) -> &str {
        "a side effect"
    }
    async fn call(&self, args: EffectArgs, _ctx: ToolContext) -> Result<String, ToolError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        Ok(format!("did {}", args.what))
    }
}

fn calls(names: &[(&str, &str)]) -> ScriptedTurn {
    ScriptedTurn {
        tool_calls: names
            .iter()
            .enumerate()
            .map(|(i, (name, what))| ScriptedToolCall {
                id: Some(format!("c{i}")),
                name: (*name).into(),
                arguments: json!({ "what": what }),
            })
            .collect(),
        ..ScriptedTurn::default()
    }
}

fn agent(turns: Vec<ScriptedTurn>, write: &Effect, mail: &Effect) -> Agent {
    Agent::builder("worker")
        .provider(ScriptedProvider::new(Script::new(turns)))
        .tool(write.clone())
        .tool(mail.clone())
        .interrupt_before_tool(true)
        .build()
        .unwrap()
}

fn effects() -> (Effect, Effect) {
    (
        Effect {
            name: "write",
            runs: Arc::default(),
        },
        Effect {
            name: "mail",
            runs: Arc::default(),
        },
    )
}

#[tokio::test]
async fn a_gated_call_waits_and_runs_exactly_once_when_allowed() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (write, mail) = effects();
    let a = agent(
        vec![calls(&[("write", "report")]), ScriptedTurn::text("written")],
        &write,
        &mail,
    );
    let mut s = a.session().store(store.clone()).create().await.unwrap();
    let r = s.run("write it", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Suspended);
    let waiting = r.suspension.clone().unwrap();
    assert_eq!(waiting.pending.len(), 1);
    let pending = &waiting.pending[0];
    assert!(
        pending.id.starts_with("apr_") && pending.id.len() == 68,
        "{}",
        pending.id
    );
    assert_eq!(
        (pending.tool.as_str(), pending.call_id.as_str()),
        ("write", "c0")
    );
    assert_eq!(
        write.runs.load(Ordering::SeqCst),
        0,
        "nothing ran before the decision"
    );
    assert_eq!(
        store.session(s.id()).await.unwrap().unwrap().status,
        SessionStatus::Suspended
    );

    // Another session object over the same store (as after a restart) resumes it.
    drop(s);
    let mut again = a.open_session(store.clone(), r.session_id).await.unwrap();
    let done = again
        .approve(
            r.run_id,
            waiting.version,
            &[ApprovalDecision::new(
                pending.id.clone(),
                Verdict::AllowOnce,
            )],
            RunOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(done.run_id, r.run_id, "the same run went on");
    assert_eq!(done.text, "written");
    assert_eq!(write.runs.load(Ordering::SeqCst), 1);
    assert_eq!(tool_results(again.messages()), ["did report"]);
    // It is over: resuming or deciding again is the one unknown-approval error.
    let e = again
        .resume(r.run_id, RunOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Unknown approval");
    assert_eq!(write.runs.load(Ordering::SeqCst), 1, "still exactly once");
    assert!(
        approval::suspensions(store.as_ref(), r.session_id)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn two_gated_calls_decided_one_at_a_time() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (write, mail) = effects();
    let a = agent(
        vec![
            calls(&[("write", "draft"), ("mail", "boss")]),
            ScriptedTurn::text("done"),
        ],
        &write,
        &mail,
    );
    let mut s = a.session().store(store.clone()).create().await.unwrap();
    let r = s.run("go", RunOptions::default()).await.unwrap();
    let first = r.suspension.unwrap();
    assert_eq!(first.pending.len(), 2);
    let (w, m) = (first.pending[0].id.clone(), first.pending[1].id.clone());

    let left = approval::decide(
        store.as_ref(),
        r.run_id,
        first.version,
        &[ApprovalDecision::new(w, Verdict::AllowOnce)],
    )
    .await
    .unwrap();
    assert_eq!(left.pending.len(), 1);
    assert_eq!(left.pending[0].id, m);
    assert_eq!(
        write.runs.load(Ordering::SeqCst),
        0,
        "deciding runs nothing"
    );
    let again = s.resume(r.run_id, RunOptions::default()).await.unwrap();
    assert_eq!(
        again.status,
        RunStatus::Suspended,
        "re-suspends with the rest"
    );
    assert_eq!(write.runs.load(Ordering::SeqCst), 1);
    let rest = again.suspension.unwrap();
    assert_eq!(rest.pending.len(), 1);
    let done = s
        .approve(
            r.run_id,
            rest.version,
            &[ApprovalDecision {
                id: m,
                verdict: Verdict::RejectOnce,
                reason: Some("not to the boss".into()),
                decided_by: None,
            }],
            RunOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(
        (
            write.runs.load(Ordering::SeqCst),
            mail.runs.load(Ordering::SeqCst)
        ),
        (1, 0)
    );
    assert_eq!(
        tool_results(s.messages()),
        ["did draft", "rejected by a reviewer: not to the boss"]
    );
}

#[tokio::test]
async fn bad_decisions_are_refused_and_leave_the_checkpoint_unchanged() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (write, mail) = effects();
    let a = agent(vec![calls(&[("write", "x")])], &write, &mail);
    let mut s = a.session().store(store.clone()).create().await.unwrap();
    let r = s.run("go", RunOptions::default()).await.unwrap();
    let waiting = r.suspension.unwrap();
    let id = waiting.pending[0].id.clone();
    let forged = format!("apr_{}", "0".repeat(64));
    let cases: Vec<(u64, Vec<ApprovalDecision>, CoreErrorKind, String)> = vec![
        (
            waiting.version,
            vec![ApprovalDecision::new(forged.clone(), Verdict::AllowOnce)],
            CoreErrorKind::Denied,
            "Unknown approval".into(),
        ),
        (
            waiting.version + 1,
            vec![ApprovalDecision::new(id.clone(), Verdict::AllowOnce)],
            CoreErrorKind::Conflict,
            format!(
                "the run's approvals changed: expected version {}, found {}",
                waiting.version + 1,
                waiting.version
            ),
        ),
        (
            waiting.version,
            vec![
                ApprovalDecision::new(id.clone(), Verdict::AllowOnce),
                ApprovalDecision::new(id.clone(), Verdict::RejectOnce),
            ],
            CoreErrorKind::Validation,
            "a batch decides one approval twice".into(),
        ),
        (
            waiting.version,
            vec![ApprovalDecision {
                id: id.clone(),
                verdict: Verdict::RejectOnce,
                reason: Some("x".repeat(MAX_REASON_BYTES + 1)),
                decided_by: None,
            }],
            CoreErrorKind::Limit,
            "a decision's reason exceeds 2048 bytes".into(),
        ),
        (
            waiting.version,
            // One good decision and one forged: the batch is refused whole.
            vec![
                ApprovalDecision::new(id.clone(), Verdict::AllowOnce),
                ApprovalDecision::new(forged.clone(), Verdict::AllowOnce),
            ],
            CoreErrorKind::Denied,
            "Unknown approval".into(),
        ),
    ];
    for (version, decisions, kind, message) in cases {
        let e = approval::decide(store.as_ref(), r.run_id, version, &decisions)
            .await
            .unwrap_err();
        assert_eq!((e.kind(), e.to_string()), (kind, message));
        assert!(
            !e.to_string().contains(&forged[4..]),
            "the id is not echoed"
        );
        let now = approval::suspension(store.as_ref(), r.run_id)
            .await
            .unwrap();
        assert_eq!(now.version, waiting.version, "unchanged");
        assert_eq!(now.pending, waiting.pending);
    }
    // A run id that is not suspended (or is forged) gets the same error.
    let e = approval::suspension(store.as_ref(), arbor_protocol::RunId::new())
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Unknown approval");
    assert_eq!(write.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn allow_for_run_holds_for_later_calls_of_the_same_tool_only() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (write, mail) = effects();
    let a = agent(
        vec![
            calls(&[("write", "one")]),
            calls(&[("write", "two")]),
            calls(&[("mail", "three")]),
            ScriptedTurn::text("done"),
        ],
        &write,
        &mail,
    );
    let mut s = a.session().store(store.clone()).create().await.unwrap();
    let r = s.run("go", RunOptions::default()).await.unwrap();
    let waiting = r.suspension.unwrap();
    let next = s
        .approve(
            r.run_id,
            waiting.version,
            &[ApprovalDecision::new(
                waiting.pending[0].id.clone(),
                Verdict::AllowForRun,
            )],
            RunOptions::default(),
        )
        .await
        .unwrap();
    // The second write went through on the run-wide decision; the mail waits.
    assert_eq!(next.status, RunStatus::Suspended);
    assert_eq!(write.runs.load(Ordering::SeqCst), 2);
    let rest = next.suspension.unwrap();
    assert_eq!(rest.pending.len(), 1);
    assert_eq!(rest.pending[0].tool, "mail");
    let done = s
        .approve(
            r.run_id,
            rest.version,
            &[ApprovalDecision::new(
                rest.pending[0].id.clone(),
                Verdict::AllowOnce,
            )],
            RunOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(mail.runs.load(Ordering::SeqCst), 1);
    // The transcript records the suspensions and one end.
    let ends: Vec<RunStatus> = store
        .transcript(s.id(), 0, None)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EntryKind::RunFinished { status, .. } => Some(status),
            _ => None,
        })
        .collect();
    assert_eq!(
        ends,
        [
            RunStatus::Suspended,
            RunStatus::Suspended,
            RunStatus::Succeeded
        ]
    );
}

#[tokio::test]
async fn reject_for_run_refuses_later_calls_of_the_same_tool_without_asking() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (write, mail) = effects();
    let a = agent(
        vec![
            calls(&[("write", "one")]),
            calls(&[("write", "two")]),
            calls(&[("mail", "three")]),
            ScriptedTurn::text("done"),
        ],
        &write,
        &mail,
    );
    let mut s = a.session().store(store.clone()).create().await.unwrap();
    let r = s.run("go", RunOptions::default()).await.unwrap();
    let waiting = r.suspension.unwrap();
    let next = s
        .approve(
            r.run_id,
            waiting.version,
            &[ApprovalDecision {
                reason: Some("no writes in this run".into()),
                ..ApprovalDecision::new(waiting.pending[0].id.clone(), Verdict::RejectForRun)
            }],
            RunOptions::default(),
        )
        .await
        .unwrap();
    // The second write was refused on the run-wide decision, unasked; the mail waits.
    assert_eq!(next.status, RunStatus::Suspended);
    let rest = next.suspension.unwrap();
    assert_eq!(rest.pending.len(), 1);
    assert_eq!(rest.pending[0].tool, "mail");
    assert_eq!(write.runs.load(Ordering::SeqCst), 0);
    assert_eq!(
        tool_results(s.messages()),
        [
            "rejected by a reviewer: no writes in this run",
            "rejected by a reviewer: decided for the whole run"
        ]
    );
    let done = s
        .approve(
            r.run_id,
            rest.version,
            &[ApprovalDecision::new(
                rest.pending[0].id.clone(),
                Verdict::AllowOnce,
            )],
            RunOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(
        (
            write.runs.load(Ordering::SeqCst),
            mail.runs.load(Ordering::SeqCst)
        ),
        (0, 1)
    );
}

#[tokio::test]
async fn another_sessions_run_is_unknown_and_its_checkpoint_is_untouched() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (write, mail) = effects();
    let a = agent(
        vec![calls(&[("write", "one")]), ScriptedTurn::text("done")],
        &write,
        &mail,
    );
    let mut owner = a.session().store(store.clone()).create().await.unwrap();
    let mut stranger = a.session().store(store.clone()).create().await.unwrap();
    let r = owner.run("go", RunOptions::default()).await.unwrap();
    let waiting = r.suspension.unwrap();
    let id = waiting.pending[0].id.clone();
    let e = stranger
        .approve(
            r.run_id,
            waiting.version,
            &[ApprovalDecision::new(id.clone(), Verdict::AllowOnce)],
            RunOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Unknown approval");
    assert!(!e.to_string().contains(&r.run_id.to_string()));
    let e = stranger
        .resume(r.run_id, RunOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Unknown approval");
    // Nothing was recorded: same version, the call still pending, nothing ran.
    let still = approval::suspension(store.as_ref(), r.run_id)
        .await
        .unwrap();
    assert_eq!(still.version, waiting.version);
    assert_eq!(still.pending.len(), 1);
    assert_eq!(write.runs.load(Ordering::SeqCst), 0);
    let done = owner
        .approve(
            r.run_id,
            waiting.version,
            &[ApprovalDecision::new(id, Verdict::AllowOnce)],
            RunOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(write.runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_resumes_run_the_approved_call_once() {
    for _ in 0..20 {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let (write, mail) = effects();
        let a = agent(
            vec![calls(&[("write", "once")]), ScriptedTurn::text("done")],
            &write,
            &mail,
        );
        let mut s = a.session().store(store.clone()).create().await.unwrap();
        let r = s.run("go", RunOptions::default()).await.unwrap();
        let waiting = r.suspension.unwrap();
        approval::decide(
            store.as_ref(),
            r.run_id,
            waiting.version,
            &[ApprovalDecision::new(
                waiting.pending[0].id.clone(),
                Verdict::AllowOnce,
            )],
        )
        .await
        .unwrap();
        let mut one = a.open_session(store.clone(), s.id()).await.unwrap();
        let mut two = a.open_session(store.clone(), s.id()).await.unwrap();
        let run = r.run_id;
        let (x, y) = tokio::join!(
            tokio::spawn(async move { one.resume(run, RunOptions::default()).await }),
            tokio::spawn(async move { two.resume(run, RunOptions::default()).await }),
        );
        let oks = [x.unwrap(), y.unwrap()]
            .into_iter()
            .filter(|r| r.as_ref().is_ok_and(|r| r.status == RunStatus::Succeeded))
            .count();
        assert_eq!(oks, 1, "one resume goes on");
        assert_eq!(write.runs.load(Ordering::SeqCst), 1, "the call ran once");
    }
}

#[tokio::test]
async fn a_turn_may_wait_on_at_most_32_calls_and_a_claimed_run_takes_no_decision() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (write, mail) = effects();
    let many: Vec<(&str, &str)> = (0..33).map(|_| ("write", "x")).collect();
    let a = agent(vec![calls(&many)], &write, &mail)
        .to_builder()
        .limits(arbor_protocol::RunLimits::HARD)
        .build()
        .unwrap();
    let mut s = a.session().store(store.clone()).create().await.unwrap();
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(
        r.error.as_deref(),
        Some("a turn may wait on at most 32 approvals (it asked for 33)")
    );
    assert_eq!(write.runs.load(Ordering::SeqCst), 0);

    // A resume in progress holds the run: a decision meanwhile is refused.
    let mut checkpoint = approval::RunCheckpoint {
        session_id: s.id(),
        run_id: arbor_protocol::RunId::new(),
        turn: 1,
        turns: 1,
        tool_calls: 1,
        usage: arbor_protocol::Usage::default(),
        text: String::new(),
        limits: arbor_protocol::RunLimits::DEFAULT,
        started_ms: 0,
        calls: vec![approval::CallSlot {
            call: arbor_protocol::ToolCall {
                id: "c".into(),
                name: "write".into(),
                arguments: json!({"what": "x"}),
            },
            approval_id: "apr_1".into(),
            state: approval::CallState::Pending,
        }],
        sticky: Vec::new(),
        claimed_at_ms: Some(arbor_protocol::Timestamp::now().0),
        claimed_by: None,
        caps: approval::ApprovalCaps::DEFAULT,
        trace: None,
    };
    let v = approval::save(store.as_ref(), &checkpoint, 0)
        .await
        .unwrap();
    let e = approval::decide(
        store.as_ref(),
        checkpoint.run_id,
        v,
        &[ApprovalDecision::new("apr_1", Verdict::AllowOnce)],
    )
    .await
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "the run is being resumed; decide again once it suspends"
    );
    assert_eq!(e.kind(), CoreErrorKind::Conflict);
    // A claim older than the run's timeout is a dead resumer's: decisions go through.
    checkpoint.claimed_at_ms = Some(1);
    let v = approval::save(store.as_ref(), &checkpoint, v)
        .await
        .unwrap();
    approval::decide(
        store.as_ref(),
        checkpoint.run_id,
        v,
        &[ApprovalDecision::new("apr_1", Verdict::AllowOnce)],
    )
    .await
    .unwrap();
}

/// A tool standing for a delegation whose child suspended on one decision.
#[derive(Debug, Clone)]
struct SuspendedChild {
    run_id: arbor_protocol::RunId,
    session_id: arbor_protocol::SessionId,
}

fn child_decision(depth: usize) -> arbor_protocol::PendingDecision {
    arbor_protocol::PendingDecision {
        id: "apr_child".into(),
        tool: "write".into(),
        arguments: json!({}),
        call_id: "k1".into(),
        path: (0..depth).map(|i| format!("level{i}")).collect(),
        session_id: None,
        run_id: None,
    }
}

#[async_trait]
impl Tool for SuspendedChild {
    type Args = EffectArgs;
    type Output = String;
    fn name(&self) -> &str {
        "delegate"
    }
    fn description(&self) -> &str {
        "a child that waits for approval"
    }
    async fn call(&self, _args: EffectArgs, _ctx: ToolContext) -> Result<String, ToolError> {
        Err(ToolError::Suspended(Box::new(
            arbor_core::NestedSuspension {
                run_id: self.run_id,
                session_id: self.session_id,
                pending: vec![child_decision(1)],
            },
        )))
    }
}

/// Resumes the child with a fixed outcome.
#[derive(Debug)]
struct Resumer(arbor_core::process::NestedOutcome);

#[async_trait]
impl arbor_core::process::NestedResumer for Resumer {
    async fn resume_nested(
        &self,
        _run_id: arbor_protocol::RunId,
        _session_id: arbor_protocol::SessionId,
        _decisions: Vec<ApprovalDecision>,
    ) -> arbor_core::CoreResult<arbor_core::process::NestedOutcome> {
        Ok(self.0.clone())
    }
}

#[tokio::test]
async fn a_resume_refused_for_a_too_deep_path_lets_go_of_the_run() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let child = SuspendedChild {
        run_id: arbor_protocol::RunId::new(),
        session_id: arbor_protocol::SessionId::new(),
    };
    let a = Agent::builder("lead")
        .provider(ScriptedProvider::new(Script::new([
            calls(&[("delegate", "x")]),
            ScriptedTurn::text("done"),
        ])))
        .tool(child)
        .build()
        .unwrap();
    let mut s = a.session().store(store.clone()).create().await.unwrap();
    let r = s.run("go", RunOptions::default()).await.unwrap();
    let waiting = r.suspension.unwrap();
    assert_eq!(waiting.pending[0].path, ["level0"]);
    let decision = ApprovalDecision::new(waiting.pending[0].id.clone(), Verdict::AllowOnce);
    // The child suspends again, nine levels down: more than a decision's path may hold.
    let deeper = arbor_core::process::NestedOutcome::Suspended(vec![child_decision(9)]);
    let e = s
        .approve(
            r.run_id,
            waiting.version,
            &[decision],
            RunOptions::default().with_nested(Arc::new(Resumer(deeper))),
        )
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Attribution path exceeds 8 entries");
    let (_, checkpoint) = approval::load(store.as_ref(), r.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(checkpoint.claimed_at_ms, None, "the failed resume let go");
    // So the next resume is not refused as "being resumed", and finishes the run.
    let done = s
        .resume(
            r.run_id,
            RunOptions::default().with_nested(Arc::new(Resumer(
                arbor_core::process::NestedOutcome::Completed("child wrote it".into()),
            ))),
        )
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(tool_results(s.messages()), ["child wrote it"]);
}

#[test]
fn approval_caps_are_checked_against_their_hard_caps() {
    let (write, mail) = effects();
    let build = |caps: approval::ApprovalCaps| {
        Agent::builder("worker")
            .provider(ScriptedProvider::new(Script::default()))
            .tool(write.clone())
            .tool(mail.clone())
            .approval_caps(caps)
            .build()
    };
    assert_eq!(approval::ApprovalCaps::HARD.max_pending, 128);
    assert_eq!(approval::ApprovalCaps::HARD.max_sticky, 256);
    let e = build(approval::ApprovalCaps {
        max_pending: 129,
        max_sticky: 64,
    })
    .unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::Validation);
    assert_eq!(
        e.to_string(),
        "max_pending_approvals must be a positive integer at most 128"
    );
    let e = build(approval::ApprovalCaps {
        max_pending: 32,
        max_sticky: 0,
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "max_sticky_decisions must be a positive integer at most 256"
    );
    let ok = build(approval::ApprovalCaps::HARD).unwrap();
    assert_eq!(ok.approval_caps(), approval::ApprovalCaps::HARD);
}

#[tokio::test]
async fn configured_caps_bound_a_turn_and_the_run_wide_decisions() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (write, mail) = effects();
    let capped = |turns: Vec<ScriptedTurn>| {
        Agent::builder("worker")
            .provider(ScriptedProvider::new(Script::new(turns)))
            .tool(write.clone())
            .tool(mail.clone())
            .interrupt_before_tool(true)
            .approval_caps(approval::ApprovalCaps {
                max_pending: 2,
                max_sticky: 1,
            })
            .build()
            .unwrap()
    };
    // Three calls in one turn against a cap of two: the run fails, nothing ran.
    let a = capped(vec![calls(&[
        ("write", "1"),
        ("write", "2"),
        ("mail", "3"),
    ])]);
    let mut s = a.session().store(store.clone()).create().await.unwrap();
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(
        r.error.as_deref(),
        Some("a turn may wait on at most 2 approvals (it asked for 3)")
    );
    // Two run-wide decisions against a cap of one: refused whole, nothing recorded.
    let a = capped(vec![
        calls(&[("write", "1"), ("mail", "2")]),
        ScriptedTurn::text("done"),
    ]);
    let mut s = a.session().store(store.clone()).create().await.unwrap();
    let r = s.run("go", RunOptions::default()).await.unwrap();
    let waiting = r.suspension.unwrap();
    let for_run =
        |i: usize| ApprovalDecision::new(waiting.pending[i].id.clone(), Verdict::AllowForRun);
    let e = s
        .approve(
            r.run_id,
            waiting.version,
            &[for_run(0), for_run(1)],
            RunOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "a run keeps at most 1 run-wide decisions");
    assert_eq!(
        e.limit().map(|l| (l.limit, l.maximum, l.observed)),
        Some((arbor_protocol::LimitKind::MaxStickyDecisions, 1, 2))
    );
    let still = approval::suspension(store.as_ref(), r.run_id)
        .await
        .unwrap();
    assert_eq!((still.version, still.pending.len()), (waiting.version, 2));
    assert_eq!(write.runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn what_children_wait_on_counts_against_the_roots_cap() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let child = |_: ()| SuspendedChild {
        run_id: arbor_protocol::RunId::new(),
        session_id: arbor_protocol::SessionId::new(),
    };
    // Each child waits on one decision; three children against a cap of two.
    let a = Agent::builder("lead")
        .provider(ScriptedProvider::new(Script::new([calls(&[
            ("delegate", "a"),
            ("delegate", "b"),
            ("delegate", "c"),
        ])])))
        .tool(child(()))
        .approval_caps(approval::ApprovalCaps {
            max_pending: 2,
            max_sticky: 64,
        })
        .build()
        .unwrap();
    let mut s = a.session().store(store.clone()).create().await.unwrap();
    // Nothing to resume: the run fails with the reason and nothing waits.
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(
        r.error.as_deref(),
        Some("a run may wait on at most 2 approvals (its tree asks for 3)")
    );
    let record = store.session(s.id()).await.unwrap().unwrap();
    assert_eq!(record.status, SessionStatus::Failed);
    assert!(
        approval::suspensions(store.as_ref(), s.id())
            .await
            .unwrap()
            .is_empty()
    );
}
