use std::sync::atomic::Ordering;
use std::time::Duration;

use arbor_core::{CoreErrorKind, RunOptions};
use arbor_model::ScriptedTurn;
use arbor_protocol::{
    AgentEvent, LimitKind, Message, RunLimitBreach, RunLimits, RunStatus, StopReason,
};
use serde_json::json;

use super::support::*;

fn echo_turn() -> ScriptedTurn {
    ScriptedTurn::tool_call("echo", json!({"text": "again"})).with_usage(10, 5)
}

#[tokio::test]
async fn max_steps_fires_with_its_figures() {
    let agent = looping(echo_turn())
        .tool(arbor_core::builtin::Echo)
        .limits(RunLimits {
            max_steps: 3,
            ..RunLimits::DEFAULT
        });
    let mut s = session(agent).await;
    let mut sub = s.subscribe();
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(r.stop_reason, StopReason::TurnLimit);
    let breach = RunLimitBreach {
        limit: LimitKind::MaxSteps,
        maximum: 3,
        observed: 4,
    };
    assert_eq!(r.breach, Some(breach));
    assert_eq!(r.turns, 3);
    assert_eq!(r.tool_calls, 3);
    assert_eq!(
        r.error.as_deref(),
        Some("run limit max_steps exceeded (maximum 3, observed 4)")
    );
    let events = drain(&mut sub);
    let t = types(&events);
    assert_eq!(&t[t.len() - 2..], &["run_limit_exceeded", "run_finished"]);
    assert_eq!(
        find(&events, "run_limit_exceeded"),
        vec![&AgentEvent::RunLimitExceeded { breach }]
    );
}

#[tokio::test]
async fn max_tool_calls_is_checked_before_any_call_of_the_turn_runs() {
    let probe = Probe::default();
    let calls = probe.calls.clone();
    let turn = ScriptedTurn {
        tool_calls: (0..3)
            .map(|i| arbor_model::ScriptedToolCall {
                id: None,
                name: "probe".into(),
                arguments: json!({"ms": 0, "tag": format!("t{i}")}),
            })
            .collect(),
        ..ScriptedTurn::default()
    };
    let agent = scripted(vec![turn, ScriptedTurn::text("never")])
        .tool(probe)
        .limits(RunLimits {
            max_tool_calls: 2,
            ..RunLimits::DEFAULT
        });
    let mut s = session(agent).await;
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(r.stop_reason, StopReason::ToolCallLimit);
    assert_eq!(
        r.breach,
        Some(RunLimitBreach {
            limit: LimitKind::MaxToolCalls,
            maximum: 2,
            observed: 3,
        })
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0, "no call may run");
    // Every call still has a result, so the transcript stays a valid conversation.
    let results: Vec<_> = s
        .messages()
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 3);
    assert!(
        results
            .iter()
            .all(|r| r.is_error && r.content.contains("tool_call_limit"))
    );
}

#[tokio::test]
async fn max_tokens_fires_after_the_turn_that_crossed_it() {
    let agent = looping(ScriptedTurn::tool_call("echo", json!({"text": "x"})).with_usage(500, 100))
        .tool(arbor_core::builtin::Echo)
        .limits(RunLimits {
            max_tokens: 1000,
            ..RunLimits::DEFAULT
        });
    let mut s = session(agent).await;
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.stop_reason, StopReason::TokenLimit);
    // 600 after turn 1, 1200 after turn 2: overshoot by at most one turn.
    assert_eq!(
        r.breach,
        Some(RunLimitBreach {
            limit: LimitKind::MaxTokens,
            maximum: 1000,
            observed: 1200,
        })
    );
    assert_eq!(r.turns, 2);
    assert_eq!(r.usage.total_tokens, 1200);
    assert_eq!(s.usage().total_tokens, 1200);
}

#[tokio::test(start_paused = true)]
async fn timeout_fires_during_a_slow_provider_call() {
    let agent = scripted(vec![
        ScriptedTurn::text("late").with_delay(Duration::from_secs(120)),
    ])
    .limits(RunLimits {
        timeout_ms: 1_000,
        ..RunLimits::DEFAULT
    });
    let mut s = session(agent).await;
    let start = tokio::time::Instant::now();
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(r.stop_reason, StopReason::Timeout);
    let breach = r.breach.unwrap();
    assert_eq!(breach.limit, LimitKind::TimeoutMs);
    assert_eq!(breach.maximum, 1_000);
    assert_eq!(breach.observed, 1_000);
    assert_eq!(start.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn timeout_fires_during_a_slow_tool() {
    let agent = scripted(vec![
        ScriptedTurn::tool_call("sleep", json!({"ms": 500_000})),
        ScriptedTurn::text("never"),
    ])
    .tool(arbor_core::builtin::Sleep)
    .limits(RunLimits {
        timeout_ms: 2_000,
        ..RunLimits::DEFAULT
    });
    let mut s = session(agent).await;
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.stop_reason, StopReason::Timeout);
    assert_eq!(r.breach.unwrap().observed, 2_000);
}

#[tokio::test]
async fn run_options_narrow_and_never_widen() {
    let agent = looping(echo_turn())
        .tool(arbor_core::builtin::Echo)
        .limits(RunLimits {
            max_steps: 4,
            ..RunLimits::DEFAULT
        });
    let mut s = session(agent).await;
    let narrower = RunOptions::default().with_limits(RunLimits {
        max_steps: 2,
        ..RunLimits::HARD
    });
    let r = s.run("go", narrower).await.unwrap();
    assert_eq!(r.breach.unwrap().maximum, 2);
    let wider = RunOptions::default().with_limits(RunLimits::HARD);
    let r = s.run("again", wider).await.unwrap();
    assert_eq!(r.breach.unwrap().maximum, 4);
}

#[test]
fn limits_over_the_hard_cap_are_a_validation_error() {
    let err = scripted(vec![])
        .limits(RunLimits {
            max_steps: 65,
            ..RunLimits::DEFAULT
        })
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), CoreErrorKind::Validation);
    assert_eq!(
        err.to_string(),
        "max_steps must be a positive integer at most 64"
    );
    let err = scripted(vec![]).tool_concurrency(0).build().unwrap_err();
    assert_eq!(
        err.to_string(),
        "tool_concurrency must be a positive integer at most 64"
    );
    let err = arbor_core::Agent::builder("bad name").build().unwrap_err();
    assert!(err.to_string().starts_with("invalid agent name"), "{err}");
    let err = arbor_core::Agent::builder("x").build().unwrap_err();
    assert_eq!(err.to_string(), "agent \"x\" has no provider");
}
