//! Model-facing tools: `spawn_agent`, `wait_agent` and `cancel_agent`.
//!
//! The spawn tool's schema is closed: `child_id` is an enum of the supervisor's advertised
//! ids and every other key is refused, naming it. Model arguments can never supply tools,
//! identity, scopes or higher limits. Errors reach the model as tool errors that say what
//! failed (which limit, with its maximum and observed value), redacted. Arguments are checked
//! against each tool's schema before parsing: an argument error names the field, the class
//! of the value given and what is accepted.

use arbor_model::{ThinkingLevel, ToolSpec};
use arbor_protocol::SpawnPoint;
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::error::CoreError;
use crate::supervisor::config::policy::{
    HARD_MILESTONE_EVERY_TURNS, Lifetime, PolicyInput, Report,
};
use crate::supervisor::delegation::handles::Reach;
use crate::supervisor::delegation::join::{WaitOptions, WaitOutcome};
use crate::supervisor::delegation::request::{DelegationRequest, DelegationResult};
use crate::supervisor::runtime::Delegator;
use crate::supervisor::runtime::Supervisor;
use crate::supervisor::tools::arguments;
use crate::tool::{DynTool, ToolContext, ToolError};

/// `milestone`: when a `milestones` report offers events.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Milestone {
    /// Offer only the events of every N-th turn.
    #[schemars(range(min = 1, max = HARD_MILESTONE_EVERY_TURNS))]
    every_turns: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
enum Mode {
    Sync,
    Async,
    Message,
}

/// The arguments of `spawn_agent`. The tool's parameter schema is generated from this type
/// ([`spawn_schema`]), with the offered child ids patched in as `child_id`'s enum, so what
/// the model is shown, what [`arguments::check`] checks and what is parsed cannot drift.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SpawnArgs {
    /// The child to delegate to (one of the allowed ids).
    child_id: String,
    /// The child's task.
    input: String,
    /// The conversation thread within the child's memory (default `default`).
    thread_id: Option<String>,
    /// The child's name: how you address it later.
    #[schemars(length(min = 1, max = 64))]
    name: Option<String>,
    /// A model the child allows; default its own.
    model: Option<String>,
    /// How much the child's model reasons; it must support the level (find_models lists
    /// them). Default: the child's own.
    #[serde(default)]
    #[schemars(schema_with = "thinking_schema")]
    thinking: Option<ThinkingLevel>,
    /// `sync` (default) waits for the answer; `async` returns a handle for wait_agent;
    /// `message` answers by message on a later turn.
    mode: Option<Mode>,
    /// `task` (default) ends with this delegation; `session` outlives it.
    lifetime: Option<Lifetime>,
    /// Which of the child's events reach you while it runs.
    report: Option<Report>,
    /// Milestone settings (with `report: milestones`).
    milestone: Option<Milestone>,
    /// The share of the remaining budget the child may use.
    #[schemars(extend("exclusiveMinimum" = 0, "maximum" = 1))]
    budget_share: Option<f64>,
}

/// `thinking`: one of the levels arbor knows (a child's model may support fewer).
fn thinking_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "enum": ThinkingLevel::ALL.map(ThinkingLevel::as_str),
    })
}

/// The parameter schema of `spawn_agent` offering `ids`: generated from [`SpawnArgs`]
/// (draft-07, subschemas inlined, then [`arguments::simplify`]d: an optional field is its
/// value's schema and may be left out), with `child_id` closed to `ids`.
fn spawn_schema(ids: &[String]) -> serde_json::Value {
    let mut settings = schemars::generate::SchemaSettings::draft07();
    settings.inline_subschemas = true;
    let mut schema = settings
        .into_generator()
        .into_root_schema_for::<SpawnArgs>()
        .to_value();
    if let Some(obj) = schema.as_object_mut() {
        obj.remove("$schema");
        obj.remove("title");
        obj.remove("description");
    }
    arguments::simplify(&mut schema);
    schema["properties"]["child_id"]["enum"] = json!(ids);
    schema
}

/// The text a delegation error shows the model: the message, and for limits which one fired.
impl Supervisor {
    /// The most of `child_id`'s answer its parent's context gets (`max_result_bytes`, the
    /// supervisor's narrowed by the child's catalog entry).
    pub(crate) fn result_cap(&self, child_id: &str) -> usize {
        let max = self.settings().limits().max_result_bytes;
        let entry = self
            .catalog()
            .get(child_id)
            .and_then(|(_, e)| e.limits.max_result_bytes);
        let cap = entry.map_or(max, |e| e.min(max));
        usize::try_from(cap).unwrap_or(usize::MAX)
    }

    /// `text` as a tool error the model reads, redacted.
    pub(crate) fn tool_error(&self, text: &str) -> ToolError {
        ToolError::ToModel(self.redact(text))
    }

