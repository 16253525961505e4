//! One MCP server's tool as an agent's tool: named `mcp__SERVER__TOOL`, described and
//! shaped as the server lists it, called with a time limit and the run's cancellation, its
//! result cut to the server's cap. It passes the agent's permission, approval gate, limits,
//! redaction and events like any tool. A tool the server marks read-only has no effect;
//! every other is an external effect.

use std::sync::Arc;
use std::time::Duration;

use arbor_core::{DynTool, ToolContext, ToolEffect, ToolError};
use arbor_model::ToolSpec;
use async_trait::async_trait;
use rmcp::model::CallToolRequestParams;
use rmcp::service::ServiceError;

use super::config::{ServerConfig, tool_name};
use super::connection::Connection;

/// An MCP server's tool, as an agent calls it.
#[derive(Debug)]
pub struct McpTool {
    conn: Arc<Connection>,
    tool: String,
    spec: ToolSpec,
    timeout: Duration,
    cap: usize,
    effect: ToolEffect,
}

impl McpTool {
    pub(crate) fn new(
        conn: Arc<Connection>,
        tool: &rmcp::model::Tool,
        config: &ServerConfig,
    ) -> Option<Self> {
        let name = tool_name(&conn.server, &tool.name)?;
        let description = tool.description.as_deref().unwrap_or("").to_owned();
        let read_only = tool
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false);
        Some(Self {
            spec: ToolSpec {
                name,
                description: format!("[MCP server {}] {description}", conn.server),
                parameters: serde_json::Value::Object((*tool.input_schema).clone()),
            },
            tool: tool.name.to_string(),
            conn,
            timeout: config.call_timeout(),
            cap: config.result_cap(),
            effect: if read_only {
                ToolEffect::None
            } else {
                ToolEffect::External
            },
        })
    }

    fn failed(&self, e: &ServiceError) -> ToolError {
        let (server, tool) = (&self.conn.server, &self.tool);
        ToolError::ToModel(match e {
            ServiceError::TransportClosed => format!(
                "MCP server {server} is gone (its process exited or its connection closed): {tool} got no answer"
            ),
            ServiceError::McpError(data) => format!(
                "MCP server {server}: {tool} failed: {} (error {})",
                data.message, data.code.0
            ),
            ServiceError::Timeout { .. } => format!(
                "MCP server {server}: {tool} took longer than {} ms and was cancelled",
                self.timeout.as_millis()
            ),
            other => format!("MCP server {server}: {tool} failed: {other}"),
        })
    }
}

#[async_trait]
impl DynTool for McpTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn exclusive(&self) -> bool {
        false
    }

    fn effect(&self) -> ToolEffect {
        self.effect
    }

    async fn call_json(
        &self,
        arguments: serde_json::Value,
        ctx: ToolContext,
    ) -> Result<String, ToolError> {
        let arguments = match arguments {
            serde_json::Value::Object(map) => map,
            serde_json::Value::Null => serde_json::Map::new(),
            other => {
                return Err(ToolError::ToModel(format!(
                    "invalid arguments for {}: expected an object, got {}",
                    self.spec.name,
                    kind(&other)
                )));
            }
        };
        let params = CallToolRequestParams::new(self.tool.clone()).with_arguments(arguments);
        let call = self.conn.peer.call_tool(params);
        // Dropping the call on a timeout or a cancel tells the server (notifications/cancelled).
        let result = tokio::select! {
            r = tokio::time::timeout(self.timeout, call) => match r {
                Ok(r) => r,
                Err(_) => Err(ServiceError::Timeout { timeout: self.timeout }),
            },
            () = ctx.cancel.cancelled() => {
                return Err(ToolError::ToModel(format!(
                    "MCP server {}: {} was cancelled with the run",
                    self.conn.server, self.tool
                )));
            }
        };
        let result = result.map_err(|e| self.failed(&e))?;
        let mut text: Vec<String> = result
            .content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect();
        if text.is_empty()
            && let Some(v) = &result.structured_content
        {
            text.push(v.to_string());
        }
        let text = cut(&text.join("\n"), self.cap);
        if result.is_error == Some(true) {
            return Err(ToolError::ToModel(format!(
                "MCP server {}: {} failed: {text}",
                self.conn.server, self.tool
            )));
        }
        Ok(text)
    }
}

fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// `text` cut to `cap` bytes on a character boundary, with a marker saying how much was left.
fn cut(text: &str, cap: usize) -> String {
    let kept = arbor_core::tool::prefix_within(text, cap);
    if kept.len() == text.len() {
        return text.to_owned();
    }
    format!(
        "{kept}\n[truncated: {} of {} bytes shown (the MCP server's max_result_bytes)]",
        kept.len(),
        text.len()
    )
}
