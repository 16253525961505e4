//! How a [`PostgresStore`](crate::PostgresStore) connects.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use arbor_store::{StoreError, StoreResult};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::error::{shown, store_error, unavailable};
use crate::migrate::{check_schema, migrate};
use crate::store::PostgresStore;

/// How a [`PostgresStore`] connects: the pool's size and waits, and the schema it lives in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresOptions {
    pub(crate) schema: Option<String>,
    pub(crate) max_connections: u32,
    pub(crate) acquire_timeout: Duration,
    pub(crate) synchronous_commit: Option<bool>,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        Self {
            schema: None,
            max_connections: 10,
            acquire_timeout: Duration::from_secs(5),
            synchronous_commit: None,
        }
    }
}

impl PostgresStore {
    /// Connects with the default [`PostgresOptions`]; see [`PostgresOptions::connect`].
    pub async fn connect(url: &str) -> StoreResult<Self> {
        PostgresOptions::new().connect(url).await
    }
}

impl PostgresOptions {
    /// The defaults: the connection's default schema (`public`), 10 connections, 5 s to get
    /// one.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps the store's tables in this schema (created if missing) instead of the default
    /// one: several stores (deployments, test runs) can share a database. Lowercase ASCII
    /// letters, digits and `_`, not starting with a digit, at most 63 characters; any other
    /// name is refused at connect with `Invalid`.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// The most connections the store opens at once.
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max.max(1);
        self
    }

    /// How long an operation waits for a free connection before it fails with
    /// `Unavailable`.
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// Whether a commit waits for the server's write-ahead log to reach its disk
    /// (`synchronous_commit`; unset: the server's setting, `on` by default). `false` is
    /// SQLite's `NORMAL`: a commit the store reported survives this process and a crash of
    /// the server's processes, but the server's host losing power may lose the last few
    /// hundred milliseconds of commits (never corrupting the database). On this project's
    /// VM it made a sync delegation about five times faster (docs/SCALE-OUT.md).
    pub fn synchronous_commit(mut self, wait: bool) -> Self {
        self.synchronous_commit = Some(wait);
        self
    }

    /// Connects to the server at `url` (`postgres://user:password@host:port/database`, with
    /// libpq's query parameters such as `sslmode`), brings the schema to this build's
    /// version, and returns the store. The password is never stored by arbor nor shown in
    /// an error.
    ///
    /// Fails with `Invalid` naming the problem for a URL or schema name that cannot be used,
    /// and with `Unavailable` when the server cannot be reached, refuses the login, or holds
    /// a schema from a newer arbor or tables that are not an arbor store's (left untouched).
    pub async fn connect(&self, url: &str) -> StoreResult<PostgresStore> {
        let parsed = url::Url::parse(url)
            .map_err(|e| StoreError::Invalid(format!("store URL: not a postgres:// URL ({e})")))?;
        if !matches!(parsed.scheme(), "postgres" | "postgresql") {
            return Err(StoreError::Invalid(format!(
                "store URL: scheme {:?} is not postgres:// or postgresql://",
                parsed.scheme()
            )));
        }
        let shown: Arc<str> = shown(&parsed).into();
        if let Some(schema) = &self.schema {
            check_schema(schema)?;
        }
        let mut connect = PgConnectOptions::from_str(url)
            .map_err(|e| StoreError::Invalid(format!("store URL {shown}: {e}")))?;
        if let Some(schema) = &self.schema {
            connect = connect.options([("search_path", schema.as_str())]);
        }
        if let Some(wait) = self.synchronous_commit {
            connect = connect.options([("synchronous_commit", if wait { "on" } else { "off" })]);
        }
        let pool = PgPoolOptions::new()
            .max_connections(self.max_connections)
            .acquire_timeout(self.acquire_timeout)
            .connect_with(connect)
            .await
            .map_err(|e| match e {
                sqlx::Error::PoolTimedOut => store_error(&shown, e),
                other => unavailable(&shown, format_args!("cannot connect: {other}")),
            })?;
        migrate(&pool, &shown, self.schema.as_deref()).await?;
        Ok(PostgresStore::new(pool, shown))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_checked() {
        assert!(check_schema("arbor_ci_1").is_ok());
        for bad in ["", "1abc", "Arbor", "a-b", "a\"b", &"a".repeat(64)] {
            let err = check_schema(bad).unwrap_err();
            assert!(err.to_string().contains("store schema"), "{err}");
        }
    }
}
