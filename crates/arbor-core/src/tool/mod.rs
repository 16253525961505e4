//! Tools an agent can call.
//!
//! Write a tool against the typed [`Tool`] trait: its arguments are a Rust type whose JSON
//! Schema (draft-07, subschemas inlined) is generated with schemars and shown to the model,
//! and a call's arguments are validated by deserializing into that type before the tool runs.
//! [`DynTool`] is the erased form the run loop dispatches on; [`ToolSet`] is an agent's
//! immutable set of tools, looked up by name.

pub use crate::outcome::NestedSuspension;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use arbor_model::ToolSpec;
use arbor_protocol::RunId;
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Serialize;
use serde::de::DeserializeOwned;
use thiserror::Error;
use tokio_util::sync::CancellationToken;

use crate::error::{CoreError, CoreResult};
use crate::identity::Identity;
use crate::outcome::SessionRef;

pub mod ask;
pub mod builtin;
pub mod effect;

/// What a tool call knows about where it runs. The run loop builds it; a host calling a tool
/// itself (a test, say) starts from [`ToolContext::new`] (a field added later is not a
/// breaking change).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ToolContext {
    /// The calling agent's name.
    pub agent: String,
    /// The calling session and its place in its tree.
    pub session: SessionRef,
    /// The calling run.
    pub run_id: RunId,
    /// This call's id.
    pub call_id: String,
    /// Turn number within the run.
    pub turn: u32,
    /// Fires when the run is cancelled or times out. Long tools should watch it; the run
    /// loop also drops a tool's future when the run ends.
    pub cancel: CancellationToken,
    /// The identity the run acts as, if any (check its scopes before a side effect).
    pub identity: Option<Arc<Identity>>,
    /// For a tool declaring an idempotent external effect ([`ToolEffect::Idempotent`]):
    /// this call's stable idempotency key (the same when the call is resumed or retried).
    ///
    /// [`ToolEffect::Idempotent`]: crate::tool::effect::ToolEffect::Idempotent
    pub idempotency_key: Option<String>,
    /// The tree's effect store, if one is configured.
    pub effects: Option<Arc<dyn crate::tool::effect::EffectStore>>,
}

impl ToolContext {
    /// The context of call `call_id` of `agent`'s run `run_id`, turn 1, in `session`: not
    /// cancelled, without an identity, an idempotency key or an effect store.
    pub fn new(
        agent: impl Into<String>,
        session: SessionRef,
        run_id: RunId,
        call_id: impl Into<String>,
    ) -> Self {
        Self {
            agent: agent.into(),
            session,
            run_id,
            call_id: call_id.into(),
            turn: 1,
            cancel: CancellationToken::new(),
            identity: None,
            idempotency_key: None,
            effects: None,
        }
    }

    /// At this turn of the run.
    #[must_use]
    pub fn turn(mut self, turn: u32) -> Self {
        self.turn = turn;
        self
    }

    /// Cancelled by this token.
    #[must_use]
    pub fn cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = cancel;
        self
    }

    /// Acting as this identity.
    #[must_use]
    pub fn identity(mut self, identity: Option<Arc<Identity>>) -> Self {
        self.identity = identity;
        self
    }

    /// With this idempotency key and effect store (a tool with an idempotent effect).
    #[must_use]
    pub fn effects(
        mut self,
        idempotency_key: Option<String>,
        effects: Option<Arc<dyn crate::tool::effect::EffectStore>>,
    ) -> Self {
        self.idempotency_key = idempotency_key;
        self.effects = effects;
        self
    }
}

/// A failed tool call.
#[derive(Debug, Clone, Error, PartialEq)]
#[non_exhaustive]
pub enum ToolError {
    /// The model reads this message as the tool's result and the run goes on.
    #[error("{0}")]
    ToModel(String),
    /// The run ends `failed` with this message.
    #[error("{0}")]
    Fatal(String),
    /// The call delegated and the child's run suspended on approvals: the calling run
    /// suspends too, with the child's decisions surfacing as its own.
    #[error("Delegated run suspended")]
    Suspended(Box<NestedSuspension>),
}

