use std::sync::atomic::Ordering;

use arbor_core::permission::{DenyTools, policy_fn};
use arbor_core::{Decision, RunOptions};
use arbor_model::ScriptedTurn;
use arbor_protocol::{AgentEvent, Message, RunStatus, StopReason};
use serde_json::json;

use super::support::*;

#[tokio::test]
async fn a_denied_call_is_a_blocked_result_and_the_run_goes_on() {
    let probe = Probe::default();
    let calls = probe.calls.clone();
    let agent = scripted(vec![
        ScriptedTurn::tool_call("probe", json!({"ms": 0, "tag": "x"})),
        ScriptedTurn::text("ok without it"),
    ])
    .tool(probe)
    .policy(DenyTools::new(["probe"]));
    let mut s = session(agent).await;
    let mut sub = s.subscribe();
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Succeeded);
    assert_eq!(r.text, "ok without it");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let blocked = s
        .messages()
        .iter()
        .find_map(|m| match m {
            Message::Tool(r) => Some(r.clone()),
            _ => None,
        })
        .unwrap();
    assert!(blocked.is_error);
    assert_eq!(
        blocked.content,
        "permission denied: tool `probe` is denied by policy"
    );
    let events = drain(&mut sub);
    assert_eq!(
        find(&events, "tool_execution_blocked"),
        vec![&AgentEvent::ToolExecutionBlocked {
            turn: 1,
            call_id: "call_1_1".into(),
            name: "probe".into(),
            reason: "tool `probe` is denied by policy".into(),
        }]
    );
    assert!(find(&events, "tool_execution_started").is_empty());
}

#[tokio::test]
async fn policies_and_compose_in_order() {
    let agent = scripted(vec![
        ScriptedTurn::tool_call("echo", json!({"text": "x"})),
        ScriptedTurn::text("done"),
    ])
    .tool(arbor_core::builtin::Echo)
    .policy(policy_fn(|_| Decision::Allow))
    .policy(policy_fn(|req| Decision::Deny {
        reason: format!("second policy says no to {}", req.tool),
    }))
    .policy(policy_fn(|_| Decision::Deny {
        reason: "third never asked".into(),
    }));
    let mut s = session(agent).await;
    s.run("go", RunOptions::default()).await.unwrap();
    let content = s
        .messages()
        .iter()
        .find_map(|m| match m {
            Message::Tool(r) => Some(r.content.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(content, "permission denied: second policy says no to echo");
}

#[tokio::test]
async fn a_halting_policy_ends_the_run_denied() {
    let agent = scripted(vec![
        ScriptedTurn::tool_call("echo", json!({"text": "x"})),
        ScriptedTurn::text("never"),
    ])
    .tool(arbor_core::builtin::Echo)
    .policy(policy_fn(|_| Decision::Halt {
        reason: "host stopped this agent".into(),
    }));
    let mut s = session(agent).await;
    let mut sub = s.subscribe();
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Denied);
    assert_eq!(r.stop_reason, StopReason::HostPolicy);
    assert_eq!(r.error.as_deref(), Some("host stopped this agent"));
    let events = drain(&mut sub);
    let t = types(&events);
    assert_eq!(&t[t.len() - 2..], &["run_denied", "run_finished"]);
    assert_eq!(s.status(), arbor_protocol::SessionStatus::Denied);
}
