//! The provider trait and the values it exchanges.

use std::fmt;
use std::pin::Pin;

use arbor_protocol::{Message, ToolCall, Usage};
use async_trait::async_trait;
use futures::Stream;
use serde::{Deserialize, Serialize};

use crate::error::ModelError;
use crate::thinking::ThinkingLevel;

/// A tool the model may call: its name, what it does and the JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The tool's name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// One provider call: borrowed, so building it each turn copies nothing. Built with
/// [`ModelRequest::new`] and its setters (a field added later is not a breaking change).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ModelRequest<'a> {
    /// The model to ask.
    pub model: &'a str,
    /// The system prompt.
    pub system: Option<&'a str>,
    /// The conversation so far, oldest first.
    pub messages: &'a [Message],
    /// The tools on offer.
    pub tools: &'a [ToolSpec],
    /// How much the model should reason: `None` leaves it to the provider's default; `off`
    /// asks for none (nothing is sent). Admission has checked the model supports it.
    pub thinking: Option<ThinkingLevel>,
    /// Sampling, length and tool controls (none: the provider's defaults). Admission has
    /// checked the wire can carry them ([`Controls::unsupported_by`](crate::Controls::unsupported_by)).
    pub controls: Option<&'a crate::Controls>,
    /// The reasoning kept with the conversation's assistant messages, by the id of each
    /// one's first tool call: a wire that requires it (Anthropic's, in a tool loop with
    /// thinking) sends the signed blocks back with their message.
    pub reasoning: Option<&'a Reasonings>,
    /// The JSON Schema the final answer must match (a child's `output_schema`): a wire that
    /// can constrain the answer to it sends it (OpenAI's `response_format`); the runtime
    /// checks the answer either way.
    pub output_schema: Option<&'a serde_json::Value>,
    /// The session the turn is of, when the runtime says: a provider that keeps state per
    /// conversation on its side (a remote A2A agent's `contextId`) keys it by this.
    pub session: Option<arbor_protocol::SessionId>,
}

/// Reasoning blocks by the id of the first tool call of the assistant message they
/// preceded ([`ModelRequest::reasoning`]).
pub type Reasonings = std::collections::BTreeMap<String, Vec<arbor_protocol::Reasoning>>;

impl<'a> ModelRequest<'a> {
    /// A call of `model` on `messages`, without a system prompt, tools or a thinking level.
    pub fn new(model: &'a str, messages: &'a [Message]) -> Self {
        Self {
            model,
            system: None,
            messages,
            tools: &[],
            thinking: None,
            controls: None,
            reasoning: None,
            output_schema: None,
            session: None,
        }
    }

    /// Of this session.
    #[must_use]
    pub fn session(mut self, session: Option<arbor_protocol::SessionId>) -> Self {
        self.session = session;
        self
    }

    /// With the JSON Schema the final answer must match.
    #[must_use]
    pub fn output_schema(mut self, schema: Option<&'a serde_json::Value>) -> Self {
        self.output_schema = schema;
        self
    }

    /// With the reasoning kept beside the conversation's assistant messages.
    #[must_use]
    pub fn reasoning(mut self, reasoning: Option<&'a Reasonings>) -> Self {
        self.reasoning = reasoning;
        self
    }

    /// With these controls.
    #[must_use]
    pub fn controls(mut self, controls: Option<&'a crate::Controls>) -> Self {
        self.controls = controls;
        self
    }

    /// With this system prompt.
    #[must_use]
    pub fn system(mut self, system: Option<&'a str>) -> Self {
        self.system = system;
        self
    }

    /// With these tools on offer.
    #[must_use]
    pub fn tools(mut self, tools: &'a [ToolSpec]) -> Self {
        self.tools = tools;
        self
    }

    /// With this thinking level.
    #[must_use]
    pub fn thinking(mut self, thinking: Option<ThinkingLevel>) -> Self {
        self.thinking = thinking;
        self
    }
}

/// How a provider turn finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// The model finished its answer.
    Stop,
    /// The model asked for tool calls.
    ToolCalls,
    /// The provider's output limit cut the answer.
    Length,
    /// The provider refused.
    Refusal,
    /// Another reason, as the provider named it.
    Other(String),
}

