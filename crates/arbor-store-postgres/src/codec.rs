//! Rows to records and back.
//!
//! Unsigned 64-bit values (usage, context size, versions, timestamps) are stored as the
//! signed `BIGINT` with the same bits, so every `u64` round-trips. Ids are their canonical
//! text. Meta, tombstones, checkpoint values and transcript bodies are JSON text.

use arbor_protocol::{Timestamp, TranscriptEntry};
use arbor_store::row::{ReadColumns, SessionRow, read_entry};
use arbor_store::{Checkpoint, SessionRecord, StoreError, StoreResult};
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{Postgres, Row};

use crate::error::corrupt;

/// The columns [`session_from_row`] reads, in order.
pub(crate) use arbor_store::row::SESSION_COLUMNS;

/// The columns [`entry_from_row`] reads, in order.
pub(crate) use arbor_store::row::ENTRY_COLUMNS;

/// The columns [`checkpoint_from_row`] reads, in order.
pub(crate) const CHECKPOINT_COLUMNS: &str = "namespace, key, version, value, updated_at";

pub(crate) use arbor_store::row::to_sql;

fn column<'r, T>(row: &'r PgRow, idx: usize, name: &str) -> StoreResult<T>
where
    T: sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
{
    row.try_get(idx)
        .map_err(|e| corrupt(format_args!("column {name}: {e}")))
}

fn unsigned(row: &PgRow, idx: usize, name: &str) -> StoreResult<u64> {
    column::<i64>(row, idx, name).map(arbor_store::row::from_sql)
}

/// A row of this backend, read as [`SessionRow::read`] reads it.
struct Cols<'a>(&'a PgRow);

impl ReadColumns for Cols<'_> {
    fn text(&self, idx: usize, name: &str) -> StoreResult<String> {
        column(self.0, idx, name)
    }

    fn text_or_null(&self, idx: usize, name: &str) -> StoreResult<Option<String>> {
        column(self.0, idx, name)
    }

    fn int(&self, idx: usize, name: &str) -> StoreResult<i64> {
        column(self.0, idx, name)
    }

    fn int_or_null(&self, idx: usize, name: &str) -> StoreResult<Option<i64>> {
        column(self.0, idx, name)
    }
}

/// Decodes a row selected with [`SESSION_COLUMNS`].
pub(crate) fn session_from_row(row: &PgRow) -> StoreResult<SessionRecord> {
    SessionRow::read(&Cols(row))?.into_record()
}

/// The `INSERT` of a new session row, all columns bound.
pub(crate) fn insert_session(
    record: &SessionRecord,
) -> StoreResult<Query<'static, Postgres, PgArguments>> {
    let r = SessionRow::of(record)?;
    let placeholders: Vec<String> = (1..=30).map(|i| format!("${i}")).collect();
    let sql = format!(
        "INSERT INTO sessions ({SESSION_COLUMNS}) VALUES ({})",
        placeholders.join(", ")
    );
    let mut query = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(r.id)
        .bind(r.parent_id)
        .bind(r.root_id)
        .bind(r.name)
        .bind(r.agent)
        .bind(r.model)
        .bind(r.depth)
        .bind(r.status);
    for n in r.own_usage.into_iter().chain(r.attributed_usage) {
        query = query.bind(n);
    }
    Ok(query
        .bind(r.context_tokens)
        .bind(r.created_at)
        .bind(r.updated_at)
        .bind(r.meta)
        .bind(r.version)
        .bind(r.spawned_run)
        .bind(r.spawned_turn)
        .bind(r.replies)
        .bind(r.tombstone)
        .bind(r.artifacts)
        .bind(r.own_cost)
        .bind(r.attributed_cost))
}

/// The `UPDATE` writing every mutable column of `record` to its existing row.
pub(crate) fn write_session(
    record: &SessionRecord,
) -> StoreResult<Query<'static, Postgres, PgArguments>> {
    let r = SessionRow::of(record)?;
    let mut query = sqlx::query(
        "UPDATE sessions SET name = $2, status = $3, own_input_tokens = $4, \
         own_output_tokens = $5, own_total_tokens = $6, own_cache_read_tokens = $7, \
         own_cache_write_tokens = $8, attributed_input_tokens = $9, \
         attributed_output_tokens = $10, attributed_total_tokens = $11, \
         attributed_cache_read_tokens = $12, attributed_cache_write_tokens = $13, \
         context_tokens = $14, updated_at = $15, meta = $16, version = $17, replies = $18, \
         tombstone = $19, artifacts = $20, own_cost = $21, attributed_cost = $22 \
         WHERE id = $1",
    )
    .bind(r.id)
    .bind(r.name)
    .bind(r.status);
    for n in r.own_usage.into_iter().chain(r.attributed_usage) {
        query = query.bind(n);
    }
    Ok(query
        .bind(r.context_tokens)
        .bind(r.updated_at)
        .bind(r.meta)
        .bind(r.version)
        .bind(r.replies)
        .bind(r.tombstone)
        .bind(r.artifacts)
        .bind(r.own_cost)
        .bind(r.attributed_cost))
}

/// Decodes a row selected with [`ENTRY_COLUMNS`] (see [`arbor_store::row::read_entry`]).
pub(crate) fn entry_from_row(row: &PgRow) -> StoreResult<TranscriptEntry> {
    read_entry(&Cols(row))
}

/// Decodes a row selected with [`CHECKPOINT_COLUMNS`].
pub(crate) fn checkpoint_from_row(row: &PgRow) -> StoreResult<Checkpoint> {
    let value: String = column(row, 3, "value")?;
    Ok(Checkpoint {
        namespace: column(row, 0, "namespace")?,
        key: column(row, 1, "key")?,
        version: unsigned(row, 2, "version")?,
        value: serde_json::from_str(&value)
            .map_err(|e| StoreError::Corrupt(format!("checkpoint value: {e}")))?,
        updated_at: Timestamp(unsigned(row, 4, "updated_at")?),
    })
}