/// A typed tool.
#[async_trait]
pub trait Tool: Send + Sync + 'static {
    /// The arguments. Mark it `#[serde(deny_unknown_fields)]` so stray keys are refused.
    type Args: DeserializeOwned + JsonSchema + Send;
    /// The output. A `String` reaches the model as it is; other types as JSON.
    type Output: Serialize + Send;

    /// The tool's name, unique within an agent.
    fn name(&self) -> &str;

    /// What the tool does, for the model.
    fn description(&self) -> &str;

    /// An exclusive tool runs alone: a turn that calls it runs all of its calls one at a
    /// time.
    fn exclusive(&self) -> bool {
        false
    }

    /// Whether a successful call writes an artifact (a file, a document, a record someone
    /// will read). The registry counts them: a child that finished with no reply and no
    /// artifact is a silent no-op.
    fn writes_artifact(&self) -> bool {
        false
    }

    /// What the tool does outside the runtime (default: nothing). See [`crate::tool::effect`].
    fn effect(&self) -> crate::tool::effect::ToolEffect {
        crate::tool::effect::ToolEffect::None
    }

    /// Runs one call.
    async fn call(&self, args: Self::Args, ctx: ToolContext) -> Result<Self::Output, ToolError>;
}

/// The erased form of a tool: its spec and a call on raw JSON arguments.
#[async_trait]
pub trait DynTool: fmt::Debug + Send + Sync {
    /// Name, description and argument schema.
    fn spec(&self) -> &ToolSpec;

    /// See [`Tool::exclusive`].
    fn exclusive(&self) -> bool;

    /// See [`Tool::writes_artifact`].
    fn writes_artifact(&self) -> bool {
        false
    }

    /// See [`Tool::effect`].
    fn effect(&self) -> crate::tool::effect::ToolEffect {
        crate::tool::effect::ToolEffect::None
    }

    /// Whether a call waits for a person instead of running: only [`ask::AskHuman`]'s (the
    /// run suspends with the question; the answer is the call's result).
    fn asks_human(&self) -> bool {
        false
    }

    /// Whether every call waits for a person's decision before it runs, even in a run that
    /// does not gate its calls (a merge into the person's checkout, say). Such a call is
    /// held like any gated call: standing decisions and run-wide verdicts apply, the run
    /// suspends with it pending (the turn's other calls are let through: they run at once),
    /// and it runs once, when approved. Default: no.
    fn requires_approval(&self) -> bool {
        false
    }

    /// What a person deciding a held call should see beyond its arguments (a merge's
    /// files and lines, say), as JSON; computed when the call starts waiting and kept
    /// beside the run's checkpoint (see [`crate::approval::review`]), so every surface
    /// lists it with the pending decision and the call, once approved, can check that what
    /// it does is still what was shown. `None` (the default): nothing beyond the arguments.
    async fn review(
        &self,
        _arguments: &serde_json::Value,
        _ctx: &ToolContext,
    ) -> Option<serde_json::Value> {
        None
    }

    /// Validates `arguments` and runs the call; returns the text the model reads.
    async fn call_json(
        &self,
        arguments: serde_json::Value,
        ctx: ToolContext,
    ) -> Result<String, ToolError>;
}

const _: fn(&dyn DynTool) = |_| {};

/// The JSON Schema of `T` as tools advertise it: draft-07 with subschemas inlined, without
/// the `$schema` key.
pub fn tool_schema<T: JsonSchema>() -> serde_json::Value {
    let mut settings = schemars::generate::SchemaSettings::draft07();
    settings.inline_subschemas = true;
    let schema = settings.into_generator().into_root_schema_for::<T>();
    let mut value = schema.to_value();
    if let Some(obj) = value.as_object_mut() {
        obj.remove("$schema");
    }
    value
}

/// Adapts a typed [`Tool`] to [`DynTool`].
pub struct Typed<T: Tool> {
    tool: T,
    spec: ToolSpec,
    _args: PhantomData<fn() -> T::Args>,
}

