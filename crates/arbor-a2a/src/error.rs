//! The crate's one error type, [`A2aError`], with its [`kind`](A2aError::kind).

use thiserror::Error;

/// What kind of failure an [`A2aError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum A2aErrorKind {
    /// A bad configuration; the message names it.
    Config,
    /// The agent's card is missing, malformed, or offers nothing this client speaks.
    Card,
    /// The agent could not be reached, or the connection closed mid-answer.
    Connection,
    /// No answer, or no data, in time.
    Timeout,
    /// The credentials were refused (HTTP 401 or 403).
    Auth,
    /// Another HTTP status than success.
    Http,
    /// An answer of a content type the call does not take.
    ContentType,
    /// An answer past its size limit.
    TooLarge,
    /// An answer that breaks the protocol.
    Protocol,
    /// The agent answered with a JSON-RPC error.
    Remote,
}

/// An A2A failure.
#[derive(Debug, Clone, Error)]
#[non_exhaustive]
pub enum A2aError {
    /// A bad configuration.
    #[error("{0}")]
    Config(String),
    /// The card is missing, malformed, or offers nothing this client speaks.
    #[error("{0}")]
    Card(String),
    /// Unreachable, or the connection closed mid-answer.
    #[error("{0}")]
    Connection(String),
    /// No answer, or no data, in time.
    #[error("{0}")]
    Timeout(String),
    /// The credentials were refused.
    #[error("HTTP {status}: {message}")]
    Auth {
        /// The HTTP status.
        status: u16,
        /// The body's start.
        message: String,
    },
    /// Another HTTP status than success.
    #[error("HTTP {status}: {message}")]
    Http {
        /// The HTTP status.
        status: u16,
        /// The body's start.
        message: String,
    },
    /// An answer of a content type the call does not take.
    #[error("{0}")]
    ContentType(String),
    /// An answer past its size limit.
    #[error("{message}")]
    TooLarge {
        /// The limit, in bytes.
        limit: u64,
        /// What passed it.
        message: String,
    },
    /// An answer that breaks the protocol.
    #[error("{0}")]
    Protocol(String),
    /// A JSON-RPC error from the agent.
    #[error("JSON-RPC error {code}: {message}")]
    Remote {
        /// Its code.
        code: i64,
        /// Its message.
        message: String,
    },
}

impl A2aError {
    /// Its kind.
    pub fn kind(&self) -> A2aErrorKind {
        match self {
            Self::Config(_) => A2aErrorKind::Config,
            Self::Card(_) => A2aErrorKind::Card,
            Self::Connection(_) => A2aErrorKind::Connection,
            Self::Timeout(_) => A2aErrorKind::Timeout,
            Self::Auth { .. } => A2aErrorKind::Auth,
            Self::Http { .. } => A2aErrorKind::Http,
            Self::ContentType(_) => A2aErrorKind::ContentType,
            Self::TooLarge { .. } => A2aErrorKind::TooLarge,
            Self::Protocol(_) => A2aErrorKind::Protocol,
            Self::Remote { .. } => A2aErrorKind::Remote,
        }
    }

    /// As a model provider's error (the remote agent stands in for a model), each kind to
    /// its match; `provider` names the agent in the message.
    pub fn into_model_error(self, provider: &str) -> arbor_model::ModelError {
        use arbor_model::ModelError;
        let provider = provider.to_owned();
        match self {
            Self::Config(m) | Self::Card(m) => ModelError::Config {
                provider,
                message: m,
            },
            Self::Connection(m) => ModelError::Connection {
                provider,
                message: m,
            },
            Self::Timeout(m) => ModelError::Timeout {
                provider,
                message: m,
            },
            Self::Auth { status, message } => ModelError::Auth {
                provider,
                status,
                message,
            },
            Self::Http { status, message } if status >= 500 => ModelError::Server {
                provider,
                status,
                message,
            },
            Self::Http { status, message } => ModelError::BadRequest {
                provider,
                status,
                message,
            },
            Self::ContentType(m) | Self::Protocol(m) => ModelError::Stream {
                message: format!("{provider}: {m}"),
            },
            Self::TooLarge { limit, message } => ModelError::TooLarge {
                limit,
                message: format!("{provider}: {message}"),
            },
            Self::Remote { code, message } => ModelError::Provider {
                message: format!("{provider}: JSON-RPC error {code}: {message}"),
            },
        }
    }
}
