//! Transcript messages: what a model sees and what it said.

use serde::{Deserialize, Serialize};

/// Who wrote a [`Message`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Host-written instructions.
    System,
    /// Input from the user, the parent agent or the host.
    User,
    /// The model.
    Assistant,
    /// A tool's result.
    Tool,
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    /// Provider-assigned call id, echoed back in the [`ToolResult`].
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments, as the model wrote them (validated by the tool before it runs).
    pub arguments: serde_json::Value,
}

/// The outcome of one tool call, as the model sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolResult {
    /// The [`ToolCall::id`] this answers.
    pub call_id: String,
    /// The tool's name.
    pub name: String,
    /// The tool's output, or the error text the model should read.
    pub content: String,
    /// True when the call failed (bad arguments, tool error, permission denial).
    #[serde(default)]
    pub is_error: bool,
}

/// One message of a session's transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case", deny_unknown_fields)]
pub enum Message {
    /// Host-written instructions.
    System {
        /// The instructions.
        content: String,
    },
    /// Input to the agent.
    User {
        /// The input text.
        content: String,
    },
    /// A model turn: text and the tool calls it asked for.
    Assistant {
        /// The text the model produced (may be empty when it only called tools).
        #[serde(default)]
        content: String,
        /// Tool calls, in the order the model made them.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// A tool result.
    Tool(ToolResult),
}

impl Message {
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::User {
            content: content.into(),
        }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::System {
            content: content.into(),
        }
    }

    /// An assistant message with text only.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::Assistant {
            content: content.into(),
            tool_calls: Vec::new(),
        }
    }

    /// The author of this message.
    pub fn role(&self) -> Role {
        match self {
            Self::System { .. } => Role::System,
            Self::User { .. } => Role::User,
            Self::Assistant { .. } => Role::Assistant,
            Self::Tool(_) => Role::Tool,
        }
    }

    /// The message's text (a tool result's content for tool messages).
    pub fn text(&self) -> &str {
        match self {
            Self::System { content } | Self::User { content } | Self::Assistant { content, .. } => {
                content
            }
            Self::Tool(result) => &result.content,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_serialize_with_a_role_tag() {
        let m = Message::Assistant {
            content: "hi".into(),
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "echo".into(),
                arguments: serde_json::json!({"text": "x"}),
            }],
        };
        let json = serde_json::to_value(&m).unwrap();
        assert_eq!(json["role"], "assistant");
        assert_eq!(json["tool_calls"][0]["name"], "echo");
        let back: Message = serde_json::from_value(json).unwrap();
        assert_eq!(back, m);
        let tool = Message::Tool(ToolResult {
            call_id: "c1".into(),
            name: "echo".into(),
            content: "x".into(),
            is_error: false,
        });
        let json = serde_json::to_value(&tool).unwrap();
        assert_eq!(json["role"], "tool");
        assert_eq!(json["call_id"], "c1");
        assert_eq!(serde_json::from_value::<Message>(json).unwrap(), tool);
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let err = serde_json::from_str::<Message>(r#"{"role":"user","content":"x","extra":1}"#)
            .unwrap_err();
        assert!(err.to_string().contains("extra"), "{err}");
    }
}