impl<T: Tool> Typed<T> {
    /// Wraps `tool`, generating its schema once.
    pub fn new(tool: T) -> Self {
        let spec = ToolSpec {
            name: tool.name().to_owned(),
            description: tool.description().to_owned(),
            parameters: tool_schema::<T::Args>(),
        };
        Self {
            tool,
            spec,
            _args: PhantomData,
        }
    }
}

impl<T: Tool> fmt::Debug for Typed<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Typed")
            .field("name", &self.spec.name)
            .finish()
    }
}

/// The longest prefix of `text` within `cap` bytes that ends on a character boundary: where
/// a tool's output is cut to a cap (the caller adds its own marker saying what was left out).
pub fn prefix_within(text: &str, cap: usize) -> &str {
    if text.len() <= cap {
        return text;
    }
    let mut end = cap;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Renders a tool output as the text the model reads.
pub fn output_text<O: Serialize>(output: &O) -> Result<String, ToolError> {
    match serde_json::to_value(output) {
        Ok(serde_json::Value::String(s)) => Ok(s),
        Ok(value) => Ok(value.to_string()),
        Err(e) => Err(ToolError::Fatal(format!(
            "tool output does not serialize: {e}"
        ))),
    }
}

#[async_trait]
impl<T: Tool> DynTool for Typed<T> {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn exclusive(&self) -> bool {
        self.tool.exclusive()
    }

    fn writes_artifact(&self) -> bool {
        self.tool.writes_artifact()
    }

    fn effect(&self) -> crate::tool::effect::ToolEffect {
        self.tool.effect()
    }

    async fn call_json(
        &self,
        arguments: serde_json::Value,
        ctx: ToolContext,
    ) -> Result<String, ToolError> {
        let args: T::Args = serde_json::from_value(arguments).map_err(|e| {
            ToolError::ToModel(format!("invalid arguments for `{}`: {e}", self.spec.name))
        })?;
        let output = self.tool.call(args, ctx).await?;
        output_text(&output)
    }
}

/// Checks a tool name: 1–64 characters of ASCII letters, digits, `_` and `-`.
pub fn validate_tool_name(name: &str) -> CoreResult<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(CoreError::validation(format!(
            "invalid tool name {name:?}: use 1-64 ASCII letters, digits, '_' or '-'"
        )))
    }
}

/// An agent's tools: immutable, cheap to clone, looked up by name.
#[derive(Debug, Clone, Default)]
pub struct ToolSet {
    tools: Arc<[Arc<dyn DynTool>]>,
    specs: Arc<[ToolSpec]>,
    index: Arc<HashMap<String, usize, foldhash::fast::RandomState>>,
}

impl ToolSet {
    /// A set of these tools; names must be valid and unique.
    pub fn new(tools: Vec<Arc<dyn DynTool>>) -> CoreResult<Self> {
        let mut index =
            HashMap::with_capacity_and_hasher(tools.len(), foldhash::fast::RandomState::default());
        for (i, tool) in tools.iter().enumerate() {
            let name = &tool.spec().name;
            validate_tool_name(name)?;
            // The name is what the checkpoint knows a question by: one goes with the other.
            if (name == ask::ASK_HUMAN) != tool.asks_human() {
                return Err(CoreError::validation(format!(
                    "tool {name:?}: the name {:?} is reserved for arbor's own question tool \
                     (arbor_core::tool::ask::AskHuman), and only that tool asks a person",
                    ask::ASK_HUMAN
                )));
            }
            if index.insert(name.clone(), i).is_some() {
                return Err(CoreError::validation(format!(
                    "duplicate tool name {name:?}"
                )));
            }
        }
        let specs: Vec<ToolSpec> = tools.iter().map(|t| t.spec().clone()).collect();
        Ok(Self {
            tools: Arc::from(tools),
            specs: Arc::from(specs),
            index: Arc::new(index),
        })
    }

    /// The tool with this name.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn DynTool>> {
        self.index.get(name).map(|&i| &self.tools[i])
    }

    /// The specs shown to the model, in the order the tools were added.
    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    /// How many tools.
    pub fn len(&self) -> usize {
        self.tools.len()
    }

    /// True when there is none.
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }
}
