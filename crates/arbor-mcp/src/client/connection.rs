//! Starting one MCP server ([`connect`]): a child process over stdio or a Streamable HTTP
//! endpoint, initialized and its tools listed; the [`Connection`] ends it when dropped.

use rmcp::RoleClient;
use rmcp::service::{Peer, RunningService};
use tokio::io::AsyncBufReadExt;

use super::config::{self, PASSED_ENV, ServerConfig};
use crate::error::{McpError, McpResult};

/// A started server: its peer, its tools, and the service that ends it when dropped.
#[derive(Debug)]
pub(crate) struct Connection {
    pub(crate) server: String,
    pub(crate) peer: Peer<RoleClient>,
    pub(crate) tools: Vec<rmcp::model::Tool>,
    pub(crate) service: std::sync::Mutex<Option<RunningService<RoleClient, ()>>>,
}

pub(crate) async fn connect(server: &str, config: &ServerConfig) -> McpResult<Connection> {
    use rmcp::ServiceExt;
    let unavailable = |what: String| McpError::Unavailable(format!("MCP server {server}: {what}"));
    let service = if let Some(program) = &config.command {
        let mut cmd = tokio::process::Command::new(program);
        for (i, a) in config.args.iter().enumerate() {
            cmd.arg(
                config::expand(a, &format!("mcp_servers.{server}.args[{i}]"))
                    .map_err(unavailable)?,
            );
        }
        cmd.env_clear();
        for key in PASSED_ENV {
            if let Some(v) = std::env::var_os(key) {
                cmd.env(key, v);
            }
        }
        for (k, v) in &config.env {
            cmd.env(
                k,
                config::expand(v, &format!("mcp_servers.{server}.env.{k}")).map_err(unavailable)?,
            );
        }
        if let Some(dir) = &config.cwd {
            cmd.current_dir(dir);
        }
        cmd.kill_on_drop(true);
        let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| unavailable(format!("cannot start {program:?}: {e}")))?;
        if let Some(stderr) = stderr {
            let name = server.to_owned();
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::debug!(target: "arbor_mcp::server_stderr", server = %name, "{line}");
                }
            });
        }
        ().serve(transport)
            .await
            .map_err(|e| unavailable(format!("it did not initialize: {e}")))?
    } else {
        let url = config.url.clone().unwrap_or_default();
        let mut headers = std::collections::HashMap::new();
        for (k, v) in &config.headers {
            let value = config::expand(v, &format!("mcp_servers.{server}.headers.{k}"))
                .map_err(unavailable)?;
            let name = http::HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| unavailable(format!("header {k:?}: {e}")))?;
            let value = http::HeaderValue::from_str(&value)
                .map_err(|e| unavailable(format!("header {k:?}: {e}")))?;
            headers.insert(name, value);
        }
        let client = arbor_model::http::tls_client(config.startup()).map_err(unavailable)?;
        let transport_config =
            rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                url,
            )
            .custom_headers(headers);
        let transport =
            rmcp::transport::StreamableHttpClientTransport::with_client(client, transport_config);
        ().serve(transport)
            .await
            .map_err(|e| unavailable(format!("it did not initialize: {e}")))?
    };
    let tools = service
        .list_all_tools()
        .await
        .map_err(|e| unavailable(format!("it did not list its tools: {e}")))?;
    tracing::info!(server, tools = tools.len(), "MCP server started");
    Ok(Connection {
        server: server.to_owned(),
        peer: service.peer().clone(),
        tools,
        service: std::sync::Mutex::new(Some(service)),
    })
}
