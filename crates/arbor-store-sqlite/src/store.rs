//! [`SqliteStore`]: opening the file and the [`Store`] operations.

use std::fmt;
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};

use arbor_protocol::{EntryKind, RunId, SessionId, SessionStatus, Timestamp, TranscriptEntry};
use arbor_store::{
    Attribution, Checkpoint, SessionQuery, SessionRecord, SessionUpdate, Store, StoreError,
    StoreResult,
};
use async_trait::async_trait;
use rusqlite::{Connection, Transaction, TransactionBehavior, params};

use crate::codec::{
    ENTRY_COLUMNS, SESSION_COLUMNS, entry_body, entry_from_row, insert_session, session_from_row,
    to_sql, write_session,
};
use crate::error::SqlResultExt;
use crate::open;
use crate::options::SqliteOptions;

/// A store in one SQLite file. Safe to share between tasks; several processes may open the
/// same file, and each write is atomic against all of them.
pub struct SqliteStore {
    conn: Mutex<Connection>,
    path: String,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens the store file at `path` with the default [`SqliteOptions`], creating the file
    /// (not its directory) if missing and migrating its schema.
    ///
    /// Fails with `Unavailable` naming the path when the file cannot be opened, is not an
    /// arbor store, or was created by a newer arbor (the file is left untouched), and with
    /// `Locked` when another process holds it longer than the busy timeout.
    pub fn open(path: impl AsRef<Path>) -> StoreResult<Self> {
        Self::open_with(path, &SqliteOptions::default())
    }

    /// [`open`](Self::open) with explicit options.
    pub fn open_with(path: impl AsRef<Path>, options: &SqliteOptions) -> StoreResult<Self> {
        let path = path.as_ref();
        let display = path.display().to_string();
        let conn = open::connect(path, &display, options)?;
        Ok(Self::new(conn, display))
    }

    /// A private in-memory store, gone when dropped: for tests.
    pub fn open_in_memory() -> StoreResult<Self> {
        Self::open_in_memory_with(&SqliteOptions::default())
    }

    /// [`open_in_memory`](Self::open_in_memory) with explicit options.
    pub fn open_in_memory_with(options: &SqliteOptions) -> StoreResult<Self> {
        let path = ":memory:".to_owned();
        let conn = open::connect_in_memory(&path, options)?;
        Ok(Self::new(conn, path))
    }

    fn new(conn: Connection, path: String) -> Self {
        Self {
            conn: Mutex::new(conn),
            path,
        }
    }

