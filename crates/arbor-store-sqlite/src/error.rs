//! Mapping SQLite failures onto [`StoreError`].

use std::fmt::Display;

use arbor_store::StoreError;
use rusqlite::ErrorCode;

/// The store error for a failed operation on the store at `path`.
pub(crate) fn store_error(path: &str, err: rusqlite::Error) -> StoreError {
    match err.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Locked {
            path: path.to_owned(),
        },
        Some(ErrorCode::DatabaseCorrupt) => damaged(path, err),
        Some(ErrorCode::NotADatabase) => damaged(
            path,
            format_args!("it is no longer a SQLite database: {err}"),
        ),
        Some(_) => unavailable(path, err),
        None => match err {
            rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
            | rusqlite::Error::InvalidColumnType(..) => corrupt(format_args!("{path}: {err}")),
            other => unavailable(path, other),
        },
    }
}

/// The store error for a failure while opening the store at `path`.
pub(crate) fn open_error(path: &str, err: rusqlite::Error) -> StoreError {
    match err.sqlite_error_code() {
        Some(ErrorCode::NotADatabase) => damaged(
            path,
            "it is not a SQLite database, or its header is damaged; if it is not a store, \
             name another file",
        ),
        Some(ErrorCode::CannotOpen) => StoreError::Unavailable {
            path: path.to_owned(),
            reason: format!("cannot open the file ({err}); does its directory exist?"),
        },
        _ => store_error(path, err),
    }
}

/// An `Unavailable` error for the store at `path`.
pub(crate) fn unavailable(path: &str, reason: impl Display) -> StoreError {
    StoreError::Unavailable {
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

/// A `Corrupt` error for the store file at `path`, which SQLite found damaged (`what`), with
/// how to recover.
pub(crate) fn damaged(path: &str, what: impl Display) -> StoreError {
    corrupt(format_args!(
        "the store file {path} is damaged ({what}); arbor left it as it is. To recover, stop \
         every arbor using it and keep a copy, then salvage what SQLite can still read with \
         `sqlite3 {path} .recover | sqlite3 {path}.recovered` and use that file, or move the \
         damaged file aside to start an empty store"
    ))
}

/// A `Corrupt` error.
pub(crate) fn corrupt(what: impl Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

/// Attaches the store's path to a SQLite result.
pub(crate) trait SqlResultExt<T> {
    /// The result with a SQLite failure mapped by [`store_error`].
    fn at(self, path: &str) -> Result<T, StoreError>;
}

impl<T> SqlResultExt<T> for rusqlite::Result<T> {
    fn at(self, path: &str) -> Result<T, StoreError> {
        self.map_err(|e| store_error(path, e))
    }
}
