//! The run spec: a TOML file describing a tree of agents, parsed strictly.
//!
//! Every table refuses unknown keys; a TOML error names the file, the line and (for an
//! unknown key) the key, on one line. Every agent is checked here and built once by
//! [`tree::check`](crate::tree::check) before any store is opened, so a bad spec never
//! touches stored data.

use std::collections::BTreeMap;
use std::ops::Range;

use arbor_core::supervisor::{LimitsInput, PolicyInput};
use arbor_model::ScriptedTurn;
use arbor_protocol::RunLimits;
use serde::Deserialize;

pub(crate) mod context;
mod delegation;
mod error;
pub(crate) mod limits;
mod output;
mod pricing;
pub(crate) use error::{SpecError, at};
pub(crate) use pricing::BudgetSpec;

/// Built-in tools a spec may name.
pub(crate) const BUILTIN_TOOLS: &[&str] = &["echo", "sleep", "append_line", "ask_human"];

/// Coding tools, for agents that work in a worktree (`workspace = true`).
pub(crate) const CODING_TOOLS: [&str; 5] = arbor_coding::CODING_TOOL_NAMES;

/// Tools over coding children's work (`diff_child`, `merge_child`, `discard_child`), for
/// agents of a spec with a `[workspace]`.
pub(crate) const CHILD_WORK_TOOLS: [&str; 3] = arbor_coding::CHILD_WORK_TOOL_NAMES;

/// A parsed spec.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Spec {
    /// The root run's input (`arbor run --task` gives another; empty: it must).
    #[serde(default)]
    pub(crate) task: String,
    /// The root agent (default: the only agent, else `root`).
    pub(crate) root: Option<String>,
    /// Supervisor settings for trees.
    #[serde(default)]
    pub(crate) supervisor: SupervisorSpec,
    /// Where agents with `workspace = true` work: a worktree each of this repository.
    pub(crate) workspace: Option<WorkspaceSpec>,
    /// Secrets replaced before anything is stored, shown or passed on.
    #[serde(default)]
    pub(crate) redaction: crate::redaction::RedactionSpec,
    /// Named HTTP providers agents may use (`provider = "<name>"`).
    #[serde(default)]
    pub(crate) providers: BTreeMap<String, crate::providers::ProviderSpec>,
    /// What models cost (see [`pricing`]).
    #[serde(default = "pricing::PricingSpec::on")]
    pub(crate) pricing: pricing::PricingSpec,
    /// MCP servers whose tools agents may be granted (`tools = ["mcp:NAME/*"]`).
    #[serde(default)]
    pub(crate) mcp_servers: BTreeMap<String, arbor_mcp::ServerConfig>,
    /// The agents, by name.
    pub(crate) agents: BTreeMap<String, AgentSpec>,
    /// The SHA-256 of the spec's text: the revision suspended children are resumed under.
    #[serde(skip)]
    pub(crate) fingerprint: String,
}

/// Supervisor settings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SupervisorSpec {
    /// Limits over the defaults.
    #[serde(default)]
    pub(crate) limits: LimitsInput,
    /// Durable approvals: every child's tool calls (its delegations included) wait for a
    /// decision at the root (`arbor approvals`, `approve`, `reject`, `resume`).
    #[serde(default)]
    pub(crate) approvals: bool,
    /// What a spawn asking for a larger pool than its parent's has left gets: `clamp`
    /// (the default: what is left) or `refuse`.
    #[serde(default)]
    pub(crate) budget_policy: arbor_core::budget::BudgetPolicy,
    /// Standing decisions for the whole tree: `{ allow = [{ tool = "read_*" }, { tool =
    /// "write", arguments = { file = "notes/*" } }], reject = [...] }`. A call that would wait
    /// and matches one runs (or is rejected) at once, written down as decided by `standing`.
    pub(crate) standing: Option<arbor_core::approval::standing::StandingLayer>,
    /// How many spawns may wait for a slot at once (`on_full = "queue"`; default 16).
    pub(crate) max_queued: Option<u32>,
}

/// The repository children work on, each in its own linked worktree.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WorkspaceSpec {
    /// The git repository (relative to the current directory; `arbor run --repository`
    /// overrides it).
    pub(crate) repository: Option<std::path::PathBuf>,
    /// The one folder worktrees may be made under (default `.arbor/worktrees`).
    #[serde(default = "default_worktrees")]
    pub(crate) worktrees: std::path::PathBuf,
    /// The repository's name in worktree paths (default `repo`).
    #[serde(default = "default_repository_id")]
    pub(crate) id: String,
    /// How `merge_child` may merge a child's branch (`merge`, `squash`, `ff`), the first the
    /// default (default: `["merge"]`).
    #[serde(default)]
    pub(crate) merge_strategies: Vec<String>,
}

