//! # arbor-mcp
//!
//! The Model Context Protocol for arbor, both ways.
//!
//! **As a server** ([`ArborMcp`]), any MCP client (a coding agent, an IDE, an assistant)
//! drives an arbor tree in place of its root agent: it spawns the root's allow-listed
//! children (`spawn_agent`, sync, async or by message), waits for them (`wait_agent`, with
//! progress notifications), cancels them, messages them, reads their messages, and decides
//! the calls that wait for a human (`list_approvals`, `decide_approval`), all under the same
//! allow-list, limits, policies and redaction as a model. The tools' input schemas are the
//! closed schemas the models get. One MCP session drives one root session in the store
//! ([`RootSource`] finds it), so `arbor ls` and `arbor tree` show it afterwards. It serves
//! over stdio ([`serve_stdio`], what `arbor mcp` runs) and Streamable HTTP
//! ([`http_service`], mounted at `/mcp` by `arbor serve`).
//!
//! ```no_run
//! use arbor_core::supervisor::{ChildEntry, Ownership, Supervisor};
//! use arbor_core::Agent;
//! use arbor_mcp::{ArborMcp, FixedRoot, HostedRoot};
//! use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let helper = Agent::builder("helper")
//!     .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text("done")])))
//!     .build()?;
//! let sup = Supervisor::builder(Ownership::user("local", "me"))
//!     .child(ChildEntry::agent("helper", helper))
//!     .build()?;
//! // The root session the client drives, attached so its children's messages reach it.
//! let mut session = Agent::builder("root")
//!     .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text("unused")])))
//!     .build()?
//!     .session()
//!     .store(sup.store().clone())
//!     .create()
//!     .await?;
//! sup.attach(&mut session);
//! let root = HostedRoot::new(
//!     sup.clone(),
//!     arbor_core::SessionRef::from(session.record()),
//!     "root",
//!     &["helper".to_owned()],
//!     session.inbox().clone(),
//!     sup.session_token().clone(),
//! )?;
//! arbor_mcp::serve_stdio(ArborMcp::new(FixedRoot(root))).await?;
//! sup.shutdown().await;
//! # Ok(())
//! # }
//! ```

#[cfg(feature = "client")]
pub mod client;
mod error;
mod root;
#[cfg(feature = "server")]
mod server;

#[cfg(feature = "client")]
pub use client::{Grant, McpServers, McpTool, ServerConfig};
pub use error::{McpError, McpErrorKind, McpResult};
pub use root::{Caller, FixedRoot, HostedRoot, RootSource};
#[cfg(feature = "server")]
pub use server::{ArborMcp, Tenant, http_service, serve_stdio};
