//! A model's reasoning ([`Reasoning`]), kept beside the assistant message it preceded: an
//! Anthropic thinking block with its signature, a redacted (encrypted) one, or the
//! `reasoning_content` an OpenAI-compatible server streams. The signed kinds go back to the
//! API with their message while a tool loop goes on, as it requires; the plain text is kept
//! and shown, never sent.

use serde::{Deserialize, Serialize};

/// One block of a model's reasoning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Reasoning {
    /// An Anthropic thinking block: its text and the signature that lets it be sent back.
    Thinking {
        /// What the model thought.
        thinking: String,
        /// The API's signature over it (sent back unchanged).
        signature: String,
    },
    /// An Anthropic thinking block the API encrypted: sent back as it is, never shown.
    RedactedThinking {
        /// The encrypted block.
        data: String,
    },
    /// Reasoning text that cannot be sent back (an OpenAI-compatible server's
    /// `reasoning_content`, or a thinking block redaction changed).
    Text {
        /// The text.
        text: String,
    },
}

impl Reasoning {
    /// The readable text (none for a redacted block).
    pub fn text(&self) -> &str {
        match self {
            Self::Thinking { thinking, .. } => thinking,
            Self::RedactedThinking { .. } => "",
            Self::Text { text } => text,
        }
    }

    /// Whether the API can be sent it back (a signed or encrypted block).
    pub fn is_signed(&self) -> bool {
        matches!(self, Self::Thinking { .. } | Self::RedactedThinking { .. })
    }
}
