//! The A2A v1.0 wire format: the agent card, messages, tasks, stream items and JSON-RPC
//! envelopes, as ProtoJSON (camelCase fields, `TASK_STATE_*` and `ROLE_*` enums, a member's
//! name as the discriminator: no `kind`).
//!
//! Read leniently, as the official SDKs read: unknown fields are ignored, absent ones take
//! their defaults, an enum value this version does not know reads as `*_UNSPECIFIED`, and a
//! task state may come as its number. Written as the SDKs write: empty fields left out.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// The protocol version this crate speaks, sent in [`VERSION_HEADER`].
pub const PROTOCOL_VERSION: &str = "1.0";
/// The header naming the protocol version of a request.
pub const VERSION_HEADER: &str = "A2A-Version";
/// Where an agent publishes its card, under its base URL.
pub const CARD_PATH: &str = "/.well-known/agent-card.json";
/// The binding name of JSON-RPC in an agent card's interfaces (compared case-sensitively).
pub const JSONRPC_BINDING: &str = "JSONRPC";

fn is_false(b: &bool) -> bool {
    !*b
}

/// An agent's card: who it is and where it is reached.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AgentCard {
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Where it is reached, the preferred first.
    pub supported_interfaces: Vec<AgentInterface>,
    /// The agent's own version.
    pub version: String,
    /// What it offers.
    pub capabilities: Capabilities,
    /// The authentication schemes it takes, by name.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    pub security_schemes: serde_json::Map<String, Value>,
    /// Which schemes a caller must use.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub security_requirements: Vec<Value>,
    /// The media types it reads.
    pub default_input_modes: Vec<String>,
    /// The media types it writes.
    pub default_output_modes: Vec<String>,
    /// What it can do.
    pub skills: Vec<AgentSkill>,
}

impl AgentCard {
    /// The JSON-RPC interface of protocol 1.x (an empty version counts as 1.0, as the SDKs
    /// read it), if the card has one.
    pub fn jsonrpc_interface(&self) -> Option<&AgentInterface> {
        self.supported_interfaces.iter().find(|i| {
            i.protocol_binding == JSONRPC_BINDING
                && (i.protocol_version.is_empty()
                    || i.protocol_version == "1"
                    || i.protocol_version.starts_with("1."))
        })
    }
}

/// One way an agent is reached.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AgentInterface {
    /// The endpoint (for JSON-RPC: the URL every request is posted to).
    pub url: String,
    /// `JSONRPC`, `HTTP+JSON` or `GRPC`.
    pub protocol_binding: String,
    /// The protocol version it speaks (`1.0`).
    pub protocol_version: String,
    /// The tenant a request names, if the interface is shared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// What an agent offers.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Capabilities {
    /// It answers `SendStreamingMessage`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub streaming: Option<bool>,
    /// It takes push notification configurations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub push_notifications: Option<bool>,
}

/// One thing an agent can do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct AgentSkill {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Words to find it by.
    pub tags: Vec<String>,
    /// Example requests.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub examples: Vec<String>,
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// The client.
    #[serde(rename = "ROLE_USER")]
    User,
    /// The remote agent.
    #[serde(rename = "ROLE_AGENT")]
    Agent,
    /// Not said, or a value this version does not know.
    #[default]
    #[serde(rename = "ROLE_UNSPECIFIED", other)]
    Unspecified,
}

/// One part of a message or an artifact: text, a file (its bytes or a URL) or JSON data.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Part {
    /// Text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// A file's bytes, base64.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// A file's URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// JSON data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// The media type of a file or data.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// A file's name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: Some(text.into()),
            ..Self::default()
        }
    }

    /// The part as text a model reads: its text, its data as JSON, a file's URL, or a line
    /// naming a file sent inline (its bytes are not text).
    pub fn render(&self) -> String {
        if let Some(t) = &self.text {
            return t.clone();
        }
        if let Some(d) = &self.data {
            return d.to_string();
        }
        let name = self.filename.as_deref().unwrap_or("file");
        let media = self
            .media_type
            .as_deref()
            .map(|m| format!(", {m}"))
            .unwrap_or_default();
        if let Some(u) = &self.url {
            return format!("[{name}{media}: {u}]");
        }
        if let Some(r) = &self.raw {
            return format!("[{name}{media}: {} bytes inline]", r.len() / 4 * 3);
        }
        String::new()
    }
}

