//! An approved call runs at most once, whatever happens to the resume that runs it: a
//! resume cancelled mid-call closes the run (nothing left to resume twice), and a resume
//! cut off without a trace (a crash: its future dropped) leaves the call marked in flight, so
//! the next resume reports it interrupted instead of running it again.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arbor_core::approval;
use arbor_core::{Agent, RunLimits, RunOptions, Tool, ToolContext, ToolError};
use arbor_model::{Script, ScriptedProvider, ScriptedToolCall, ScriptedTurn};
use arbor_protocol::{ApprovalDecision, RunStatus, Verdict};
use arbor_store::{MemoryStore, Store};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::support::tool_results;
use tokio_util::sync::CancellationToken;

/// A side effect that counts its starts and takes `ms` to finish.
#[derive(Debug, Clone, Default)]
struct Pay(Arc<AtomicUsize>);

#[derive(Debug, Deserialize, JsonSchema)]
struct PayArgs {
    ms: u64,
}

#[async_trait]
impl Tool for Pay {
    type Args = PayArgs;
    type Output = String;
    fn name(&self) -> &str {
        "pay"
    }
    fn description(&self) -> &str {
        "pays"
    }
    async fn call(&self, args: PayArgs, _ctx: ToolContext) -> Result<String, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(args.ms)).await;
        Ok("paid".into())
    }
}

fn turn(calls: &[(&str, u64)]) -> ScriptedTurn {
    ScriptedTurn {
        tool_calls: calls
            .iter()
            .enumerate()
            .map(|(i, (name, ms))| ScriptedToolCall {
                id: Some(format!("c{i}")),
                name: (*name).into(),
                arguments: json!({ "ms": ms }),
            })
            .collect(),
        ..ScriptedTurn::default()
    }
}

/// A gated agent with `pay` and a second effect `refund`, timing out after `timeout_ms`
/// (so a dead resume's claim expires quickly).
fn agent(pay: &Pay, refund: &Pay, timeout_ms: u64) -> Agent {
    #[derive(Debug, Clone)]
    struct Named(Pay, &'static str);
    #[async_trait]
    impl Tool for Named {
        type Args = PayArgs;
        type Output = String;
        fn name(&self) -> &str {
            self.1
        }
        fn description(&self) -> &str {
            "refunds"
        }
        async fn call(&self, args: PayArgs, ctx: ToolContext) -> Result<String, ToolError> {
            self.0.call(args, ctx).await.map(|_| "refunded".into())
        }
    }
    Agent::builder("clerk")
        .provider(ScriptedProvider::new(Script::new([
            turn(&[("pay", 400), ("refund", 0)]),
            ScriptedTurn::text("settled"),
        ])))
        .tool(pay.clone())
        .tool(Named(refund.clone(), "refund"))
        .interrupt_before_tool(true)
        .limits(RunLimits {
            timeout_ms,
            ..RunLimits::default()
        })
        .build()
        .unwrap()
}

fn allow_all(s: &approval::Suspension) -> Vec<ApprovalDecision> {
    s.pending
        .iter()
        .map(|p| ApprovalDecision::new(p.id.clone(), Verdict::AllowOnce))
        .collect()
}

/// A session of `agent(pay, refund, timeout_ms)` whose first run suspended on both calls,
/// each then allowed: what a resume runs.
async fn decided(
    store: &Arc<dyn Store>,
    pay: &Pay,
    refund: &Pay,
    timeout_ms: u64,
) -> (arbor_core::Session, arbor_protocol::RunId) {
    let mut s = agent(pay, refund, timeout_ms)
        .session()
        .store(store.clone())
        .create()
        .await
        .unwrap();
    let r = s.run("settle", RunOptions::default()).await.unwrap();
    let waiting = r.suspension.unwrap();
    approval::decide(
        store.as_ref(),
        r.run_id,
        waiting.version,
        &allow_all(&waiting),
    )
    .await
    .unwrap();
    (s, r.run_id)
}

#[tokio::test]
async fn a_resume_cancelled_mid_call_closes_the_run_and_nothing_runs_twice() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (pay, refund) = (Pay::default(), Pay::default());
    let (mut s, run_id) = decided(&store, &pay, &refund, 300).await;
    let cancel = CancellationToken::new();
    let resuming = s.resume(run_id, RunOptions::default().with_cancel(cancel.clone()));
    let canceller = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
    };
    let (ended, ()) = tokio::join!(resuming, canceller);
    let ended = ended.unwrap();
    assert_eq!(ended.status, RunStatus::Aborted);
    assert_eq!(pay.0.load(Ordering::SeqCst), 1);
    assert_eq!(refund.0.load(Ordering::SeqCst), 0, "cancelled before it");
    // The run is closed: nothing is listed as waiting, and nothing can be resumed again,
    // even once a claim would have expired.
    assert!(
        approval::load(store.as_ref(), run_id)
            .await
            .unwrap()
            .is_none()
    );
    tokio::time::sleep(Duration::from_millis(350)).await;
    let again = s.resume(run_id, RunOptions::default()).await.unwrap_err();
    assert_eq!(again.to_string(), "Unknown approval");
    assert_eq!(
        pay.0.load(Ordering::SeqCst),
        1,
        "the approved call ran once"
    );
    let results = tool_results(s.messages());
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[0].starts_with("interrupted:"), "{results:?}");
    assert!(results[1].starts_with("not run"), "{results:?}");
}

