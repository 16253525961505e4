//! The agents, supervisors and stores the scenarios run: scripted models with zero delay,
//! every model call reporting 10 input and 5 output tokens.

use std::sync::Arc;

use arbor_core::supervisor::{
    ChildContext, ChildEntry, LimitsInput, Ownership, SpawnAgentTool, Supervisor, SupervisorLimits,
    WaitOptions, WaitOutcome, factory_fn,
};
use arbor_core::{
    Agent, AgentBuilder, CoreError, CoreResult, RunOptions, Tool, ToolContext, ToolError,
};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{RunStatus, SessionId, SpawnPoint};
use arbor_store::Store;

use async_trait::async_trait;
use futures::StreamExt;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

/// Input tokens every model call reports.
pub(crate) const INPUT_TOKENS: u64 = 10;
/// Output tokens every model call reports.
pub(crate) const OUTPUT_TOKENS: u64 = 5;
/// Tokens of one model call.
pub(crate) const CALL_TOKENS: u64 = INPUT_TOKENS + OUTPUT_TOKENS;

/// A scripted turn with the benchmark's usage.
pub(crate) fn turn(t: ScriptedTurn) -> ScriptedTurn {
    t.with_usage(INPUT_TOKENS, OUTPUT_TOKENS)
}

/// An agent playing `turns`.
pub(crate) fn scripted(name: &str, turns: Vec<ScriptedTurn>) -> AgentBuilder {
    Agent::builder(name).provider(ScriptedProvider::new(Script::new(
        turns.into_iter().map(turn),
    )))
}

/// An agent that answers in one turn.
pub(crate) fn leaf(name: &str) -> CoreResult<Agent> {
    scripted(name, vec![ScriptedTurn::text("ok")]).build()
}

/// Calls `spawn_agent` on `child` (sync), then answers.
fn delegating_turns(child: &str) -> Vec<ScriptedTurn> {
    vec![
        ScriptedTurn::tool_call("spawn_agent", json!({"child_id": child, "input": "go"})),
        ScriptedTurn::text("done"),
    ]
}

fn supervisor(
    store: &Arc<dyn Store>,
    max_active: u32,
) -> arbor_core::supervisor::SupervisorBuilder {
    Supervisor::builder(Ownership::user("bench", "bench"))
        .id("bench")
        .store(store.clone())
        .limits(LimitsInput {
            max_active_children: Some(max_active),
            ..LimitsInput::default()
        })
}

/// A root that delegates once (sync) to a child answering in one turn: 3 model calls.
pub(crate) fn one_child(store: &Arc<dyn Store>) -> CoreResult<(Agent, Supervisor)> {
    one_child_with(store, 4)
}

/// [`one_child`] under a supervisor that runs `max_active` children at once.
pub(crate) fn one_child_with(
    store: &Arc<dyn Store>,
    max_active: u32,
) -> CoreResult<(Agent, Supervisor)> {
    let sup = supervisor(store, max_active)
        .child(ChildEntry::agent("child", leaf("child")?))
        .build()?;
    let root = scripted("root", delegating_turns("child"))
        .dyn_tool(Arc::new(SpawnAgentTool::new(sup.delegator())))
        .build()?;
    Ok((root, sup))
}

/// A chain `root → c1 → c2 → c3`, each delegating sync: 7 model calls.
pub(crate) fn chain(store: &Arc<dyn Store>) -> CoreResult<(Agent, Supervisor)> {
    fn middle(name: &'static str, next: &'static str) -> ChildEntry {
        ChildEntry::new(
            name,
            factory_fn(move |ctx: ChildContext| async move {
                let spawn = SpawnAgentTool::for_children(ctx.delegator.clone(), &[next.into()])?;
                scripted(name, delegating_turns(next))
                    .dyn_tool(Arc::new(spawn))
                    .build()
            }),
        )
    }
    let sup = supervisor(store, 4)
        .child(middle("c1", "c2"))
        .child(middle("c2", "c3"))
        .child(ChildEntry::agent("c3", leaf("c3")?))
        .build()?;
    let spawn = SpawnAgentTool::for_children(sup.delegator(), &["c1".into()])?;
    let root = scripted("root", delegating_turns("c1"))
        .dyn_tool(Arc::new(spawn))
        .build()?;
    Ok((root, sup))
}

