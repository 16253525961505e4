use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arbor_core::SecretRedactor;
use arbor_core::process::SupervisorProcess;
use arbor_core::supervisor::{
    AfterHook, BeforeContext, BeforeDecision, BeforeHook, ChildEntry, Completion, CompletionStatus,
    DelegationRequest, Lifetime, LimitsInput, Outcome, Ownership, PolicyInput, Supervisor,
    SupervisorBuilder, WaitOptions, WaitOutcome, factory_fn,
};
use arbor_core::{Agent, CoreErrorKind};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{RunStatus, SupervisorEnvelope, SupervisorEvent};
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

fn agent(turns: Vec<ScriptedTurn>) -> Agent {
    Agent::builder("child")
        .provider(ScriptedProvider::new(Script::new(turns)))
        .limits(arbor_protocol::RunLimits::HARD)
        .build()
        .unwrap()
}

fn answers(text: &str) -> Agent {
    agent(vec![ScriptedTurn::text(text).with_usage(10, 5)])
}

fn slow(ms: u64) -> Agent {
    agent(vec![
        ScriptedTurn::text("slow").with_delay(Duration::from_millis(ms)),
    ])
}

fn hangs() -> Agent {
    agent(vec![ScriptedTurn {
        hang: true,
        ..ScriptedTurn::default()
    }])
}

fn owner() -> Ownership {
    Ownership::user("tenant", "user")
}

fn builder() -> SupervisorBuilder {
    Supervisor::builder(owner())
}

fn drain(sub: &mut arbor_core::Subscription<SupervisorEnvelope>) -> Vec<SupervisorEvent> {
    let mut out = Vec::new();
    while let Some(e) = sub.try_recv() {
        out.push(e.event.clone());
    }
    out
}

fn types(events: &[SupervisorEvent]) -> Vec<&'static str> {
    events.iter().map(SupervisorEvent::type_name).collect()
}

#[test]
fn construction_is_validated_in_order() {
    let err = Supervisor::builder(Ownership {
        tenant_id: "t".into(),
        account_id: None,
        user_id: None,
    })
    .build()
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "tenant_id and non-empty account_id or user_id are required"
    );
    let err = Supervisor::builder(Ownership::user(" ", "u"))
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), CoreErrorKind::Validation);
    let err = builder().id("-bad").build().unwrap_err();
    assert_eq!(err.to_string(), "Supervisor id is invalid");
    let err = builder().build().unwrap_err();
    assert_eq!(err.to_string(), "At least one child is required");
    let err = builder()
        .child(ChildEntry::agent("bad id", answers("x")))
        .build()
        .unwrap_err();
    assert_eq!(err.to_string(), "Invalid child id: bad id");
    let err = builder()
        .child(ChildEntry::agent("a", answers("x")))
        .limits(LimitsInput {
            max_active_children: Some(33),
            ..LimitsInput::default()
        })
        .build()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "max_active_children must be a positive integer at most 32"
    );
    let sup = builder()
        .child(ChildEntry::agent("a", answers("x")))
        .child(ChildEntry::agent("b", answers("x")))
        .build()
        .unwrap();
    assert_eq!(sup.child_ids(), ["a", "b"]);
    assert_eq!(sup.worst_case_sessions(), 5);
}

