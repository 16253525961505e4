//! Agents: immutable configurations that sessions run.

use std::fmt;
use std::sync::Arc;

use arbor_model::{ModelProvider, ThinkingLevel};
use arbor_protocol::RunLimits;

use crate::error::{CoreError, CoreResult};
use crate::identity::Identity;
use crate::permission::{Permission, PermissionPolicy};
use crate::pricing::PriceTable;
use crate::redact::Redactor;
use crate::tool::{DynTool, Tool, ToolSet, Typed};

/// Default `tool_concurrency`: how many non-exclusive calls of one turn run at once.
pub const DEFAULT_TOOL_CONCURRENCY: usize = 4;
/// Most calls of one turn that may run at once.
pub const MAX_TOOL_CONCURRENCY: usize = 64;
/// Default capacity of each event subscription's queue.
pub const DEFAULT_EVENT_CAPACITY: usize = 1024;
/// The most one model answer may hold by default (4 MiB).
pub const DEFAULT_MAX_ANSWER_BYTES: usize = 4 * 1024 * 1024;
/// The most `max_answer_bytes` may be set to (64 MiB).
pub const HARD_MAX_ANSWER_BYTES: usize = 64 * 1024 * 1024;

/// An agent: model, prompt, tools, permission and limits. Immutable and cheap to clone;
/// build one with [`Agent::builder`].
#[derive(Clone)]
pub struct Agent {
    inner: Arc<AgentInner>,
}

struct AgentInner {
    name: String,
    provider: Arc<dyn ModelProvider>,
    model: String,
    system: Option<String>,
    tools: ToolSet,
    permission: Permission,
    identity: Option<Arc<Identity>>,
    redactor: Option<Arc<dyn Redactor>>,
    interrupt_before_tool: bool,
    approval_caps: crate::approval::ApprovalCaps,
    limits: RunLimits,
    tool_concurrency: usize,
    event_capacity: usize,
    max_answer_bytes: usize,
    fail_on_truncation: bool,
    effects: Option<Arc<dyn crate::tool::effect::EffectStore>>,
    thinking: Option<ThinkingLevel>,
    controls: Option<arbor_model::Controls>,
    pricing: Option<Arc<PriceTable>>,
}

impl fmt::Debug for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Agent")
            .field("name", &self.inner.name)
            .field("provider", &self.inner.provider.name())
            .field("model", &self.inner.model)
            .field("thinking", &self.inner.thinking)
            .field("tools", &self.inner.tools.len())
            .field("limits", &self.inner.limits)
            .finish()
    }
}

impl Agent {
    /// Starts building an agent named `name`.
    pub fn builder(name: impl Into<String>) -> AgentBuilder {
        AgentBuilder {
            name: name.into(),
            provider: None,
            model: None,
            system: None,
            tools: Vec::new(),
            permission: Permission::allow_all(),
            identity: None,
            redactor: None,
            interrupt_before_tool: false,
            approval_caps: crate::approval::ApprovalCaps::DEFAULT,
            limits: RunLimits::DEFAULT,
            tool_concurrency: DEFAULT_TOOL_CONCURRENCY,
            event_capacity: DEFAULT_EVENT_CAPACITY,
            max_answer_bytes: DEFAULT_MAX_ANSWER_BYTES,
            fail_on_truncation: false,
            effects: None,
            thinking: None,
            controls: None,
            pricing: None,
        }
    }

    /// The agent's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The provider it calls.
    pub fn provider(&self) -> &Arc<dyn ModelProvider> {
        &self.inner.provider
    }

    /// The model it asks for.
    pub fn model(&self) -> &str {
        &self.inner.model
    }

    /// How much its model is asked to reason (`None`: the provider's default).
    pub fn thinking(&self) -> Option<ThinkingLevel> {
        self.inner.thinking
    }

    /// Its model controls (sampling, length, tool use), sent with every provider call.
    pub fn controls(&self) -> Option<&arbor_model::Controls> {
        self.inner.controls.as_ref()
    }

    /// Its system prompt.
    pub fn system(&self) -> Option<&str> {
        self.inner.system.as_deref()
    }

    /// Its tools.
    pub fn tools(&self) -> &ToolSet {
        &self.inner.tools
    }

    /// Its permission (AND-composed policies).
    pub fn permission(&self) -> &Permission {
        &self.inner.permission
    }

    /// The identity its runs act as, if any (policies and tools see it).
    pub fn identity(&self) -> Option<&Identity> {
        self.inner.identity.as_deref()
    }

    /// The prices its turns are costed with, if any.
    pub fn pricing(&self) -> Option<&Arc<PriceTable>> {
        self.inner.pricing.as_ref()
    }

