//! Stopping a hosted child's run keeps the child (`Supervisor::stop`), where cancelling it
//! releases it (`revoked`): its session stays, `aborted`, and a message to it starts its
//! next run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arbor_core::supervisor::{
    AsyncHandle, ChildEntry, DelegationRequest, Ownership, Sender, Supervisor, WaitOutcome,
};
use arbor_core::{Agent, Tool, ToolContext, ToolError};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{EntryKind, RunStatus, SessionStatus};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

/// A tool that works until its call is cancelled; says when it started.
#[derive(Debug, Clone, Default)]
struct Working(Arc<AtomicBool>);

#[derive(Debug, Deserialize, JsonSchema)]
struct NoArgs {}

#[async_trait]
impl Tool for Working {
    type Args = NoArgs;
    type Output = String;

    fn name(&self) -> &str {
        "work"
    }

    fn description(&self) -> &str {
        "works until stopped"
    }

    async fn call(&self, _args: NoArgs, ctx: ToolContext) -> Result<String, ToolError> {
        self.0.store(true, Ordering::SeqCst);
        ctx.cancel.cancelled().await;
        Err(ToolError::ToModel("stopped".to_owned()))
    }
}

/// A child whose first run works until it is stopped (a tool that waits), and whose next
/// run answers at once.
fn slow_then_quick() -> (Supervisor, Arc<AtomicBool>) {
    let working = Working::default();
    let started = working.0.clone();
    let child = Agent::builder("worker")
        .provider(ScriptedProvider::new(Script::new([
            ScriptedTurn::tool_call("work", serde_json::json!({})),
            ScriptedTurn::text("again"),
        ])))
        .tool(working)
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .child(ChildEntry::agent("worker", child))
        .build()
        .unwrap();
    (sup, started)
}

/// Stops `handle`'s delegation once its child's run is in flight (its tool works).
async fn stop_when_running(
    sup: &Supervisor,
    started: &AtomicBool,
    handle: &AsyncHandle,
    reason: Option<&str>,
) {
    for _ in 0..400 {
        if started.load(Ordering::SeqCst) {
            assert!(sup.stop(&handle.delegation_id, reason).unwrap());
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("its run never started");
}

#[tokio::test]
async fn a_stopped_child_stays_aborted_with_its_transcript_and_runs_again_on_a_message() {
    let (sup, started) = slow_then_quick();
    // A hosted child: under a root session, as the service's host calls start one.
    let root = Agent::builder("lead")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            "ok",
        )])))
        .build()
        .unwrap();
    let session = sup.root_session(&root, |b| b).await.unwrap();
    let handle = sup
        .delegate_async(DelegationRequest::new("worker", "work slowly").parent(session.as_ref()))
        .await
        .unwrap();
    stop_when_running(&sup, &started, &handle, Some("the user pressed stop")).await;
    let outcome = sup
        .wait(&handle.delegation_id, Default::default())
        .await
        .unwrap();
    assert!(
        matches!(outcome, WaitOutcome::Cancelled { .. }),
        "{outcome:?}"
    );

    // Kept: no tombstone, its run aborted, the reason in its record of the run.
    let store = sup.store().clone();
    let record = store.session(handle.session_id).await.unwrap().unwrap();
    assert_eq!(record.tombstone, None);
    assert_eq!(record.status, SessionStatus::Aborted);
    let finished: Vec<_> = store
        .transcript(handle.session_id, 0, None)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EntryKind::RunFinished { status, .. } => Some(status),
            _ => None,
        })
        .collect();
    assert_eq!(finished, [RunStatus::Aborted]);

    // A message starts its next run, which answers.
    sup.send_message(Sender::Host, handle.session_id, "go on")
        .await
        .unwrap();
    let mut statuses = Vec::new();
    for _ in 0..400 {
        statuses = store
            .transcript(handle.session_id, 0, None)
            .await
            .unwrap()
            .into_iter()
            .filter_map(|e| match e.kind {
                EntryKind::RunFinished { status, .. } => Some(status),
                _ => None,
            })
            .collect();
        if statuses.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(statuses, [RunStatus::Aborted, RunStatus::Succeeded]);
    let record = store.session(handle.session_id).await.unwrap().unwrap();
    assert_eq!(
        (record.status, record.tombstone),
        (SessionStatus::Succeeded, None)
    );
}

#[tokio::test]
async fn stop_says_false_once_the_run_is_over_and_refuses_an_unknown_delegation() {
    let (sup, started) = slow_then_quick();
    let handle = sup
        .delegate_async(DelegationRequest::new("worker", "work slowly"))
        .await
        .unwrap();
    stop_when_running(&sup, &started, &handle, None).await;
    sup.wait(&handle.delegation_id, Default::default())
        .await
        .unwrap();
    // Over: nothing to stop.
    assert!(!sup.stop(&handle.delegation_id, None).unwrap());
    // An unknown delegation gets the one unknown-handle error cancel gives.
    let unknown = sup.stop("no-such-delegation", None).unwrap_err();
    let cancel = sup.cancel("no-such-delegation").unwrap_err();
    assert_eq!(unknown.kind(), cancel.kind());
    assert_eq!(unknown.to_string(), cancel.to_string());
}