#[tokio::test]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
async fn a_sync_delegation_reports_its_lifecycle_and_keeps_the_session() {
    let sup = builder()
        .child(ChildEntry::agent("research", answers("found it")))
        .build()
        .unwrap();
    let mut sub = sup.subscribe();
    let r = sup
        .delegate(DelegationRequest::new("research", "check sources"))
        .await
        .unwrap();
    assert_eq!(r.result.status, RunStatus::Succeeded);
    assert_eq!(r.result.text, "found it");
    assert_eq!(r.child_id, "research");
    assert!(r.delegation_id.starts_with("supervisor-"));
    let events = drain(&mut sub);
    assert_eq!(
        types(&events),
        vec![
            "delegation_admitted",
            "delegation_started",
            "delegation_finished"
        ]
    );
    match &events[0] {
        SupervisorEvent::DelegationAdmitted {
            session_id,
            name,
            model,
            ..
        } => {
            assert_eq!(*session_id, r.session_id);
            assert_eq!(*name, r.name);
            assert!(name.starts_with("subagent-check-sources-"), "{name}");
            assert_eq!(model, "scripted");
        }
        other => panic!("{other:?}"),
    }
    match &events[1] {
        SupervisorEvent::DelegationStarted {
            origin,
            resource_id,
            thread_id,
        } => {
            assert_eq!(origin.depth, 1);
            assert_eq!(
                *resource_id,
                format!("supervisor/{}/research", r.delegation_id)
            );
            assert_eq!(*thread_id, format!("{resource_id}/default"));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        events[2],
        SupervisorEvent::DelegationFinished {
            status: RunStatus::Succeeded,
            total_tokens: 15,
            ..
        }
    ));
    let record = sup.store().session(r.session_id).await.unwrap().unwrap();
    assert_eq!(record.own_usage.total_tokens, 15);
    // What the record keeps of the admission, key by key; the text a store writes (built
    // straight from the typed terms) reads back as the same JSON.
    let text = record.meta.to_json().unwrap();
    let meta = record.meta.to_value();
    let keys: Vec<&str> = meta
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "child_id",
            "delegation_id",
            "lifetime",
            "limits",
            "mode",
            "path",
            "policy",
            "resource_id",
            "scopes",
            "supervisor_id",
            "thinking",
            "thread_id"
        ]
    );
    assert_eq!(meta["child_id"], "research");
    assert_eq!(meta["delegation_id"], r.delegation_id.as_str());
    assert_eq!(meta["mode"], "sync");
    assert_eq!(meta["lifetime"], "task");
    assert_eq!(meta["path"], serde_json::json!(["research"]));
    assert_eq!(meta["supervisor_id"], "supervisor");
    assert_eq!(meta["scopes"], serde_json::Value::Null);
    assert_eq!(meta["limits"]["max_depth"], 4);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).unwrap(),
        meta
    );
    let row = &sup.summary()[0];
    assert_eq!(
        (row.attempts, row.failures, row.outcome),
        (1, 0, Outcome::Succeeded)
    );
    assert_eq!(sup.active_children(), 0);
}

#[tokio::test]
async fn pre_checks_refuse_before_anything_is_counted() {
    let sup = builder()
        .child(ChildEntry::agent("a", answers("x")))
        .limits(LimitsInput {
            max_message_bytes: Some(8),
            ..LimitsInput::default()
        })
        .build()
        .unwrap();
    let mut sub = sup.subscribe();
    let err = sup
        .delegate(DelegationRequest::new("ghost", "x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), CoreErrorKind::Denied);
    assert_eq!(err.to_string(), "Child is not allow-listed");
    let err = sup
        .delegate(DelegationRequest::new("a", "far too long"))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "Delegation input exceeds max bytes");
    let info = err.limit().unwrap();
    assert_eq!(
        (info.limit, info.maximum, info.observed),
        (arbor_protocol::LimitKind::MaxMessageBytes, 8, 12)
    );
    let mut req = DelegationRequest::new("a", "x");
    req.policy.lifetime = Some(Lifetime::Session);
    let err = sup.delegate_async(req).await.unwrap_err();
    assert_eq!(err.to_string(), "Child does not allow session lifetime");
    let mut req = DelegationRequest::new("a", "x");
    req.limits.max_steps = Some(65);
    let err = sup.delegate(req).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "max_steps must be a positive integer at most 64"
    );
    assert!(drain(&mut sub).is_empty(), "no events");
    assert_eq!(sup.summary()[0].attempts, 0, "no attempts");
    assert_eq!(sup.active_children(), 0);
}