    /// The redactor applied to its sessions' events and stored transcripts, if any.
    pub fn redactor(&self) -> Option<&Arc<dyn Redactor>> {
        self.inner.redactor.as_ref()
    }

    /// Whether its runs suspend before each tool call.
    pub fn interrupt_before_tool(&self) -> bool {
        self.inner.interrupt_before_tool
    }

    /// How many decisions its runs may wait on and keep.
    pub fn approval_caps(&self) -> crate::approval::ApprovalCaps {
        self.inner.approval_caps
    }

    pub(crate) fn shared_identity(&self) -> Option<Arc<Identity>> {
        self.inner.identity.clone()
    }

    /// Its run limits.
    pub fn limits(&self) -> RunLimits {
        self.inner.limits
    }

    /// How many non-exclusive tool calls of one turn run at once.
    pub fn tool_concurrency(&self) -> usize {
        self.inner.tool_concurrency
    }

    /// Capacity of each event subscription's queue.
    pub fn event_capacity(&self) -> usize {
        self.inner.event_capacity
    }

    /// The most one model answer may hold (text and tool calls, UTF-8 bytes).
    pub fn max_answer_bytes(&self) -> usize {
        self.inner.max_answer_bytes
    }

    /// Whether a final answer the provider cut off at its output cap fails the run (else it
    /// succeeds as `completed_truncated`).
    pub fn fail_on_truncation(&self) -> bool {
        self.inner.fail_on_truncation
    }

    /// Where the results of its idempotent tool effects are recorded, if anywhere.
    pub fn effect_store(&self) -> Option<&Arc<dyn crate::tool::effect::EffectStore>> {
        self.inner.effects.as_ref()
    }

    /// A builder starting from this agent's configuration, to derive a variant.
    pub fn to_builder(&self) -> AgentBuilder {
        let i = &self.inner;
        AgentBuilder {
            name: i.name.clone(),
            provider: Some(i.provider.clone()),
            model: Some(i.model.clone()),
            system: i.system.clone(),
            tools: i
                .tools
                .specs()
                .iter()
                .filter_map(|s| i.tools.get(&s.name).cloned())
                .collect(),
            permission: i.permission.clone(),
            identity: i.identity.as_deref().cloned(),
            redactor: i.redactor.clone(),
            interrupt_before_tool: i.interrupt_before_tool,
            approval_caps: i.approval_caps,
            limits: i.limits,
            tool_concurrency: i.tool_concurrency,
            event_capacity: i.event_capacity,
            max_answer_bytes: i.max_answer_bytes,
            fail_on_truncation: i.fail_on_truncation,
            effects: i.effects.clone(),
            thinking: i.thinking,
            controls: i.controls.clone(),
            pricing: i.pricing.clone(),
        }
    }
}

/// Builds an [`Agent`].
#[must_use]
pub struct AgentBuilder {
    name: String,
    provider: Option<Arc<dyn ModelProvider>>,
    model: Option<String>,
    system: Option<String>,
    tools: Vec<Arc<dyn DynTool>>,
    permission: Permission,
    identity: Option<Identity>,
    redactor: Option<Arc<dyn Redactor>>,
    interrupt_before_tool: bool,
    approval_caps: crate::approval::ApprovalCaps,
    limits: RunLimits,
    tool_concurrency: usize,
    event_capacity: usize,
    max_answer_bytes: usize,
    fail_on_truncation: bool,
    effects: Option<Arc<dyn crate::tool::effect::EffectStore>>,
    thinking: Option<ThinkingLevel>,
    controls: Option<arbor_model::Controls>,
    pricing: Option<Arc<PriceTable>>,
}

impl fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("name", &self.name)
            .finish()
    }
}

impl AgentBuilder {
    /// The provider to call (required).
    pub fn provider(mut self, provider: impl ModelProvider + 'static) -> Self {
        self.provider = Some(Arc::new(provider));
        self
    }

    /// The provider to call, shared.
    pub fn shared_provider(mut self, provider: Arc<dyn ModelProvider>) -> Self {
        self.provider = Some(provider);
        self
    }

    /// The model to ask for; defaults to the provider's name.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// The system prompt.
    pub fn system(mut self, system: impl Into<String>) -> Self {
        self.system = Some(system.into());
        self
    }

    /// Adds a typed tool.
    pub fn tool(mut self, tool: impl Tool) -> Self {
        self.tools.push(Arc::new(Typed::new(tool)));
        self
    }

    /// Adds an erased tool.
    pub fn dyn_tool(mut self, tool: Arc<dyn DynTool>) -> Self {
        self.tools.push(tool);
        self
    }

