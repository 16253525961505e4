//! Builds the agents and the supervisor a spec describes.
//!
//! Every agent other than the root becomes an allow-listed child of one supervisor, so the
//! active-children limit holds across the whole tree. An agent with `children` gets
//! `spawn_agent` (offering only those children), `wait_agent`, `cancel_agent`,
//! `list_children` and `find_models` (the models and thinking levels of those children).
//!
//! An agent with `workspace = true` is built for its own worktree of the spec's repository
//! (arbor-coding's worktree factory), with its coding tools confined to it; the supervisor's
//! after hook removes the worktree when the delegation ends.
//!
//! Children are built by their factory when they are delegated to; [`check`] builds every
//! agent once up front (against a throwaway in-memory store), so a configuration the runtime
//! refuses is a spec error before the real store is opened, not a child failure mid-run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arbor_mcp::{Grant, McpServers};

use arbor_coding::{
    ChildWork, Workdir, WorkspaceConfig, WorkspaceFactory, WorktreeChildFactory, Worktrees,
};
use arbor_core::builtin::{Echo, Sleep};
use arbor_core::supervisor::{
    ChildContext, ChildEntry, ChildFactory, Delegator, Ownership, Supervisor,
};
use arbor_core::{Agent, AgentBuilder, CoreError, CoreResult};
use arbor_model::{ModelProvider, Script, ScriptedProvider};
use arbor_store::{MemoryStore, Store};
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::spec::{AgentSpec, Spec, SpecError};

/// What a spec builds.
#[derive(Debug)]
pub(crate) struct Built {
    pub(crate) root: Agent,
    pub(crate) supervisor: Option<Supervisor>,
    /// The tree's MCP servers: started on first use, stopped when the tree ends
    /// ([`Built::close`]) or this is dropped.
    pub(crate) mcp: Arc<McpServers>,
    /// Where the root's limits come from, to say which one stopped its run.
    pub(crate) root_limits: crate::spec::limits::Provenance,
    /// Where each child agent's limits come from, by agent name.
    pub(crate) child_limits: crate::spec::limits::Limits,
    /// The coding children's work, over the tree's own worktrees (none without a
    /// `[workspace]`).
    pub(crate) work: Option<ChildWork>,
}

impl Built {
    /// Stops what the tree started outside the runtime: its MCP servers.
    pub(crate) async fn close(&self) {
        self.mcp.close().await;
    }
}

/// The agent's provider: its resolved HTTP provider, or its script.
fn provider(spec: &AgentSpec) -> Arc<dyn ModelProvider> {
    match &spec.http {
        Some(p) => p.clone(),
        None => Arc::new(ScriptedProvider::new(
            Script::new(spec.turns.clone())
                .repeat_last(spec.repeat_last)
                .models(spec.models.clone()),
        )),
    }
}

/// The agent's tools; coding tools are confined to `cwd` (its worktree).
fn base_in(
    name: &str,
    spec: &AgentSpec,
    model: Option<&str>,
    cwd: Option<&Workdir>,
) -> AgentBuilder {
    let mut b = base(name, spec, model);
    if let Some(dir) = cwd {
        for tool in &spec.tools {
            if let Some(t) = arbor_coding::coding_tool(dir, tool) {
                b = b.dyn_tool(t);
            }
        }
    }
    b
}

fn base(name: &str, spec: &AgentSpec, model: Option<&str>) -> AgentBuilder {
    let mut b = Agent::builder(name)
        .shared_provider(provider(spec))
        .model(model.unwrap_or(&spec.model).to_owned())
        .limits(spec.run_limits)
        .controls(spec.controls.clone());
    if let Some(table) = &spec.pricing {
        b = b.pricing(table.clone());
    }
    if let Some(system) = &spec.system {
        b = b.system(system.clone());
    }
    if spec.fail_on_truncation {
        b = b.fail_on_truncation(true);
    }
    if let Some(n) = spec.tool_concurrency {
        b = b.tool_concurrency(n);
    }
    for tool in &spec.tools {
        b = match tool.as_str() {
            "echo" => b.tool(Echo),
            "sleep" => b.tool(Sleep),
            "append_line" => b.tool(crate::append::AppendLine),
            "ask_human" => b.dyn_tool(std::sync::Arc::new(arbor_core::tool::ask::AskHuman::new())),
            _ => b,
        };
    }
    b
}

