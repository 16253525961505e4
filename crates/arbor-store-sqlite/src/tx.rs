//! A transaction whose `BEGIN`, `COMMIT`, `ROLLBACK` and savepoints are prepared once per
//! connection and kept in its statement cache.
//!
//! rusqlite's `Transaction` runs each of those with `execute_batch`, which parses and
//! compiles the statement every time: two compilations per write (about 15 % of a
//! write's instructions on a file store). [`Tx`] runs the same statements from the cache.
//! Like rusqlite's, it rolls back when dropped uncommitted (an error, a panic), so the
//! connection is never left inside a transaction.

use std::ops::Deref;

use arbor_store::StoreResult;
use rusqlite::Connection;

use crate::error::SqlResultExt;

/// How a transaction takes the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Begin {
    /// Takes the write lock at once (`BEGIN IMMEDIATE`): every write.
    Immediate,
    /// Takes a read snapshot at the first read (`BEGIN DEFERRED`): reads that must see one.
    Deferred,
}

/// An open transaction on a connection; see the module docs.
pub(crate) struct Tx<'c> {
    conn: &'c Connection,
    open: bool,
}

impl<'c> Tx<'c> {
    /// Begins a transaction on `conn`.
    pub(crate) fn begin(conn: &'c Connection, begin: Begin, path: &str) -> StoreResult<Self> {
        let sql = match begin {
            Begin::Immediate => "BEGIN IMMEDIATE",
            Begin::Deferred => "BEGIN DEFERRED",
        };
        run(conn, sql, path)?;
        Ok(Self { conn, open: true })
    }

    /// Commits it. On failure it is rolled back (as when dropped).
    pub(crate) fn commit(mut self, path: &str) -> StoreResult<()> {
        run(self.conn, "COMMIT", path)?;
        self.open = false;
        Ok(())
    }

    /// Opens the savepoint `arbor_write` inside it.
    pub(crate) fn savepoint(&self, path: &str) -> StoreResult<()> {
        run(self.conn, "SAVEPOINT arbor_write", path)
    }

    /// Keeps what was done since [`savepoint`](Self::savepoint).
    pub(crate) fn release(&self, path: &str) -> StoreResult<()> {
        run(self.conn, "RELEASE arbor_write", path)
    }

    /// Undoes what was done since [`savepoint`](Self::savepoint), and closes it.
    pub(crate) fn roll_back_to_savepoint(&self, path: &str) -> StoreResult<()> {
        run(self.conn, "ROLLBACK TO arbor_write", path)?;
        self.release(path)
    }
}

impl Deref for Tx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        // SQLite may have rolled back already (some errors end the transaction): then
        // there is nothing to undo.
        if self.open
            && !self.conn.is_autocommit()
            && let Err(e) = run(self.conn, "ROLLBACK", "")
        {
            tracing::warn!(error = %e, "a store transaction could not be rolled back");
        }
    }
}

/// Runs the parameterless statement `sql` from the connection's cache.
fn run(conn: &Connection, sql: &str, path: &str) -> StoreResult<()> {
    conn.prepare_cached(sql)
        .and_then(|mut stmt| stmt.execute([]))
        .at(path)
        .map(drop)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn count(conn: &Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap()
    }

    /// Committed work stays, dropped work is undone, a savepoint undoes only its own part,
    /// and the statements are compiled once for the connection, not once per transaction.
    #[test]
    fn commits_rolls_back_and_compiles_each_statement_once() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (n INTEGER)").unwrap();

        let tx = Tx::begin(&conn, Begin::Immediate, ":memory:").unwrap();
        tx.execute("INSERT INTO t VALUES (1)", []).unwrap();
        tx.savepoint("").unwrap();
        tx.execute("INSERT INTO t VALUES (2)", []).unwrap();
        tx.roll_back_to_savepoint("").unwrap();
        tx.savepoint("").unwrap();
        tx.execute("INSERT INTO t VALUES (3)", []).unwrap();
        tx.release("").unwrap();
        tx.commit("").unwrap();
        assert!(conn.is_autocommit());
        let kept: Vec<i64> = conn
            .prepare("SELECT n FROM t ORDER BY n")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(kept, [1, 3]);

        {
            let tx = Tx::begin(&conn, Begin::Deferred, "").unwrap();
            tx.execute("INSERT INTO t VALUES (4)", []).unwrap();
            // Dropped uncommitted: rolled back.
        }
        assert!(conn.is_autocommit());
        assert_eq!(count(&conn), 2);

        // Later transactions run the same cached statements: each one compiled once has
        // run every time (the first transaction's and these three).
        for _ in 0..3 {
            let tx = Tx::begin(&conn, Begin::Immediate, "").unwrap();
            tx.commit("").unwrap();
        }
        let runs = |sql: &str| {
            conn.prepare_cached(sql)
                .unwrap()
                .get_status(rusqlite::StatementStatus::Run)
        };
        assert_eq!(runs("BEGIN IMMEDIATE"), 4);
        assert_eq!(runs("COMMIT"), 4);
        assert_eq!(runs("ROLLBACK"), 1, "the dropped transaction");
    }
}