    /// The store's location as errors name it (`:memory:` for an in-memory store).
    pub fn path(&self) -> &str {
        &self.path
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // A panic inside an operation drops its transaction, which rolls back: the connection
        // is usable even if the lock is poisoned.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn transaction<T>(
        &self,
        behavior: TransactionBehavior,
        f: impl FnOnce(&Transaction<'_>, &str) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let mut conn = self.lock();
        let tx = conn.transaction_with_behavior(behavior).at(&self.path)?;
        let out = f(&tx, &self.path)?;
        tx.commit().at(&self.path)?;
        Ok(out)
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction, committed only if `f` succeeds.
    fn write<T>(&self, f: impl FnOnce(&Transaction<'_>, &str) -> StoreResult<T>) -> StoreResult<T> {
        self.transaction(TransactionBehavior::Immediate, f)
    }

    /// Runs `f` in one read transaction, so its statements see one snapshot.
    fn read<T>(&self, f: impl FnOnce(&Transaction<'_>, &str) -> StoreResult<T>) -> StoreResult<T> {
        self.transaction(TransactionBehavior::Deferred, f)
    }
}

fn exists(conn: &Connection, path: &str, id: SessionId) -> StoreResult<bool> {
    conn.prepare_cached("SELECT 1 FROM sessions WHERE id = ?1")
        .and_then(|mut stmt| stmt.exists([id.to_string()]))
        .at(path)
}

fn load(conn: &Connection, path: &str, id: SessionId) -> StoreResult<Option<SessionRecord>> {
    let sql = format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1");
    let mut stmt = conn.prepare_cached(&sql).at(path)?;
    let mut rows = stmt.query([id.to_string()]).at(path)?;
    rows.next().at(path)?.map(session_from_row).transpose()
}

fn select_sessions(
    conn: &Connection,
    path: &str,
    filter: &str,
    param: Option<String>,
) -> StoreResult<Vec<SessionRecord>> {
    let sql =
        format!("SELECT {SESSION_COLUMNS} FROM sessions WHERE {filter} ORDER BY created_at, id");
    let mut stmt = conn.prepare_cached(&sql).at(path)?;
    let mut rows = match param {
        Some(param) => stmt.query([param]),
        None => stmt.query([]),
    }
    .at(path)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().at(path)? {
        out.push(session_from_row(row)?);
    }
    Ok(out)
}

/// Loads `id`, checks `update`'s expected version, applies it and writes the record back.
fn apply_update(
    conn: &Connection,
    path: &str,
    id: SessionId,
    update: &SessionUpdate,
) -> StoreResult<SessionRecord> {
    let mut record = load(conn, path, id)?.ok_or_else(|| StoreError::session_not_found(id))?;
    record.check_version(update)?;
    record.apply(update);
    write_session(conn, path, &record)?;
    Ok(record)
}

fn encode(entries: &[EntryKind]) -> StoreResult<Vec<(&'static str, String)>> {
    entries
        .iter()
        .map(|kind| Ok((kind.kind_name(), entry_body(kind)?)))
        .collect()
}

/// Applies `update` (if any) and appends `bodies` to `session`, inside the caller's
/// transaction; returns the last sequence number.
fn append_in(
    tx: &Transaction<'_>,
    path: &str,
    session: SessionId,
    run: RunId,
    bodies: &[(&'static str, String)],
    update: Option<&SessionUpdate>,
) -> StoreResult<u64> {
    match update {
        Some(update) => drop(apply_update(tx, path, session, update)?),
        None if !exists(tx, path, session)? => {
            return Err(StoreError::session_not_found(session));
        }
        None => {}
    }
    let last: i64 = tx
        .prepare_cached(
            "SELECT COALESCE(MAX(seq), 0) FROM transcript_entries WHERE session_id = ?1",
        )
        .and_then(|mut stmt| stmt.query_row([session.to_string()], |row| row.get(0)))
        .at(path)?;
    let (session, run) = (session.to_string(), run.to_string());
    let at = to_sql(Timestamp::now().0);
    let mut insert = tx
        .prepare_cached(
            "INSERT INTO transcript_entries (session_id, seq, at, run_id, kind, body) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )
        .at(path)?;
    let mut seq = last;
    for (kind, body) in bodies {
        seq += 1;
        insert
            .execute(params![session, seq, at, run, kind, body])
            .at(path)?;
    }
    u64::try_from(seq).map_err(|_| StoreError::Corrupt(format!("transcript seq {seq}")))
}

fn name_taken(tx: &Transaction<'_>, path: &str, record: &SessionRecord) -> StoreResult<bool> {
    let Some(parent) = record.parent_id else {
        return Ok(false);
    };
    if record.tombstone.is_some() {
        return Ok(false);
    }
    tx.prepare_cached(
        "SELECT 1 FROM sessions WHERE parent_id = ?1 AND name = ?2 AND tombstone IS NULL",
    )
    .and_then(|mut stmt| stmt.exists(params![parent.to_string(), record.name]))
    .at(path)
}

fn checkpoint_version(
    tx: &Transaction<'_>,
    path: &str,
    namespace: &str,
    key: &str,
) -> StoreResult<Option<u64>> {
    use rusqlite::OptionalExtension;
    tx.prepare_cached("SELECT version FROM checkpoints WHERE namespace = ?1 AND key = ?2")
        .and_then(|mut stmt| {
            stmt.query_row(params![namespace, key], |row| row.get::<_, i64>(0))
                .optional()
        })
        .at(path)
        .map(|v| v.map(|v| v as u64))
}

fn checkpoint_from_row(row: &rusqlite::Row<'_>) -> StoreResult<Checkpoint> {
    let get = |i: usize| -> StoreResult<String> {
        row.get(i)
            .map_err(|e| StoreError::Corrupt(format!("checkpoint column {i}: {e}")))
    };
    let num = |i: usize| -> StoreResult<u64> {
        row.get::<_, i64>(i)
            .map(|v| v as u64)
            .map_err(|e| StoreError::Corrupt(format!("checkpoint column {i}: {e}")))
    };
    let value = get(3)?;
    Ok(Checkpoint {
        namespace: get(0)?,
        key: get(1)?,
        version: num(2)?,
        value: serde_json::from_str(&value)
            .map_err(|e| StoreError::Corrupt(format!("checkpoint value: {e}")))?,
        updated_at: Timestamp(num(4)?),
    })
}

#[async_trait]
impl Store for SqliteStore {
    async fn create_session(&self, record: &SessionRecord) -> StoreResult<()> {
        self.write(|tx, path| {
            if exists(tx, path, record.id)? {
                return Err(StoreError::AlreadyExists {
                    what: "session",
                    id: record.id.to_string(),
                });
            }
            if let Some(parent) = record.parent_id
                && !exists(tx, path, parent)?
            {
                return Err(StoreError::session_not_found(parent));
            }
            if name_taken(tx, path, record)? {
                return Err(StoreError::NameTaken {
                    name: record.name.clone(),
                });
            }
            insert_session(tx, path, record)
        })
    }

    async fn session(&self, id: SessionId) -> StoreResult<Option<SessionRecord>> {
        let conn = self.lock();
        load(&conn, &self.path, id)
    }

    async fn update_session(
        &self,
        id: SessionId,
        update: &SessionUpdate,
    ) -> StoreResult<SessionRecord> {
        self.write(|tx, path| apply_update(tx, path, id, update))
    }

    async fn list_sessions(&self, query: SessionQuery) -> StoreResult<Vec<SessionRecord>> {
        let conn = self.lock();
        let (filter, param) = match query {
            SessionQuery::Roots => ("parent_id IS NULL", None),
            SessionQuery::Children(parent) => ("parent_id = ?1", Some(parent.to_string())),
            SessionQuery::Tree(root) => ("root_id = ?1", Some(root.to_string())),
        };
        select_sessions(&conn, &self.path, filter, param)
    }

    async fn append(
        &self,
        session: SessionId,
        run: RunId,
        entries: &[EntryKind],
        update: Option<&SessionUpdate>,
    ) -> StoreResult<u64> {
        let bodies = encode(entries)?;
        self.write(|tx, path| append_in(tx, path, session, run, &bodies, update))
    }

    async fn append_attributed(
        &self,
        session: SessionId,
        run: RunId,
        entries: &[EntryKind],
        update: Option<&SessionUpdate>,
        attribution: &Attribution,
    ) -> StoreResult<u64> {
        let bodies = encode(entries)?;
        self.write(|tx, path| {
            let seq = append_in(tx, path, session, run, &bodies, update)?;
            for target in &attribution.targets {
                let mut record = load(tx, path, target.session)?
                    .ok_or_else(|| StoreError::session_not_found(target.session))?;
                let entry = attribution.apply_to(target, &mut record);
                write_session(tx, path, &record)?;
                let body = encode(std::slice::from_ref(&entry))?;
                append_in(
                    tx,
                    path,
                    target.session,
                    Attribution::run_for(target, run),
                    &body,
                    None,
                )?;
            }
            Ok(seq)
        })
    }

    async fn transcript(
        &self,
        session: SessionId,
        after: u64,
        limit: Option<usize>,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        // A negative LIMIT means none.
        let limit = limit.map_or(-1, |n| i64::try_from(n).unwrap_or(i64::MAX));
        self.read(|tx, path| {
            if !exists(tx, path, session)? {
                return Err(StoreError::session_not_found(session));
            }
            let sql = format!(
                "SELECT {ENTRY_COLUMNS} FROM transcript_entries \
                 WHERE session_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3"
            );
            let mut stmt = tx.prepare_cached(&sql).at(path)?;
            let mut rows = stmt
                .query(params![session.to_string(), after, limit])
                .at(path)?;
            let mut out = Vec::new();
            while let Some(row) = rows.next().at(path)? {
                out.push(entry_from_row(row)?);
            }
            Ok(out)
        })
    }

    async fn mark_interrupted(&self) -> StoreResult<Vec<SessionId>> {
        self.write(|tx, path| {
            let running = select_sessions(
                tx,
                path,
                "status = ?1",
                Some(SessionStatus::Running.as_str().to_owned()),
            )?;
            let mut ids = Vec::with_capacity(running.len());
            for mut record in running {
                record.apply(&SessionUpdate::status(SessionStatus::Interrupted));
                write_session(tx, path, &record)?;
                ids.push(record.id);
            }
            ids.sort();
            Ok(ids)
        })
    }

    async fn put_checkpoint(
        &self,
        namespace: &str,
        key: &str,
        value: &serde_json::Value,
        expected_version: u64,
    ) -> StoreResult<u64> {
        let body = serde_json::to_string(value)
            .map_err(|e| StoreError::Invalid(format!("checkpoint value: {e}")))?;
        self.write(|tx, path| {
            let actual = checkpoint_version(tx, path, namespace, key)?.unwrap_or(0);
            if actual != expected_version {
                return Err(StoreError::Conflict {
                    expected: expected_version,
                    actual,
                });
            }
            let version = actual + 1;
            tx.prepare_cached(
                "INSERT INTO checkpoints (namespace, key, version, value, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (namespace, key) DO UPDATE SET \
                 version = excluded.version, value = excluded.value, \
                 updated_at = excluded.updated_at",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    namespace,
                    key,
                    to_sql(version),
                    body,
                    to_sql(Timestamp::now().0)
                ])
            })
            .at(path)?;
            Ok(version)
        })
    }

    async fn checkpoint(&self, namespace: &str, key: &str) -> StoreResult<Option<Checkpoint>> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(
                "SELECT namespace, key, version, value, updated_at FROM checkpoints \
                 WHERE namespace = ?1 AND key = ?2",
            )
            .at(&self.path)?;
        let mut rows = stmt.query(params![namespace, key]).at(&self.path)?;
        rows.next()
            .at(&self.path)?
            .map(checkpoint_from_row)
            .transpose()
    }

    async fn list_checkpoints(&self, namespace: &str) -> StoreResult<Vec<Checkpoint>> {
        let conn = self.lock();
        let mut stmt = conn
            .prepare_cached(
                "SELECT namespace, key, version, value, updated_at FROM checkpoints \
                 WHERE namespace = ?1 ORDER BY key",
            )
            .at(&self.path)?;
        let mut rows = stmt.query(params![namespace]).at(&self.path)?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().at(&self.path)? {
            out.push(checkpoint_from_row(row)?);
        }
        Ok(out)
    }

    async fn delete_checkpoint(
        &self,
        namespace: &str,
        key: &str,
        expected_version: u64,
    ) -> StoreResult<()> {
        self.write(|tx, path| {
            match checkpoint_version(tx, path, namespace, key)? {
                None => {
                    return Err(StoreError::NotFound {
                        what: "checkpoint",
                        id: format!("{namespace}/{key}"),
                    });
                }
                Some(actual) if actual != expected_version => {
                    return Err(StoreError::Conflict {
                        expected: expected_version,
                        actual,
                    });
                }
                Some(_) => {}
            }
            tx.prepare_cached("DELETE FROM checkpoints WHERE namespace = ?1 AND key = ?2")
                .and_then(|mut stmt| stmt.execute(params![namespace, key]))
                .at(path)
                .map(drop)
        })
    }

    fn backend(&self) -> &'static str {
        "sqlite"
    }
}