#[tokio::test]
async fn parallel_delegations_never_exceed_max_active_children() {
    let sup = builder()
        .child(ChildEntry::agent("w", slow(50)))
        .limits(LimitsInput {
            max_active_children: Some(3),
            ..LimitsInput::default()
        })
        .build()
        .unwrap();
    let peak = Arc::new(AtomicU32::new(0));
    let watcher = {
        let (sup, peak) = (sup.clone(), peak.clone());
        tokio::spawn(async move {
            for _ in 0..200 {
                peak.fetch_max(sup.active_children(), Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let calls = (0..12).map(|i| {
        let sup = sup.clone();
        tokio::spawn(async move {
            sup.delegate(DelegationRequest::new("w", format!("job {i}")))
                .await
        })
    });
    let results = futures::future::join_all(calls).await;
    let (ok, refused): (Vec<_>, Vec<_>) = results
        .into_iter()
        .map(|r| r.unwrap())
        .partition(|r| r.is_ok());
    assert_eq!(ok.len(), 3);
    assert_eq!(refused.len(), 9);
    for r in refused {
        let e = r.unwrap_err();
        assert_eq!(e.to_string(), "Active child limit exceeded");
        let info = e.limit().unwrap();
        assert_eq!(
            (info.limit, info.maximum, info.observed),
            (arbor_protocol::LimitKind::MaxActiveChildren, 3, 4)
        );
    }
    watcher.await.unwrap();
    assert!(peak.load(Ordering::SeqCst) <= 3);
    assert_eq!(sup.active_children(), 0);
    assert_eq!(
        sup.summary()[0].attempts,
        3,
        "refused requests are not attempts"
    );
}

#[derive(Debug)]
struct Deny;

#[async_trait]
impl BeforeHook for Deny {
    async fn before(&self, ctx: &BeforeContext) -> BeforeDecision {
        BeforeDecision::Deny {
            reason: Some(format!("no {} today (canary)", ctx.child_id)),
        }
    }
}

#[derive(Debug, Default, Clone)]
struct Record(Arc<Mutex<Vec<Completion>>>);

#[async_trait]
impl AfterHook for Record {
    async fn after(&self, c: &Completion) -> Result<(), arbor_core::supervisor::HookError> {
        self.0.lock().unwrap().push(c.clone());
        Ok(())
    }
}

#[tokio::test]
async fn a_hook_rejection_releases_the_slot_and_reports_once() {
    let after = Record::default();
    let sup = builder()
        .child(ChildEntry::agent("a", answers("x")))
        .before(Deny)
        .after(after.clone())
        .redactor(SecretRedactor::new(["canary"]))
        .build()
        .unwrap();
    let mut sub = sup.subscribe();
    let err = sup
        .delegate(DelegationRequest::new("a", "x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), CoreErrorKind::Denied);
    assert_eq!(err.to_string(), "no a today ([REDACTED])");
    let events = drain(&mut sub);
    assert_eq!(
        types(&events),
        vec!["delegation_admitted", "delegation_rejected"]
    );
    let done = after.0.lock().unwrap().clone();
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].status, CompletionStatus::Rejected);
    let row = &sup.summary()[0];
    assert_eq!(
        (row.attempts, row.failures, row.outcome),
        (1, 0, Outcome::Rejected)
    );
    assert_eq!(sup.active_children(), 0);
}

#[derive(Debug)]
struct Narrow;

#[async_trait]
impl BeforeHook for Narrow {
    async fn before(&self, _: &BeforeContext) -> BeforeDecision {
        BeforeDecision::Modify {
            input: Some("replaced canary input".into()),
            limits: Some(LimitsInput {
                max_steps: Some(1),
                ..LimitsInput::default()
            }),
            permission: None,
        }
    }
}

#[tokio::test]
async fn a_hook_can_replace_input_and_lower_limits() {
    let looping = Agent::builder("child")
        .provider(ScriptedProvider::new(
            Script::new(vec![ScriptedTurn::tool_call(
                "echo",
                serde_json::json!({"text": "x"}),
            )])
            .repeat_last(true),
        ))
        .tool(arbor_core::builtin::Echo)
        .build()
        .unwrap();
    let sup = builder()
        .child(ChildEntry::agent("a", looping))
        .before(Narrow)
        .redactor(SecretRedactor::new(["canary"]))
        .build()
        .unwrap();
    let mut sub = sup.subscribe();
    let err = sup
        .delegate(DelegationRequest::new("a", "x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), CoreErrorKind::Limit);
    assert_eq!(err.to_string(), "Delegation run limit exceeded");
    let info = err.limit().unwrap();
    assert_eq!(
        (info.limit, info.maximum, info.observed),
        (arbor_protocol::LimitKind::MaxSteps, 1, 2)
    );
    let result = err.result().unwrap();
    // The child saw the redacted replacement input.
    let session = sup
        .store()
        .transcript(result.session_id, 0, None)
        .await
        .unwrap();
    let first_user = session
        .iter()
        .find_map(|e| match &e.kind {
            arbor_protocol::EntryKind::Message {
                message: arbor_protocol::Message::User { content },
            } => Some(content.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(first_user, "replaced [REDACTED] input");
    let events = drain(&mut sub);
    assert_eq!(
        types(&events),
        vec![
            "delegation_admitted",
            "delegation_started",
            "child_failed",
            "delegation_error"
        ]
    );
    match &events[2] {
        SupervisorEvent::ChildFailed { limit, status, .. } => {
            assert_eq!(*status, Some(RunStatus::Failed));
            assert_eq!(limit.unwrap().maximum, 1);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(sup.summary()[0].failures, 1);
}

#[tokio::test(start_paused = true)]
async fn a_timeout_is_a_failure_and_releases_the_slot() {
    let sup = builder()
        .child(ChildEntry::agent("a", hangs()))
        .limits(LimitsInput {
            timeout_ms: Some(500),
            ..LimitsInput::default()
        })
        .build()
        .unwrap();
    let mut sub = sup.subscribe();
    let start = tokio::time::Instant::now();
    let err = sup
        .delegate(DelegationRequest::new("a", "x"))
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_millis(500));
    assert_eq!(err.kind(), CoreErrorKind::Limit);
    assert!(err.to_string().contains("timeout"), "{err}");
    let events = drain(&mut sub);
    let t = types(&events);
    assert_eq!(&t[t.len() - 2..], &["child_failed", "delegation_error"]);
    assert_eq!(sup.active_children(), 0);
    assert_eq!(sup.summary()[0].outcome, Outcome::Failed);
}

#[tokio::test]
async fn a_panicking_factory_is_contained() {
    let sup = builder()
        .child(ChildEntry::new(
            "boom",
            factory_fn(|_ctx| async move {
                if true {
                    panic!("factory exploded");
                }
                Ok(answers("never"))
            }),
        ))
        .child(ChildEntry::agent("ok", answers("fine")))
        .build()
        .unwrap();
    let err = sup
        .delegate(DelegationRequest::new("boom", "x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), CoreErrorKind::Supervisor);
    assert_eq!(
        err.to_string(),
        "child \"boom\" factory panicked: factory exploded"
    );
    assert_eq!(sup.active_children(), 0);
    assert_eq!(sup.summary()[0].failures, 1);
    // The supervisor keeps working.
    let r = sup
        .delegate(DelegationRequest::new("ok", "x"))
        .await
        .unwrap();
    assert_eq!(r.result.text, "fine");
}

#[tokio::test]
async fn async_handles_wait_cancel_and_unknown_ids() {
    let sup = builder()
        .child(ChildEntry::agent("fast", answers("quick")))
        .child(ChildEntry::agent("stuck", hangs()))
        .build()
        .unwrap();
    let h = sup
        .delegate_async(DelegationRequest::new("fast", "x"))
        .await
        .unwrap();
    let first = sup
        .wait(&h.delegation_id, WaitOptions::default())
        .await
        .unwrap();
    let again = sup
        .wait(&h.delegation_id, WaitOptions::default())
        .await
        .unwrap();
    assert_eq!(first, again, "wait is idempotent");
    match first {
        WaitOutcome::Finished(r) => assert_eq!(r.result.text, "quick"),
        other => panic!("{other:?}"),
    }
    assert!(!sup.cancel(&h.delegation_id).unwrap(), "already terminal");

    let stuck = sup
        .delegate_async(DelegationRequest::new("stuck", "x"))
        .await
        .unwrap();
    let err = sup
        .wait(
            &stuck.delegation_id,
            WaitOptions {
                timeout: Some(Duration::from_millis(20)),
                cancel: None,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "Async delegation wait timeout exceeded");
    assert!(sup.cancel(&stuck.delegation_id).unwrap());
    let w = sup
        .wait(&stuck.delegation_id, WaitOptions::default())
        .await
        .unwrap();
    assert_eq!(
        w,
        WaitOutcome::Cancelled {
            delegation_id: stuck.delegation_id.clone()
        }
    );
    assert_eq!(sup.active_children(), 0);
    assert_eq!(sup.summary()[1].outcome, Outcome::Aborted);
    assert_eq!(sup.summary()[1].failures, 0, "a cancel is not a failure");

    for bad in ["nope", "supervisor-1"] {
        let e = sup.wait(bad, WaitOptions::default()).await.unwrap_err();
        assert_eq!(e.to_string(), "Unknown async delegation");
        assert_eq!(
            sup.cancel(bad).unwrap_err().to_string(),
            "Unknown async delegation"
        );
    }
    let other = builder()
        .child(ChildEntry::agent("fast", answers("quick")))
        .build()
        .unwrap();
    let foreign = other
        .wait(&h.delegation_id, WaitOptions::default())
        .await
        .unwrap_err();
    assert_eq!(foreign.to_string(), "Unknown async delegation");
}

#[tokio::test]
async fn session_lifetime_survives_the_caller_and_stops_on_cancel_or_session_end() {
    let session_token = CancellationToken::new();
    let sup = builder()
        .child(ChildEntry::agent("bg", hangs()).policy(PolicyInput {
            lifetime: Some(Lifetime::Session),
            ..PolicyInput::default()
        }))
        .child(ChildEntry::agent("task", hangs()))
        .session_token(session_token.clone())
        .build()
        .unwrap();
    let caller = CancellationToken::new();
    let mut req = DelegationRequest::new("bg", "watch");
    req.policy.lifetime = Some(Lifetime::Session);
    req.cancel = Some(caller.clone());
    let bg = sup.delegate_async(req.clone()).await.unwrap();
    let mut task_req = DelegationRequest::new("task", "x");
    task_req.cancel = Some(caller.clone());
    let task = sup.delegate_async(task_req).await.unwrap();

    // A sync delegate refuses session lifetime.
    let err = sup.delegate(req.clone()).await.unwrap_err();
    assert_eq!(err.kind(), CoreErrorKind::Validation);

    caller.cancel();
    let t = sup.wait(&task.delegation_id, WaitOptions::default()).await;
    assert!(t.is_err(), "the task child ends with its caller");
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(sup.running_handles(), 1, "the session child lives on");
    assert_eq!(sup.active_children(), 1);

    assert!(sup.cancel(&bg.delegation_id).unwrap());
    let w = sup
        .wait(&bg.delegation_id, WaitOptions::default())
        .await
        .unwrap();
    assert!(matches!(w, WaitOutcome::Cancelled { .. }));
    assert_eq!(sup.active_children(), 0);

    // The supervisor's session token ends session children too.
    let bg2 = sup.delegate_async(req).await.unwrap();
    session_token.cancel();
    let e = sup
        .wait(&bg2.delegation_id, WaitOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Supervisor session has ended");
    assert_eq!(e.kind(), CoreErrorKind::Closed);
    sup.shutdown().await;
    assert_eq!(sup.active_children(), 0);
    // Nothing is admitted after the session ended.
    let err = sup
        .delegate(DelegationRequest::new("task", "late"))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "Supervisor session has ended");
    assert_eq!(err.kind(), CoreErrorKind::Closed);
}

#[tokio::test]
async fn budget_share_scales_the_child_run_limits() {
    let looping = Agent::builder("child")
        .provider(ScriptedProvider::new(
            Script::new(vec![ScriptedTurn::tool_call(
                "echo",
                serde_json::json!({"text": "x"}),
            )])
            .repeat_last(true),
        ))
        .tool(arbor_core::builtin::Echo)
        .limits(arbor_protocol::RunLimits::HARD)
        .build()
        .unwrap();
    let sup = builder()
        .child(ChildEntry::agent("a", looping).policy(PolicyInput {
            budget_share: Some(0.5),
            ..PolicyInput::default()
        }))
        .build()
        .unwrap();
    let mut req = DelegationRequest::new("a", "x");
    req.policy.budget_share = Some(0.25); // the lower share wins: 8 × 0.25 = 2 steps
    let err = sup.delegate(req).await.unwrap_err();
    let info = err.limit().unwrap();
    assert_eq!(
        (info.limit, info.maximum),
        (arbor_protocol::LimitKind::MaxSteps, 2)
    );
    let err = sup
        .delegate(DelegationRequest::new("a", "x"))
        .await
        .unwrap_err();
    assert_eq!(err.limit().unwrap().maximum, 4, "host share alone: 8 × 0.5");
}

#[tokio::test]
async fn nested_delegation_checks_cycles_and_depth_and_tracks_failure_radius() {
    // "outer" delegates to "inner" from its factory context; "inner" tries "outer" again.
    let sup = builder()
        .child(ChildEntry::new(
            "outer",
            factory_fn(|ctx| async move {
                let nested = ctx
                    .delegator
                    .delegate(DelegationRequest::new("inner", "go deeper"))
                    .await;
                let text = match nested {
                    Ok(r) => r.result.text,
                    Err(e) => format!("inner failed: {e}"),
                };
                Ok(answers(&text))
            }),
        ))
        .child(ChildEntry::new(
            "inner",
            factory_fn(|ctx| async move {
                let again = ctx
                    .delegator
                    .delegate(DelegationRequest::new("outer", "loop"))
                    .await
                    .unwrap_err();
                assert_eq!(again.to_string(), "Delegation cycle detected");
                assert_eq!(ctx.depth, 2);
                assert_eq!(&ctx.path[..], ["outer".to_owned(), "inner".to_owned()]);
                Ok(answers("inner done"))
            }),
        ))
        .build()
        .unwrap();
    let r = sup
        .delegate(DelegationRequest::new("outer", "start"))
        .await
        .unwrap();
    assert_eq!(r.result.text, "inner done");

    let shallow = builder()
        .child(ChildEntry::new(
            "outer",
            factory_fn(|ctx| async move {
                let e = ctx
                    .delegator
                    .delegate(DelegationRequest::new("inner", "x"))
                    .await
                    .unwrap_err();
                Ok(answers(&e.to_string()))
            }),
        ))
        .child(ChildEntry::agent("inner", answers("x")))
        .limits(LimitsInput {
            max_depth: Some(1),
            ..LimitsInput::default()
        })
        .build()
        .unwrap();
    let r = shallow
        .delegate(DelegationRequest::new("outer", "x"))
        .await
        .unwrap();
    assert_eq!(r.result.text, "Delegation depth exceeded");
}

#[tokio::test]
async fn failure_radius_counts_live_task_descendants_of_the_failed_delegation() {
    // "parent" starts two async "leaf" children that hang, then its own run fails.
    let sup = builder()
        .child(ChildEntry::new(
            "parent",
            factory_fn(|ctx| async move {
                for _ in 0..2 {
                    ctx.delegator
                        .delegate_async(DelegationRequest::new("leaf", "hang"))
                        .await
                        .unwrap();
                }
                Ok(agent(vec![ScriptedTurn {
                    fail: Some("provider down".into()),
                    ..ScriptedTurn::default()
                }]))
            }),
        ))
        .child(ChildEntry::agent("leaf", hangs()))
        .build()
        .unwrap();
    let err = sup
        .delegate(DelegationRequest::new("parent", "x"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), CoreErrorKind::Run);
    assert_eq!(err.to_string(), "provider error: provider down");
    let rows = sup.summary();
    assert_eq!(rows[0].failures, 1);
    assert_eq!(rows[0].failure_radius, 2);
    sup.shutdown().await;
    assert_eq!(sup.active_children(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_sync_delegation_still_reports_its_terminal_once() {
    let after = Record::default();
    let sup = builder()
        .child(ChildEntry::agent("a", hangs()))
        .after(after.clone())
        .build()
        .unwrap();
    let mut sub = sup.subscribe();
    let dropped = tokio::time::timeout(
        Duration::from_millis(100),
        sup.delegate(DelegationRequest::new("a", "x")),
    )
    .await;
    assert!(dropped.is_err(), "the caller gave up");
    sup.shutdown().await;
    let t = types(&drain(&mut sub));
    assert_eq!(t.last(), Some(&"delegation_error"));
    assert!(
        !t.contains(&"child_failed"),
        "a host drop is a cancel, not a failure"
    );
    assert_eq!(after.0.lock().unwrap().len(), 1);
    assert_eq!(sup.summary()[0].outcome, Outcome::Aborted);
    assert_eq!(sup.active_children(), 0);
}

#[tokio::test]
async fn the_first_subscriber_gets_earlier_events_and_shutdown_ends_every_stream() {
    let sup = builder()
        .child(ChildEntry::agent("a", answers("x")))
        .child(ChildEntry::agent("h", hangs()))
        .build()
        .unwrap();
    sup.delegate(DelegationRequest::new("a", "x"))
        .await
        .unwrap();
    sup.delegate_async(DelegationRequest::new("h", "x"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let mut first = sup.subscribe();
    let mut second = sup.subscribe();
    let shutdown = tokio::spawn({
        let sup = sup.clone();
        async move { sup.shutdown().await }
    });
    let mut seen = Vec::new();
    while let Some(e) = first.recv().await {
        seen.push(e.event.type_name());
    }
    assert_eq!(
        seen,
        [
            "delegation_admitted",
            "delegation_started",
            "delegation_finished",
            "delegation_admitted",
            "delegation_started",
            "delegation_error",
        ]
    );
    let mut late = Vec::new();
    while let Some(e) = second.recv().await {
        late.push(e.event.type_name());
    }
    assert_eq!(late, ["delegation_error"]);
    shutdown.await.unwrap();
    assert!(sup.subscribe().recv().await.is_none());
}

#[tokio::test]
async fn a_cancelled_handle_reports_why_and_wait_says_cancelled() {
    let sup = builder()
        .child(ChildEntry::agent("h", hangs()))
        .build()
        .unwrap();
    let mut sub = sup.subscribe();
    let h = sup
        .delegate_async(DelegationRequest::new("h", "x"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(sup.cancel(&h.delegation_id).unwrap());
    let w = sup
        .wait(&h.delegation_id, WaitOptions::default())
        .await
        .unwrap();
    assert_eq!(
        w,
        WaitOutcome::Cancelled {
            delegation_id: h.delegation_id.clone()
        }
    );
    assert!(!sup.cancel(&h.delegation_id).unwrap(), "already over");
    let errors: Vec<String> = drain(&mut sub)
        .into_iter()
        .filter_map(|e| match e {
            SupervisorEvent::DelegationError { error, .. } => Some(error),
            SupervisorEvent::ChildFailed { .. } => panic!("a cancel is not a failure"),
            _ => None,
        })
        .collect();
    assert_eq!(errors, ["Async delegation cancelled"]);
    assert_eq!(sup.summary()[0].outcome, Outcome::Aborted);
    assert_eq!(sup.summary()[0].failures, 0);
}

#[tokio::test]
async fn an_erased_factory_must_produce_an_agent() {
    use arbor_core::supervisor::{Product, erased_factory};
    let sup = builder()
        .child(ChildEntry::new(
            "text",
            erased_factory(
                |_ctx| async move { Ok(Some(Product::new("an agent, honest".to_owned()))) },
            ),
        ))
        .child(ChildEntry::new(
            "nothing",
            erased_factory(|_ctx| async move { Ok(None) }),
        ))
        .child(ChildEntry::new(
            "session",
            erased_factory(|_ctx| async move {
                let session = answers("x").session().create().await?;
                Ok(Some(Product::new(session)))
            }),
        ))
        .child(ChildEntry::new(
            "real",
            erased_factory(|_ctx| async move { Ok(Some(Product::new(answers("real one")))) }),
        ))
        .build()
        .unwrap();
    let mut sub = sup.subscribe();
    for (child, got) in [
        ("text", "String"),
        ("nothing", "None"),
        ("session", "Session"),
    ] {
        let e = sup
            .delegate(DelegationRequest::new(child, "x"))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), CoreErrorKind::Supervisor);
        assert_eq!(
            e.to_string(),
            format!("child \"{child}\" factory must return an Agent, got {got}")
        );
    }
    assert_eq!(sup.active_children(), 0);
    let r = sup
        .delegate(DelegationRequest::new("real", "x"))
        .await
        .unwrap();
    assert_eq!(r.result.text, "real one");
    let events = drain(&mut sub);
    assert_eq!(
        types(&events[..4]),
        [
            "delegation_admitted",
            "delegation_started",
            "child_failed",
            "delegation_error"
        ]
    );
}
