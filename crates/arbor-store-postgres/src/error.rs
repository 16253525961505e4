//! Mapping PostgreSQL failures onto [`StoreError`], and the server as errors name it.

use std::fmt::Display;

use arbor_store::StoreError;

/// SQLSTATEs after which a transaction is run again: `serialization_failure` and
/// `deadlock_detected` (PostgreSQL aborted it so that another could go on).
const RETRY: [&str; 2] = ["40001", "40P01"];

/// The SQLSTATE of `unique_violation`.
pub(crate) const UNIQUE_VIOLATION: &str = "23505";

/// The SQLSTATE of `foreign_key_violation`.
pub(crate) const FOREIGN_KEY_VIOLATION: &str = "23503";

/// What failed inside an operation: a refusal the store decided, or a database error still to
/// be classified (retried, or mapped with [`store_error`]): before the commit, or the
/// commit's own (after which, the connection lost, the outcome is unknown).
#[derive(Debug)]
pub(crate) enum Failure {
    Store(StoreError),
    Sql(sqlx::Error),
    Commit(sqlx::Error),
}

impl From<StoreError> for Failure {
    fn from(err: StoreError) -> Self {
        Self::Store(err)
    }
}

impl From<sqlx::Error> for Failure {
    fn from(err: sqlx::Error) -> Self {
        Self::Sql(err)
    }
}

/// An operation's result before classification.
pub(crate) type OpResult<T> = Result<T, Failure>;

/// Whether running the transaction again may succeed.
pub(crate) fn retryable(err: &sqlx::Error) -> bool {
    sqlstate(err).is_some_and(|code| RETRY.contains(&code.as_str()))
}

/// Whether `err` says the connection is gone: an I/O or TLS failure, a broken protocol
/// exchange, or the server ending the session (`08…` connection exceptions, `57P01`
/// admin_shutdown, `57P02` crash_shutdown, `57P03` cannot_connect_now).
pub(crate) fn connection_lost(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_) | sqlx::Error::Tls(_) | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c.starts_with("08") || matches!(&*c, "57P01" | "57P02" | "57P03")),
        _ => false,
    }
}

/// The error's SQLSTATE, if the server sent one.
pub(crate) fn sqlstate(err: &sqlx::Error) -> Option<String> {
    err.as_database_error()
        .and_then(|e| e.code())
        .map(|c| c.into_owned())
}

/// The constraint a database error names, if any.
pub(crate) fn constraint(err: &sqlx::Error) -> Option<&str> {
    err.as_database_error().and_then(|e| e.constraint())
}

/// The store error for a failed operation on the server `shown`.
pub(crate) fn store_error(shown: &str, err: sqlx::Error) -> StoreError {
    match err {
        sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::Decode(_)
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::TypeNotFound { .. } => corrupt(format_args!("{shown}: {err}")),
        sqlx::Error::PoolTimedOut => unavailable(
            shown,
            "no connection to the server within the acquire timeout (is it up, and are \
             connections left?)",
        ),
        sqlx::Error::Database(db) if db.code().as_deref() == Some("55P03") => StoreError::Locked {
            path: shown.to_owned(),
        },
        other => unavailable(shown, other),
    }
}

/// The store error for a commit that failed on the server `shown`: when the connection was
/// lost while committing, PostgreSQL may or may not have applied it, and the error says so.
pub(crate) fn commit_error(shown: &str, err: sqlx::Error) -> StoreError {
    if connection_lost(&err) {
        unavailable(
            shown,
            format_args!(
                "the connection was lost while committing ({err}): the write may or may not \
                 have been applied"
            ),
        )
    } else {
        store_error(shown, err)
    }
}

/// An `Unavailable` error for the server `shown`.
pub(crate) fn unavailable(shown: &str, reason: impl Display) -> StoreError {
    StoreError::Unavailable {
        path: shown.to_owned(),
        reason: reason.to_string(),
    }
}

/// A `Corrupt` error.
pub(crate) fn corrupt(what: impl Display) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

/// A `postgres://` URL as messages should show it: without its password (in the URL or its
/// query). `Invalid` when it is not a URL.
pub fn redacted_url(url: &str) -> arbor_store::StoreResult<String> {
    url::Url::parse(url.trim())
        .map(|u| shown(&u))
        .map_err(|e| StoreError::Invalid(format!("store URL: not a postgres:// URL ({e})")))
}

/// The URL as errors and logs show it: without a password, in the URL or its query.
pub(crate) fn shown(url: &url::Url) -> String {
    let mut clean = url.clone();
    // Only fails for URLs that cannot have a password, which then have none.
    let _ = clean.set_password(None);
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(k, _)| !k.eq_ignore_ascii_case("password"))
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    if kept.is_empty() {
        clean.set_query(None);
    } else {
        clean.query_pairs_mut().clear().extend_pairs(kept);
    }
    clean.to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_shown_url_never_carries_a_password() {
        let url = url::Url::parse(
            "postgres://arbor:s3cret@db.example:5432/arbor?sslmode=require&password=also",
        )
        .unwrap();
        let shown = shown(&url);
        assert_eq!(
            shown,
            "postgres://arbor@db.example:5432/arbor?sslmode=require"
        );
        assert!(!shown.contains("s3cret") && !shown.contains("also"));
    }
}
