//! Rows to records and back.
//!
//! Unsigned 64-bit values (usage, context size, versions, timestamps) are stored as the
//! signed `BIGINT` with the same bits, so every `u64` round-trips. Ids are their canonical
//! text. Meta, tombstones, checkpoint values and transcript bodies are JSON text.

use std::str::FromStr;

use arbor_protocol::{EntryKind, SessionStatus, SpawnPoint, Timestamp, TranscriptEntry, Usage};
use arbor_store::{Checkpoint, SessionRecord, StoreError, StoreResult};
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::Query;
use sqlx::{Postgres, Row};

use crate::error::corrupt;

/// The columns [`session_from_row`] reads, in order.
pub(crate) const SESSION_COLUMNS: &str = "id, parent_id, root_id, name, agent, model, depth, \
    status, own_input_tokens, own_output_tokens, own_total_tokens, own_cache_read_tokens, \
    own_cache_write_tokens, attributed_input_tokens, attributed_output_tokens, \
    attributed_total_tokens, attributed_cache_read_tokens, attributed_cache_write_tokens, \
    context_tokens, created_at, updated_at, meta, version, spawned_run, spawned_turn, replies, \
    tombstone, artifacts";

/// The columns [`entry_from_row`] reads, in order.
pub(crate) const ENTRY_COLUMNS: &str = "seq, at, run_id, kind, body";

/// The columns [`checkpoint_from_row`] reads, in order.
pub(crate) const CHECKPOINT_COLUMNS: &str = "namespace, key, version, value, updated_at";

/// A `u64` as the `i64` with the same bits.
pub(crate) fn to_sql(value: u64) -> i64 {
    value as i64
}

fn column<'r, T>(row: &'r PgRow, idx: usize, name: &str) -> StoreResult<T>
where
    T: sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres>,
{
    row.try_get(idx)
        .map_err(|e| corrupt(format_args!("column {name}: {e}")))
}

fn parsed<T: FromStr>(row: &PgRow, idx: usize, name: &str) -> StoreResult<T> {
    let text: String = column(row, idx, name)?;
    text.parse()
        .map_err(|_| corrupt(format_args!("column {name}: cannot parse {text:?}")))
}

fn unsigned(row: &PgRow, idx: usize, name: &str) -> StoreResult<u64> {
    column::<i64>(row, idx, name).map(|v| v as u64)
}

fn small(row: &PgRow, idx: usize, name: &str) -> StoreResult<u32> {
    let value: i64 = column(row, idx, name)?;
    u32::try_from(value)
        .map_err(|_| corrupt(format_args!("column {name}: {value} is out of range")))
}

fn usage(row: &PgRow, first: usize, prefix: &str) -> StoreResult<Usage> {
    let field =
        |offset: usize, name: &str| unsigned(row, first + offset, &format!("{prefix}_{name}"));
    Ok(Usage {
        input_tokens: field(0, "input_tokens")?,
        output_tokens: field(1, "output_tokens")?,
        total_tokens: field(2, "total_tokens")?,
        cache_read_tokens: field(3, "cache_read_tokens")?,
        cache_write_tokens: field(4, "cache_write_tokens")?,
    })
}

/// Decodes a row selected with [`SESSION_COLUMNS`].
pub(crate) fn session_from_row(row: &PgRow) -> StoreResult<SessionRecord> {
    let parent: Option<String> = column(row, 1, "parent_id")?;
    let parent_id = parent
        .map(|p| {
            p.parse()
                .map_err(|_| corrupt(format_args!("column parent_id: cannot parse {p:?}")))
        })
        .transpose()?;
    let status: String = column(row, 7, "status")?;
    let meta: String = column(row, 21, "meta")?;
    Ok(SessionRecord {
        id: parsed(row, 0, "id")?,
        parent_id,
        root_id: parsed(row, 2, "root_id")?,
        name: column(row, 3, "name")?,
        agent: column(row, 4, "agent")?,
        model: column(row, 5, "model")?,
        depth: small(row, 6, "depth")?,
        status: SessionStatus::parse(&status)
            .ok_or_else(|| corrupt(format_args!("column status: unknown status {status:?}")))?,
        own_usage: usage(row, 8, "own")?,
        attributed_usage: usage(row, 13, "attributed")?,
        context_tokens: unsigned(row, 18, "context_tokens")?,
        created_at: Timestamp(unsigned(row, 19, "created_at")?),
        updated_at: Timestamp(unsigned(row, 20, "updated_at")?),
        meta: serde_json::from_str::<serde_json::Value>(&meta)
            .map_err(|e| corrupt(format_args!("column meta: {e}")))?
            .into(),
        version: unsigned(row, 22, "version")?,
        spawned_by: spawn_point(row)?,
        replies: small(row, 25, "replies")?,
        tombstone: column::<Option<String>>(row, 26, "tombstone")?
            .map(|t| {
                serde_json::from_str(&t).map_err(|e| corrupt(format_args!("column tombstone: {e}")))
            })
            .transpose()?,
        artifacts: small(row, 27, "artifacts")?,
    })
}

fn spawn_point(row: &PgRow) -> StoreResult<Option<SpawnPoint>> {
    let run: Option<String> = column(row, 23, "spawned_run")?;
    let turn: Option<i64> = column(row, 24, "spawned_turn")?;
    match (run, turn) {
        (Some(run), Some(turn)) => Ok(Some(SpawnPoint {
            run_id: run
                .parse()
                .map_err(|_| corrupt(format_args!("column spawned_run: cannot parse {run:?}")))?,
            turn: u32::try_from(turn).map_err(|_| corrupt("column spawned_turn: out of range"))?,
        })),
        (None, None) => Ok(None),
        _ => Err(corrupt(
            "columns spawned_run and spawned_turn: one without the other",
        )),
    }
}

