use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arbor_core::{RunOptions, Tool, ToolContext, ToolError};
use arbor_model::ScriptedTurn;
use arbor_protocol::{AgentEvent, Message, RunStatus, StopReason};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::support::*;

/// A tool that never finishes and ignores its cancellation token; it records being dropped.
#[derive(Debug, Clone, Default)]
struct Stuck {
    started: Arc<AtomicBool>,
    dropped: Arc<AtomicBool>,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct NoArgs {}

struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[async_trait]
impl Tool for Stuck {
    type Args = NoArgs;
    type Output = String;

    fn name(&self) -> &str {
        "stuck"
    }

    fn description(&self) -> &str {
        "never returns"
    }

    async fn call(&self, _args: NoArgs, _ctx: ToolContext) -> Result<String, ToolError> {
        let _flag = DropFlag(self.dropped.clone());
        self.started.store(true, Ordering::SeqCst);
        futures::future::pending::<()>().await;
        Ok(String::new())
    }
}

#[tokio::test(start_paused = true)]
async fn cancel_mid_provider_call_aborts_promptly() {
    let agent = scripted(vec![ScriptedTurn {
        hang: true,
        ..ScriptedTurn::default()
    }]);
    let mut s = session(agent).await;
    let mut sub = s.subscribe();
    let token = CancellationToken::new();
    let canceller = {
        let token = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            token.cancel();
        })
    };
    let start = tokio::time::Instant::now();
    let r = s
        .run("go", RunOptions::default().with_cancel(token))
        .await
        .unwrap();
    canceller.await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(50));
    assert_eq!(r.status, RunStatus::Aborted);
    assert_eq!(r.stop_reason, StopReason::Cancelled);
    assert_eq!(r.breach, None);
    let events = drain(&mut sub);
    assert_eq!(
        types(&events),
        vec![
            "run_started",
            "turn_started",
            "provider_turn_started",
            "run_finished"
        ]
    );
    assert_eq!(s.status(), arbor_protocol::SessionStatus::Aborted);
}

#[tokio::test(start_paused = true)]
async fn cancel_mid_tool_drops_the_tool_and_closes_the_call() {
    let stuck = Stuck::default();
    let (started, dropped) = (stuck.started.clone(), stuck.dropped.clone());
    let agent = scripted(vec![
        ScriptedTurn::tool_call("stuck", json!({})),
        ScriptedTurn::text("never"),
    ])
    .tool(stuck);
    let mut s = session(agent).await;
    let token = CancellationToken::new();
    let canceller = {
        let (token, started) = (token.clone(), started.clone());
        tokio::spawn(async move {
            while !started.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            token.cancel();
        })
    };
    let r = s
        .run("go", RunOptions::default().with_cancel(token))
        .await
        .unwrap();
    canceller.await.unwrap();
    assert_eq!(r.status, RunStatus::Aborted);
    assert!(
        dropped.load(Ordering::SeqCst),
        "the tool's future must be dropped"
    );
    let last = s.messages().last().unwrap();
    match last {
        Message::Tool(result) => {
            assert!(result.is_error);
            assert_eq!(result.content, "not run: the run stopped (cancelled)");
        }
        other => panic!("expected a closing tool result, got {other:?}"),
    }
    // The session can run again after the abort: the transcript is a valid conversation.
    let r = s.run("try again", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Succeeded);
    assert_eq!(r.text, "never");
}

#[tokio::test]
async fn a_token_cancelled_before_the_run_aborts_it_without_a_turn() {
    let mut s = session(scripted(vec![ScriptedTurn::text("hi")])).await;
    let token = CancellationToken::new();
    token.cancel();
    let mut sub = s.subscribe();
    let r = s
        .run("go", RunOptions::default().with_cancel(token))
        .await
        .unwrap();
    assert_eq!(r.status, RunStatus::Aborted);
    assert_eq!(r.turns, 0);
    let events = drain(&mut sub);
    assert!(matches!(
        events.last().unwrap().event,
        AgentEvent::RunFinished {
            status: RunStatus::Aborted,
            ..
        }
    ));
}

#[tokio::test(start_paused = true)]
async fn the_tool_context_token_fires_on_cancel() {
    // `sleep` watches its token: cancelling the run ends it cooperatively too.
    let agent = scripted(vec![
        ScriptedTurn::tool_call("sleep", json!({"ms": 100_000})),
        ScriptedTurn::text("never"),
    ])
    .tool(arbor_core::builtin::Sleep);
    let mut s = session(agent).await;
    let token = CancellationToken::new();
    let t2 = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        t2.cancel();
    });
    let start = tokio::time::Instant::now();
    let r = s
        .run("go", RunOptions::default().with_cancel(token))
        .await
        .unwrap();
    assert_eq!(r.status, RunStatus::Aborted);
    assert!(start.elapsed() < Duration::from_secs(1));
}
