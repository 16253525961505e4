//! The model-facing `spawn_agent` tool (`wait_agent` and `cancel_agent` are in `handle.rs`).
//!
//! The spawn tool's schema is closed: `child_id` is an enum of the supervisor's advertised
//! ids and every other key is refused, naming it. Model arguments can never supply tools,
//! identity, scopes or higher limits. Errors reach the model as tool errors that say what
//! failed (which limit, with its maximum and observed value), redacted. Arguments are checked
//! against each tool's schema before parsing: an argument error names the field, the class
//! of the value given and what is accepted.

use arbor_model::{ThinkingLevel, ToolChoice, ToolSpec};
use arbor_protocol::SpawnPoint;
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use crate::error::CoreError;
use crate::supervisor::config::policy::{
    HARD_MILESTONE_EVERY_TURNS, Lifetime, PolicyInput, Report,
};
use crate::supervisor::request::{DelegationRequest, Mode};
use crate::supervisor::runtime::Delegator;
use crate::supervisor::runtime::Supervisor;
use crate::supervisor::tools::arguments;
use crate::supervisor::tools::model_tool::ModelTool;
use crate::supervisor::tools::report::{self, ChildStarted, finished};
use crate::tool::{ToolContext, ToolError};

/// `milestone`: when a `milestones` report offers events.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Milestone {
    /// Offer only the events of every N-th turn.
    #[schemars(range(min = 1, max = HARD_MILESTONE_EVERY_TURNS))]
    every_turns: Option<u32>,
}

/// `controls`: the child's model controls (a host's `extra` fields are not the model's to set).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SpawnControls {
    /// Sampling temperature.
    #[schemars(range(min = 0, max = 2))]
    temperature: Option<f64>,
    /// Nucleus sampling.
    #[schemars(extend("exclusiveMinimum" = 0, "maximum" = 1))]
    top_p: Option<f64>,
    /// A seed, for reproducible sampling.
    seed: Option<u64>,
    /// Where its answer stops.
    stop: Option<Vec<String>>,
    /// Its longest answer, in tokens.
    #[schemars(range(min = 1))]
    max_output_tokens: Option<u32>,
    /// `auto`, `required`, `none`, or one tool's name.
    tool_choice: Option<String>,
    /// Whether it may call several tools at once.
    parallel_tool_calls: Option<bool>,
}

impl From<SpawnControls> for arbor_model::Controls {
    fn from(c: SpawnControls) -> Self {
        let mut controls = Self::default();
        controls.temperature = c.temperature;
        controls.top_p = c.top_p;
        controls.seed = c.seed;
        controls.stop = c.stop.unwrap_or_default();
        controls.max_output_tokens = c.max_output_tokens;
        controls.tool_choice = c.tool_choice.map(|t| match t.trim() {
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            "none" => ToolChoice::None,
            name => ToolChoice::Tool(name.to_owned()),
        });
        controls.parallel_tool_calls = c.parallel_tool_calls;
        controls
    }
}

/// The arguments of `spawn_agent`. The tool's parameter schema is generated from this type
/// ([`spawn_schema`]), with the offered child ids patched in as `child_id`'s enum, so what
/// the model is shown, what [`arguments::check`] checks and what is parsed cannot drift.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpawnArgs {
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
    /// The child's model controls; default its own.
    controls: Option<SpawnControls>,
    /// A pool for the child's whole subtree, taken from yours: it gets what yours has
    /// left if you ask for more.
    budget: Option<SpawnBudget>,
    /// A JSON Schema the child's answer must match: you get the value, checked.
    #[schemars(with = "Option<serde_json::Map<String, serde_json::Value>>")]
    output_schema: Option<serde_json::Value>,
    /// How many times a mismatching answer is sent back to the child (default 1).
    #[schemars(range(max = 5))]
    output_retries: Option<u32>,
    /// How much of your conversation the child starts with: `none` (default), `all`, or
    /// `{"last_turns": N}`.
    context: Option<crate::session::fork::ForkContext>,
    /// When too many children run already: `refuse` (default) fails at once; `queue` waits
    /// for a free slot (the child is listed as `queued` until it starts).
    on_full: Option<crate::supervisor::request::OnFull>,
}

/// `budget`: a pool for the child's whole subtree.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpawnBudget {
    /// Tokens (input plus output) the child and its descendants may spend.
    #[schemars(range(min = 1))]
    max_tree_tokens: Option<u64>,
    /// Money the child and its descendants may spend, in the price table's currency.
    #[schemars(extend("exclusiveMinimum" = 0))]
    max_tree_cost: Option<f64>,
}