/// The tools over coding children's work the agent lists (`diff_child`, `merge_child`,
/// `discard_child`).
fn with_child_work(
    mut b: AgentBuilder,
    spec: &AgentSpec,
    work: Option<&ChildWork>,
) -> AgentBuilder {
    let Some(work) = work else { return b };
    for name in &spec.tools {
        if let Some(t) = work.tool(name) {
            b = b.dyn_tool(t);
        }
    }
    b
}

fn with_delegation(
    b: AgentBuilder,
    spec: &AgentSpec,
    delegator: &Delegator,
) -> CoreResult<AgentBuilder> {
    // The delegation tools it lists, or what its children's modes need (spec::delegation).
    if spec.delegation.is_empty() {
        return Ok(b);
    }
    Ok(b.dyn_tools(delegator.tools_named(&spec.children, &spec.delegation)?))
}

/// Builds a spec agent for each delegation, wiring its own children to the delegator the
/// supervisor hands it (so path, depth and cancellation carry down the tree), with the MCP
/// tools it holds.
#[derive(Debug)]
struct SpecFactory {
    name: String,
    spec: AgentSpec,
    mcp: Arc<McpServers>,
    /// Each agent's own MCP grants, by name.
    grants: Arc<BTreeMap<String, Vec<Grant>>>,
    /// The root agent's name.
    root: String,
    /// The coding children's work, for its tools.
    work: Option<ChildWork>,
}

impl SpecFactory {
    /// The MCP tools of this child at `path`: what its entry grants AND what its root and
    /// every ancestor on the path holds.
    async fn mcp_tools(&self, path: &[String]) -> CoreResult<Vec<Arc<dyn arbor_core::DynTool>>> {
        let none = Vec::new();
        let mut held = self.grants.get(&self.name).unwrap_or(&none).clone();
        if held.is_empty() {
            return Ok(Vec::new());
        }
        let ancestors =
            std::iter::once(&self.root).chain(path.iter().take(path.len().saturating_sub(1)));
        for ancestor in ancestors {
            held = arbor_mcp::client::narrow(&held, self.grants.get(ancestor).unwrap_or(&none));
        }
        Ok(self.mcp.tools_for(&held).await?)
    }
}

#[async_trait]
impl ChildFactory for SpecFactory {
    async fn create(&self, ctx: ChildContext) -> CoreResult<Agent> {
        let model = ctx.model.clone();
        let tools = self.mcp_tools(&ctx.path).await?;
        let b = base(&self.name, &self.spec, model.as_deref()).dyn_tools(tools);
        with_delegation(
            with_child_work(b, &self.spec, self.work.as_ref()),
            &self.spec,
            &ctx.delegator,
        )?
        .build()
    }
}

/// The same for an agent that works in its own worktree (`cwd`).
#[async_trait]
impl WorkspaceFactory for SpecFactory {
    async fn create(&self, ctx: ChildContext, cwd: PathBuf) -> CoreResult<Agent> {
        let dir = Workdir::new(&cwd).map_err(CoreError::from)?;
        let model = ctx.model.clone();
        let tools = self.mcp_tools(&ctx.path).await?;
        let b = base_in(&self.name, &self.spec, model.as_deref(), Some(&dir)).dyn_tools(tools);
        with_delegation(
            with_child_work(b, &self.spec, self.work.as_ref()),
            &self.spec,
            &ctx.delegator,
        )?
        .build()
    }
}