impl WorkspaceSpec {
    /// The merge strategies, parsed.
    pub(crate) fn strategies(&self) -> Result<Vec<arbor_coding::Strategy>, String> {
        self.merge_strategies
            .iter()
            .map(|s| {
                arbor_coding::Strategy::parse(s)
                    .map_err(|e| format!("[workspace] merge_strategies: {e}"))
            })
            .collect()
    }
}

fn default_worktrees() -> std::path::PathBuf {
    std::path::PathBuf::from(".arbor/worktrees")
}

fn default_repository_id() -> String {
    "repo".to_owned()
}

/// One agent.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentSpec {
    /// What it is for (shown to parents).
    pub(crate) description: Option<String>,
    /// System prompt.
    pub(crate) system: Option<String>,
    /// Provider: `scripted` (its turns play), `openai`, `anthropic`, or a
    /// `[providers.<name>]`.
    #[serde(default = "scripted")]
    pub(crate) provider: String,
    /// Model name: what it runs when a parent asks for no model.
    #[serde(default = "scripted")]
    pub(crate) model: String,
    /// Other models a parent may ask for when it spawns this agent; the script's provider
    /// preflights each (empty: only `model`).
    #[serde(default)]
    pub(crate) allow_models: Vec<String>,
    /// The models the scripted provider offers (its preflight refuses others; empty: all).
    #[serde(default)]
    pub(crate) models: Vec<String>,
    /// The thinking levels its models (`model` and `allow_models`) support, which a parent
    /// may ask for when it spawns it (empty: only `off`).
    #[serde(default)]
    pub(crate) thinking_levels: Vec<arbor_model::ThinkingLevel>,
    /// Built-in tools (coding tools need `workspace = true`) and MCP grants
    /// (`mcp:SERVER/*` or `mcp:SERVER/TOOL`; a child holds only what its parent holds too).
    #[serde(default)]
    pub(crate) tools: Vec<String>,
    /// Works in its own worktree of `[workspace] repository` (children only).
    #[serde(default)]
    pub(crate) workspace: bool,
    /// Agents it may delegate to.
    #[serde(default)]
    pub(crate) children: Vec<String>,
    /// The delegation tools it gets (default: what its children's modes need; see
    /// [`delegation`]).
    pub(crate) delegation_tools: Option<Vec<String>>,
    /// The delegation tools it gets, resolved.
    #[serde(skip)]
    pub(crate) delegation: Vec<String>,
    /// The host policy when it runs as a child.
    #[serde(default)]
    pub(crate) policy: PolicyInput,
    /// Concurrent tool calls per turn.
    pub(crate) tool_concurrency: Option<usize>,
    /// A final answer the provider cut off at its output cap fails the run (else it succeeds
    /// as `completed_truncated`).
    #[serde(default)]
    pub(crate) fail_on_truncation: bool,
    /// Run limits as written (see [`crate::spec::limits`]).
    #[serde(default)]
    pub(crate) limits: crate::spec::limits::AgentLimits,
    /// A pool for its whole subtree wherever it runs: the run's, for the root; each
    /// delegation's (unless the parent's model asks for another), for a child.
    pub(crate) budget: Option<pricing::BudgetSpec>,
    /// A JSON Schema its answers must match (a TOML table, as JSON Schema's keys): a
    /// mismatch is sent back to its model, then its run fails `invalid_output`; a parent gets
    /// the value. A spawn may not name another.
    pub(crate) output_schema: Option<serde_json::Value>,
    /// How many times a mismatching answer is sent back (0 to 5, default 1).
    pub(crate) output_retries: Option<u32>,
    /// Whether a spawn of it may (`allow`, the default), must not (`forbid`) or must
    /// (`all`, `{ last_turns = N }`) fork its parent's conversation into it.
    pub(crate) context: Option<context::ContextSpec>,
    /// Narrows the standing decisions its sessions inherit (as `[supervisor] standing`; its
    /// allows keep only what every layer above allows too).
    pub(crate) standing: Option<arbor_core::approval::standing::StandingLayer>,
    /// Model controls sent with every call (`temperature`, `top_p`, `seed`, `stop`,
    /// `max_output_tokens`, `tool_choice`, `parallel_tool_calls`, `extra`).
    #[serde(default)]
    pub(crate) controls: arbor_model::Controls,
    /// The limits its runs get: its own over `[supervisor] limits` over the defaults.
    #[serde(skip)]
    pub(crate) run_limits: RunLimits,
    /// Replay the last scripted turn when the script runs out.
    #[serde(default)]
    pub(crate) repeat_last: bool,
    /// The scripted turns.
    #[serde(default)]
    pub(crate) turns: Vec<ScriptedTurn>,
    /// Its HTTP provider, once resolved (shared by every agent naming it).
    #[serde(skip)]
    pub(crate) http: Option<std::sync::Arc<dyn arbor_model::ModelProvider>>,
    /// The spec's price table, once resolved (shared by every agent).
    #[serde(skip)]
    pub(crate) pricing: Option<std::sync::Arc<arbor_core::pricing::PriceTable>>,
}

