//! The MCP client: a tree's MCP servers ([`McpServers`]), started once per tree on first use
//! and stopped when it ends, and their tools as agent tools ([`McpTool`]).
//!
//! A stdio server is started with its arguments and environment (and only PATH, HOME, USER,
//! LANG, LC_ALL, TMPDIR and TZ of arbor's own); its stderr goes to `tracing` (debug, target
//! `arbor_mcp::server_stderr`). A URL server is reached over Streamable HTTP with its
//! headers. A server that cannot start, does not answer within its startup time, or dies
//! mid-call gives a classified error ([`McpErrorKind`]), never a hang.
//!
//! [`McpErrorKind`]: crate::McpErrorKind

mod config;
mod connection;
mod tool;

use std::collections::BTreeMap;
use std::sync::Arc;

use arbor_core::DynTool;

pub use config::{
    DEFAULT_CALL_MS, DEFAULT_RESULT_BYTES, DEFAULT_STARTUP_MS, Grant, PASSED_ENV, ServerConfig,
    narrow, tool_name, valid_server_name,
};
pub use tool::McpTool;

use crate::error::{McpError, McpResult};
use connection::{Connection, connect};

/// The MCP servers of one tree. Cheap to share (`Arc`); each server starts on the first
/// request for its tools, once, and stops when [`close`](Self::close) runs or the value is
/// dropped.
#[derive(Debug, Default)]
pub struct McpServers {
    servers: BTreeMap<String, Slot>,
}

#[derive(Debug)]
struct Slot {
    config: ServerConfig,
    conn: tokio::sync::OnceCell<Arc<Connection>>,
}

impl McpServers {
    /// The servers a spec declares (checked: see [`ServerConfig::validate`]).
    pub fn new(servers: BTreeMap<String, ServerConfig>) -> McpResult<Self> {
        let mut out = BTreeMap::new();
        for (name, config) in servers {
            config.validate(&name).map_err(McpError::Validation)?;
            out.insert(
                name,
                Slot {
                    config,
                    conn: tokio::sync::OnceCell::new(),
                },
            );
        }
        Ok(Self { servers: out })
    }

    /// Whether no server is declared.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// The tools `grants` give, as agent tools, starting their servers if needed. A grant of
    /// an undeclared server, or of a tool its server does not offer, is a validation error.
    pub async fn tools_for(&self, grants: &[Grant]) -> McpResult<Vec<Arc<dyn DynTool>>> {
        let mut tools: Vec<Arc<dyn DynTool>> = Vec::new();
        for server in granted_servers(grants) {
            let conn = self.connection(server).await?;
            let slot = &self.servers[server];
            for g in grants.iter().filter(|g| g.server == server) {
                if let Some(t) = &g.tool
                    && !conn.tools.iter().any(|x| x.name == *t)
                {
                    let offered: Vec<&str> = conn.tools.iter().map(|x| x.name.as_ref()).collect();
                    return Err(McpError::Validation(format!(
                        "{g}: server {server} offers no tool {t} (it offers: {})",
                        offered.join(", ")
                    )));
                }
            }
            for t in &conn.tools {
                if !grants.iter().any(|g| g.allows(server, &t.name)) {
                    continue;
                }
                match McpTool::new(conn.clone(), t, &slot.config) {
                    Some(tool) => tools.push(Arc::new(tool)),
                    None => tracing::warn!(
                        server,
                        tool = %t.name,
                        "an MCP tool whose name cannot be an agent tool's (mcp__SERVER__TOOL, 1-64 of A-Z a-z 0-9 _ -) is left out"
                    ),
                }
            }
        }
        Ok(tools)
    }

    /// Stops every server started (a stdio server's process is ended).
    pub async fn close(&self) {
        for slot in self.servers.values() {
            let service = slot
                .conn
                .get()
                .and_then(|c| c.service.lock().ok().and_then(|mut s| s.take()));
            if let Some(service) = service {
                let _ = service.cancel().await;
            }
        }
    }

    async fn connection(&self, server: &str) -> McpResult<Arc<Connection>> {
        let slot = self.servers.get(server).ok_or_else(|| {
            McpError::Validation(format!(
                "MCP server {server} is not declared ([mcp_servers.{server}])"
            ))
        })?;
        slot.conn
            .get_or_try_init(|| async {
                let startup = slot.config.startup();
                let ms = startup.as_millis();
                tokio::time::timeout(startup, connect(server, &slot.config))
                    .await
                    .map_err(|_| {
                        McpError::Timeout(format!(
                            "MCP server {server} did not start and list its tools within {ms} ms"
                        ))
                    })?
                    .map(Arc::new)
            })
            .await
            .cloned()
    }
}

/// The servers `grants` name, each once (whatever their order).
fn granted_servers(grants: &[Grant]) -> std::collections::BTreeSet<&str> {
    grants.iter().map(|g| g.server.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_granted_server_is_named_once() {
        let grants: Vec<Grant> = ["mcp:a/x", "mcp:b/*", "mcp:a/y"]
            .iter()
            .filter_map(|g| Grant::parse(g)?.ok())
            .collect();
        assert_eq!(
            granted_servers(&grants).into_iter().collect::<Vec<_>>(),
            ["a", "b"]
        );
    }
}