    /// Adds erased tools (for example a delegator's
    /// [`tools`](crate::supervisor::Delegator::tools)).
    pub fn dyn_tools(mut self, tools: impl IntoIterator<Item = Arc<dyn DynTool>>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Replaces the permission.
    pub fn permission(mut self, permission: Permission) -> Self {
        self.permission = permission;
        self
    }

    /// AND-composes one more policy after the existing ones.
    pub fn policy(mut self, policy: impl PermissionPolicy + 'static) -> Self {
        self.permission = self.permission.and_policy(policy);
        self
    }

    /// The identity its runs act as.
    pub fn identity(mut self, identity: Identity) -> Self {
        self.identity = Some(identity);
        self
    }

    /// The redactor applied to everything its sessions publish or store.
    pub fn redactor(self, redactor: impl Redactor + 'static) -> Self {
        self.shared_redactor(Arc::new(redactor))
    }

    /// [`redactor`](Self::redactor), shared (the same redactor for several agents).
    pub fn shared_redactor(mut self, redactor: Arc<dyn Redactor>) -> Self {
        self.redactor = Some(redactor);
        self
    }

    /// Replaces (or clears) the identity, redactor, effect store and thinking level at once:
    /// a supervisor forcing its own onto a child's agent.
    pub(crate) fn overrides(
        mut self,
        identity: Option<Identity>,
        redactor: Option<Arc<dyn Redactor>>,
        effects: Option<Arc<dyn crate::tool::effect::EffectStore>>,
        thinking: Option<ThinkingLevel>,
    ) -> Self {
        self.identity = identity;
        self.redactor = redactor;
        self.effects = effects;
        self.thinking = thinking;
        self
    }

    /// Every run suspends before executing a tool call, until a decision allows it.
    pub fn interrupt_before_tool(mut self, on: bool) -> Self {
        self.interrupt_before_tool = on;
        self
    }

    /// How many decisions a run may wait on and keep (default 32 and 64; at most 128 and
    /// 256).
    pub fn approval_caps(mut self, caps: crate::approval::ApprovalCaps) -> Self {
        self.approval_caps = caps;
        self
    }

    /// The run limits (each at least 1 and at most its hard cap).
    pub fn limits(mut self, limits: RunLimits) -> Self {
        self.limits = limits;
        self
    }

    /// How many non-exclusive tool calls of one turn run at once (1–64).
    pub fn tool_concurrency(mut self, n: usize) -> Self {
        self.tool_concurrency = n;
        self
    }

    /// Capacity of each event subscription's queue (1–65536).
    pub fn event_capacity(mut self, n: usize) -> Self {
        self.event_capacity = n;
        self
    }

    /// The most one model answer may hold: its text and its tool calls (names and
    /// arguments), in UTF-8 bytes (default 4 MiB, at most 64 MiB). An answer that grows past
    /// it ends the run failed (`provider_error`, naming the cap) as soon as it does, so a
    /// runaway model cannot fill memory, the store or its parent's context.
    pub fn max_answer_bytes(mut self, n: usize) -> Self {
        self.max_answer_bytes = n;
        self
    }

    /// A final answer the provider cut off at its output cap (`finish_reason: length`) fails
    /// the run (`failed`, `completed_truncated`, naming the cut) instead of succeeding as
    /// `completed_truncated` (the default). Either way the turn is marked `truncated` in the
    /// transcript.
    pub fn fail_on_truncation(mut self, on: bool) -> Self {
        self.fail_on_truncation = on;
        self
    }

    /// Where the results of idempotent tool effects are recorded (see [`crate::tool::effect`]): a
    /// call recorded done is never executed again.
    pub fn effect_store(self, effects: impl crate::tool::effect::EffectStore + 'static) -> Self {
        self.shared_effect_store(Arc::new(effects))
    }

    /// [`effect_store`](Self::effect_store), shared.
    pub fn shared_effect_store(
        mut self,
        effects: Arc<dyn crate::tool::effect::EffectStore>,
    ) -> Self {
        self.effects = Some(effects);
        self
    }

    /// How much the model is asked to reason, sent with every provider call (`None`, the
    /// default: nothing is asked; the provider's own default applies). A supervisor forces
    /// the level a delegation was admitted with onto its child.
    pub fn thinking(mut self, thinking: ThinkingLevel) -> Self {
        self.thinking = Some(thinking);
        self
    }

    /// Model controls sent with every provider call: sampling, the answer's length, tool
    /// use, fields passed through. Checked at build: a value out of range, or a control the
    /// provider's wire cannot carry, is refused naming it.
    pub fn controls(mut self, controls: arbor_model::Controls) -> Self {
        self.controls = (!controls.is_empty()).then_some(controls);
        self
    }

    /// The prices its provider turns are costed with (each turn's cost is stored with its
    /// usage and summed into its session's and every ancestor's cost). A supervisor's own
    /// table, when it has one, replaces a child's.
    pub fn pricing(mut self, table: impl Into<Arc<PriceTable>>) -> Self {
        self.pricing = Some(table.into());
        self
    }

    /// Validates and builds the agent.
    pub fn build(self) -> CoreResult<Agent> {
        validate_agent_name(&self.name)?;
        let provider = self.provider.ok_or_else(|| {
            CoreError::validation(format!("agent {:?} has no provider", self.name))
        })?;
        let model = self.model.unwrap_or_else(|| provider.name().to_owned());
        if model.trim().is_empty() {
            return Err(CoreError::validation(format!(
                "agent {:?} has an empty model name",
                self.name
            )));
        }
        self.limits.validate().map_err(CoreError::Validation)?;
        if self.tool_concurrency == 0 || self.tool_concurrency > MAX_TOOL_CONCURRENCY {
            return Err(CoreError::validation(format!(
                "tool_concurrency must be a positive integer at most {MAX_TOOL_CONCURRENCY}"
            )));
        }
        if self.event_capacity == 0 || self.event_capacity > 65_536 {
            return Err(CoreError::validation(
                "event_capacity must be a positive integer at most 65536",
            ));
        }
        if self.max_answer_bytes == 0 || self.max_answer_bytes > HARD_MAX_ANSWER_BYTES {
            return Err(CoreError::validation(format!(
                "max_answer_bytes must be a positive integer at most {HARD_MAX_ANSWER_BYTES}"
            )));
        }
        self.approval_caps.validate()?;
        if let Some(c) = &self.controls {
            c.check()
                .map_err(|(field, message)| CoreError::invalid(field, message))?;
            let thinks = self.thinking.and_then(|t| t.budget_tokens()).is_some();
            if let Some((field, why)) = c.refused_by(provider.wire(), thinks) {
                return Err(CoreError::invalid(
                    field,
                    format!(
                        "the provider {:?} cannot carry {field}: {why}",
                        provider.name()
                    ),
                ));
            }
        }
        if let Some(table) = &self.pricing {
            table.require(&model)?;
        }
        let tools = ToolSet::new(self.tools)?;
        if tools.specs().is_empty()
            && let Some(c) = &self.controls
            && let Some(field) = [
                ("tool_choice", &c.tool_choice),
                ("tool_choice_after_call", &c.tool_choice_after_call),
            ]
            .into_iter()
            .find_map(|(f, t)| matches!(t, Some(arbor_model::ToolChoice::Required)).then_some(f))
        {
            return Err(CoreError::invalid(
                field,
                format!(
                    "{field} \"required\" needs a tool to call, and agent {:?} has none",
                    self.name
                ),
            ));
        }
        if let Some(name) = self
            .controls
            .iter()
            .flat_map(arbor_model::Controls::named_tools)
            .find(|name| tools.get(name).is_none())
        {
            return Err(CoreError::invalid(
                "tool_choice",
                format!(
                    "tool_choice names the tool {name:?}, which agent {:?} does not have",
                    self.name
                ),
            ));
        }
        Ok(Agent {
            inner: Arc::new(AgentInner {
                name: self.name,
                provider,
                model,
                system: self.system,
                tools,
                permission: self.permission,
                identity: self.identity.map(Arc::new),
                redactor: self.redactor,
                interrupt_before_tool: self.interrupt_before_tool,
                approval_caps: self.approval_caps,
                limits: self.limits,
                tool_concurrency: self.tool_concurrency,
                event_capacity: self.event_capacity,
                max_answer_bytes: self.max_answer_bytes,
                fail_on_truncation: self.fail_on_truncation,
                effects: self.effects,
                thinking: self.thinking,
                controls: self.controls,
                pricing: self.pricing,
            }),
        })
    }
}

/// Checks an agent name: 1–64 characters, starting with an ASCII letter or digit, then
/// letters, digits, `.`, `_`, `:` or `-`.
pub fn validate_agent_name(name: &str) -> CoreResult<()> {
    let mut bytes = name.bytes();
    let first_ok = bytes.next().is_some_and(|b| b.is_ascii_alphanumeric());
    let rest_ok =
        bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'));
    if first_ok && rest_ok && name.len() <= 64 {
        Ok(())
    } else {
        Err(CoreError::validation(format!(
            "invalid agent name {name:?}: use 1-64 ASCII letters, digits, '.', '_', ':' or '-', starting with a letter or digit"
        )))
    }
}
