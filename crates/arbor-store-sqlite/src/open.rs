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

use arbor_store::{StoreError, StoreErrorKind, StoreResult};
use rusqlite::{Connection, ErrorCode, OpenFlags};

use crate::error::{SqlResultExt, open_error, unavailable};
use crate::options::SqliteOptions;
use crate::schema::SCHEMA_VERSION;
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
    if options.read_only {
        return connect_read_only(path, display, options);
    }
    // A `file:` URI (a shared in-memory database, say) names no file to create or check:
    // creating one would leave an empty file of that name in the working directory.
    let uri = path.to_str().is_some_and(|p| p.starts_with("file:"));
    if !uri {
        perms::create_private(path);
    }
    let conn = Connection::open(path).map_err(|e| open_error(display, e))?;
    let conn = setup(conn, display, options)?;
    if !uri {
        perms::warn_if_shared(path, display);
    }
    Ok(conn)
}

/// A second connection to the store file at `path`, already opened and migrated by
/// [`connect`], that only reads (`query_only`): in WAL mode its reads see every committed
/// write and never wait for the writer's transaction, nor it for them.
pub(crate) fn connect_reader(
    path: &Path,
    display: &str,
    options: &SqliteOptions,
) -> StoreResult<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| open_error(display, e))?;
    conn.busy_timeout(options.busy_timeout).at(display)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.pragma_update(None, "query_only", true).at(display)?;
    Ok(conn)
}

/// Whether `conn`'s database is in WAL mode (what [`connect`] asks for; a file system that
/// cannot share memory, say, leaves it in another mode).
pub(crate) fn in_wal_mode(conn: &Connection) -> bool {
    conn.pragma_query_value(None, "journal_mode", |row| row.get::<_, String>(0))
        .is_ok_and(|mode| mode.eq_ignore_ascii_case("wal"))
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
    let pages = i32::try_from(options.checkpoint_pages).unwrap_or(i32::MAX);
    conn.pragma_update(None, "wal_autocheckpoint", pages)
        .at(path)?;
    retry_busy(deadline, || schema::migrate(&mut conn, path, version))?;
    Ok(conn)
}

/// Opens the existing store at `path` read-only: no file is created and nothing is written.
fn connect_read_only(path: &Path, shown: &str, options: &SqliteOptions) -> StoreResult<Connection> {
    if !path.exists() {
        return Err(unavailable(
            shown,
            "no store file there (a read-only open creates none)",
        ));
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(path, flags).map_err(|e| open_error(shown, e))?;
    let conn = match setup_read_only(conn, shown, options) {
        // A WAL file cannot be read without its `-shm` index, which SQLite could not create
        // (a read-only directory). With no `-wal` file either, the main file holds every
        // commit and can be read as immutable.
        Err(ReadOnlyError::CannotOpen(err)) if !wal_has_frames(path) => {
            tracing::debug!(path = shown, %err, "reading the store as immutable");
            let conn = Connection::open_with_flags(
                immutable_uri(path),
                flags | OpenFlags::SQLITE_OPEN_URI,
            )
            .map_err(|e| open_error(shown, e))?;
            setup_read_only(conn, shown, options).map_err(|e| e.into_store(shown))?
        }
        Err(ReadOnlyError::CannotOpen(err)) => {
            return Err(unavailable(
                shown,
                format_args!(
                    "cannot read it read-only ({err}): its write-ahead log ({shown}-wal) holds \
                     commits that SQLite can only read with a writable directory; open it \
                     read-write once, or read a copy"
                ),
            ));
        }
        other => other.map_err(|e| e.into_store(shown))?,
    };
    perms::warn_if_shared(path, shown);
    Ok(conn)
}

/// Why a read-only setup failed.
enum ReadOnlyError {
    /// SQLite could not open the file or its companions for reading.
    CannotOpen(rusqlite::Error),
    /// Any other failure.
    Store(StoreError),
}

impl ReadOnlyError {
    fn into_store(self, path: &str) -> StoreError {
        match self {
            Self::Store(err) => err,
            Self::CannotOpen(err) => open_error(path, err),
        }
    }
}

fn setup_read_only(
    conn: Connection,
    path: &str,
    options: &SqliteOptions,
) -> Result<Connection, ReadOnlyError> {
    conn.busy_timeout(options.busy_timeout)
        .at(path)
        .map_err(ReadOnlyError::Store)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // The first read opens the WAL index: tell its failure apart from the others.
    // A directory the user cannot write gives `CannotOpen` (the `-shm` file cannot be made)
    // or `ReadOnly` (an existing `-shm` or WAL index cannot be set up): either way the file
    // may still be read as immutable.
    if let Err(err) = conn.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(()))
        && matches!(
            err.sqlite_error_code(),
            Some(ErrorCode::CannotOpen | ErrorCode::ReadOnly)
        )
    {
        return Err(ReadOnlyError::CannotOpen(err));
    }
    let deadline = Instant::now() + options.busy_timeout;
    let version =
        retry_busy(deadline, || schema::check(&conn, path)).map_err(ReadOnlyError::Store)?;
    if version < SCHEMA_VERSION {
        return Err(ReadOnlyError::Store(unavailable(
            path,
            format_args!(
                "its schema (version {version}) is older than this arbor's ({SCHEMA_VERSION}) \
                 and a read-only open does not upgrade it; open it read-write once (any arbor \
                 command that writes) to upgrade it"
            ),
        )));
    }
    Ok(conn)
}

/// Whether the `-wal` file next to `path` exists and is not empty.
fn wal_has_frames(path: &Path) -> bool {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    std::fs::metadata(Path::new(&wal)).is_ok_and(|m| m.len() > 0)
}

/// A `file:` URI opening `path` as immutable (SQLite neither locks it nor looks for a WAL).
fn immutable_uri(path: &Path) -> String {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut uri = String::from("file:");
    for c in absolute.to_string_lossy().chars() {
        match c {
            '%' => uri.push_str("%25"),
            '?' => uri.push_str("%3f"),
            '#' => uri.push_str("%23"),
            c => uri.push(c),
        }
    }
    uri.push_str("?immutable=1");
    uri
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