fn tombstone_json(record: &SessionRecord) -> StoreResult<Option<String>> {
    record
        .tombstone
        .as_ref()
        .map(|t| serde_json::to_string(t).map_err(|e| corrupt(format_args!("tombstone: {e}"))))
        .transpose()
}

fn meta_json(record: &SessionRecord) -> StoreResult<String> {
    serde_json::to_string(&record.meta).map_err(|e| corrupt(format_args!("meta: {e}")))
}

/// The `INSERT` of a new session row, all columns bound.
pub(crate) fn insert_session(
    record: &SessionRecord,
) -> StoreResult<Query<'static, Postgres, PgArguments>> {
    let meta = meta_json(record)?;
    let tombstone = tombstone_json(record)?;
    let (own, attr) = (&record.own_usage, &record.attributed_usage);
    let placeholders: Vec<String> = (1..=28).map(|i| format!("${i}")).collect();
    let sql = format!(
        "INSERT INTO sessions ({SESSION_COLUMNS}) VALUES ({})",
        placeholders.join(", ")
    );
    Ok(sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(record.id.to_string())
        .bind(record.parent_id.map(|p| p.to_string()))
        .bind(record.root_id.to_string())
        .bind(record.name.clone())
        .bind(record.agent.clone())
        .bind(record.model.clone())
        .bind(i64::from(record.depth))
        .bind(record.status.as_str())
        .bind(to_sql(own.input_tokens))
        .bind(to_sql(own.output_tokens))
        .bind(to_sql(own.total_tokens))
        .bind(to_sql(own.cache_read_tokens))
        .bind(to_sql(own.cache_write_tokens))
        .bind(to_sql(attr.input_tokens))
        .bind(to_sql(attr.output_tokens))
        .bind(to_sql(attr.total_tokens))
        .bind(to_sql(attr.cache_read_tokens))
        .bind(to_sql(attr.cache_write_tokens))
        .bind(to_sql(record.context_tokens))
        .bind(to_sql(record.created_at.0))
        .bind(to_sql(record.updated_at.0))
        .bind(meta)
        .bind(to_sql(record.version))
        .bind(record.spawned_by.map(|s| s.run_id.to_string()))
        .bind(record.spawned_by.map(|s| i64::from(s.turn)))
        .bind(i64::from(record.replies))
        .bind(tombstone)
        .bind(i64::from(record.artifacts)))
}

/// The `UPDATE` writing every mutable column of `record` to its existing row.
pub(crate) fn write_session(
    record: &SessionRecord,
) -> StoreResult<Query<'static, Postgres, PgArguments>> {
    let meta = meta_json(record)?;
    let tombstone = tombstone_json(record)?;
    let (own, attr) = (&record.own_usage, &record.attributed_usage);
    Ok(sqlx::query(
        "UPDATE sessions SET name = $2, status = $3, own_input_tokens = $4, \
         own_output_tokens = $5, own_total_tokens = $6, own_cache_read_tokens = $7, \
         own_cache_write_tokens = $8, attributed_input_tokens = $9, \
         attributed_output_tokens = $10, attributed_total_tokens = $11, \
         attributed_cache_read_tokens = $12, attributed_cache_write_tokens = $13, \
         context_tokens = $14, updated_at = $15, meta = $16, version = $17, replies = $18, \
         tombstone = $19, artifacts = $20 WHERE id = $1",
    )
    .bind(record.id.to_string())
    .bind(record.name.clone())
    .bind(record.status.as_str())
    .bind(to_sql(own.input_tokens))
    .bind(to_sql(own.output_tokens))
    .bind(to_sql(own.total_tokens))
    .bind(to_sql(own.cache_read_tokens))
    .bind(to_sql(own.cache_write_tokens))
    .bind(to_sql(attr.input_tokens))
    .bind(to_sql(attr.output_tokens))
    .bind(to_sql(attr.total_tokens))
    .bind(to_sql(attr.cache_read_tokens))
    .bind(to_sql(attr.cache_write_tokens))
    .bind(to_sql(record.context_tokens))
    .bind(to_sql(record.updated_at.0))
    .bind(meta)
    .bind(to_sql(record.version))
    .bind(i64::from(record.replies))
    .bind(tombstone)
    .bind(i64::from(record.artifacts)))
}

/// The JSON body stored for `kind`.
pub(crate) fn entry_body(kind: &EntryKind) -> StoreResult<String> {
    serde_json::to_string(kind).map_err(|e| corrupt(format_args!("transcript entry: {e}")))
}

/// Decodes a row selected with [`ENTRY_COLUMNS`].
pub(crate) fn entry_from_row(row: &PgRow) -> StoreResult<TranscriptEntry> {
    let seq = unsigned(row, 0, "seq")?;
    let tag: String = column(row, 3, "kind")?;
    let body: String = column(row, 4, "body")?;
    let kind: EntryKind = serde_json::from_str(&body)
        .map_err(|e| corrupt(format_args!("transcript entry {seq}: {e}")))?;
    if kind.kind_name() != tag {
        return Err(corrupt(format_args!(
            "transcript entry {seq}: kind column {tag:?} does not match its body ({})",
            kind.kind_name()
        )));
    }
    Ok(TranscriptEntry {
        seq,
        at: Timestamp(unsigned(row, 1, "at")?),
        run_id: parsed(row, 2, "run_id")?,
        kind,
    })
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
