//! [`PostgresStore`]: the [`Store`] trait on a pool of PostgreSQL connections.
//!
//! Every write is one transaction at `READ COMMITTED` that locks the rows it reads before it
//! changes them (`SELECT … FOR UPDATE`): appends to one session are serialized on its row, a
//! compare-and-swap update sees the version it replaces, and writers of different sessions
//! never wait for each other. Uniqueness (ids, sibling names, checkpoint keys) is the
//! database's: a writer that loses a race gets the same refusal as one that came second. A
//! transaction that PostgreSQL aborts to break a deadlock or a serialization conflict is run
//! again, a few times, before its error is reported.

use std::sync::Arc;

use arbor_protocol::{EntryKind, RunId, SessionId, SessionStatus, Timestamp, TranscriptEntry};
use arbor_store::{
    Attribution, Checkpoint, SessionQuery, SessionRecord, SessionUpdate, Store, StoreError,
    StoreResult,
};
use async_trait::async_trait;
use sqlx::{PgConnection, PgPool, Postgres, Row, Transaction};

use crate::codec::{
    CHECKPOINT_COLUMNS, ENTRY_COLUMNS, SESSION_COLUMNS, checkpoint_from_row, entry_from_row,
    insert_session, session_from_row, to_sql, write_session,
};
use crate::error::{
    FOREIGN_KEY_VIOLATION, Failure, OpResult, UNIQUE_VIOLATION, constraint, sqlstate,
};
use crate::retry::{retrying, settle};

/// The arbor store on PostgreSQL; see the [crate docs](crate). Cloning shares the pool.
///
/// Many processes share it, so [`Store::mark_interrupted`] (every `running` session of the
/// schema) is for a host that knows it is the only one; hosts that share a store tell dead
/// owners by their leases instead, as the `arbor` CLI does.
#[derive(Clone)]
pub struct PostgresStore {
    pool: PgPool,
    /// The server as errors name it (no password).
    shown: Arc<str>,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("server", &self.shown)
            .finish_non_exhaustive()
    }
}

/// Runs `$body` (which uses `$tx`, a `&mut PgConnection` inside one transaction) and commits,
/// running it again when PostgreSQL aborted it to break a deadlock or a serialization
/// conflict, or the connection was lost before the commit (see [`crate::retry`]).
macro_rules! transaction {
    ($store:expr, |$tx:ident| $body:expr) => {{
        retrying!($store, async {
            let mut owned: Transaction<'_, Postgres> = $store.pool.begin().await?;
            let out: OpResult<_> = async {
                let $tx: &mut PgConnection = &mut owned;
                Ok($body)
            }
            .await;
            settle(owned, out).await
        })
    }};
}

impl PostgresStore {
    pub(crate) fn new(pool: PgPool, shown: Arc<str>) -> Self {
        Self { pool, shown }
    }

    /// The server as errors name it: the URL without its password.
    pub fn server(&self) -> &str {
        &self.shown
    }

    /// The pool, for a host that runs its own queries beside the store (workers' claims).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Deletes `schema` and everything in it (`DROP SCHEMA … CASCADE`): for the throwaway
    /// schemas of tests and benchmarks. `Invalid` for a name
    /// `PostgresOptions::schema` would refuse.
    pub async fn drop_schema(&self, schema: &str) -> StoreResult<()> {
        crate::migrate::check_schema(schema)?;
        let sql = format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            crate::migrate::quoted(schema)
        );
        let out = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(Failure::from);
        self.finish_op(out)
    }

    /// Closes every connection; operations after it fail with `Unavailable`.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// An operation's result, its database errors mapped onto the store's.
    pub(crate) fn finish_op<T>(&self, out: OpResult<T>) -> StoreResult<T> {
        out.map_err(|f| match f {
            Failure::Store(err) => err,
            Failure::Sql(err) => crate::error::store_error(&self.shown, err),
            Failure::Commit(err) => crate::error::commit_error(&self.shown, err),
        })
    }
}

async fn exists(tx: &mut PgConnection, id: SessionId) -> OpResult<bool> {
    Ok(sqlx::query("SELECT 1 FROM sessions WHERE id = $1")
        .bind(id.to_string())
        .fetch_optional(tx)
        .await?
        .is_some())
}

/// The session, its row locked until the transaction ends when `lock`.
async fn load(tx: &mut PgConnection, id: SessionId, lock: bool) -> OpResult<Option<SessionRecord>> {
    let sql = format!(
        "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1{}",
        if lock { " FOR UPDATE" } else { "" }
    );
    let row = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
        .bind(id.to_string())
        .fetch_optional(tx)
        .await?;
    Ok(row.as_ref().map(session_from_row).transpose()?)
}

