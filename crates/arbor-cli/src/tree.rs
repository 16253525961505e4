//! Builds the agents and the supervisor a spec describes.
//!
//! Every agent other than the root becomes an allow-listed child of one supervisor, so the
//! active-children limit holds across the whole tree. An agent with `children` gets
//! `spawn_agent` (offering only those children), `wait_agent` and `cancel_agent`.

use std::sync::Arc;

use arbor_core::builtin::{Echo, Sleep};
use arbor_core::supervisor::{
    CancelAgentTool, ChildContext, ChildEntry, ChildFactory, Delegator, Ownership, SpawnAgentTool,
    Supervisor, WaitAgentTool,
};
use arbor_core::{Agent, AgentBuilder, CoreResult};
use arbor_model::{Script, ScriptedProvider};
use arbor_store::Store;
use async_trait::async_trait;

use crate::spec::{AgentSpec, Spec};

/// What a spec builds.
#[derive(Debug)]
pub(crate) struct Built {
    pub(crate) root: Agent,
    pub(crate) supervisor: Option<Supervisor>,
}

fn base(name: &str, spec: &AgentSpec) -> AgentBuilder {
    let script = Script {
        turns: spec.turns.clone(),
        repeat_last: spec.repeat_last,
    };
    let mut b = Agent::builder(name)
        .provider(ScriptedProvider::new(script))
        .model(spec.model.clone())
        .limits(spec.limits);
    if let Some(system) = &spec.system {
        b = b.system(system.clone());
    }
    if let Some(n) = spec.tool_concurrency {
        b = b.tool_concurrency(n);
    }
    for tool in &spec.tools {
        b = match tool.as_str() {
            "echo" => b.tool(Echo),
            "sleep" => b.tool(Sleep),
            _ => b,
        };
    }
    b
}

fn with_delegation(
    b: AgentBuilder,
    spec: &AgentSpec,
    delegator: &Delegator,
) -> CoreResult<AgentBuilder> {
    if spec.children.is_empty() {
        return Ok(b);
    }
    Ok(b.dyn_tool(Arc::new(SpawnAgentTool::for_children(
        delegator.clone(),
        &spec.children,
    )?))
    .dyn_tool(Arc::new(WaitAgentTool::new(delegator.clone())))
    .dyn_tool(Arc::new(CancelAgentTool::new(delegator.clone()))))
}

/// Builds a spec agent for each delegation, wiring its own children to the delegator the
/// supervisor hands it (so path, depth and cancellation carry down the tree).
#[derive(Debug)]
struct SpecFactory {
    name: String,
    spec: AgentSpec,
}

#[async_trait]
impl ChildFactory for SpecFactory {
    async fn create(&self, ctx: ChildContext) -> CoreResult<Agent> {
        with_delegation(base(&self.name, &self.spec), &self.spec, &ctx.delegator)?.build()
    }
}

/// The local owner: tenant `local` and the OS user.
pub(crate) fn local_ownership() -> Ownership {
    let user = std::env::var("USER")
        .ok()
        .filter(|u| !u.trim().is_empty())
        .unwrap_or_else(|| "local".to_owned());
    Ownership::user("local", user)
}

pub(crate) fn build(
    spec: &Spec,
    store: Arc<dyn Store>,
    token: tokio_util::sync::CancellationToken,
) -> CoreResult<Built> {
    let root_name = spec
        .root_name()
        .map_err(arbor_core::CoreError::Validation)?;
    let root_spec = &spec.agents[root_name];
    let supervisor = if spec.is_tree() {
        let mut b = Supervisor::builder(local_ownership())
            .id("arbor")
            .limits(spec.supervisor.limits)
            .store(store)
            .session_token(token);
        for (name, agent) in spec.agents.iter().filter(|(n, _)| n.as_str() != root_name) {
            let mut entry = ChildEntry::new(
                name.clone(),
                SpecFactory {
                    name: name.clone(),
                    spec: agent.clone(),
                },
            )
            .policy(agent.policy);
            if let Some(d) = &agent.description {
                entry = entry.description(d.clone());
            }
            b = b.child(entry);
        }
        Some(b.build()?)
    } else {
        None
    };
    let mut root = base(root_name, root_spec);
    if let Some(sup) = &supervisor {
        root = with_delegation(root, root_spec, &sup.delegator())?;
    }
    Ok(Built {
        root: root.build()?,
        supervisor,
    })
}
