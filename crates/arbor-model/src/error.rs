//! The error a provider call returns.

use thiserror::Error;

/// What kind of failure a [`ModelError`] is, for callers that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ModelErrorKind {
    /// The provider answered with an error.
    Provider,
    /// The provider is not configured for this model, or the model is not offered.
    Unavailable,
    /// The provider's stream broke or was malformed.
    Stream,
    /// A scripted agent ran out of turns.
    ScriptExhausted,
    /// The credentials were refused (401, 403).
    Auth,
    /// The request was refused as it is (400, 404, 413, 422): retrying cannot help.
    BadRequest,
    /// Rate limited, and the retries (or the time allowed for them) ran out.
    RateLimited,
    /// The provider failed (5xx, overloaded) and the retries ran out.
    Server,
    /// No answer, or no data, within the time allowed.
    Timeout,
    /// The provider is not configured (a missing key or base URL).
    Config,
    /// The provider could not be reached, or the connection broke: before the answer (after
    /// the retries) or during the stream.
    Connection,
    /// The answer grew past what one turn may assemble (its text and tool calls, or one
    /// server-sent event).
    TooLarge,
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
    /// The credentials were refused.
    #[error("{provider}: HTTP {status}: {message}")]
    Auth {
        /// The provider.
        provider: String,
        /// The HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// The request was refused as it is.
    #[error("{provider}: HTTP {status}: {message}")]
    BadRequest {
        /// The provider.
        provider: String,
        /// The HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// Rate limited beyond the retries allowed.
    #[error("{provider}: rate limited: {message}")]
    RateLimited {
        /// The provider.
        provider: String,
        /// The provider's message.
        message: String,
        /// What the provider asked to wait, in milliseconds, if it said.
        retry_after_ms: Option<u64>,
    },
    /// The provider failed and the retries ran out.
    #[error("{provider}: HTTP {status}: {message}")]
    Server {
        /// The provider.
        provider: String,
        /// The HTTP status.
        status: u16,
        /// The provider's message.
        message: String,
    },
    /// No answer, or no data, in time.
    #[error("{provider}: timed out: {message}")]
    Timeout {
        /// The provider.
        provider: String,
        /// What timed out.
        message: String,
    },
    /// The provider is not configured.
    #[error("{provider}: {message}")]
    Config {
        /// The provider.
        provider: String,
        /// What is missing.
        message: String,
    },
    /// The connection failed: unreachable, or closed before or during the answer.
    #[error("{provider}: {message}")]
    Connection {
        /// The provider.
        provider: String,
        /// What failed.
        message: String,
    },
    /// The answer grew past what one turn may assemble; the turn ends there.
    #[error("answer too large: {message}")]
    TooLarge {
        /// The limit crossed, in bytes.
        limit: u64,
        /// What crossed it.
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
            Self::Auth { .. } => ModelErrorKind::Auth,
            Self::BadRequest { .. } => ModelErrorKind::BadRequest,
            Self::RateLimited { .. } => ModelErrorKind::RateLimited,
            Self::Server { .. } => ModelErrorKind::Server,
            Self::Timeout { .. } => ModelErrorKind::Timeout,
            Self::Config { .. } => ModelErrorKind::Config,
            Self::Connection { .. } => ModelErrorKind::Connection,
            Self::TooLarge { .. } => ModelErrorKind::TooLarge,
        }
    }
}
