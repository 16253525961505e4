//! Opening a store file: the connection's settings, the switch to WAL and the migrations,
//! safe against other processes opening (or creating) the same file at the same time.
//!
//! The busy timeout is set before anything touches the file. Every step that can meet
//! another connection holding the file (the schema check, the switch to WAL, the migration
//! transaction) is retried until the busy timeout has passed since the open began, because
//! SQLite returns `SQLITE_BUSY` without waiting in some of those cases (a read transaction
//! that must become a write one, as the journal-mode switch does). Only then does the open
//! fail with `Locked`.

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use arbor_store::{StoreErrorKind, StoreResult};
use rusqlite::Connection;

use crate::error::{SqlResultExt, open_error, unavailable};
use crate::options::SqliteOptions;
use crate::{perms, schema};

/// Prepared statements kept per connection (the store runs a few dozen distinct ones).
const STATEMENT_CACHE: usize = 128;

/// The pause between two tries of a step that found the file busy.
const RETRY_PAUSE: Duration = Duration::from_millis(5);

/// Opens (creating if missing) the store file at `path` and brings it to the current schema.
pub(crate) fn connect(
    path: &Path,
    display: &str,
    options: &SqliteOptions,
) -> StoreResult<Connection> {
    if path.is_dir() {
        return Err(unavailable(display, "it is a directory, not a store file"));
    }
    perms::create_private(path);
    let conn = Connection::open(path).map_err(|e| open_error(display, e))?;
    let conn = setup(conn, display, options)?;
    perms::warn_if_shared(path, display);
    Ok(conn)
}

/// A private in-memory store's connection.
pub(crate) fn connect_in_memory(display: &str, options: &SqliteOptions) -> StoreResult<Connection> {
    let conn = Connection::open_in_memory().map_err(|e| open_error(display, e))?;
    setup(conn, display, options)
}

fn setup(mut conn: Connection, path: &str, options: &SqliteOptions) -> StoreResult<Connection> {
    // First, so that every later step waits for other connections instead of failing.
    conn.busy_timeout(options.busy_timeout).at(path)?;
    let deadline = Instant::now() + options.busy_timeout;
    // Every statement the store runs stays prepared: with rusqlite's default of 16 the
    // cache churned and re-preparing cost an eighth of a delegation's time.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // Check before anything writes: a foreign or newer file must stay as it is.
    let version = retry_busy(deadline, || schema::check(&conn, path))?;
    retry_busy(deadline, || switch_to_wal(&conn, path))?;
    conn.pragma_update(None, "foreign_keys", true).at(path)?;
    conn.pragma_update(None, "synchronous", options.synchronous.as_pragma())
        .at(path)?;
    retry_busy(deadline, || schema::migrate(&mut conn, path, version))?;
    Ok(conn)
}

/// Puts the file in WAL mode (a no-op when it is already).
fn switch_to_wal(conn: &Connection, path: &str) -> StoreResult<()> {
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |row| row.get(0))
        .map_err(|e| open_error(path, e))?;
    if mode.eq_ignore_ascii_case("wal") || mode.eq_ignore_ascii_case("memory") {
        return Ok(());
    }
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
        .map_err(|e| open_error(path, e))?;
    if !mode.eq_ignore_ascii_case("wal") {
        tracing::warn!(path, mode, "the store could not switch to WAL mode");
    }
    Ok(())
}

/// Runs `step` until it does not fail with `Locked` or `deadline` has passed.
fn retry_busy<T>(deadline: Instant, mut step: impl FnMut() -> StoreResult<T>) -> StoreResult<T> {
    loop {
        match step() {
            Err(err) if err.kind() == StoreErrorKind::Locked && Instant::now() < deadline => {
                thread::sleep(RETRY_PAUSE);
            }
            other => return other,
        }
    }
}
