//! The crate's one error type, [`McpError`], with its [`kind`](McpError::kind).

use thiserror::Error;

/// What kind of failure an [`McpError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum McpErrorKind {
    /// A bad configuration or argument; the message names it.
    Validation,
    /// An MCP server could not be started or reached.
    Unavailable,
    /// The MCP server went away or broke the protocol mid-call.
    Transport,
    /// A call took longer than its limit.
    Timeout,
    /// Who asks may not see this (an unknown or foreign root).
    NotFound,
    /// The runtime refused or failed.
    Core,
}

/// An MCP failure.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum McpError {
    /// A bad configuration or argument.
    #[error("{0}")]
    Validation(String),
    /// An MCP server could not be started or reached.
    #[error("{0}")]
    Unavailable(String),
    /// The server went away or broke the protocol mid-call.
    #[error("{0}")]
    Transport(String),
    /// A call took longer than its limit.
    #[error("{0}")]
    Timeout(String),
    /// An unknown or foreign root.
    #[error("{0}")]
    NotFound(String),
    /// The runtime refused or failed.
    #[error(transparent)]
    Core(#[from] arbor_core::CoreError),
}

impl McpError {
    /// Its kind.
    pub fn kind(&self) -> McpErrorKind {
        match self {
            Self::Validation(_) => McpErrorKind::Validation,
            Self::Unavailable(_) => McpErrorKind::Unavailable,
            Self::Transport(_) => McpErrorKind::Transport,
            Self::Timeout(_) => McpErrorKind::Timeout,
            Self::NotFound(_) => McpErrorKind::NotFound,
            Self::Core(_) => McpErrorKind::Core,
        }
    }
}

/// A result with [`McpError`].
pub type McpResult<T> = Result<T, McpError>;

impl From<McpError> for arbor_core::CoreError {
    /// A bad grant or declaration stays a validation error; a server that cannot start, went
    /// away or timed out fails the agent being built (a child factory's failure).
    fn from(e: McpError) -> Self {
        match e {
            McpError::Core(c) => c,
            McpError::Validation(m) => arbor_core::CoreError::Validation(m),
            other => arbor_core::CoreError::Supervisor(other.to_string()),
        }
    }
}
