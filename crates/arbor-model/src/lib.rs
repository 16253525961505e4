//! Model providers for arbor.
//!
//! A [`ModelProvider`] turns a [`ModelRequest`] (the transcript so far and the tools on offer)
//! into a stream of [`ModelEvent`]s: text deltas, complete tool calls, the usage the turn
//! reported, and how it finished. Dropping the stream cancels the call.
//!
//! [`ScriptedProvider`] plays an agent's turns from a [`Script`]: text, tool calls, usage,
//! delays and injected failures. It is deterministic, needs no network, and is what the tests,
//! the benchmarks and the demo run on.
//!
//! - [`ThinkingLevel`]: how much a model reasons, and how each wire format says it.
//! - [`sse`] and [`wire`]: server-sent events and the two HTTP wire formats, pure.
//! - `http` (feature `http`): the OpenAI-compatible and Anthropic providers, with retries,
//!   timeouts and preflights; why it is our own thin client is in `docs/PROVIDERS.md`.
//! - `testing` (feature `testing`): a loopback server replaying recorded answers.

mod cache;
mod controls;
mod error;
mod estimate;
#[cfg(feature = "http")]
pub mod http;
mod provider;
mod scripted;
pub mod sse;
#[cfg(feature = "testing")]
pub mod testing;
mod thinking;
pub mod wire;

pub use cache::Cache;
pub use controls::{Controls, MAX_STOP, RESERVED_EXTRA, ToolChoice, Wire};
pub use error::{ModelError, ModelErrorKind};
pub use estimate::{BYTES_PER_TOKEN, TOKENS_PER_CALL, TOKENS_PER_MESSAGE, estimate_input_tokens};

/// The `tracing` target of the events a metrics layer counts (`metric = "provider_retry"`,
/// with `provider` and `reason`, for each retried provider attempt).
pub const METRICS_TARGET: &str = "arbor::metrics";
pub use provider::{
    FinishReason, ModelEvent, ModelProvider, ModelRequest, ModelStream, Reasonings, ToolSpec,
};
pub use scripted::{Script, ScriptedProvider, ScriptedToolCall, ScriptedTurn};
pub use thinking::{ThinkingLevel, names as thinking_names};
