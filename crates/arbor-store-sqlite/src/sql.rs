//! The parameterized statements the store runs on its hot paths, kept in one place so a
//! test proves SQLite compiles each of them once.
//!
//! This build of SQLite has STAT4, and with it a statement whose plan could depend on a
//! bound value (a comparison beside an `ORDER BY`, a `MAX` or a `LIMIT` over an index) is
//! marked stale whenever its parameters are rebound, so it was compiled again on every run:
//! 10 % of a root run's time on a file store. Casting each such parameter to its column's
//! type pins the plan; the values and results are the same.

use std::sync::LazyLock;

use arbor_store::row::{ENTRY_COLUMNS, SESSION_COLUMNS};

/// One session by id: `?1` the id.
pub(crate) static LOAD_SESSION: LazyLock<String> =
    LazyLock::new(|| format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1"));

/// A new session row, its values in [`SESSION_COLUMNS`] order.
pub(crate) static INSERT_SESSION: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO sessions ({SESSION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, \
         ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, \
         ?27, ?28, ?29, ?30)"
    )
});

/// A session's own usage and cost, then its attributed usage and cost: `?1` the id.
pub(crate) const USAGE_OF: &str = "SELECT own_input_tokens, own_output_tokens, \
     own_total_tokens, own_cache_read_tokens, own_cache_write_tokens, own_cost, \
     attributed_input_tokens, attributed_output_tokens, attributed_total_tokens, \
     attributed_cache_read_tokens, attributed_cache_write_tokens, attributed_cost \
     FROM sessions WHERE id = ?1";

/// Sets a session's attributed usage (`?2`–`?6`) and cost (`?7`), bumping its version and
/// time (`?8`): `?1` the id.
pub(crate) const ADD_ATTRIBUTED: &str = "UPDATE sessions SET attributed_input_tokens = ?2, \
     attributed_output_tokens = ?3, attributed_total_tokens = ?4, \
     attributed_cache_read_tokens = ?5, attributed_cache_write_tokens = ?6, \
     attributed_cost = ?7, version = version + 1, updated_at = MAX(updated_at, ?8) \
     WHERE id = ?1";

/// The last `seq` of a session's transcript (0 when empty): `?1` the session.
pub(crate) const LAST_SEQ: &str =
    "SELECT COALESCE(MAX(seq), 0) FROM transcript_entries WHERE session_id = CAST(?1 AS TEXT)";

/// A session's entries after `?2`, in order, at most `?3` (negative: all): `?1` the session.
pub(crate) static ENTRIES_AFTER: LazyLock<String> = LazyLock::new(|| {
    format!(
        "SELECT {ENTRY_COLUMNS} FROM transcript_entries WHERE session_id = CAST(?1 AS TEXT) \
         AND seq > CAST(?2 AS INTEGER) ORDER BY seq LIMIT CAST(?3 AS INTEGER)"
    )
});

/// A namespace's checkpoints by key: `?1` the namespace.
pub(crate) const CHECKPOINTS_OF: &str = "SELECT namespace, key, version, value, updated_at \
     FROM checkpoints WHERE namespace = CAST(?1 AS TEXT) ORDER BY key";

/// The filters of [`sessions_where`] that take one parameter.
pub(crate) const CHILDREN_OF: &str = "parent_id = CAST(?1 AS TEXT)";
pub(crate) const TREE_OF: &str = "root_id = CAST(?1 AS TEXT)";
pub(crate) const WITH_STATUS: &str = "status = CAST(?1 AS TEXT)";
/// The newest `?1` roots (through the parent index, whose NULL parents are the roots).
pub(crate) const LATEST_ROOTS: &str = "id IN (SELECT id FROM sessions WHERE parent_id IS NULL \
     ORDER BY created_at DESC, id DESC LIMIT CAST(?1 AS INTEGER))";

/// The sessions that `filter` selects, oldest first.
pub(crate) fn sessions_where(filter: &str) -> String {
    format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE {filter} ORDER BY created_at, id")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use rusqlite::{StatementStatus, ToSql};

    use super::*;
    use crate::options::SqliteOptions;

    /// Runs `sql` three times with `params` on a migrated file store, from the statement
    /// cache as the store does; how often SQLite compiled it again.
    fn recompiles(conn: &rusqlite::Connection, sql: &str, params: &[&dyn ToSql]) -> i32 {
        let mut recompiled = 0;
        for _ in 0..3 {
            let mut stmt = conn.prepare_cached(sql).unwrap();
            let mut rows = stmt.query(params).unwrap();
            while rows.next().unwrap().is_some() {}
            drop(rows);
            recompiled = stmt.get_status(StatementStatus::RePrepare);
        }
        recompiled
    }

    #[test]
    fn hot_statements_are_compiled_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store.db");
        let conn = crate::open::connect(
            &path,
            &path.display().to_string(),
            &SqliteOptions::default(),
        )
        .unwrap();
        let (id, n, all) = ("0190f1e2-0000-7000-8000-000000000001", 3_i64, -1_i64);
        let cases: Vec<(String, Vec<&dyn ToSql>)> = vec![
            (LAST_SEQ.to_owned(), vec![&id]),
            (ENTRIES_AFTER.clone(), vec![&id, &n, &all]),
            (ENTRIES_AFTER.clone(), vec![&id, &n, &n]),
            (CHECKPOINTS_OF.to_owned(), vec![&"approvals"]),
            (sessions_where(CHILDREN_OF), vec![&id]),
            (sessions_where(TREE_OF), vec![&id]),
            (sessions_where(WITH_STATUS), vec![&"running"]),
            (sessions_where(LATEST_ROOTS), vec![&"1"]),
        ];
        for (sql, params) in cases {
            assert_eq!(recompiles(&conn, &sql, &params), 0, "{sql}");
        }
        // The test can fail: the same statement with a bare parameter is compiled again.
        let bare = LAST_SEQ.replace("CAST(?1 AS TEXT)", "?1");
        assert!(recompiles(&conn, &bare, &[&id]) > 0, "{bare}");
    }
}
