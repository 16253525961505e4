//! Tool effects and idempotency keys: an idempotent effect's call gets a stable key; once
//! its result is recorded it is never executed again, across a cut-off resume or a crash;
//! a supervisor gives its effect store to every child.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arbor_core::approval;
use arbor_core::effect::{EFFECT_KEY_PREFIX, effect_key};
use arbor_core::supervisor::{ChildEntry, DelegationRequest, Ownership, Supervisor};
use arbor_core::{
    Agent, RunLimits, RunOptions, StoreEffects, Tool, ToolContext, ToolEffect, ToolError,
};
use arbor_model::{Script, ScriptedProvider, ScriptedToolCall, ScriptedTurn};
use arbor_protocol::{ApprovalDecision, RunStatus, Verdict};
use arbor_store::{MemoryStore, Store};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::support::tool_results;
use arbor_store::testing::{Call, FaultStore as HoldStore};

/// Charges a card: an idempotent external effect. Keeps the key of every execution.
#[derive(Debug, Clone, Default)]
struct Charge(Arc<Mutex<Vec<Execution>>>);

/// One execution: the key it got, and whether it saw an effect store.
type Execution = (Option<String>, bool);

#[derive(Debug, Deserialize, JsonSchema)]
struct ChargeArgs {
    amount: u32,
}

#[async_trait]
impl Tool for Charge {
    type Args = ChargeArgs;
    type Output = String;
    fn name(&self) -> &str {
        "charge"
    }
    fn description(&self) -> &str {
        "charges the card"
    }
    fn effect(&self) -> ToolEffect {
        ToolEffect::Idempotent
    }
    async fn call(&self, args: ChargeArgs, ctx: ToolContext) -> Result<String, ToolError> {
        self.0
            .lock()
            .unwrap()
            .push((ctx.idempotency_key.clone(), ctx.effects.is_some()));
        Ok(format!("charged {}", args.amount))
    }
}

fn charge_turn() -> ScriptedTurn {
    ScriptedTurn {
        tool_calls: vec![ScriptedToolCall {
            id: Some("c0".into()),
            name: "charge".into(),
            arguments: json!({"amount": 5}),
        }],
        ..ScriptedTurn::default()
    }
}

#[tokio::test]
async fn a_recorded_effect_is_never_executed_again_after_a_cut_off_resume() {
    let mem: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let hold = HoldStore::new(mem.clone());
    let store: Arc<dyn Store> = hold.clone();
    let charge = Charge::default();
    let mut s = Agent::builder("clerk")
        .provider(ScriptedProvider::new(Script::new([
            charge_turn(),
            ScriptedTurn::text("paid"),
        ])))
        .tool(charge.clone())
        .interrupt_before_tool(true)
        .effect_store(StoreEffects::new(store.clone()))
        .limits(RunLimits {
            timeout_ms: 300,
            ..RunLimits::default()
        })
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .create()
        .await
        .unwrap();
    let r = s.run("pay", RunOptions::default()).await.unwrap();
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
    // The charge runs and its effect is recorded; the crash comes before its outcome is
    // stored in the run's checkpoint.
    let mut held = hold.arm(
        false,
        |c| matches!(c, Call::PutCheckpoint("run", v) if v["calls"][0]["state"]["state"] == "done"),
    );
    let resuming = s.resume(r.run_id, RunOptions::default());
    let cut = tokio::time::timeout(Duration::from_millis(200), async {
        tokio::select! {
            _ = resuming => panic!("the resume finished"),
            _ = &mut held.reached => {}
        }
    })
    .await;
    assert!(cut.is_ok(), "the outcome's save was reached");
    drop(held.release);
    {
        let runs = charge.0.lock().unwrap();
        assert_eq!(runs.len(), 1);
        let key = runs[0].0.clone().unwrap();
        assert_eq!(key, effect_key(s.id(), r.run_id, "c0"));
        assert!(key.starts_with(EFFECT_KEY_PREFIX));
        assert!(runs[0].1, "the tool sees the effect store");
    }
    // Once the dead resume's claim expires, the next resume finds the call in flight and
    // its effect recorded: the recorded result, not an interruption, and no second charge.
    tokio::time::sleep(Duration::from_millis(350)).await;
    let done = s.resume(r.run_id, RunOptions::default()).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(charge.0.lock().unwrap().len(), 1, "charged once");
    assert_eq!(tool_results(s.messages()), ["charged 5"]);
}

#[tokio::test]
async fn a_supervisor_gives_its_effect_store_to_every_child() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let charge = Charge::default();
    let child = Agent::builder("payer")
        .provider(ScriptedProvider::new(Script::new([
            charge_turn(),
            ScriptedTurn::text("paid"),
        ])))
        .tool(charge.clone())
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .effect_store(StoreEffects::new(store.clone()))
        .child(ChildEntry::agent("payer", child))
        .build()
        .unwrap();
    let done = sup
        .delegate(DelegationRequest::new("payer", "pay"))
        .await
        .unwrap();
    assert_eq!(done.result.status, RunStatus::Succeeded);
    let runs = charge.0.lock().unwrap();
    assert_eq!(runs.len(), 1);
    assert!(
        runs[0]
            .0
            .as_deref()
            .is_some_and(|k| k.starts_with(EFFECT_KEY_PREFIX))
    );
    assert!(
        runs[0].1,
        "the child's tool sees the supervisor's effect store"
    );
}