/// The worktrees of the spec's `[workspace]`, if any agent works in one.
fn worktrees(spec: &Spec) -> CoreResult<Option<Arc<Worktrees>>> {
    let (Some(w), true) = (&spec.workspace, spec.agents.values().any(|a| a.workspace)) else {
        return Ok(None);
    };
    let repository = spec
        .repository()
        .map_err(CoreError::Validation)?
        .map(Path::to_path_buf)
        .unwrap_or_default();
    Ok(Some(Arc::new(Worktrees::new(
        WorkspaceConfig::new(repository, w.id.clone()).worktree_root(w.worktrees.clone()),
    ))))
}

/// The coding children's work of the spec's tree, for `diff_child`, `merge_child` and
/// `discard_child` (and the CLI's `arbor diff`, `merge`, `discard`).
pub(crate) fn child_work(spec: &Spec, store: Arc<dyn Store>) -> CoreResult<Option<ChildWork>> {
    work_of(spec, worktrees(spec)?, store)
}

/// The same over worktrees made already (one manager per tree: git's list of worktrees is
/// changed by one command at a time).
fn work_of(
    spec: &Spec,
    trees: Option<Arc<Worktrees>>,
    store: Arc<dyn Store>,
) -> CoreResult<Option<ChildWork>> {
    let (Some(w), Some(trees)) = (&spec.workspace, trees) else {
        return Ok(None);
    };
    let strategies = w.strategies().map_err(CoreError::Validation)?;
    Ok(Some(ChildWork::new(trees, store).strategies(&strategies)))
}

