//! The schema: numbered migrations (`migrations/NNNN_name.sql`, embedded in the binary),
//! applied at connect inside one transaction that holds an advisory lock, so processes that
//! connect at the same moment apply each migration once. Applied migrations are rows of
//! `arbor_migrations`; a schema written by a newer arbor, or tables that are not an arbor
//! store's, are refused untouched.

use arbor_protocol::Timestamp;
use arbor_store::{StoreError, StoreResult};
use sqlx::{PgPool, Row};

use crate::error::{store_error, unavailable};

/// The schema version this build writes: the number of the last migration.
pub const SCHEMA_VERSION: i64 = 5;

/// The migrations, in order.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "store", include_str!("../migrations/0001_store.sql")),
    (
        2,
        "child_runs",
        include_str!("../migrations/0002_child_runs.sql"),
    ),
    (
        3,
        "tree_slots",
        include_str!("../migrations/0003_tree_slots.sql"),
    ),
    (
        4,
        "child_events",
        include_str!("../migrations/0004_child_events.sql"),
    ),
    (5, "cost", include_str!("../migrations/0005_cost.sql")),
];

/// The advisory lock held while migrating ("arbor" in ASCII).
const LOCK: i64 = 0x0061_7262_6f72;

/// Brings the schema the pool's connections see to [`SCHEMA_VERSION`].
pub(crate) async fn migrate(pool: &PgPool, shown: &str, schema: Option<&str>) -> StoreResult<()> {
    let err = |e| store_error(shown, e);
    let mut tx = pool.begin().await.map_err(err)?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(LOCK)
        .execute(&mut *tx)
        .await
        .map_err(err)?;
    if let Some(schema) = schema {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "CREATE SCHEMA IF NOT EXISTS {}",
            quoted(schema)
        )))
        .execute(&mut *tx)
        .await
        .map_err(err)?;
    }
    let tracked: bool = sqlx::query("SELECT to_regclass('arbor_migrations') IS NOT NULL")
        .fetch_one(&mut *tx)
        .await
        .and_then(|row| row.try_get(0))
        .map_err(err)?;
    let current = if tracked {
        sqlx::query("SELECT COALESCE(MAX(version), 0) FROM arbor_migrations")
            .fetch_one(&mut *tx)
            .await
            .and_then(|row| row.try_get::<i64, _>(0))
            .map_err(err)?
    } else {
        let foreign: bool = sqlx::query("SELECT to_regclass('sessions') IS NOT NULL")
            .fetch_one(&mut *tx)
            .await
            .and_then(|row| row.try_get(0))
            .map_err(err)?;
        if foreign {
            return Err(unavailable(
                shown,
                "its schema has a `sessions` table that is not an arbor store's (no \
                 arbor_migrations); arbor left it as it is: name another database or schema",
            ));
        }
        sqlx::query(
            "CREATE TABLE arbor_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, \
             applied_at BIGINT NOT NULL)",
        )
        .execute(&mut *tx)
        .await
        .map_err(err)?;
        0
    };
    if current > SCHEMA_VERSION {
        return Err(StoreError::Unavailable {
            path: shown.to_owned(),
            reason: format!(
                "its schema is version {current}, written by a newer arbor (this one knows up \
                 to {SCHEMA_VERSION}); arbor left it as it is: upgrade arbor"
            ),
        });
    }
    for (version, name, sql) in MIGRATIONS.iter().filter(|(v, ..)| *v > current) {
        sqlx::raw_sql(sqlx::AssertSqlSafe(*sql))
            .execute(&mut *tx)
            .await
            .map_err(|e| unavailable(shown, format_args!("migration {version} ({name}): {e}")))?;
        sqlx::query("INSERT INTO arbor_migrations (version, name, applied_at) VALUES ($1, $2, $3)")
            .bind(version)
            .bind(*name)
            .bind(Timestamp::now().0 as i64)
            .execute(&mut *tx)
            .await
            .map_err(err)?;
        tracing::info!(store = shown, version, name, "applied migration");
    }
    tx.commit().await.map_err(err)
}

/// `name` as a quoted SQL identifier (it has been checked to hold no quote).
pub(crate) fn quoted(name: &str) -> String {
    format!("\"{name}\"")
}

/// A schema name the store accepts: `[a-z_][a-z0-9_]{0,62}`.
pub(crate) fn check_schema(schema: &str) -> StoreResult<()> {
    let mut chars = schema.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if first_ok && rest_ok && schema.len() <= 63 {
        return Ok(());
    }
    Err(StoreError::Invalid(format!(
        "store schema {schema:?}: use lowercase ASCII letters, digits and `_`, not starting \
         with a digit, at most 63 characters"
    )))
}
