//! The error type of arbor-core.

use arbor_store::StoreError;
use thiserror::Error;

/// What kind of failure a [`CoreError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoreErrorKind {
    /// A configuration or request is invalid.
    Validation,
    /// A record the caller named does not exist.
    NotFound,
    /// The store failed.
    Store,
}

/// A failure of the runtime itself (bad configuration, the store). Model, tool and limit
/// failures of a run are not errors: they end the run with a status in its `RunResult`.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum CoreError {
    /// A configuration or request is invalid.
    #[error("{0}")]
    Validation(String),
    /// A named record does not exist.
    #[error("{what} {id} not found")]
    NotFound {
        /// What was looked up.
        what: &'static str,
        /// Its id.
        id: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl CoreError {
    /// The kind of failure.
    pub fn kind(&self) -> CoreErrorKind {
        match self {
            Self::Validation(_) => CoreErrorKind::Validation,
            Self::NotFound { .. } => CoreErrorKind::NotFound,
            Self::Store(_) => CoreErrorKind::Store,
        }
    }

    pub(crate) fn validation(message: impl Into<String>) -> Self {
        Self::Validation(message.into())
    }
}

/// Result of a runtime operation.
pub type CoreResult<T> = Result<T, CoreError>;
