//! # arbor-a2a
//!
//! The [Agent2Agent protocol](https://a2a-protocol.org) (A2A v1.0) for arbor.
//!
//! **A remote agent as a supervised child** ([`A2aProvider`], feature `client`). The remote
//! agent stands in for a child agent's model: a catalog entry whose agent uses it is a child
//! like any other. It is admitted under the same allow-list and limits, spawned sync, async
//! or by message, bounded by its timeout and its tree's budget, cancelled (A2A
//! `CancelTask`), and its events and usage are attributed like a local child's. A question
//! the remote task asks (`TASK_STATE_INPUT_REQUIRED`) reaches the person at the root as an
//! `ask_human` call, and the answer goes back to the task. The card is fetched and checked on
//! first use, or at start-up through [`ModelProvider::preflight`](arbor_model::ModelProvider::preflight).
//! What a remote agent sends is capped and checked by name: card and JSON sizes, stream size,
//! event size, silence, content types ([`A2aClient`]).
//!
//! **The wire format** ([`wire`], always built): the card, messages, tasks, stream items and
//! JSON-RPC envelopes, as the official SDKs read and write them. `arbor serve`'s A2A server
//! speaks it too.
//!
//! Why not an A2A crate from the registry: docs/INTEROP.md ("A2A") compares them. In short,
//! the official client and server crates carry protobuf and tonic, and arbor needs the
//! JSON-RPC binding only, over the axum and reqwest it already has.
//!
//! The wire types, on a card as the official SDK's server publishes it:
//!
//! ```
//! use arbor_a2a::wire::{AgentCard, StreamEvent, StreamResponse, TaskState};
//!
//! let card: AgentCard = serde_json::from_str(r#"{
//!     "name": "Travel", "description": "Books trips", "version": "1.0.0",
//!     "supportedInterfaces": [{"url": "https://agents.example.com/travel/rpc",
//!                              "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
//!     "capabilities": {"streaming": true},
//!     "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
//!     "skills": [{"id": "book", "name": "Book", "description": "Books", "tags": []}]
//! }"#)?;
//! assert_eq!(card.jsonrpc_interface().map(|i| i.url.as_str()),
//!            Some("https://agents.example.com/travel/rpc"));
//!
//! // A stream item holds exactly one thing; an unknown state reads as unspecified.
//! let item: StreamResponse = serde_json::from_str(
//!     r#"{"statusUpdate": {"taskId": "t1", "contextId": "c1",
//!                          "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}}"#)?;
//! let Some(StreamEvent::Status(update)) = item.into_event() else { unreachable!() };
//! assert!(update.status.state.is_interrupted());
//! assert_eq!(serde_json::from_str::<TaskState>("\"completed\"")?, TaskState::Unspecified);
//! # Ok::<(), serde_json::Error>(())
//! ```
//!
//! A remote agent as a child's model:
//!
//! ```no_run
//! # #[cfg(feature = "client")]
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use arbor_a2a::{A2aClient, A2aConfig, A2aProvider};
//! use arbor_model::http::ApiKey;
//!
//! // The remote agent at its base URL (its card is at /.well-known/agent-card.json), with a
//! // bearer token from the environment.
//! let client = A2aClient::new(
//!     A2aConfig::new("https://agents.example.com/travel").token(ApiKey::from_env("TRAVEL_TOKEN")),
//! )?;
//! println!("remote agent: {}", client.card().await?.name);
//! // As a child's model: the agent built with it is a catalog entry like any other.
//! let provider = A2aProvider::new("travel", client);
//! # let _ = provider;
//! # Ok(())
//! # }
//! ```

pub mod error;
pub mod wire;

#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "client")]
pub mod provider;

pub use error::{A2aError, A2aErrorKind};

#[cfg(feature = "client")]
pub use client::{A2aClient, A2aConfig, EventStream};
#[cfg(feature = "client")]
pub use provider::{A2aProvider, settle};