fn scripted() -> String {
    "scripted".to_owned()
}

fn line_of(text: &str, span: Option<Range<usize>>) -> Option<usize> {
    let start = span?.start.min(text.len());
    Some(text[..start].bytes().filter(|&b| b == b'\n').count() + 1)
}

impl Spec {
    /// Parses and validates `text`; errors are one line, prefixed with `path` and the line.
    pub(crate) fn parse(path: &str, text: &str) -> Result<Spec, String> {
        let spec: Spec = toml::from_str(text).map_err(|e| {
            let message = e.message().replace('\n', " ");
            match line_of(text, e.span()) {
                Some(line) => format!("{path}:{line}: {}", message.trim()),
                None => format!("{path}: {}", message.trim()),
            }
        })?;
        spec.validate().map_err(|e| at(path, text, &e))?;
        let mut spec = spec;
        let supervisor = spec.supervisor.limits;
        for agent in spec.agents.values_mut() {
            agent.run_limits = agent.limits.resolve(&supervisor);
        }
        spec.fingerprint = fingerprint(text);
        delegation::resolve(&mut spec).map_err(|e| at(path, text, &e))?;
        spec.resolve_providers().map_err(|e| at(path, text, &e))?;
        spec.resolve_pricing().map_err(|e| at(path, text, &e))?;
        Ok(spec)
    }

    /// Builds each HTTP provider the agents name, once (no request is made).
    fn resolve_providers(&mut self) -> Result<(), SpecError> {
        let mut built: BTreeMap<String, std::sync::Arc<dyn arbor_model::ModelProvider>> =
            BTreeMap::new();
        for (name, agent) in &mut self.agents {
            if agent.provider == "scripted" {
                agent.http = None;
                continue;
            }
            let p = match built.get(&agent.provider) {
                Some(p) => p.clone(),
                None => {
                    let p = crate::providers::build(&agent.provider, &self.providers)
                        .map_err(|e| SpecError::agent(name, e))?
                        .shared();
                    built.insert(agent.provider.clone(), p.clone());
                    p
                }
            };
            agent.http = Some(p);
        }
        Ok(())
    }

    /// The root agent's name.
    pub(crate) fn root_name(&self) -> Result<&str, String> {
        match &self.root {
            Some(root) => Ok(root),
            None if self.agents.len() == 1 => Ok(self
                .agents
                .keys()
                .next()
                .map(String::as_str)
                .unwrap_or("root")),
            None => Ok("root"),
        }
    }

    /// Checks where an agent with `workspace = true` works: a child, of a `[workspace]`.
    fn check_workspace(&self, name: &str, root: &str, agent: &AgentSpec) -> Result<(), SpecError> {
        if !agent.workspace {
            return Ok(());
        }
        if name == root {
            return Err(SpecError::agent(
                name,
                "the root cannot work in a worktree (workspace = true is for children)",
            ));
        }
        if self.workspace.is_none() {
            return Err(SpecError::agent(
                name,
                "workspace = true needs a [workspace] table naming the repository",
            ));
        }
        Ok(())
    }