/// The text of `parts`, each part rendered ([`Part::render`]), joined by newlines.
pub fn text_of(parts: &[Part]) -> String {
    parts
        .iter()
        .map(Part::render)
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A message of a conversation with an agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Message {
    /// Its id, chosen by its sender.
    pub message_id: String,
    /// The conversation it belongs to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// The task it belongs to (a reply to a task waiting for input names it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Who wrote it.
    pub role: Role,
    /// Its content.
    pub parts: Vec<Part>,
    /// Anything else.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

impl Message {
    /// A message of the client's with one text part and a fresh id.
    pub fn user(text: impl Into<String>) -> Self {
        Self {
            message_id: uuid::Uuid::now_v7().to_string(),
            role: Role::User,
            parts: vec![Part::text(text)],
            ..Self::default()
        }
    }

    /// A message of the agent's with one text part and a fresh id.
    pub fn agent(text: impl Into<String>) -> Self {
        Self {
            message_id: uuid::Uuid::now_v7().to_string(),
            role: Role::Agent,
            parts: vec![Part::text(text)],
            ..Self::default()
        }
    }
}

/// Where a task stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum TaskState {
    /// Not said, or a value this version does not know.
    #[default]
    Unspecified,
    /// Received.
    Submitted,
    /// Being worked on.
    Working,
    /// Done (terminal).
    Completed,
    /// Failed (terminal).
    Failed,
    /// Canceled (terminal).
    Canceled,
    /// Waits for the client's input (interrupted).
    InputRequired,
    /// Refused by the agent (terminal).
    Rejected,
    /// Waits for the client's credentials (interrupted).
    AuthRequired,
}

const STATES: [(TaskState, &str); 9] = [
    (TaskState::Unspecified, "TASK_STATE_UNSPECIFIED"),
    (TaskState::Submitted, "TASK_STATE_SUBMITTED"),
    (TaskState::Working, "TASK_STATE_WORKING"),
    (TaskState::Completed, "TASK_STATE_COMPLETED"),
    (TaskState::Failed, "TASK_STATE_FAILED"),
    (TaskState::Canceled, "TASK_STATE_CANCELED"),
    (TaskState::InputRequired, "TASK_STATE_INPUT_REQUIRED"),
    (TaskState::Rejected, "TASK_STATE_REJECTED"),
    (TaskState::AuthRequired, "TASK_STATE_AUTH_REQUIRED"),
];

impl TaskState {
    /// Its wire name (`TASK_STATE_WORKING`).
    pub fn name(self) -> &'static str {
        STATES
            .iter()
            .find(|(s, _)| *s == self)
            .map_or("TASK_STATE_UNSPECIFIED", |(_, n)| n)
    }

    /// The state of a wire name; an unknown name is `Unspecified`, as the SDKs read it.
    pub fn from_name(name: &str) -> Self {
        STATES
            .iter()
            .find(|(_, n)| *n == name)
            .map_or(Self::Unspecified, |(s, _)| *s)
    }

    /// Completed, failed, canceled or rejected: nothing more happens to the task.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Canceled | Self::Rejected
        )
    }

    /// Waiting for the client: input or credentials.
    pub fn is_interrupted(self) -> bool {
        matches!(self, Self::InputRequired | Self::AuthRequired)
    }
}