async fn select_sessions(
    conn: &mut PgConnection,
    filter: &str,
    param: Option<String>,
    lock: bool,
) -> OpResult<Vec<SessionRecord>> {
    let sql = format!(
        "SELECT {SESSION_COLUMNS} FROM sessions WHERE {filter} ORDER BY created_at, id{}",
        if lock { " FOR UPDATE" } else { "" }
    );
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.clone()));
    if let Some(param) = param {
        query = query.bind(param);
    }
    let rows = query.fetch_all(conn).await?;
    Ok(rows
        .iter()
        .map(session_from_row)
        .collect::<StoreResult<Vec<_>>>()?)
}

/// Maps a unique violation of the sibling-name index to `NameTaken`.
fn name_race(err: Failure, name: &str) -> Failure {
    match &err {
        Failure::Sql(e)
            if sqlstate(e).as_deref() == Some(UNIQUE_VIOLATION)
                && constraint(e) == Some("sessions_sibling_names") =>
        {
            Failure::Store(StoreError::NameTaken {
                name: name.to_owned(),
            })
        }
        _ => err,
    }
}

/// Locks and loads `id`, checks `update`'s expected version, applies it and writes the
/// record back.
async fn apply_update(
    tx: &mut PgConnection,
    id: SessionId,
    update: &SessionUpdate,
) -> OpResult<SessionRecord> {
    let mut record = load(tx, id, true)
        .await?
        .ok_or_else(|| StoreError::session_not_found(id))?;
    record.check_version(update)?;
    if let (Some(name), Some(parent), None) = (&update.name, record.parent_id, &record.tombstone)
        && *name != record.name
        && name_taken(tx, parent, name).await?
    {
        return Err(StoreError::NameTaken { name: name.clone() }.into());
    }
    record.apply(update);
    write_session(&record)?
        .execute(&mut *tx)
        .await
        .map_err(|e| name_race(e.into(), &record.name))?;
    Ok(record)
}

async fn name_taken(tx: &mut PgConnection, parent: SessionId, name: &str) -> OpResult<bool> {
    Ok(sqlx::query(
        "SELECT 1 FROM sessions WHERE parent_id = $1 AND name = $2 AND tombstone IS NULL",
    )
    .bind(parent.to_string())
    .bind(name)
    .fetch_optional(tx)
    .await?
    .is_some())
}

use arbor_store::row::entry_rows as encode;