impl SpawnBudget {
    fn budget(&self) -> Result<crate::budget::Budget, ToolError> {
        crate::budget::Budget::from_units(self.max_tree_tokens, self.max_tree_cost, None)
            .map_err(|(field, message)| ToolError::ToModel(format!("{field}: {message}")))
    }
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
/// The schema is generated once per process (it depends on [`SpawnArgs`] only); each tool
/// gets a copy with its own `child_id` list.
fn spawn_schema(ids: &[String]) -> serde_json::Value {
    static BASE: std::sync::OnceLock<serde_json::Value> = std::sync::OnceLock::new();
    let mut schema = BASE
        .get_or_init(|| {
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
            schema
        })
        .clone();
    schema["properties"]["child_id"]["enum"] = json!(ids);
    schema
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

impl SpawnAgentTool {
    /// The tool as a lean set offers it: `async` and `lifetime: session` only when the set
    /// can wait (`can_wait`), `model` and `thinking` only when a child offered has a choice,
    /// and a shorter description.
    #[must_use]
    pub(crate) fn lean(mut self, can_wait: bool) -> Self {
        let sup = self.delegator.supervisor();
        let entries: Vec<&crate::supervisor::ChildEntry> = self
            .allowed
            .iter()
            .filter_map(|id| sup.catalog().get(id).map(|(_, e)| e))
            .collect();
        let models = entries.iter().any(|e| e.models().len() > 1);
        let thinking = entries.iter().any(|e| {
            let mut models: Vec<Option<&str>> = e.models().into_iter().map(Some).collect();
            models.push(None);
            models
                .into_iter()
                .any(|m| e.supported_thinking(m).len() > 1)
        });
        let params = &mut self.spec.parameters;
        if let Some(props) = params["properties"].as_object_mut() {
            if !models {
                props.remove("model");
            }
            if !thinking {
                props.remove("thinking");
            }
            if !can_wait {
                props.remove("lifetime");
                props.insert(
                    "mode".to_owned(),
                    json!({
                        "type": "string",
                        "enum": ["sync", "message"],
                        "description": "`sync` (default) waits for the answer; `message` \
                                        answers by message on a later turn."
                    }),
                );
            }
        }
        let listed: Vec<String> = self
            .allowed
            .iter()
            .map(|id| match sup.child_description(id) {
                Some(d) => format!("{id} ({d})"),
                None => id.clone(),
            })
            .collect();
        self.spec.description = format!(
            "Delegate a task to a child agent: {}. Name each child to address it later.{}",
            listed.join(", "),
            if can_wait {
                " mode async returns a handle for wait_agent; message answers by message on a \
                 later turn (end your turn to receive it)."
            } else {
                " mode message answers by message on a later turn (end your turn to receive \
                 it)."
            }
        );
        self
    }
}

#[async_trait]
impl ModelTool for SpawnAgentTool {
    type Args = SpawnArgs;

    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn supervisor(&self) -> &Supervisor {
        self.delegator.supervisor()
    }

    async fn call(&self, args: SpawnArgs, ctx: ToolContext) -> Result<String, ToolError> {
        let spawn_point = SpawnPoint {
            run_id: ctx.run_id,
            turn: ctx.turn,
        };
        let HostSpawn { mut request, mode } = self.request_of(
            args,
            ctx.session,
            Some(ctx.cancel.clone()),
            Some(spawn_point),
        )?;
        request.spawn_call = Some(ctx.call_id.clone());
        let thinking = request.thinking;
        let handle = match mode {
            Mode::Sync => None,
            Mode::Async => Some(self.delegator.delegate_async(request.clone()).await),
            Mode::Message => Some(self.delegator.spawn(request.clone()).await),
        };
        if let Some(handle) = handle {
            let handle = handle.map_err(|e| self.delegator.supervisor().model_error(&e))?;
            let record = self.record_of(handle.session_id).await;
            let mut started = ChildStarted::new(handle, thinking);
            started.budget = record.as_ref().and_then(crate::budget::Granted::of);
            // Waiting for a slot (`on_full: queue`): said so until it starts.
            if record.is_some_and(|r| r.status == arbor_protocol::SessionStatus::Queued) {
                started.status = report::HandleStatus::Queued;
            }
            return Ok(report::text(&started));
        }
        match self.delegator.delegate(request).await {
            Ok(r) => {
                let mut answer = report::answer(&self.delegator, &r);
                answer.budget = self.granted(r.session_id).await;
                Ok(report::text(&answer))
            }
            // The child waits for approvals: this call (and its run) wait with it.
            Err(CoreError::Suspended(nested)) => Err(ToolError::Suspended(nested)),
            Err(e) => Err(self.delegator.supervisor().model_error(&e)),
        }
    }
}

impl SpawnAgentTool {
    /// The pool a child was granted, as its record keeps it.
    async fn granted(&self, session: arbor_protocol::SessionId) -> Option<crate::budget::Granted> {
        crate::budget::Granted::of(&self.record_of(session).await?)
    }

    /// A child's record, as the store has it now.
    async fn record_of(
        &self,
        session: arbor_protocol::SessionId,
    ) -> Option<arbor_store::SessionRecord> {
        let store = self.delegator.supervisor().store();
        store.session(session).await.ok().flatten()
    }
}

/// A spawn as a host acting as a parent session makes it from a model's arguments (see
/// [`SpawnAgentTool::host_request`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HostSpawn {
    /// The request, for [`Supervisor::delegate_async`] or [`Supervisor::spawn`].
    pub request: DelegationRequest,
    /// How the arguments asked to take the answer.
    pub mode: Mode,
}

impl SpawnAgentTool {
    /// Checks and parses a `spawn_agent` call exactly as for a model (the same closed
    /// schema, the same errors naming the field, the same allow-list) into the request a
    /// host acting as the parent session `parent` makes: an MCP client, say, driving a root
    /// session itself. No calling run spawns it, so a child the host joins that stops for an
    /// approval is listed at the root and resumed on its own
    /// ([`Supervisor::resume_child`]). A host takes `sync` by starting the child with
    /// [`Supervisor::delegate_async`] and waiting on its handle.
    pub fn host_request(
        &self,
        arguments: serde_json::Value,
        parent: crate::SessionRef,
    ) -> Result<HostSpawn, ToolError> {
        let args: SpawnArgs = self
            .delegator
            .supervisor()
            .parse_arguments(ModelTool::spec(self), arguments)?;
        self.request_of(args, parent, None, None)
    }

