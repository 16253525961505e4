//! [`SqliteStore`]: the store's handle and its [`Store`] operations. Writes on a tokio
//! runtime go through the group commit of [`crate::batch`]; reads, and writes outside a
//! runtime, run as below.
//!
//! Where operations run: waiting for another process never happens on the async runtime's
//! threads. An operation is first tried on the calling task's thread with SQLite's busy wait
//! off, if the connection is free at once (a read whose writer's connection is taken uses the
//! reader connection instead, see [`SqliteStore`]'s `call_read`); SQLite work on an uncontended file takes
//! microseconds, and a handoff to another thread would cost more than the work. If the file
//! or the connection is busy, the operation (rolled back if it had begun) runs on tokio's
//! blocking pool instead, waiting up to the busy timeout there, so timers, timeouts and other
//! tasks stay on time. With [`Synchronous::Full`](crate::Synchronous::Full), where every
//! commit waits for the disk, every operation runs on the blocking pool. A call whose future
//! is dropped while on the pool (a timeout, a cancelled task) still finishes there: a write
//! then lands whole or not at all, as always, only nobody hears which. Outside a tokio
//! runtime an operation runs inline with the full busy wait.

use std::fmt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use arbor_protocol::{EntryKind, RunId, SessionId, SessionStatus, Timestamp, TranscriptEntry};
use arbor_store::{
    Attribution, Checkpoint, SessionQuery, SessionRecord, SessionUpdate, Store, StoreError,
    StoreResult,
};
use async_trait::async_trait;
use rusqlite::{Connection, params};

use crate::batch::{Shared, WriteStats};
use crate::codec::{Columns, entry_from_row, insert_session, to_sql, write_session};
use crate::error::{SqlResultExt, damaged};
use crate::open;
use crate::ops::{
    append_in, apply_update, checkpoint_from_row, checkpoint_version, encode, exists, load,
    name_taken, select_sessions,
};
use crate::options::{SqliteOptions, Synchronous};
use crate::sql;

/// A store in one SQLite file. Safe to share between tasks; several processes may open the
/// same file, and each write is atomic against all of them.
pub struct SqliteStore {
    /// The connection, its path, its waits and the writes waiting for the next commit (see
    /// [`crate::batch`]): what a flush task needs too.
    pub(crate) shared: Shared,
    /// The connection reads use when the store is a file opened read-write: reads then
    /// neither wait for a batch being committed nor hold it up. `None` for an in-memory or
    /// read-only store, whose reads use the one connection.
    pub(crate) reader: Option<Arc<Mutex<Connection>>>,
    /// Whether the store was opened read-only (every write is refused).
    pub(crate) read_only: bool,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.shared.path)
            .finish_non_exhaustive()
    }
}

/// Opening a store with these options (kept beside the store, which owns the connection).
impl SqliteOptions {
    /// Opens (creating it if missing, unless read-only) the store file at `path`; see
    /// [`SqliteStore::open`].
    pub fn open(&self, path: impl AsRef<Path>) -> StoreResult<SqliteStore> {
        SqliteStore::open_with(path, self)
    }

    /// Opens a private in-memory store; see [`SqliteStore::open_in_memory`].
    pub fn open_in_memory(&self) -> StoreResult<SqliteStore> {
        SqliteStore::open_in_memory_with(self)
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
        // Only a named file in WAL mode gets a reader: another connection to `""` or
        // `:memory:` would open another, empty database, and outside WAL mode the reader
        // and the writer would wait for each other.
        let file = !display.is_empty() && !display.starts_with("file:") && display != ":memory:";
        let wal = open::in_wal_mode(&conn);
        let mut store = Self::new(conn, display, options);
        if file && wal && !options.read_only {
            let reader = open::connect_reader(path, &store.shared.path, options)?;
            store.reader = Some(Arc::new(Mutex::new(reader)));
        }
        Ok(store)
    }

    /// Opens the existing store file at `path` read-only, for inspection; see
    /// [`SqliteOptions::read_only`]. Fails with `Unavailable` when there is no file, or its
    /// schema is older than this build's.
    pub fn open_read_only(path: impl AsRef<Path>) -> StoreResult<Self> {
        Self::open_with(path, &SqliteOptions::default().read_only(true))
    }

