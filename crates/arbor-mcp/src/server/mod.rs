//! The MCP server: a root session's delegation tools for any MCP client.
//!
//! [`ArborMcp`] is an rmcp [`ServerHandler`]. Its tools are the ones the root agent of the
//! tree would have (`spawn_agent`, `wait_agent`, `cancel_agent`, `list_children`,
//! `send_message`, `rename_child`, `find_models`), with the same closed input schemas, the
//! same allow-list, limits, policies and redaction, plus three for a host:
//! `list_approvals`, `decide_approval` and `read_messages` (see [`calls`]). A tool that
//! fails answers an MCP tool error (`isError: true`) whose text names the field or the
//! limit; an unknown tool is a protocol error. While a sync spawn or a wait runs, the
//! child's events reach a client that asked for progress as progress notifications.
//!
//! It serves over stdio ([`serve_stdio`]) and over Streamable HTTP ([`http_service`]): both
//! protocol revisions 2025-11-25 (initialize, sessions) and 2026-07-28 (stateless) are
//! negotiated by rmcp.

pub(crate) mod calls;
mod elicit;
mod out;
mod progress;
mod schemas;

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt};

use crate::error::{McpError, McpResult};
use crate::root::{Caller, RootSource};

/// The MCP server over a [`RootSource`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ArborMcp {
    source: Arc<dyn RootSource>,
    version: String,
    session: Arc<SessionWatch>,
}

/// Tells the source when the MCP session a handler served ends (the handler is dropped).
#[derive(Debug)]
struct SessionWatch {
    source: Arc<dyn RootSource>,
    id: std::sync::OnceLock<String>,
}

impl Drop for SessionWatch {
    fn drop(&mut self) {
        let (Some(id), Ok(runtime)) = (self.id.get(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        let (source, id) = (self.source.clone(), id.clone());
        runtime.spawn(async move { source.session_closed(&id).await });
    }
}

impl ArborMcp {
    /// A server whose clients drive the roots `source` gives them; it reports itself as
    /// `arbor` at this crate's version.
    pub fn new(source: impl RootSource) -> Self {
        Self::shared(Arc::new(source))
    }

    /// [`new`](Self::new) with a shared source.
    pub fn shared(source: Arc<dyn RootSource>) -> Self {
        Self {
            session: Arc::new(SessionWatch {
                source: source.clone(),
                id: std::sync::OnceLock::new(),
            }),
            source,
            version: env!("CARGO_PKG_VERSION").to_owned(),
        }
    }

    /// The same server for a new MCP session (its end is reported on its own).
    fn fresh(&self) -> Self {
        Self::shared(self.source.clone()).version(self.version.clone())
    }

    /// Reports another version (the host's, say).
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = version.into();
        self
    }

    async fn root(&self, cx: &RequestContext<RoleServer>) -> Result<crate::HostedRoot, ErrorData> {
        let caller = caller(cx);
        if let Some(id) = &caller.session {
            let _ = self.session.id.get_or_init(|| id.clone());
        }
        self.source
            .root(&caller)
            .await
            .map_err(|e| protocol_error(&e))
    }
}

/// Who asks: the tenant the HTTP layer put in the request's extensions, and the MCP session.
fn caller(cx: &RequestContext<RoleServer>) -> Caller {
    let parts = cx.extensions.get::<http::request::Parts>();
    let tenant = parts
        .and_then(|p| p.extensions.get::<Tenant>())
        .map(|t| t.0.clone());
    let session = parts
        .and_then(|p| p.headers.get("mcp-session-id"))
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Caller { tenant, session }
}

/// The tenant an HTTP layer authenticated, put in the request's extensions before the MCP
/// service sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenant(pub String);

fn protocol_error(e: &McpError) -> ErrorData {
    match e.kind() {
        crate::McpErrorKind::Validation | crate::McpErrorKind::NotFound => {
            ErrorData::invalid_params(e.to_string(), None)
        }
        _ => ErrorData::internal_error(e.to_string(), None),
    }
}

impl ServerHandler for ArborMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("arbor", self.version.clone()))
            .with_instructions(
                "arbor runs child agents for you under a supervisor: spawn_agent delegates a \
                 task to an allow-listed child (sync waits, async returns a handle for \
                 wait_agent, message answers later: read_messages). Calls that wait for a \
                 human decision are listed by list_approvals and decided by decide_approval.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        cx: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let root = self.root(&cx).await?;
        let tools = tools_of(&root).map_err(|e| protocol_error(&e))?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        cx: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let root = self.root(&cx).await?;
        let name = request.name.to_string();
        if !calls::known(&root, &name) {
            return Err(ErrorData::invalid_params(
                format!("unknown tool: {name}"),
                None,
            ));
        }
        let arguments = request
            .arguments
            .map_or(serde_json::Value::Null, serde_json::Value::Object);
        let progress = progress::Progress::of(&cx);
        let client = calls::Client {
            cancel: &cx.ct,
            progress: &progress,
            asker: elicit::Asker::of(&cx),
            tenant: caller(&cx).tenant,
        };
        let out = calls::call(&root, &name, arguments, &client).await;
        Ok(out.into_result().into())
    }
}

/// The tools a client of `root` sees.
fn tools_of(root: &crate::HostedRoot) -> McpResult<Vec<Tool>> {
    let mut tools = Vec::new();
    for spec in calls::specs(root) {
        let serde_json::Value::Object(schema) = spec.parameters else {
            return Err(McpError::Validation(format!(
                "tool {}: its schema is not an object",
                spec.name
            )));
        };
        tools.push(Tool::new(spec.name, spec.description, Arc::new(schema)));
    }
    Ok(tools)
}

/// Serves `server` over this process's stdin and stdout until the client closes them (a
/// client that goes away before initializing is not an error).
pub async fn serve_stdio(server: ArborMcp) -> McpResult<()> {
    let running = match server.serve(rmcp::transport::stdio()).await {
        Ok(r) => r,
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(_)) => return Ok(()),
        Err(e) => return Err(McpError::Transport(format!("MCP over stdio: {e}"))),
    };
    running
        .waiting()
        .await
        .map_err(|e| McpError::Transport(format!("MCP over stdio: {e}")))?;
    Ok(())
}

/// The Streamable HTTP service of `server`, to mount (`Router::nest_service("/mcp", …)`).
/// It accepts `Host` headers naming `allowed_hosts` only (DNS-rebinding protection; a host
/// without a port matches any port), and ends its sessions and streams when `shutdown`
/// fires.
pub fn http_service(
    server: ArborMcp,
    allowed_hosts: Vec<String>,
    shutdown: tokio_util::sync::CancellationToken,
) -> rmcp::transport::streamable_http_server::StreamableHttpService<
    ArborMcp,
    rmcp::transport::streamable_http_server::session::local::LocalSessionManager,
> {
    use rmcp::transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    };
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(allowed_hosts)
        .with_cancellation_token(shutdown);
    StreamableHttpService::new(
        move || Ok(server.fresh()),
        Arc::new(LocalSessionManager::default()),
        config,
    )
}
