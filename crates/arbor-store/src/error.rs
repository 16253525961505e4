//! The store's error type.

use thiserror::Error;

/// What kind of failure a [`StoreError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The record does not exist.
    NotFound,
    /// A record with that id exists already.
    AlreadyExists,
    /// A compare-and-swap write saw another version.
    Conflict,
    /// The store is held by another process.
    Locked,
    /// The store cannot be opened or its data cannot be read.
    Unavailable,
    /// Stored data does not decode.
    Corrupt,
    /// The request itself is invalid.
    Invalid,
}

/// A failed store operation. A failed write changes nothing.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreError {
    /// The record does not exist.
    #[error("{what} {id} not found")]
    NotFound {
        /// What was looked up (`session`, …).
        what: &'static str,
        /// Its id.
        id: String,
    },
    /// A record with that id exists already.
    #[error("{what} {id} already exists")]
    AlreadyExists {
        /// What was created.
        what: &'static str,
        /// Its id.
        id: String,
    },
    /// A sibling (same parent, not deleted) already has this name.
    #[error("name {name:?} is taken by a sibling")]
    NameTaken {
        /// The name.
        name: String,
    },
    /// The session was deleted (it has a tombstone) and the write needs a live one.
    #[error("session {id} was deleted")]
    Deleted {
        /// Its id.
        id: String,
    },
    /// A compare-and-swap write expected another version.
    #[error("version conflict: expected {expected}, found {actual}")]
    Conflict {
        /// The version the writer expected.
        expected: u64,
        /// The version stored.
        actual: u64,
    },
    /// Another process holds the store.
    #[error("store {path} is locked by another process")]
    Locked {
        /// The store's location.
        path: String,
    },
    /// The store cannot be opened or read.
    #[error("store {path} cannot be used: {reason}")]
    Unavailable {
        /// The store's location.
        path: String,
        /// Why.
        reason: String,
    },
    /// Stored data does not decode.
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    /// The request is invalid.
    #[error("invalid store request: {0}")]
    Invalid(String),
}

impl StoreError {
    /// The kind of failure.
    pub fn kind(&self) -> StoreErrorKind {
        match self {
            Self::NotFound { .. } | Self::Deleted { .. } => StoreErrorKind::NotFound,
            Self::AlreadyExists { .. } | Self::NameTaken { .. } => StoreErrorKind::AlreadyExists,
            Self::Conflict { .. } => StoreErrorKind::Conflict,
            Self::Locked { .. } => StoreErrorKind::Locked,
            Self::Unavailable { .. } => StoreErrorKind::Unavailable,
            Self::Corrupt(_) => StoreErrorKind::Corrupt,
            Self::Invalid(_) => StoreErrorKind::Invalid,
        }
    }

    /// A `NotFound` for a session.
    pub fn session_not_found(id: impl ToString) -> Self {
        Self::NotFound {
            what: "session",
            id: id.to_string(),
        }
    }
}