    /// A private in-memory store, gone when dropped: for tests.
    pub fn open_in_memory() -> StoreResult<Self> {
        Self::open_in_memory_with(&SqliteOptions::default())
    }

    /// [`open_in_memory`](Self::open_in_memory) with explicit options.
    pub fn open_in_memory_with(options: &SqliteOptions) -> StoreResult<Self> {
        let path = ":memory:".to_owned();
        let conn = open::connect_in_memory(&path, options)?;
        Ok(Self::new(conn, path, options))
    }

    fn new(conn: Connection, path: String, options: &SqliteOptions) -> Self {
        Self {
            shared: Shared {
                conn: Arc::new(Mutex::new(conn)),
                path: path.into(),
                busy_timeout: options.busy_timeout,
                inline_first: options.synchronous != Synchronous::Full,
                batcher: Arc::default(),
            },
            reader: None,
            read_only: options.read_only,
        }
    }

    /// How this handle's writes on a tokio runtime were committed so far: writes waiting at
    /// the same moment share one commit (group commit), so `commits` is at most `writes`.
    pub fn write_stats(&self) -> WriteStats {
        self.shared.batcher.stats()
    }

    /// The store's location as errors name it (`:memory:` for an in-memory store).
    pub fn path(&self) -> &str {
        &self.shared.path
    }
}