    /// Checks one tool an agent lists: known, and usable where it is.
    fn check_tool(&self, name: &str, agent: &AgentSpec, tool: &str) -> Result<(), SpecError> {
        if let Some(grant) = arbor_mcp::Grant::parse(tool) {
            let grant = grant.map_err(|e| SpecError::agent(name, e))?;
            if !self.mcp_servers.contains_key(&grant.server) {
                return Err(SpecError::agent(
                    name,
                    format!(
                        "{tool:?} names MCP server {:?}, which is not declared \
                     ([mcp_servers.{}])",
                        grant.server, grant.server
                    ),
                ));
            }
        } else if CODING_TOOLS.contains(&tool) {
            if !agent.workspace {
                return Err(SpecError::agent(
                    name,
                    format!(
                        "tool {tool:?} needs workspace = true (coding tools \
                     work in the agent's own worktree)"
                    ),
                ));
            }
        } else if CHILD_WORK_TOOLS.contains(&tool) {
            if self.workspace.is_none() || !self.agents.values().any(|a| a.workspace) {
                return Err(SpecError::agent(
                    name,
                    format!(
                        "tool {tool:?} needs a [workspace] table and a child with \
                     workspace = true (it works on coding children's worktrees)"
                    ),
                ));
            }
        } else if !BUILTIN_TOOLS.contains(&tool) {
            let known: Vec<&str> = BUILTIN_TOOLS
                .iter()
                .chain(&CODING_TOOLS)
                .chain(&CHILD_WORK_TOOLS)
                .copied()
                .collect();
            return Err(SpecError::agent(
                name,
                format!(
                    "unknown tool {tool:?} (known: {}, mcp:SERVER/*, \
                 mcp:SERVER/TOOL)",
                    known.join(", ")
                ),
            ));
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), SpecError> {
        if self.agents.is_empty() {
            return Err(SpecError::plain(
                "the spec defines no agents ([agents.<name>])",
            ));
        }
        let root = self.root_name().map_err(SpecError::plain)?;
        if !self.agents.contains_key(root) {
            let defined: Vec<&str> = self.agents.keys().map(String::as_str).collect();
            return Err(SpecError::plain(format!(
                "the root agent {root:?} is not defined (agents: {})",
                defined.join(", ")
            )));
        }
        for (name, agent) in &self.agents {
            arbor_core::validate_agent_name(name).map_err(|e| SpecError::agent(name, e))?;
            if let Some(b) = &agent.budget {
                b.budget().map_err(|e| SpecError::agent(name, e))?;
            }
            agent.output().map_err(|e| SpecError::agent(name, e))?;
            agent
                .controls
                .check()
                .map_err(|(field, e)| SpecError::agent(name, format!("controls.{field}: {e}")))?;
            if crate::providers::is_a2a(&agent.provider, &self.providers)
                && !agent.controls.is_empty()
            {
                return Err(SpecError::agent(
                    name,
                    format!(
                        "controls: provider {:?} is a remote A2A agent, which takes no \
                         sampling or tool controls",
                        agent.provider
                    ),
                ));
            }
            if let Some((field, why)) = agent.controls.refused_by(
                crate::providers::wire(&agent.provider, &self.providers),
                false,
            ) {
                return Err(SpecError::agent(
                    name,
                    format!(
                        "controls.{field}: provider {:?} cannot carry {field} ({why})",
                        agent.provider
                    ),
                ));
            }
            if !crate::providers::BUILT_IN.contains(&agent.provider.as_str())
                && !self.providers.contains_key(&agent.provider)
            {
                let mut known: Vec<&str> = crate::providers::BUILT_IN.to_vec();
                known.extend(self.providers.keys().map(String::as_str));
                return Err(SpecError::agent(
                    name,
                    format!(
                        "unknown provider {:?} (known: {})",
                        agent.provider,
                        known.join(", ")
                    ),
                ));
            }
            if agent.provider == "scripted" && agent.turns.is_empty() {
                return Err(SpecError::agent(
                    name,
                    format!("the scripted provider needs at least one [[agents.{name}.turns]]"),
                ));
            }
            agent
                .limits
                .validate()
                .map_err(|e| SpecError::agent(name, e))?;
            agent
                .policy
                .validate()
                .map_err(|e| SpecError::agent(name, e))?;
            for tool in &agent.tools {
                self.check_tool(name, agent, tool)?;
            }
            self.check_workspace(name, root, agent)?;
            for child in &agent.children {
                if !self.agents.contains_key(child) {
                    return Err(SpecError::agent(
                        name,
                        format!("child {child:?} is not defined"),
                    ));
                }
                if child == root {
                    return Err(SpecError::agent(name, "the root cannot be a child"));
                }
            }
        }
        if let Some(w) = &self.workspace {
            w.strategies().map_err(SpecError::plain)?;
        }
        for (name, server) in &self.mcp_servers {
            server.validate(name).map_err(|e| SpecError::mcp(name, e))?;
        }
        arbor_core::supervisor::SupervisorLimits::resolve(&self.supervisor.limits)
            .map_err(SpecError::supervisor)?;
        Ok(())
    }

    /// Runs the root on `provider` and `model` (`arbor run --provider/--model`).
    pub(crate) fn override_root(
        &mut self,
        provider: Option<&str>,
        model: Option<&str>,
        controls: Option<&arbor_model::Controls>,
    ) -> Result<(), String> {
        let root = self.root_name()?.to_owned();
        let Some(agent) = self.agents.get_mut(&root) else {
            return Err(format!("the root agent {root:?} is not defined"));
        };
        if let Some(p) = provider {
            agent.provider = p.to_owned();
        }
        if let Some(m) = model {
            agent.model = m.to_owned();
        }
        if let Some(c) = controls {
            agent.controls = c.over(&agent.controls);
        }
        self.validate().map_err(|e| e.message)?;
        self.resolve_providers().map_err(|e| e.message)?;
        self.resolve_pricing().map_err(|e| e.message)
    }

    /// Sets the folder worktrees are made under (absolute, as a run keeps it).
    pub(crate) fn set_worktrees(&mut self, root: std::path::PathBuf) {
        if let Some(w) = &mut self.workspace {
            w.worktrees = root;
        }
    }

    /// Sets the repository worktrees are made of (`--repository`, or the one a stored run
    /// used).
    pub(crate) fn set_repository(&mut self, repository: std::path::PathBuf) {
        if let Some(w) = &mut self.workspace {
            w.repository = Some(repository);
        }
    }

    /// Parses a definition a run kept (`meta.definition`), with the repository it used.
    pub(crate) fn from_definition(definition: &serde_json::Value) -> Result<Option<Spec>, String> {
        let (Some(path), Some(text)) = (definition["path"].as_str(), definition["spec"].as_str())
        else {
            return Ok(None);
        };
        let mut spec = Spec::parse(path, text)?;
        // The kept text may be redacted: the revision is the original text's.
        if let Some(f) = definition["fingerprint"].as_str() {
            spec.fingerprint = f.to_owned();
        }
        if let Some(r) = definition["repository"].as_str() {
            spec.set_repository(r.into());
        }
        if let Some(w) = definition["worktrees"].as_str() {
            spec.set_worktrees(w.into());
        }
        let (provider, model) = (
            definition["root_provider"].as_str(),
            definition["root_model"].as_str(),
        );
        let controls = match &definition["root_controls"] {
            serde_json::Value::Null => None,
            kept => Some(
                serde_json::from_value::<arbor_model::Controls>(kept.clone())
                    .map_err(|e| format!("the run's root_controls do not parse: {e}"))?,
            ),
        };
        if provider.is_some() || model.is_some() || controls.is_some() {
            spec.override_root(provider, model, controls.as_ref())?;
        }
        Ok(Some(spec))
    }

    /// The repository, checked: set, and named for every agent that needs it.
    pub(crate) fn repository(&self) -> Result<Option<&std::path::Path>, String> {
        let Some(w) = &self.workspace else {
            return Ok(None);
        };
        match &w.repository {
            Some(r) => Ok(Some(r)),
            None if self.agents.values().any(|a| a.workspace) => Err(
                "[workspace] names no repository: set repository or pass --repository".to_owned(),
            ),
            None => Ok(None),
        }
    }

    /// The MCP grants of agent `name` (what its entry names; a child holds only what its
    /// ancestors hold too).
    pub(crate) fn grants(&self, name: &str) -> Vec<arbor_mcp::Grant> {
        self.agents
            .get(name)
            .map(|a| {
                a.tools
                    .iter()
                    .filter_map(|t| arbor_mcp::Grant::parse(t)?.ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The `${VAR}` references of the MCP servers that are not set in the environment.
    pub(crate) fn missing_variables(&self) -> Vec<String> {
        self.mcp_servers
            .iter()
            .flat_map(|(name, s)| s.missing_variables(name))
            .collect()
    }

    /// True when some agent delegates.
    pub(crate) fn is_tree(&self) -> bool {
        self.agents.values().any(|a| !a.children.is_empty())
    }
}

/// The SHA-256 of the spec text, in lowercase hex.
pub(crate) fn fingerprint(text: &str) -> String {
    <sha2::Sha256 as sha2::Digest>::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests;