    /// A core error as the model reads it: with the limit that fired, redacted. A wiring
    /// error of the host ([`CoreErrorKind::Config`](crate::CoreErrorKind::Config)) ends the
    /// run instead: the model cannot fix it, and the run must not look successful.
    pub(crate) fn model_error(&self, e: &CoreError) -> ToolError {
        if e.kind() == crate::CoreErrorKind::Config {
            return ToolError::Fatal(self.redact(&e.to_string()));
        }
        match e.limit() {
            Some(info) => self.tool_error(&format!("{e}: {info}")),
            None => self.tool_error(&e.to_string()),
        }
    }

    /// A model's arguments for `spec`, checked against its parameter schema first: an error
    /// names the field, the class of the value given and what is accepted, so the model can
    /// correct itself. It may quote the value, so it is redacted before the model reads it.
    pub(crate) fn parse_arguments<T: serde::de::DeserializeOwned>(
        &self,
        spec: &ToolSpec,
        arguments: serde_json::Value,
    ) -> Result<T, ToolError> {
        if let Err(e) = arguments::check(&spec.name, &spec.parameters, &arguments) {
            return Err(self.bad_arguments(&spec.name, &e));
        }
        serde_json::from_value(arguments).map_err(|e| self.bad_arguments(&spec.name, &e))
    }

    /// Bad arguments for `tool`, as the model reads them (redacted).
    pub(crate) fn bad_arguments(&self, tool: &str, e: &dyn std::fmt::Display) -> ToolError {
        self.tool_error(&format!("invalid arguments for {tool}: {e}"))
    }
}

pub(crate) fn finished(delegator: &Delegator, r: &DelegationResult) -> String {
    let sup = delegator.supervisor();
    let text = sup.redact(&r.result.text);
    let cap = sup.result_cap(&r.child_id);
    json!({
        "child_id": r.child_id,
        "delegation_id": r.delegation_id,
        "status": r.result.status,
        "usage": r.result.usage,
        "text": cut(&text, cap, r.session_id),
    })
    .to_string()
}

/// `text` cut to at most `cap` bytes on a character boundary, with a marker saying how much
/// was left out and where the whole of it is.
pub(crate) fn cut(text: &str, cap: usize, session: arbor_protocol::SessionId) -> String {
    if text.len() <= cap {
        return text.to_owned();
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n[truncated: {} of {} bytes shown; the whole answer is in the transcript of session {session}]",
        &text[..end],
        end,
        text.len()
    )
}

/// `spawn_agent`: delegate to an allow-listed child, waiting (`sync`) or not (`async`).
#[derive(Debug, Clone)]
pub struct SpawnAgentTool {
    delegator: Delegator,
    spec: ToolSpec,
    allowed: Vec<String>,
}

impl SpawnAgentTool {
    /// The tool, named `spawn_agent`.
    pub fn new(delegator: Delegator) -> Self {
        Self::named(delegator, "spawn_agent")
    }

    /// The tool under another name.
    pub fn named(delegator: Delegator, name: &str) -> Self {
        let ids = delegator.supervisor().child_ids().to_vec();
        Self::build(delegator, name, ids)
    }

    /// The tool offering only some of the supervisor's children (each must be allow-listed).
    pub fn for_children(delegator: Delegator, children: &[String]) -> crate::CoreResult<Self> {
        for id in children {
            if !delegator.supervisor().child_ids().contains(id) {
                return Err(CoreError::Validation(format!("Invalid child id: {id}")));
            }
        }
        Ok(Self::build(delegator, "spawn_agent", children.to_vec()))
    }

    pub(crate) fn build(delegator: Delegator, name: &str, ids: Vec<String>) -> Self {
        let sup = delegator.supervisor();
        let listed: Vec<String> = ids
            .iter()
            .map(|id| match sup.child_description(id) {
                Some(d) => format!("{id} ({d})"),
                None => id.clone(),
            })
            .collect();
        let description = format!(
            "Delegate a task to a child agent. Allowed children: {}. mode sync (default) waits for its answer; async returns a handle for wait_agent; message returns a handle at once and the child's reply (or a notice that it finished, failed or was cancelled) arrives as a message on a later turn, so end your turn instead of waiting. Name each child: the name is how you address it later.",
            listed.join(", ")
        );
        let parameters = spawn_schema(&ids);
        Self {
            spec: ToolSpec {
                name: name.to_owned(),
                description,
                parameters,
            },
            delegator,
            allowed: ids,
        }
    }
}