#[tokio::test]
async fn a_resume_cut_off_mid_call_leaves_it_interrupted_for_the_next_resume() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (pay, refund) = (Pay::default(), Pay::default());
    let (mut s, run_id) = decided(&store, &pay, &refund, 300).await;
    // A crash mid-call: the resume's future is dropped while `pay` runs; nothing of it
    // finishes, no cleanup happens.
    let cut = tokio::time::timeout(
        Duration::from_millis(50),
        s.resume(run_id, RunOptions::default()),
    )
    .await;
    assert!(cut.is_err(), "the resume was cut off");
    assert_eq!(pay.0.load(Ordering::SeqCst), 1);
    let (_, stored) = approval::load(store.as_ref(), run_id)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(stored.calls[0].state, approval::CallState::InFlight { .. }),
        "{:?}",
        stored.calls[0].state
    );
    // Once the dead resume's claim expires, the next one finishes the run without paying
    // twice: the model is told the payment was interrupted; the refund runs once.
    tokio::time::sleep(Duration::from_millis(350)).await;
    let done = s.resume(run_id, RunOptions::default()).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(
        pay.0.load(Ordering::SeqCst),
        1,
        "the approved call ran once"
    );
    assert_eq!(refund.0.load(Ordering::SeqCst), 1);
    let results = tool_results(s.messages());
    assert!(results[0].starts_with("interrupted:"), "{results:?}");
    assert_eq!(results[1], "refunded");
    assert!(
        approval::load(store.as_ref(), run_id)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test]
async fn a_resumed_attempt_announces_its_own_start() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (pay, refund) = (Pay::default(), Pay::default());
    let mut s = agent(&pay, &refund, 60_000)
        .session()
        .store(store.clone())
        .create()
        .await
        .unwrap();
    let r = s.run("settle", RunOptions::default()).await.unwrap();
    let waiting = r.suspension.unwrap();
    let mut events = s.subscribe();
    let done = s
        .approve(
            r.run_id,
            waiting.version,
            &allow_all(&waiting),
            RunOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    let first = events.try_recv().expect("an event");
    assert_eq!(first.event.type_name(), "run_started");
    assert_eq!(first.run_id, r.run_id, "the same run, a new attempt");
}

#[tokio::test]
async fn a_claim_whose_process_died_is_taken_over_at_once() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (pay, refund) = (Pay::default(), Pay::default());
    // A long timeout: the claim would hold for a minute if its holder's death went unseen.
    let mut s = agent(&pay, &refund, 60_000)
        .session()
        .store(store.clone())
        .create()
        .await
        .unwrap();
    let r = s.run("settle", RunOptions::default()).await.unwrap();
    let waiting = r.suspension.unwrap();
    approval::decide(
        store.as_ref(),
        r.run_id,
        waiting.version,
        &allow_all(&waiting),
    )
    .await
    .unwrap();
    let (version, mut stored) = approval::load(store.as_ref(), r.run_id)
        .await
        .unwrap()
        .unwrap();
    // A resumer on this host that was killed right after claiming the run.
    let me = arbor_core::process::lease::ProcessId::current();
    stored.claimed_at_ms = Some(arbor_protocol::Timestamp::now().0);
    stored.claimed_by = Some(arbor_core::process::lease::ProcessId {
        pid: 0x3fff_fff0,
        ..me.clone()
    });
    let version = approval::save(store.as_ref(), &stored, version)
        .await
        .unwrap();
    let done = s.resume(r.run_id, RunOptions::default()).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(pay.0.load(Ordering::SeqCst), 1);
    // A claim held by a live process (this one) is respected.
    stored.claimed_by = Some(me);
    let run2 = arbor_protocol::RunId::new();
    stored.run_id = run2;
    approval::save(store.as_ref(), &stored, 0).await.unwrap();
    let e = s.resume(run2, RunOptions::default()).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "the run is being resumed; decide again once it suspends"
    );
    let _ = version;
}
