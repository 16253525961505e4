//! Rows to records and back.
//!
//! Unsigned 64-bit values (usage, context size, versions, timestamps) are stored as the
//! signed `INTEGER` with the same bits, so every `u64` round-trips; every realistic value is
//! below 2^63 and reads as itself in SQL. Ids are stored as their canonical text, whose byte
//! order is the ids' order. Meta and transcript bodies are JSON text.

use arbor_protocol::TranscriptEntry;
use arbor_store::row::{ReadColumns, SessionRow, meta_json, read_entry, tombstone_json};
use arbor_store::{SessionRecord, SessionUpdate, StoreResult};
use rusqlite::types::{FromSql, Value};
use rusqlite::{Connection, Row, params};

use crate::error::{SqlResultExt, corrupt};

/// The columns [`session_from_row`] reads, in order.
pub(crate) use arbor_store::row::SESSION_COLUMNS;

pub(crate) use arbor_store::row::to_sql;

fn column<T: FromSql>(row: &Row<'_>, idx: usize, name: &str) -> StoreResult<T> {
    row.get(idx)
        .map_err(|e| corrupt(format_args!("column {name}: {e}")))
}

/// A row of this backend, read as [`SessionRow::read`] reads it.
struct Cols<'a>(&'a Row<'a>);

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
pub(crate) fn session_from_row(row: &Row<'_>) -> StoreResult<SessionRecord> {
    SessionRow::read(&Cols(row))?.into_record()
}

/// Inserts `record` as a new row.
pub(crate) fn insert_session(
    conn: &Connection,
    path: &str,
    record: &SessionRecord,
) -> StoreResult<()> {
    let r = SessionRow::of(record)?;
    let (own, attr) = (r.own_usage, r.attributed_usage);
    conn.prepare_cached(&crate::sql::INSERT_SESSION)
        .and_then(|mut stmt| {
            stmt.execute(params![
                r.id,
                r.parent_id,
                r.root_id,
                r.name,
                r.agent,
                r.model,
                r.depth,
                r.status,
                own[0],
                own[1],
                own[2],
                own[3],
                own[4],
                attr[0],
                attr[1],
                attr[2],
                attr[3],
                attr[4],
                r.context_tokens,
                r.created_at,
                r.updated_at,
                r.meta,
                r.version,
                r.spawned_run,
                r.spawned_turn,
                r.replies,
                r.tombstone,
                r.artifacts,
                r.own_cost,
                r.attributed_cost,
            ])
        })
        .at(path)
        .map(drop)
}

/// Which columns of a session's row a write sets, beyond `version` and `updated_at`
/// (which every write sets). Only these are named in the `UPDATE`: SQLite rewrites the
/// entries of every index over a column the statement sets, changed or not, so naming
/// `status` or `name` needlessly would dirty (and log to the WAL) their index pages too.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Columns {
    status: bool,
    own_usage: bool,
    attributed_usage: bool,
    context_tokens: bool,
    meta: bool,
    replies: bool,
    artifacts: bool,
    tombstone: bool,
    name: bool,
}

impl Columns {
    /// The columns `update` sets.
    pub(crate) fn of(update: &SessionUpdate) -> Self {
        Self {
            status: update.status.is_some(),
            own_usage: update.own_usage.is_some() || update.own_cost.is_some(),
            attributed_usage: update.attributed_usage.is_some() || update.attributed_cost.is_some(),
            context_tokens: update.context_tokens.is_some(),
            meta: update.meta.is_some(),
            replies: update.replies.is_some(),
            artifacts: update.artifacts.is_some(),
            tombstone: update.tombstone.is_some(),
            name: update.name.is_some(),
        }
    }
}

/// A session's own cost and usage columns, in the order [`write_session`] sets them.
pub(crate) const OWN_COLUMNS: [&str; 6] = [
    "own_cost",
    "own_input_tokens",
    "own_output_tokens",
    "own_total_tokens",
    "own_cache_read_tokens",
    "own_cache_write_tokens",
];

/// A session's attributed cost and usage columns, in the same order.
pub(crate) const ATTRIBUTED_COLUMNS: [&str; 6] = [
    "attributed_cost",
    "attributed_input_tokens",
    "attributed_output_tokens",
    "attributed_total_tokens",
    "attributed_cache_read_tokens",
    "attributed_cache_write_tokens",
];

/// Writes `columns` of `record` (and its `version` and `updated_at`) to its existing row.
pub(crate) fn write_session(
    conn: &Connection,
    path: &str,
    record: &SessionRecord,
    columns: Columns,
) -> StoreResult<()> {
    let mut sql = String::with_capacity(256);
    sql.push_str("UPDATE sessions SET version = ?2, updated_at = ?3");
    let mut values: Vec<Value> = vec![
        Value::Text(record.id.to_string()),
        Value::Integer(to_sql(record.version)),
        Value::Integer(to_sql(record.updated_at.0)),
    ];
    // Static names, numbered in place: nothing but the statement itself is built.
    let mut set = |column: &str, value: Value| {
        use std::fmt::Write as _;
        values.push(value);
        let _ = write!(sql, ", {column} = ?{}", values.len());
    };
    if columns.status {
        set("status", Value::Text(record.status.as_str().to_owned()));
    }
    for (on, names, usage, cost) in [
        (
            columns.own_usage,
            &OWN_COLUMNS,
            &record.own_usage,
            record.own_cost,
        ),
        (
            columns.attributed_usage,
            &ATTRIBUTED_COLUMNS,
            &record.attributed_usage,
            record.attributed_cost,
        ),
    ] {
        if on {
            set(names[0], int(cost));
            set(names[1], int(usage.input_tokens));
            set(names[2], int(usage.output_tokens));
            set(names[3], int(usage.total_tokens));
            set(names[4], int(usage.cache_read_tokens));
            set(names[5], int(usage.cache_write_tokens));
        }
    }
    if columns.context_tokens {
        set("context_tokens", int(record.context_tokens));
    }
    if columns.meta {
        set("meta", Value::Text(meta_json(record)?));
    }
    if columns.replies {
        set("replies", Value::Integer(i64::from(record.replies)));
    }
    if columns.artifacts {
        set("artifacts", Value::Integer(i64::from(record.artifacts)));
    }
    if columns.tombstone {
        set(
            "tombstone",
            tombstone_json(record)?.map_or(Value::Null, Value::Text),
        );
    }
    if columns.name {
        set("name", Value::Text(record.name.clone()));
    }
    sql.push_str(" WHERE id = ?1");
    conn.prepare_cached(&sql)
        .and_then(|mut stmt| stmt.execute(rusqlite::params_from_iter(values)))
        .at(path)
        .map(drop)
}

pub(crate) fn int(n: u64) -> Value {
    Value::Integer(to_sql(n))
}

/// Decodes a row selected with [`ENTRY_COLUMNS`](arbor_store::row::ENTRY_COLUMNS) (see [`arbor_store::row::read_entry`]).
pub(crate) fn entry_from_row(row: &Row<'_>) -> StoreResult<TranscriptEntry> {
    read_entry(&Cols(row))
}