/// Applies `update` (if any) and appends `bodies` to `session`, inside the caller's
/// transaction, the session's row locked; returns the last sequence number.
async fn append_in(
    tx: &mut PgConnection,
    session: SessionId,
    run: RunId,
    bodies: &[(&'static str, String)],
    update: Option<&SessionUpdate>,
) -> OpResult<u64> {
    match update {
        Some(update) => drop(apply_update(tx, session, update).await?),
        None => {
            let locked = sqlx::query("SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE")
                .bind(session.to_string())
                .fetch_optional(&mut *tx)
                .await?;
            if locked.is_none() {
                return Err(StoreError::session_not_found(session).into());
            }
        }
    }
    if bodies.is_empty() {
        let last: i64 = sqlx::query(
            "SELECT COALESCE(MAX(seq), 0) FROM transcript_entries WHERE session_id = $1",
        )
        .bind(session.to_string())
        .fetch_one(&mut *tx)
        .await?
        .try_get(0)?;
        return Ok(last as u64);
    }
    // Numbered after the last entry in the same statement: this transaction holds the
    // session's row, so the statement's snapshot (taken after the lock) has every entry.
    let kinds: Vec<&str> = bodies.iter().map(|(k, _)| *k).collect();
    let texts: Vec<&str> = bodies.iter().map(|(_, b)| b.as_str()).collect();
    let seqs: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO transcript_entries (session_id, seq, at, run_id, kind, body) \
         SELECT $1, m.last + e.n, $2, $3, e.kind, e.body \
         FROM (SELECT COALESCE(MAX(seq), 0) AS last FROM transcript_entries \
               WHERE session_id = $1) AS m, \
              UNNEST($4::TEXT[], $5::TEXT[]) WITH ORDINALITY AS e (kind, body, n) \
         RETURNING seq",
    )
    .bind(session.to_string())
    .bind(to_sql(Timestamp::now().0))
    .bind(run.to_string())
    .bind(&kinds)
    .bind(&texts)
    .fetch_all(&mut *tx)
    .await?;
    let last = seqs.into_iter().max().unwrap_or(0);
    Ok(last as u64)
}

async fn checkpoint_version(
    tx: &mut PgConnection,
    namespace: &str,
    key: &str,
) -> OpResult<Option<u64>> {
    let row = sqlx::query("SELECT version FROM checkpoints WHERE namespace = $1 AND key = $2")
        .bind(namespace)
        .bind(key)
        .fetch_optional(tx)
        .await?;
    Ok(row
        .map(|r| r.try_get::<i64, _>(0))
        .transpose()?
        .map(|v| v as u64))
}

#[async_trait]
impl Store for PostgresStore {
    async fn create_session(&self, record: &SessionRecord) -> StoreResult<()> {
        // One statement, one round trip: the database's constraints decide (a taken id, a
        // missing parent, a taken sibling name), also against a concurrent writer. Run again
        // after its connection was lost, it may find its own row: the first attempt
        // committed before the answer was lost (a row of another writer differs from ours).
        let attempts = std::sync::atomic::AtomicU32::new(0);
        retrying!(self, async {
            let attempt = attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            let inserted = insert_session(record)?.execute(&self.pool).await;
            match inserted {
                Ok(_) => Ok(()),
                Err(e) => Err(match (sqlstate(&e).as_deref(), constraint(&e)) {
                    (Some(UNIQUE_VIOLATION), Some("sessions_pkey")) => {
                        if attempt > 1 {
                            let mut conn = self.pool.acquire().await?;
                            if load(&mut conn, record.id, false).await?.as_ref() == Some(record) {
                                return Ok(());
                            }
                        }
                        StoreError::AlreadyExists {
                            what: "session",
                            id: record.id.to_string(),
                        }
                        .into()
                    }
                    (Some(FOREIGN_KEY_VIOLATION), _) => match record.parent_id {
                        Some(parent) => StoreError::session_not_found(parent).into(),
                        None => Failure::Sql(e),
                    },
                    _ => name_race(e.into(), &record.name),
                }),
            }
        })
    }

    async fn session(&self, id: SessionId) -> StoreResult<Option<SessionRecord>> {
        retrying!(self, async {
            let mut conn = self.pool.acquire().await?;
            load(&mut conn, id, false).await
        })
    }

    async fn update_session(
        &self,
        id: SessionId,
        update: &SessionUpdate,
    ) -> StoreResult<SessionRecord> {
        transaction!(self, |tx| apply_update(tx, id, update).await?)
    }

    async fn list_sessions(&self, query: SessionQuery) -> StoreResult<Vec<SessionRecord>> {
        let (filter, param) = match query {
            SessionQuery::Roots => ("parent_id IS NULL", None),
            SessionQuery::Children(parent) => ("parent_id = $1", Some(parent.to_string())),
            SessionQuery::Tree(root) => ("root_id = $1", Some(root.to_string())),
            SessionQuery::Status(status) => ("status = $1", Some(status.as_str().to_owned())),
            SessionQuery::LatestRoots(n) => (
                "id IN (SELECT id FROM sessions WHERE parent_id IS NULL \
                 ORDER BY created_at DESC, id DESC LIMIT CAST($1 AS BIGINT))",
                Some(n.to_string()),
            ),
        };
        retrying!(self, async {
            let mut conn = self.pool.acquire().await?;
            select_sessions(&mut conn, filter, param.clone(), false).await
        })
    }

    async fn append(
        &self,
        session: SessionId,
        run: RunId,
        entries: &[EntryKind],
        update: Option<&SessionUpdate>,
    ) -> StoreResult<u64> {
        let bodies = encode(entries)?;
        transaction!(self, |tx| append_in(tx, session, run, &bodies, update)
            .await?)
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
        transaction!(self, |tx| {
            let seq = append_in(tx, session, run, &bodies, update).await?;
            for target in &attribution.targets {
                let mut record = load(tx, target.session, true)
                    .await?
                    .ok_or_else(|| StoreError::session_not_found(target.session))?;
                let added = attribution.apply_to(target, &mut record);
                write_session(&record)?.execute(&mut *tx).await?;
                let body = encode(&added)?;
                append_in(
                    tx,
                    target.session,
                    Attribution::run_for(target, run),
                    &body,
                    None,
                )
                .await?;
            }
            seq
        })
    }

    async fn transcript(
        &self,
        session: SessionId,
        after: u64,
        limit: Option<usize>,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        let limit = limit.map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        retrying!(self, async {
            let mut conn = self.pool.acquire().await?;
            if !exists(&mut conn, session).await? {
                return Err(StoreError::session_not_found(session).into());
            }
            let sql = format!(
                "SELECT {ENTRY_COLUMNS} FROM transcript_entries WHERE session_id = $1 \
                 AND seq > $2 ORDER BY seq LIMIT $3"
            );
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .bind(session.to_string())
                .bind(after)
                .bind(limit)
                .fetch_all(&mut *conn)
                .await?;
            Ok(rows
                .iter()
                .map(entry_from_row)
                .collect::<StoreResult<Vec<_>>>()?)
        })
    }

    async fn mark_interrupted(&self) -> StoreResult<Vec<SessionId>> {
        transaction!(self, |tx| {
            let running = select_sessions(
                tx,
                "status = $1",
                Some(SessionStatus::Running.as_str().to_owned()),
                true,
            )
            .await?;
            let mut ids = Vec::with_capacity(running.len());
            let update = SessionUpdate::status(SessionStatus::Interrupted);
            for mut record in running {
                record.apply(&update);
                write_session(&record)?.execute(&mut *tx).await?;
                ids.push(record.id);
            }
            ids.sort();
            ids
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
        let now = to_sql(Timestamp::now().0);
        transaction!(self, |tx| {
            // Written only from the expected version: a missing row for 0 (a concurrent
            // insert of the same key waits, then does nothing), the row at that version
            // otherwise.
            let written = if expected_version == 0 {
                sqlx::query(
                    "INSERT INTO checkpoints (namespace, key, version, value, updated_at) \
                     VALUES ($1, $2, 1, $3, $4) ON CONFLICT (namespace, key) DO NOTHING \
                     RETURNING version",
                )
                .bind(namespace)
                .bind(key)
                .bind(&body)
                .bind(now)
                .fetch_optional(&mut *tx)
                .await?
            } else {
                sqlx::query(
                    "UPDATE checkpoints SET version = version + 1, value = $3, updated_at = $4 \
                     WHERE namespace = $1 AND key = $2 AND version = $5 RETURNING version",
                )
                .bind(namespace)
                .bind(key)
                .bind(&body)
                .bind(now)
                .bind(to_sql(expected_version))
                .fetch_optional(&mut *tx)
                .await?
            };
            match written {
                Some(row) => row.try_get::<i64, _>(0)? as u64,
                None => {
                    let actual = checkpoint_version(tx, namespace, key).await?.unwrap_or(0);
                    return Err(StoreError::Conflict {
                        expected: expected_version,
                        actual,
                    }
                    .into());
                }
            }
        })
    }

    async fn checkpoint(&self, namespace: &str, key: &str) -> StoreResult<Option<Checkpoint>> {
        let sql = format!(
            "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE namespace = $1 AND key = $2"
        );
        retrying!(self, async {
            let row = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .bind(namespace)
                .bind(key)
                .fetch_optional(&self.pool)
                .await?;
            Ok(row.as_ref().map(checkpoint_from_row).transpose()?)
        })
    }

    async fn list_checkpoints(&self, namespace: &str) -> StoreResult<Vec<Checkpoint>> {
        let sql = format!(
            "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE namespace = $1 ORDER BY key"
        );
        retrying!(self, async {
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .bind(namespace)
                .fetch_all(&self.pool)
                .await?;
            Ok(rows
                .iter()
                .map(checkpoint_from_row)
                .collect::<StoreResult<Vec<_>>>()?)
        })
    }

    async fn delete_checkpoint(
        &self,
        namespace: &str,
        key: &str,
        expected_version: u64,
    ) -> StoreResult<()> {
        transaction!(self, |tx| {
            let deleted = sqlx::query(
                "DELETE FROM checkpoints WHERE namespace = $1 AND key = $2 AND version = $3 \
                 RETURNING 1",
            )
            .bind(namespace)
            .bind(key)
            .bind(to_sql(expected_version))
            .fetch_optional(&mut *tx)
            .await?;
            if deleted.is_none() {
                return Err(match checkpoint_version(tx, namespace, key).await? {
                    None => StoreError::NotFound {
                        what: "checkpoint",
                        id: format!("{namespace}/{key}"),
                    },
                    Some(actual) => StoreError::Conflict {
                        expected: expected_version,
                        actual,
                    },
                }
                .into());
            }
        })
    }

    async fn held_by_queue(&self, sessions: &[SessionId]) -> StoreResult<Vec<SessionId>> {
        if sessions.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = sessions.iter().map(ToString::to_string).collect();
        let held: Vec<String> = retrying!(self, async {
            Ok(sqlx::query_scalar(
                "SELECT session_id FROM child_runs WHERE session_id = ANY($1) \
                 AND state IN ('queued', 'claimed')",
            )
            .bind(&ids)
            .fetch_all(&self.pool)
            .await?)
        })?;
        Ok(sessions
            .iter()
            .filter(|s| held.contains(&s.to_string()))
            .copied()
            .collect())
    }

    async fn roots_page(&self, page: &arbor_store::RootPage) -> StoreResult<Vec<SessionRecord>> {
        self.page_of_roots(page).await
    }

    async fn census(&self, key: &str) -> StoreResult<Vec<arbor_store::StatusCount>> {
        self.count_by_status(key).await
    }

    fn backend(&self) -> &'static str {
        "postgres"
    }
}