impl fmt::Display for TaskState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for TaskState {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for TaskState {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = TaskState;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a task state's name or number")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TaskState, E> {
                Ok(TaskState::from_name(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<TaskState, E> {
                Ok(usize::try_from(v)
                    .ok()
                    .and_then(|i| STATES.get(i))
                    .map_or(TaskState::Unspecified, |(s, _)| *s))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<TaskState, E> {
                u64::try_from(v).map_or(Ok(TaskState::Unspecified), |v| self.visit_u64(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// A task's state, with the agent's message about it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TaskStatus {
    /// The state.
    pub state: TaskState,
    /// What the agent says about it (the question, when it waits for input).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// When it was set (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
}

/// Something a task produced.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Artifact {
    /// Its id within the task.
    pub artifact_id: String,
    /// Its name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its content.
    pub parts: Vec<Part>,
    /// Anything else.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// A unit of work an agent does for a client.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Task {
    /// Its id, chosen by the agent.
    pub id: String,
    /// The conversation it belongs to.
    pub context_id: String,
    /// Where it stands.
    pub status: TaskStatus,
    /// What it produced.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    /// The messages so far.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    /// Anything else (arbor reads `usage` here, and writes it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// A task's new status, streamed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TaskStatusUpdateEvent {
    /// The task.
    pub task_id: String,
    /// Its conversation.
    pub context_id: String,
    /// Its status now.
    pub status: TaskStatus,
    /// Anything else (arbor reads `usage` here, and writes it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// A task's artifact, or a chunk of one, streamed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TaskArtifactUpdateEvent {
    /// The task.
    pub task_id: String,
    /// Its conversation.
    pub context_id: String,
    /// The artifact (its parts are this chunk's).
    pub artifact: Artifact,
    /// The parts add to the artifact of the same id sent before.
    #[serde(skip_serializing_if = "is_false")]
    pub append: bool,
    /// The artifact's last chunk.
    #[serde(skip_serializing_if = "is_false")]
    pub last_chunk: bool,
    /// Anything else.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// One item of a stream (and the result of `SendMessage`): exactly one member is set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct StreamResponse {
    /// The task as it stands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task: Option<Task>,
    /// A message instead of a task.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// A status update.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_update: Option<TaskStatusUpdateEvent>,
    /// An artifact update.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifact_update: Option<TaskArtifactUpdateEvent>,
}

/// A [`StreamResponse`] as the one thing it holds.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    /// The task as it stands.
    Task(Task),
    /// A message instead of a task.
    Message(Message),
    /// A status update.
    Status(TaskStatusUpdateEvent),
    /// An artifact update.
    Artifact(TaskArtifactUpdateEvent),
}

impl StreamResponse {
    /// What it holds, if exactly one member is set.
    pub fn into_event(self) -> Option<StreamEvent> {
        match (
            self.task,
            self.message,
            self.status_update,
            self.artifact_update,
        ) {
            (Some(t), None, None, None) => Some(StreamEvent::Task(t)),
            (None, Some(m), None, None) => Some(StreamEvent::Message(m)),
            (None, None, Some(s), None) => Some(StreamEvent::Status(s)),
            (None, None, None, Some(a)) => Some(StreamEvent::Artifact(a)),
            _ => None,
        }
    }

    /// The item holding `event`.
    pub fn of(event: StreamEvent) -> Self {
        let mut out = Self::default();
        match event {
            StreamEvent::Task(t) => out.task = Some(t),
            StreamEvent::Message(m) => out.message = Some(m),
            StreamEvent::Status(s) => out.status_update = Some(s),
            StreamEvent::Artifact(a) => out.artifact_update = Some(a),
        }
        out
    }
}

/// How a message is to be handled.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SendConfiguration {
    /// The media types the client reads.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub accepted_output_modes: Vec<String>,
    /// How many messages of history the answer holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_length: Option<i32>,
    /// Answer at once instead of when the task ends or waits for input (`SendMessage`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub return_immediately: Option<bool>,
}

/// The parameters of `SendMessage` and `SendStreamingMessage`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SendMessageRequest {
    /// The message.
    pub message: Message,
    /// How to handle it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub configuration: Option<SendConfiguration>,
    /// Anything else.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// The parameters of `GetTask`, `CancelTask` and `SubscribeToTask`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TaskIdParams {
    /// The task.
    pub id: String,
    /// How many messages of history the answer holds (`GetTask`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_length: Option<i32>,
}

/// Token counts an agent reports in a task's or an update's `metadata.usage`
/// (`inputTokens`/`outputTokens`, or `input_tokens`/`output_tokens`); A2A itself has no
/// usage field, so this is the convention arbor reads and writes.
pub fn usage_in(metadata: Option<&Value>) -> Option<arbor_protocol::Usage> {
    let u = metadata?.get("usage")?;
    let n = |a: &str, b: &str| {
        u.get(a)
            .or_else(|| u.get(b))
            .and_then(Value::as_f64)
            .filter(|v| v.is_finite() && *v >= 0.0)
            .map(|v| v.min(u64::MAX as f64) as u64)
    };
    let input = n("inputTokens", "input_tokens");
    let output = n("outputTokens", "output_tokens");
    (input.is_some() || output.is_some())
        .then(|| arbor_protocol::Usage::new(input.unwrap_or_default(), output.unwrap_or_default()))
}

mod rpc;
pub use rpc::{RpcError, RpcRequest, RpcResponse, codes};

#[cfg(test)]
mod tests;
