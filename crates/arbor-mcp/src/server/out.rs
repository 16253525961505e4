//! What a call answers ([`Out`]), and how it becomes an MCP tool result.

use rmcp::model::{CallToolResult, ContentBlock};

/// What a call answers.
#[derive(Debug)]
pub(crate) enum Out {
    /// A JSON value.
    Value(serde_json::Value),
    /// A tool error, as the client's model reads it.
    Error(String),
}

impl Out {
    /// The text a model tool returned: JSON when it is, else plain text.
    pub(crate) fn text(text: String) -> Self {
        match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(v @ serde_json::Value::Object(_)) => Out::Value(v),
            _ => Out::Value(serde_json::Value::String(text)),
        }
    }

    pub(crate) fn into_result(self) -> CallToolResult {
        match self {
            Out::Value(v @ serde_json::Value::Object(_)) => CallToolResult::structured(v),
            Out::Value(serde_json::Value::String(s)) => {
                CallToolResult::success(vec![ContentBlock::text(s)])
            }
            Out::Value(v) => CallToolResult::success(vec![ContentBlock::text(v.to_string())]),
            Out::Error(m) => CallToolResult::error(vec![ContentBlock::text(m)]),
        }
    }
}