/// Arguments of `fan_out`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FanOutArgs {
    /// How many children to run.
    count: u32,
}

/// A host tool that starts `count` children with `delegate_async` and waits for them all,
/// keeping as many in flight as the supervisor admits at once.
#[derive(Debug, Clone)]
pub(crate) struct FanOut {
    sup: Supervisor,
}

#[async_trait]
impl Tool for FanOut {
    type Args = FanOutArgs;
    type Output = u32;

    fn name(&self) -> &str {
        "fan_out"
    }

    fn description(&self) -> &str {
        "Runs `count` children concurrently and waits for all."
    }

    async fn call(&self, args: FanOutArgs, ctx: ToolContext) -> Result<u32, ToolError> {
        let window = self.sup.limits().max_active_children as usize;
        let delegator = self.sup.delegator();
        let ctx = &ctx;
        let results = futures::stream::iter(0..args.count)
            .map(|_| {
                let delegator = delegator.clone();
                async move {
                    let request = arbor_core::supervisor::DelegationRequest {
                        cancel: Some(ctx.cancel.clone()),
                        parent: Some(ctx.session),
                        spawned_by: Some(SpawnPoint {
                            run_id: ctx.run_id,
                            turn: ctx.turn,
                        }),
                        ..arbor_core::supervisor::DelegationRequest::new("child", "go")
                    };
                    let handle = delegator.delegate_async(request).await?;
                    match self
                        .sup
                        .wait(&handle.delegation_id, WaitOptions::default())
                        .await?
                    {
                        WaitOutcome::Finished(_) => Ok::<u32, CoreError>(1),
                        WaitOutcome::Cancelled { .. } => Ok(0),
                    }
                }
            })
            .buffer_unordered(window)
            .collect::<Vec<_>>()
            .await;
        let mut done = 0;
        for r in results {
            done += r.map_err(|e| ToolError::Fatal(e.to_string()))?;
        }
        Ok(done)
    }
}

/// A root whose one tool call runs `count` children (one turn each), then answers: 2 model
/// calls of its own.
pub(crate) fn fan_out(store: &Arc<dyn Store>, count: u32) -> CoreResult<(Agent, Supervisor)> {
    let sup = supervisor(store, SupervisorLimits::HARD.max_active_children)
        .child(ChildEntry::agent("child", leaf("child")?))
        .build()?;
    let root = scripted(
        "root",
        vec![
            ScriptedTurn::tool_call("fan_out", json!({ "count": count })),
            ScriptedTurn::text("done"),
        ],
    )
    .tool(FanOut { sup: sup.clone() })
    .build()?;
    Ok((root, sup))
}

/// A supervisor for admission alone: one child answering in one turn.
pub(crate) fn admission(store: &Arc<dyn Store>) -> CoreResult<Supervisor> {
    supervisor(store, 4)
        .child(ChildEntry::agent("child", leaf("child")?))
        .build()
}

/// Creates a root session of `root` on `store` and runs it; the run must succeed.
pub(crate) async fn run_root(root: &Agent, store: &Arc<dyn Store>) -> Result<SessionId, String> {
    let mut session = root
        .session()
        .store(store.clone())
        .create()
        .await
        .map_err(|e| e.to_string())?;
    let result = session
        .run("task", RunOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    if result.status != RunStatus::Succeeded {
        return Err(format!(
            "a root run ended {:?}: {}",
            result.status,
            result.error.unwrap_or_default()
        ));
    }
    Ok(session.id())
}
