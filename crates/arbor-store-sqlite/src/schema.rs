//! The schema: numbered migrations embedded in the binary, applied at open inside one
//! transaction and tracked with `PRAGMA user_version`.
//!
//! To change the schema, add `migrations/NNNN_name.sql` and a [`Migration`] entry with the
//! next version; never edit a migration that has shipped. When a new constraint may not hold
//! on data an older arbor wrote, a fix in [`crate::repair`] runs before the migration, in its
//! transaction (0002's unique sibling names: older stores' duplicates are renamed). A store is
//! recognised by its `PRAGMA application_id`, set by the first migration, so a foreign
//! SQLite database is refused instead of being migrated.

use arbor_store::{StoreError, StoreResult};
use rusqlite::{Connection, ErrorCode, TransactionBehavior};

use crate::error::{SqlResultExt, open_error, unavailable};
use crate::repair;

/// One schema step.
#[derive(Debug)]
struct Migration {
    /// The `user_version` after this step.
    version: u32,
    /// The file name, for errors and logs.
    name: &'static str,
    /// The SQL, run as one batch.
    sql: &'static str,
    /// A data fix run right before `sql`, in the same transaction (see [`crate::repair`]).
    prepare: Option<fn(&Connection, &str) -> StoreResult<()>>,
}

const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "0001_sessions",
        sql: include_str!("../migrations/0001_sessions.sql"),
        prepare: None,
    },
    Migration {
        version: 2,
        name: "0002_registry",
        sql: include_str!("../migrations/0002_registry.sql"),
        // Schema version 1 allowed same-named siblings; 0002's unique index does not.
        prepare: Some(repair::unique_sibling_names),
    },
    Migration {
        version: 3,
        name: "0003_checkpoints",
        sql: include_str!("../migrations/0003_checkpoints.sql"),
        prepare: None,
    },
    Migration {
        version: 4,
        name: "0004_artifacts",
        sql: include_str!("../migrations/0004_artifacts.sql"),
        prepare: None,
    },
    Migration {
        version: 5,
        name: "0005_cost",
        sql: include_str!("../migrations/0005_cost.sql"),
        prepare: None,
    },
];

/// The schema version this build creates and understands (`PRAGMA user_version`).
pub const SCHEMA_VERSION: u32 = 5;

/// `PRAGMA application_id` of an arbor store: "arbr" in ASCII.
const APPLICATION_ID: i64 = 0x6172_6272;

/// Reads the schema version of the database on `conn`, refusing one that is not an arbor
/// store or that a newer arbor wrote. Only reads.
pub(crate) fn check(conn: &Connection, path: &str) -> StoreResult<u32> {
    // One statement, so one read transaction: the three facts come from one snapshot even
    // while another process creates the store (read apart, an empty version and id next to
    // freshly created tables looked like another application's database).
    let (version, application_id, objects): (i64, i64, i64) = conn
        .prepare_cached(
            "SELECT (SELECT user_version FROM pragma_user_version), \
                    (SELECT application_id FROM pragma_application_id), \
                    (SELECT count(*) FROM sqlite_schema)",
        )
        .and_then(|mut stmt| stmt.query_row([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?))))
        .map_err(|e| open_error(path, e))?;
    let version =
        u32::try_from(version).map_err(|_| not_arbor(path, "its schema version is negative"))?;
    if application_id == APPLICATION_ID {
        if version > SCHEMA_VERSION {
            return Err(unavailable(
                path,
                format_args!(
                    "created by a newer arbor (schema version {version}, this build knows up to \
                     {SCHEMA_VERSION}); upgrade arbor to open it"
                ),
            ));
        }
        return Ok(version);
    }
    if application_id != 0 {
        return Err(not_arbor(
            path,
            format_args!("its application_id is {application_id:#x}"),
        ));
    }
    if version != 0 || objects != 0 {
        return Err(not_arbor(path, "it holds another application's tables"));
    }
    Ok(0)
}

fn not_arbor(path: &str, why: impl std::fmt::Display) -> StoreError {
    unavailable(
        path,
        format_args!("a SQLite database that is not an arbor store ({why}); left untouched"),
    )
}

/// Brings the schema on `conn` to [`SCHEMA_VERSION`], all steps in one `BEGIN IMMEDIATE`
/// transaction: a failed step leaves the file as it was.
pub(crate) fn migrate(conn: &mut Connection, path: &str, current: u32) -> StoreResult<()> {
    if current == SCHEMA_VERSION {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .at(path)?;
    // Another process may have migrated between the first check and the lock.
    let current = check(&tx, path)?;
    for migration in MIGRATIONS.iter().filter(|m| m.version > current) {
        if let Some(prepare) = migration.prepare {
            prepare(&tx, path)?;
        }
        tx.execute_batch(migration.sql)
            .and_then(|()| tx.pragma_update(None, "user_version", migration.version))
            .map_err(|e| match e.sqlite_error_code() {
                Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Locked {
                    path: path.to_owned(),
                },
                _ => unavailable(
                    path,
                    format_args!("migration {} failed: {e}", migration.name),
                ),
            })?;
        tracing::info!(path, migration = migration.name, "applied store migration");
    }
    tx.pragma_update(None, "application_id", APPLICATION_ID)
        .at(path)?;
    tx.commit().at(path)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_one_to_schema_version() {
        let versions: Vec<u32> = MIGRATIONS.iter().map(|m| m.version).collect();
        assert_eq!(versions, (1..=SCHEMA_VERSION).collect::<Vec<_>>());
        for m in MIGRATIONS {
            assert!(
                m.name.starts_with(&format!("{:04}_", m.version)),
                "{}",
                m.name
            );
        }
    }
}