/// One item of a provider stream.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelEvent {
    /// Text the model produced.
    TextDelta(String),
    /// A complete tool call (providers that stream fragments assemble them first).
    ToolCall(ToolCall),
    /// A complete block of the model's reasoning (a thinking block, its signature with it,
    /// or a server's `reasoning_content`), sent when it ends, before the turn's text and
    /// calls are over.
    Reasoning(arbor_protocol::Reasoning),
    /// Usage of this turn. Providers may send it more than once; the last value counts.
    Usage(Usage),
    /// The model the provider says answered (OpenAI's `model`, Anthropic's
    /// `message.model`), sent once, just before `Finished`, when the provider names it.
    ResponseModel(String),
    /// Where the provider's work stands, when it says (a remote A2A agent's task status:
    /// its state, such as `TASK_STATE_WORKING`, and its message, if any). Not part of the
    /// answer.
    Status {
        /// The state, as the provider names it.
        state: String,
        /// What the provider says about it.
        message: Option<String>,
    },
    /// The turn is over.
    Finished(FinishReason),
}

/// The stream a provider call returns. Dropping it cancels the call.
pub type ModelStream = Pin<Box<dyn Stream<Item = Result<ModelEvent, ModelError>> + Send>>;

/// A source of model turns.
///
/// Implementations must be cancel-safe by drop: when the caller drops the future or the
/// stream, the call stops and nothing is left running.
#[async_trait]
pub trait ModelProvider: fmt::Debug + Send + Sync {
    /// A short name for reports and errors (`scripted`, `openai`, …).
    fn name(&self) -> &str;

    /// Starts one turn.
    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError>;

    /// Checks that `model` can be used (configured, offered, credentials accepted). The
    /// default accepts every model.
    async fn preflight(&self, model: &str) -> Result<(), ModelError> {
        let _ = model;
        Ok(())
    }

    /// The models this provider offers, if it can list them. `None` (the default) means it
    /// cannot say: a caller then goes by the models it was configured with.
    async fn list_models(&self) -> Result<Option<Vec<String>>, ModelError> {
        Ok(None)
    }

    /// The thinking levels `model` supports, if this provider declares them. `None` (the
    /// default) means it does not say: a caller then goes by its own declaration, else
    /// treats the model as supporting only `off`.
    fn thinking_levels(&self, model: &str) -> Option<Vec<ThinkingLevel>> {
        let _ = model;
        None
    }

    /// The wire format it speaks, for the controls it can carry
    /// ([`Controls::unsupported_by`](crate::Controls::unsupported_by)). Default
    /// [`Wire::Own`](crate::Wire::Own): it reads [`ModelRequest::controls`] itself.
    fn wire(&self) -> crate::Wire {
        crate::Wire::Own
    }

    /// The most tokens a turn may produce when the request's controls set no
    /// `max_output_tokens`: what it sends as the cap (Anthropic's `max_tokens`), if it sends
    /// one. A budget reserves it as a call's output. Default `None`: no cap it knows of.
    fn max_output_tokens(&self) -> Option<u32> {
        None
    }

    /// The run that made the calls `call_ids` (tool calls this provider's turns produced)
    /// will never be resumed: its session was deleted, or the run that carried it ended,
    /// while they waited for their answers. A provider that keeps work waiting on its side
    /// for those answers lets go of it (a remote A2A agent's task in `input-required` is
    /// cancelled). Best effort: a failure is the caller's to log, never to fail on. The
    /// default keeps nothing and does nothing.
    async fn abandon(&self, call_ids: &[String]) -> Result<(), ModelError> {
        let _ = call_ids;
        Ok(())
    }
}

#[async_trait]
impl<T: ModelProvider + ?Sized> ModelProvider for std::sync::Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        (**self).stream(request).await
    }

    async fn preflight(&self, model: &str) -> Result<(), ModelError> {
        (**self).preflight(model).await
    }

    async fn list_models(&self) -> Result<Option<Vec<String>>, ModelError> {
        (**self).list_models().await
    }

    fn thinking_levels(&self, model: &str) -> Option<Vec<ThinkingLevel>> {
        (**self).thinking_levels(model)
    }

    fn wire(&self) -> crate::Wire {
        (**self).wire()
    }

    fn max_output_tokens(&self) -> Option<u32> {
        (**self).max_output_tokens()
    }

    async fn abandon(&self, call_ids: &[String]) -> Result<(), ModelError> {
        (**self).abandon(call_ids).await
    }
}

// The trait must stay object safe: agents hold `Arc<dyn ModelProvider>`.
const _: fn(&dyn ModelProvider) = |_| {};