    /// The text a parent reads for a finished delegation: the [`ChildAnswer`] JSON, its
    /// text redacted and cut to the parent's `max_result_bytes`.
    ///
    /// [`ChildAnswer`]: crate::supervisor::tools::ChildAnswer
    pub fn answer_text(&self, result: &crate::supervisor::DelegationResult) -> String {
        finished(&self.delegator, result)
    }

    /// The text a parent reads for a child started without waiting: the [`ChildStarted`]
    /// JSON.
    pub fn started_text(
        &self,
        handle: crate::supervisor::AsyncHandle,
        thinking: Option<ThinkingLevel>,
    ) -> String {
        report::text(&ChildStarted::new(handle, thinking))
    }

    fn request_of(
        &self,
        args: SpawnArgs,
        parent: crate::SessionRef,
        cancel: Option<tokio_util::sync::CancellationToken>,
        spawned_by: Option<SpawnPoint>,
    ) -> Result<HostSpawn, ToolError> {
        // The schema's enum holds exactly the offered ids; this guards a hand-built call.
        if !self.allowed.contains(&args.child_id) {
            return Err(ToolError::ToModel("Unknown child id".to_owned()));
        }
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
        let budget = args.budget.as_ref().map(SpawnBudget::budget).transpose()?;
        let output_schema = match args.output_schema {
            Some(schema) => Some(
                crate::output::OutputSchema::new(schema)
                    .and_then(|o| {
                        o.retries(
                            args.output_retries
                                .unwrap_or(crate::output::DEFAULT_OUTPUT_RETRIES),
                        )
                    })
                    .map_err(|e| ToolError::ToModel(e.to_string()))?,
            ),
            None if args.output_retries.is_some() => {
                return Err(ToolError::ToModel(
                    "output_retries: only with output_schema".to_owned(),
                ));
            }
            None => None,
        };
        let request = DelegationRequest {
            child_id: args.child_id,
            input: args.input,
            thread_id: args.thread_id,
            name: args.name,
            model: args.model,
            thinking: args.thinking,
            controls: args.controls.map(Into::into),
            budget: budget.filter(|b| !b.is_empty()),
            output_schema,
            context: args.context,
            on_full: args.on_full,
            policy,
            cancel,
            parent: Some(parent),
            spawned_by,
            ..DelegationRequest::default()
        };
        Ok(HostSpawn { request, mode })
    }
}
