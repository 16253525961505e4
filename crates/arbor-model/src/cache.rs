//! Prompt caching ([`Cache`]): whether a wire that asks for it (Anthropic's `cache_control`)
//! sets breakpoints. OpenAI-compatible servers cache on their own; what they report as
//! cached is read either way (`Usage::cache_read_tokens`).

use serde::{Deserialize, Serialize};

/// Prompt caching on a wire that asks for it (Anthropic's `cache_control`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cache {
    /// Breakpoints on the tools, the system prompt and the conversation so far: children of
    /// one catalog entry share the first two, and a run's next turn reads the third.
    #[default]
    Auto,
    /// No breakpoint (every prompt is sent as new).
    Off,
}