#[async_trait]
impl DynTool for SpawnAgentTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn exclusive(&self) -> bool {
        false
    }

    async fn call_json(
        &self,
        arguments: serde_json::Value,
        ctx: ToolContext,
    ) -> Result<String, ToolError> {
        let args: SpawnArgs = self
            .delegator
            .supervisor()
            .parse_arguments(&self.spec, arguments)?;
        // The schema's enum holds exactly the offered ids; this guards a hand-built call.
        if !self.allowed.contains(&args.child_id) {
            return Err(ToolError::ToModel("Unknown child id".to_owned()));
        }
        let thinking = args.thinking;
        let policy = PolicyInput {
            lifetime: args.lifetime,
            report: args.report,
            every_turns: args.milestone.and_then(|m| m.every_turns),
            budget_share: args.budget_share,
        };
        let mode = match (args.mode, args.lifetime) {
            (Some(Mode::Message), _) => Mode::Message,
            (Some(Mode::Async), _) | (_, Some(Lifetime::Session)) => Mode::Async,
            _ => Mode::Sync,
        };
        let request = DelegationRequest {
            child_id: args.child_id.clone(),
            input: args.input,
            thread_id: args.thread_id,
            name: args.name,
            model: args.model,
            thinking,
            policy,
            cancel: Some(ctx.cancel.clone()),
            parent: Some(ctx.session),
            spawned_by: Some(SpawnPoint {
                run_id: ctx.run_id,
                turn: ctx.turn,
            }),
            ..DelegationRequest::default()
        };
        let handle = match mode {
            Mode::Sync => None,
            Mode::Async => Some(self.delegator.delegate_async(request.clone()).await),
            Mode::Message => Some(self.delegator.spawn(request.clone()).await),
        };
        if let Some(handle) = handle {
            let handle = handle.map_err(|e| self.delegator.supervisor().model_error(&e))?;
            let mut out = json!({
                "child_id": handle.child_id,
                "delegation_id": handle.delegation_id,
                "session_id": handle.session_id,
                "name": handle.name,
                "model": handle.model,
                "status": "running",
            });
            if let Some(t) = thinking {
                out["thinking"] = json!(t);
            }
            return Ok(out.to_string());
        }
        match self.delegator.delegate(request).await {
            Ok(r) => Ok(finished(&self.delegator, &r)),
            // The child waits for approvals: this call (and its run) wait with it.
            Err(CoreError::Suspended(nested)) => Err(ToolError::Suspended(nested)),
            Err(e) => Err(self.delegator.supervisor().model_error(&e)),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct HandleArgs {
    delegation_id: String,
}

fn handle_spec(name: &str, description: &str) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: description.to_owned(),
        parameters: json!({
            "type": "object",
            "properties": {"delegation_id": {"type": "string"}},
            "required": ["delegation_id"],
            "additionalProperties": false
        }),
    }
}

/// `wait_agent`: wait for one async child by its handle.
#[derive(Debug, Clone)]
pub struct WaitAgentTool {
    delegator: Delegator,
    spec: ToolSpec,
}

impl WaitAgentTool {
    /// The tool, named `wait_agent`.
    pub fn new(delegator: Delegator) -> Self {
        Self {
            delegator,
            spec: handle_spec(
                "wait_agent",
                "Wait for one async child delegation by its handle.",
            ),
        }
    }
}

#[async_trait]
impl DynTool for WaitAgentTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn exclusive(&self) -> bool {
        false
    }

    async fn call_json(
        &self,
        arguments: serde_json::Value,
        ctx: ToolContext,
    ) -> Result<String, ToolError> {
        let args: HandleArgs = self
            .delegator
            .supervisor()
            .parse_arguments(&self.spec, arguments)?;
        let options = WaitOptions {
            timeout: None,
            cancel: Some(ctx.cancel.clone()),
        };
        match self
            .delegator
            .supervisor()
            .wait_from(
                Reach::Tree(ctx.session.root_id),
                &args.delegation_id,
                options,
            )
            .await
        {
            Ok(WaitOutcome::Finished(r)) => Ok(finished(&self.delegator, &r)),
            Ok(WaitOutcome::Cancelled { delegation_id }) => {
                Ok(json!({"delegation_id": delegation_id, "status": "cancelled"}).to_string())
            }
            Err(e) => Err(self.delegator.supervisor().model_error(&e)),
        }
    }
}

/// `cancel_agent`: cancel one async child by its handle.
#[derive(Debug, Clone)]
pub struct CancelAgentTool {
    delegator: Delegator,
    spec: ToolSpec,
}

impl CancelAgentTool {
    /// The tool, named `cancel_agent`.
    pub fn new(delegator: Delegator) -> Self {
        Self {
            delegator,
            spec: handle_spec(
                "cancel_agent",
                "Cancel one async child delegation by its handle.",
            ),
        }
    }
}

#[async_trait]
impl DynTool for CancelAgentTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn exclusive(&self) -> bool {
        false
    }

    async fn call_json(
        &self,
        arguments: serde_json::Value,
        ctx: ToolContext,
    ) -> Result<String, ToolError> {
        let args: HandleArgs = self
            .delegator
            .supervisor()
            .parse_arguments(&self.spec, arguments)?;
        // A model reaches its own tree's handles only: another tree's id is unknown to it.
        let reach = Reach::Tree(ctx.session.root_id);
        match self
            .delegator
            .supervisor()
            .cancel_from(reach, &args.delegation_id)
        {
            Ok(running) => Ok(json!({
                "delegation_id": args.delegation_id,
                "status": if running { "cancelling" } else { "terminal" },
            })
            .to_string()),
            Err(e) => Err(self.delegator.supervisor().model_error(&e)),
        }
    }
}
