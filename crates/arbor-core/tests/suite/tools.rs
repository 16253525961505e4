use std::sync::atomic::Ordering;

use arbor_core::{RunOptions, Tool, ToolContext, ToolError};
use arbor_model::{ScriptedToolCall, ScriptedTurn};
use arbor_protocol::{AgentEvent, Message, RunStatus, StopReason};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::support::*;

fn calls(name: &str, n: usize, ms: u64) -> ScriptedTurn {
    ScriptedTurn {
        tool_calls: (0..n)
            .map(|i| ScriptedToolCall {
                id: None,
                name: name.into(),
                arguments: json!({"ms": ms, "tag": format!("r{i}")}),
            })
            .collect(),
        ..ScriptedTurn::default()
    }
}

fn tool_results(messages: &[Message]) -> Vec<(String, String, bool)> {
    messages
        .iter()
        .filter_map(|m| match m {
            Message::Tool(r) => Some((r.call_id.clone(), r.content.clone(), r.is_error)),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn non_exclusive_calls_run_concurrently_up_to_the_limit_in_call_order() {
    let probe = Probe::default();
    let peak = probe.peak.clone();
    let agent = scripted(vec![calls("probe", 7, 100), ScriptedTurn::text("done")])
        .tool(probe)
        .tool_concurrency(3);
    let mut s = session(agent).await;
    let start = tokio::time::Instant::now();
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Succeeded);
    assert_eq!(peak.load(Ordering::SeqCst), 3);
    // 7 calls of 100 ms, 3 at a time: 3 waves.
    assert_eq!(start.elapsed().as_millis(), 300);
    let results = tool_results(s.messages());
    let tags: Vec<_> = results.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(tags, vec!["r0", "r1", "r2", "r3", "r4", "r5", "r6"]);
}

#[tokio::test(start_paused = true)]
async fn an_exclusive_call_serializes_its_turn() {
    let probe = Probe::default();
    let exclusive = Probe {
        exclusive: true,
        ..Probe::default()
    };
    let (peak, xpeak) = (probe.peak.clone(), exclusive.peak.clone());
    let mut turn = calls("probe", 3, 100);
    turn.tool_calls.push(ScriptedToolCall {
        id: None,
        name: "probe_exclusive".into(),
        arguments: json!({"ms": 100, "tag": "x"}),
    });
    let agent = scripted(vec![turn, ScriptedTurn::text("done")])
        .tool(probe)
        .tool(exclusive)
        .tool_concurrency(8);
    let mut s = session(agent).await;
    let start = tokio::time::Instant::now();
    s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(peak.load(Ordering::SeqCst), 1);
    assert_eq!(xpeak.load(Ordering::SeqCst), 1);
    assert_eq!(start.elapsed().as_millis(), 400);
}

#[tokio::test]
async fn malformed_arguments_are_a_tool_error_the_model_sees() {
    let agent = scripted(vec![
        ScriptedTurn::tool_call("echo", json!({"txt": 1})),
        ScriptedTurn::tool_call("echo", json!("not an object")),
        ScriptedTurn::tool_call("nope", json!({})),
        ScriptedTurn::text("recovered"),
    ])
    .tool(arbor_core::builtin::Echo);
    let mut s = session(agent).await;
    let mut sub = s.subscribe();
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Succeeded);
    assert_eq!(r.text, "recovered");
    let results = tool_results(s.messages());
    assert_eq!(results.len(), 3);
    assert!(results.iter().all(|r| r.2), "all three are errors");
    assert!(
        results[0]
            .1
            .starts_with("invalid arguments for `echo`: unknown field `txt`"),
        "{}",
        results[0].1
    );
    assert!(
        results[1]
            .1
            .starts_with("invalid arguments for `echo`: invalid type"),
        "{}",
        results[1].1
    );
    assert_eq!(results[2].1, "unknown tool `nope`; available: echo");
    let events = drain(&mut sub);
    assert_eq!(find(&events, "tool_execution_error").len(), 3);
    // Invalid arguments never reach the tool.
    assert!(find(&events, "tool_execution_started").len() == 2);
}

#[derive(Debug, Clone, Copy)]
struct Boom {
    fatal: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct Empty {}

#[async_trait]
impl Tool for Boom {
    type Args = Empty;
    type Output = String;

    fn name(&self) -> &str {
        "boom"
    }

    fn description(&self) -> &str {
        "fails"
    }

    async fn call(&self, _: Empty, _: ToolContext) -> Result<String, ToolError> {
        if self.fatal {
            return Err(ToolError::Fatal("disk on fire".into()));
        }
        panic!("tool blew up");
    }
}

#[tokio::test]
async fn a_panicking_tool_is_contained_and_fails_the_run() {
    let agent = scripted(vec![
        ScriptedTurn::tool_call("boom", json!({})),
        ScriptedTurn::text("never"),
    ])
    .tool(Boom { fatal: false });
    let mut s = session(agent).await;
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(r.stop_reason, StopReason::ToolError);
    assert_eq!(
        r.error.as_deref(),
        Some("tool `boom` panicked: tool blew up")
    );
    // The session is still usable.
    assert_eq!(s.status(), arbor_protocol::SessionStatus::Failed);
}

#[tokio::test]
async fn a_fatal_tool_error_fails_the_run() {
    let agent = scripted(vec![
        ScriptedTurn::tool_call("boom", json!({})),
        ScriptedTurn::text("never"),
    ])
    .tool(Boom { fatal: true });
    let mut s = session(agent).await;
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.stop_reason, StopReason::ToolError);
    assert_eq!(r.error.as_deref(), Some("tool `boom` failed: disk on fire"));
}

#[test]
fn tool_schemas_come_from_the_argument_type() {
    let agent = scripted(vec![])
        .tool(arbor_core::builtin::Echo)
        .build()
        .unwrap();
    let spec = &agent.tools().specs()[0];
    assert_eq!(spec.name, "echo");
    let schema = &spec.parameters;
    assert_eq!(schema["type"], "object");
    assert_eq!(schema["properties"]["text"]["type"], "string");
    assert_eq!(schema["required"], json!(["text"]));
    assert_eq!(schema["additionalProperties"], json!(false));
    assert!(schema.get("$schema").is_none());
}

#[test]
fn duplicate_tool_names_are_refused() {
    let err = scripted(vec![])
        .tool(arbor_core::builtin::Echo)
        .tool(arbor_core::builtin::Echo)
        .build()
        .unwrap_err();
    assert_eq!(err.to_string(), "duplicate tool name \"echo\"");
}

#[tokio::test]
async fn provider_errors_fail_the_run_with_the_reason() {
    let agent = scripted(vec![ScriptedTurn {
        fail: Some("upstream overloaded".into()),
        ..ScriptedTurn::default()
    }]);
    let mut s = session(agent).await;
    let mut sub = s.subscribe();
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(r.stop_reason, StopReason::ProviderError);
    assert_eq!(
        r.error.as_deref(),
        Some("provider error: upstream overloaded")
    );
    let events = drain(&mut sub);
    assert!(matches!(
        events.last().unwrap().event,
        AgentEvent::RunFinished {
            status: RunStatus::Failed,
            ..
        }
    ));
}