impl SqliteStore {
    /// Checks the whole file with SQLite's `PRAGMA integrity_check` and the foreign keys
    /// with `PRAGMA foreign_key_check`, on tokio's blocking pool (it reads every page).
    /// `Ok` when both find nothing; else `Corrupt`, listing the first problems found and how
    /// to recover.
    pub async fn check(&self) -> StoreResult<()> {
        self.run(false, |conn, path| {
            let mut problems = Vec::new();
            {
                let mut stmt = conn.prepare("PRAGMA integrity_check(20)").at(path)?;
                let mut rows = stmt.query([]).at(path)?;
                while let Some(row) = rows.next().at(path)? {
                    let line: String = row.get(0).at(path)?;
                    if line != "ok" {
                        problems.push(line);
                    }
                }
            }
            let mut stmt = conn.prepare("PRAGMA foreign_key_check").at(path)?;
            let mut rows = stmt.query([]).at(path)?;
            while let Some(row) = rows.next().at(path)? {
                let (table, rowid, parent): (String, Option<i64>, String) = (
                    row.get(0).at(path)?,
                    row.get(1).at(path)?,
                    row.get(2).at(path)?,
                );
                let rowid = rowid.map_or_else(|| "?".to_owned(), |r| r.to_string());
                problems.push(format!(
                    "row {rowid} of {table} refers to a missing row of {parent}"
                ));
            }
            if problems.is_empty() {
                return Ok(());
            }
            Err(damaged(path, problems.join("; ")))
        })
        .await
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn create_session(&self, record: &SessionRecord) -> StoreResult<()> {
        let record = record.clone();
        self.write(move |tx, path| {
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
            if name_taken(tx, path, &record)? {
                return Err(StoreError::NameTaken {
                    name: record.name.clone(),
                });
            }
            insert_session(tx, path, &record)
        })
        .await
    }

    async fn session(&self, id: SessionId) -> StoreResult<Option<SessionRecord>> {
        self.call_read(move |conn, path| load(conn, path, id)).await
    }

    async fn update_session(
        &self,
        id: SessionId,
        update: &SessionUpdate,
    ) -> StoreResult<SessionRecord> {
        let update = update.clone();
        self.write(move |tx, path| apply_update(tx, path, id, &update))
            .await
    }

    async fn list_sessions(&self, query: SessionQuery) -> StoreResult<Vec<SessionRecord>> {
        let (filter, param) = match query {
            SessionQuery::Roots => ("parent_id IS NULL", None),
            SessionQuery::Children(parent) => (sql::CHILDREN_OF, Some(parent.to_string())),
            SessionQuery::Tree(root) => (sql::TREE_OF, Some(root.to_string())),
            SessionQuery::Status(status) => (sql::WITH_STATUS, Some(status.as_str().to_owned())),
            SessionQuery::LatestRoots(n) => (sql::LATEST_ROOTS, Some(n.to_string())),
        };
        self.call_read(move |conn, path| select_sessions(conn, path, filter, param.clone()))
            .await
    }

    async fn append(
        &self,
        session: SessionId,
        run: RunId,
        entries: &[EntryKind],
        update: Option<&SessionUpdate>,
    ) -> StoreResult<u64> {
        let bodies = encode(entries)?;
        let update = update.cloned();
        self.write(move |tx, path| append_in(tx, path, session, run, &bodies, update.as_ref()))
            .await
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
        let update = update.cloned();
        let attribution = attribution.clone();
        self.write(move |tx, path| {
            let seq = append_in(tx, path, session, run, &bodies, update.as_ref())?;
            for target in &attribution.targets {
                let added = crate::ops::attribute(tx, path, &attribution, target)?;
                let body = encode(&added)?;
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
        .await
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
        self.read(move |tx, path| {
            if !exists(tx, path, session)? {
                return Err(StoreError::session_not_found(session));
            }
            let mut stmt = tx.prepare_cached(&sql::ENTRIES_AFTER).at(path)?;
            let mut rows = stmt
                .query(params![session.to_string(), after, limit])
                .at(path)?;
            let mut out = Vec::new();
            while let Some(row) = rows.next().at(path)? {
                out.push(entry_from_row(row)?);
            }
            Ok(out)
        })
        .await
    }

    async fn mark_interrupted(&self) -> StoreResult<Vec<SessionId>> {
        self.write(|tx, path| {
            let running = select_sessions(
                tx,
                path,
                sql::WITH_STATUS,
                Some(SessionStatus::Running.as_str().to_owned()),
            )?;
            let mut ids = Vec::with_capacity(running.len());
            let update = SessionUpdate::status(SessionStatus::Interrupted);
            for mut record in running {
                record.apply(&update);
                write_session(tx, path, &record, Columns::of(&update))?;
                ids.push(record.id);
            }
            ids.sort();
            Ok(ids)
        })
        .await
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
        let (namespace, key) = (namespace.to_owned(), key.to_owned());
        self.write(move |tx, path| {
            let actual = checkpoint_version(tx, path, &namespace, &key)?.unwrap_or(0);
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
        .await
    }

    async fn checkpoint(&self, namespace: &str, key: &str) -> StoreResult<Option<Checkpoint>> {
        let (namespace, key) = (namespace.to_owned(), key.to_owned());
        self.call_read(move |conn, path| {
            let mut stmt = conn
                .prepare_cached(
                    "SELECT namespace, key, version, value, updated_at FROM checkpoints \
                     WHERE namespace = ?1 AND key = ?2",
                )
                .at(path)?;
            let mut rows = stmt.query(params![namespace, key]).at(path)?;
            rows.next().at(path)?.map(checkpoint_from_row).transpose()
        })
        .await
    }

    async fn list_checkpoints(&self, namespace: &str) -> StoreResult<Vec<Checkpoint>> {
        let namespace = namespace.to_owned();
        self.call_read(move |conn, path| {
            let mut stmt = conn.prepare_cached(sql::CHECKPOINTS_OF).at(path)?;
            let mut rows = stmt.query(params![namespace]).at(path)?;
            let mut out = Vec::new();
            while let Some(row) = rows.next().at(path)? {
                out.push(checkpoint_from_row(row)?);
            }
            Ok(out)
        })
        .await
    }

    async fn delete_checkpoint(
        &self,
        namespace: &str,
        key: &str,
        expected_version: u64,
    ) -> StoreResult<()> {
        let (namespace, key) = (namespace.to_owned(), key.to_owned());
        self.write(move |tx, path| {
            match checkpoint_version(tx, path, &namespace, &key)? {
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
        .await
    }

    async fn roots_page(&self, page: &arbor_store::RootPage) -> StoreResult<Vec<SessionRecord>> {
        page.check()?;
        let page = page.clone();
        self.call_read(move |conn, path| crate::ops::roots_page(conn, path, &page))
            .await
    }

    async fn census(&self, key: &str) -> StoreResult<Vec<arbor_store::StatusCount>> {
        if !arbor_store::census_key_is_valid(key) {
            return Err(StoreError::Invalid(format!(
                "census key {key:?}: 1 to 64 of a-z A-Z 0-9 _"
            )));
        }
        let group = format!("$.{key}");
        self.call_read(move |conn, path| crate::ops::census(conn, path, &group))
            .await
    }

    fn backend(&self) -> &'static str {
        "sqlite"
    }
}