/// Settles a merge into the spec's repository that a crash cut off (found done, or undone),
/// before anything else runs: the checkout is never left half merged. A merge that can be
/// neither is logged (a later merge names its marker).
async fn settle_merges(spec: &Spec) {
    let Ok(Some(trees)) = worktrees(spec) else {
        return;
    };
    match trees.recover_merge().await {
        Ok(true) => tracing::info!("a merge cut off by a crash was settled"),
        Ok(false) => {}
        Err(e) => tracing::warn!(error = %e, "a merge cut off by a crash could not be settled"),
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

/// Who decides on this terminal: the local owner (tenant `local`, the OS user).
pub(crate) fn local_decider() -> arbor_protocol::DecidedBy {
    let owner = local_ownership();
    arbor_protocol::DecidedBy::new(Some(owner.tenant_id), owner.user_id)
}

/// The provenance of every agent of `spec` but the root (`root`), as children.
fn children_limits(spec: &Spec, root: &str) -> crate::spec::limits::Limits {
    spec.agents
        .iter()
        .filter(|(name, _)| name.as_str() != root)
        .map(|(name, a)| {
            (
                name.clone(),
                crate::spec::limits::Provenance {
                    agent: name.clone(),
                    own: a.limits,
                    supervisor: spec.supervisor.limits,
                    child: true,
                },
            )
        })
        .collect()
}

/// Builds the tree of `spec`: its supervisor and children, and the root agent with the MCP
/// tools it holds (their servers started now; a server that cannot start fails the build).
pub(crate) async fn build(
    spec: &Spec,
    store: Arc<dyn Store>,
    token: CancellationToken,
) -> CoreResult<Built> {
    let mcp = Arc::new(McpServers::new(spec.mcp_servers.clone())?);
    settle_merges(spec).await;
    let root_name = spec.root_name().map_err(CoreError::Validation)?;
    let grants = spec.grants(root_name);
    let root_tools = if grants.is_empty() {
        Vec::new()
    } else {
        mcp.tools_for(&grants).await?
    };
    assemble(spec, store, token, mcp, root_tools)
}

/// The tree of `spec`, its root given `root_tools` besides its own (nothing is started).
/// The rest of a child's catalog entry from its agent: thinking levels, description, pool,
/// output schema and context policy (each checked when the spec was read).
fn entry_terms(mut entry: ChildEntry, agent: &crate::spec::AgentSpec) -> ChildEntry {
    if !agent.thinking_levels.is_empty() {
        let models: Vec<String> = entry.models().into_iter().map(str::to_owned).collect();
        for model in models {
            entry = entry.thinking_levels(model, agent.thinking_levels.iter().copied());
        }
    }
    if let Some(d) = &agent.description {
        entry = entry.description(d.clone());
    }
    if let Some(budget) = agent.budget.and_then(|b| b.budget().ok()) {
        entry = entry.budget(budget);
    }
    if let Ok(Some(output)) = agent.output() {
        entry = entry.output_schema(output);
    }
    if let Some(context) = agent.context {
        entry = entry.context(context.0);
    }
    if let Some(layer) = &agent.standing {
        entry = entry.standing(layer.clone());
    }
    entry
}

fn assemble(
    spec: &Spec,
    store: Arc<dyn Store>,
    token: CancellationToken,
    mcp: Arc<McpServers>,
    root_tools: Vec<Arc<dyn arbor_core::DynTool>>,
) -> CoreResult<Built> {
    let root_name = spec.root_name().map_err(CoreError::Validation)?;
    let grants: Arc<BTreeMap<String, Vec<Grant>>> = Arc::new(
        spec.agents
            .keys()
            .map(|n| (n.clone(), spec.grants(n)))
            .collect(),
    );
    let root_spec = &spec.agents[root_name];
    let redactor = spec.redaction.redactor()?;
    let trees = worktrees(spec)?;
    let work = work_of(spec, trees.clone(), store.clone())?;
    let root_effects = arbor_core::StoreEffects::new(store.clone());
    let supervisor = if spec.is_tree() {
        let store_for_effects = store.clone();
        let mut b = Supervisor::builder(local_ownership())
            .id("arbor")
            .limits(spec.supervisor.limits)
            .budget_policy(spec.supervisor.budget_policy)
            .store(store)
            .session_token(token);
        if let Some(layer) = &spec.supervisor.standing {
            b = b.standing(layer.clone());
        }
        if let Some(n) = spec.supervisor.max_queued {
            b = b.max_queued(n);
        }
        // Children are rebuilt from this definition when they suspend: for approvals (every
        // call gated) or on their own, to ask a person a question.
        b = if spec.supervisor.approvals {
            b.durable_approvals(spec.fingerprint.clone())
        } else {
            b.definition_revision(spec.fingerprint.clone())
        };
        // Tools that declare an idempotent effect record it done in the store: a run
        // continued after a crash (or taken over by another worker) never repeats one.
        b = b.effect_store(arbor_core::StoreEffects::new(store_for_effects));
        if let Some(runner) = crate::workers::runner_for(&spec.fingerprint) {
            b = b.runner(runner);
        }
        if let Some(table) = spec.price_table() {
            b = b.pricing(table);
        }
        if let Some(r) = &redactor {
            // Forced onto every child agent.
            b = b.redactor(r.clone());
        }
        if let Some(trees) = &trees {
            // Removes each delegation's worktree when it ends (kept when dirty).
            b = b.after(trees.clone());
        }
        for (name, agent) in spec.agents.iter().filter(|(n, _)| n.as_str() != root_name) {
            let factory = SpecFactory {
                name: name.clone(),
                spec: agent.clone(),
                mcp: mcp.clone(),
                grants: grants.clone(),
                root: root_name.to_owned(),
                work: work.clone(),
            };
            let entry = match (&trees, agent.workspace) {
                (Some(trees), true) => ChildEntry::new(
                    name.clone(),
                    WorktreeChildFactory::new(trees.clone(), factory),
                ),
                _ => ChildEntry::new(name.clone(), factory),
            };
            let entry = entry
                .policy(agent.policy)
                .agent_name(name.clone())
                .model(agent.model.clone())
                .allow_models(agent.allow_models.iter().cloned())
                .preflight_with(provider(agent));
            b = b.child(entry_terms(entry, agent));
        }
        Some(b.build()?)
    } else {
        None
    };
    // The root's idempotent effects (a merge) are recorded like its children's: a resume
    // never repeats one.
    let root = with_child_work(
        base(root_name, root_spec, None).dyn_tools(root_tools),
        root_spec,
        work.as_ref(),
    )
    .effect_store(root_effects);
    let root = finish_root(
        root,
        root_name,
        root_spec,
        redactor.as_ref(),
        supervisor.as_ref(),
    )?;
    Ok(Built {
        root,
        supervisor,
        mcp,
        root_limits: crate::spec::limits::Provenance {
            agent: root_name.to_owned(),
            own: root_spec.limits,
            supervisor: spec.supervisor.limits,
            child: false,
        },
        child_limits: children_limits(spec, root_name),
        work,
    })
}

/// The root agent: its redactor, its delegation tools, built (an error names it).
fn finish_root(
    mut root: AgentBuilder,
    root_name: &str,
    root_spec: &AgentSpec,
    redactor: Option<&Arc<dyn arbor_core::redact::Redactor>>,
    supervisor: Option<&Supervisor>,
) -> CoreResult<Agent> {
    if let Some(r) = redactor {
        root = root.shared_redactor(r.clone());
    }
    if let Some(sup) = supervisor {
        root = with_delegation(root, root_spec, &sup.delegator())?;
    }
    root.build().map_err(|e| match e {
        CoreError::Validation(m) => CoreError::Validation(format!("agent {root_name:?}: {m}")),
        other => other,
    })
}

/// Builds the whole spec once, without the real store: the root, the supervisor and every
/// child agent. The error names the agent that failed.
pub(crate) fn check(spec: &Spec) -> Result<(), SpecError> {
    // The root's own definition first, so that its error names its table.
    let root_name = spec.root_name().map_err(SpecError::plain)?;
    if let Some(root) = spec.agents.get(root_name) {
        // Without its delegation tools yet: a tool_choice naming one is checked below.
        let mut root = root.clone();
        root.controls.tool_choice = None;
        root.controls.tool_choice_after_call = None;
        base_in(root_name, &root, None, None)
            .build()
            .map_err(|e| SpecError::agent(root_name, e))?;
    }
    // No MCP server is started: their tools are checked when a run starts them.
    let mcp = Arc::new(McpServers::new(spec.mcp_servers.clone()).map_err(SpecError::plain)?);
    let built = assemble(
        spec,
        Arc::new(MemoryStore::new()),
        CancellationToken::new(),
        mcp,
        Vec::new(),
    )
    .map_err(SpecError::plain)?;
    let root_name = built.root.name().to_owned();
    // Coding tools are built against the current folder here: only their configuration is
    // checked, nothing runs.
    let here = Workdir::new(".").map_err(SpecError::plain)?;
    for (name, agent) in spec.agents.iter().filter(|(n, _)| **n != root_name) {
        let b = base_in(name, agent, None, agent.workspace.then_some(&here));
        let b = match &built.supervisor {
            Some(sup) => with_delegation(b, agent, &sup.delegator()),
            None => Ok(b),
        };
        b.and_then(AgentBuilder::build)
            .map_err(|e| SpecError::agent(name, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_builds_children_before_any_run() {
        let text = "task = \"x\"\n[agents.root]\nchildren = [\"kid\"]\n[[agents.root.turns]]\n\
                    [agents.kid]\ntool_concurrency = 0\n[[agents.kid.turns]]\n";
        let spec = Spec::parse("s.toml", text).unwrap();
        let err = check(&spec).unwrap_err();
        assert!(
            err.message.starts_with("agent \"kid\": tool_concurrency"),
            "{err}"
        );
        assert_eq!(err.table.as_deref(), Some("agents.kid"));
        let text = "task = \"x\"\n[agents.root]\ntool_concurrency = 65\n[[agents.root.turns]]\n";
        let err = check(&Spec::parse("s.toml", text).unwrap()).unwrap_err();
        assert!(
            err.message.starts_with("agent \"root\": tool_concurrency"),
            "{err}"
        );
        assert_eq!(err.table.as_deref(), Some("agents.root"));
        assert_eq!(
            crate::spec::at("s.toml", text, &err),
            format!("s.toml:2: {err}"),
            "the line of the root's table"
        );
        let ok =
            "task = \"x\"\n[agents.root]\ntools = [\"echo\", \"sleep\"]\n[[agents.root.turns]]\n";
        check(&Spec::parse("s.toml", ok).unwrap()).unwrap();
    }
}
