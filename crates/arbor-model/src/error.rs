//! The error a provider call returns.

use thiserror::Error;

/// What kind of failure a [`ModelError`] is, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelErrorKind {
    /// The provider answered with an error.
    Provider,
    /// The provider is not configured for this model, or the model is not offered.
    Unavailable,
    /// The provider's stream broke or was malformed.
    Stream,
    /// A scripted agent ran out of turns.
    ScriptExhausted,
}

/// A failed provider call.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelError {
    /// The provider answered with an error.
    #[error("provider error: {message}")]
    Provider {
        /// The provider's message.
        message: String,
    },
    /// The requested model cannot be used.
    #[error("model {model:?} is unavailable: {reason}")]
    Unavailable {
        /// The model asked for.
        model: String,
        /// Why.
        reason: String,
    },
    /// The stream broke or was malformed.
    #[error("provider stream failed: {message}")]
    Stream {
        /// What went wrong.
        message: String,
    },
    /// A scripted agent was asked for a turn its script does not have.
    #[error("script has no turn {turn} (it has {available})")]
    ScriptExhausted {
        /// The 1-based turn asked for.
        turn: usize,
        /// How many turns the script has.
        available: usize,
    },
}

impl ModelError {
    /// The kind of failure.
    pub fn kind(&self) -> ModelErrorKind {
        match self {
            Self::Provider { .. } => ModelErrorKind::Provider,
            Self::Unavailable { .. } => ModelErrorKind::Unavailable,
            Self::Stream { .. } => ModelErrorKind::Stream,
            Self::ScriptExhausted { .. } => ModelErrorKind::ScriptExhausted,
        }
    }
}
