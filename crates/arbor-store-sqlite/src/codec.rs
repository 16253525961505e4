//! Rows to records and back.
//!
//! Unsigned 64-bit values (usage, context size, versions, timestamps) are stored as the
//! signed `INTEGER` with the same bits, so every `u64` round-trips; every realistic value is
//! below 2^63 and reads as itself in SQL. Ids are stored as their canonical text, whose byte
//! order is the ids' order. Meta and transcript bodies are JSON text.

use std::str::FromStr;

use arbor_protocol::{EntryKind, SessionStatus, SpawnPoint, Timestamp, TranscriptEntry, Usage};
use arbor_store::{SessionRecord, SessionUpdate, StoreResult};
use rusqlite::types::{FromSql, Value};
use rusqlite::{Connection, Row, params};

use crate::error::{SqlResultExt, corrupt};

/// The columns [`session_from_row`] reads, in order.
pub(crate) const SESSION_COLUMNS: &str = "id, parent_id, root_id, name, agent, model, depth, \
    status, own_input_tokens, own_output_tokens, own_total_tokens, own_cache_read_tokens, \
    own_cache_write_tokens, attributed_input_tokens, attributed_output_tokens, \
    attributed_total_tokens, attributed_cache_read_tokens, attributed_cache_write_tokens, \
    context_tokens, created_at, updated_at, meta, version, spawned_run, spawned_turn, replies, \
    tombstone, artifacts";

/// The columns [`entry_from_row`] reads, in order.
pub(crate) const ENTRY_COLUMNS: &str = "seq, at, run_id, kind, body";

/// A `u64` as the `i64` with the same bits.
pub(crate) fn to_sql(value: u64) -> i64 {
    value as i64
}

/// The `u64` stored by [`to_sql`].
fn from_sql(value: i64) -> u64 {
    value as u64
}

fn column<T: FromSql>(row: &Row<'_>, idx: usize, name: &str) -> StoreResult<T> {
    row.get(idx)
        .map_err(|e| corrupt(format_args!("column {name}: {e}")))
}

fn parsed<T: FromStr>(row: &Row<'_>, idx: usize, name: &str) -> StoreResult<T> {
    let text: String = column(row, idx, name)?;
    text.parse()
        .map_err(|_| corrupt(format_args!("column {name}: cannot parse {text:?}")))
}

fn unsigned(row: &Row<'_>, idx: usize, name: &str) -> StoreResult<u64> {
    column::<i64>(row, idx, name).map(from_sql)
}

fn usage(row: &Row<'_>, first: usize, prefix: &str) -> StoreResult<Usage> {
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
pub(crate) fn session_from_row(row: &Row<'_>) -> StoreResult<SessionRecord> {
    let parent: Option<String> = column(row, 1, "parent_id")?;
    let parent_id = parent
        .map(|p| {
            p.parse()
                .map_err(|_| corrupt(format_args!("column parent_id: cannot parse {p:?}")))
        })
        .transpose()?;
    let depth: i64 = column(row, 6, "depth")?;
    let status: String = column(row, 7, "status")?;
    let meta: String = column(row, 21, "meta")?;
    Ok(SessionRecord {
        id: parsed(row, 0, "id")?,
        parent_id,
        root_id: parsed(row, 2, "root_id")?,
        name: column(row, 3, "name")?,
        agent: column(row, 4, "agent")?,
        model: column(row, 5, "model")?,
        depth: u32::try_from(depth)
            .map_err(|_| corrupt(format_args!("column depth: {depth} is out of range")))?,
        status: SessionStatus::parse(&status)
            .ok_or_else(|| corrupt(format_args!("column status: unknown status {status:?}")))?,
        own_usage: usage(row, 8, "own")?,
        attributed_usage: usage(row, 13, "attributed")?,
        context_tokens: unsigned(row, 18, "context_tokens")?,
        created_at: Timestamp(unsigned(row, 19, "created_at")?),
        updated_at: Timestamp(unsigned(row, 20, "updated_at")?),
        meta: serde_json::from_str(&meta).map_err(|e| corrupt(format_args!("column meta: {e}")))?,
        version: unsigned(row, 22, "version")?,
        spawned_by: spawn_point(row)?,
        replies: u32::try_from(column::<i64>(row, 25, "replies")?)
            .map_err(|_| corrupt("column replies: out of range"))?,
        tombstone: column::<Option<String>>(row, 26, "tombstone")?
            .map(|t| {
                serde_json::from_str(&t).map_err(|e| corrupt(format_args!("column tombstone: {e}")))
            })
            .transpose()?,
        artifacts: u32::try_from(column::<i64>(row, 27, "artifacts")?)
            .map_err(|_| corrupt("column artifacts: out of range"))?,
    })
}

fn spawn_point(row: &Row<'_>) -> StoreResult<Option<SpawnPoint>> {
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

/// Inserts `record` as a new row.
pub(crate) fn insert_session(
    conn: &Connection,
    path: &str,
    record: &SessionRecord,
) -> StoreResult<()> {
    let meta = meta_json(record)?;
    let tombstone = tombstone_json(record)?;
    let (own, attr) = (&record.own_usage, &record.attributed_usage);
    let sql = format!(
        "INSERT INTO sessions ({SESSION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, \
         ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, \
         ?27, ?28)"
    );
    conn.prepare_cached(&sql)
        .and_then(|mut stmt| {
            stmt.execute(params![
                record.id.to_string(),
                record.parent_id.map(|p| p.to_string()),
                record.root_id.to_string(),
                record.name,
                record.agent,
                record.model,
                i64::from(record.depth),
                record.status.as_str(),
                to_sql(own.input_tokens),
                to_sql(own.output_tokens),
                to_sql(own.total_tokens),
                to_sql(own.cache_read_tokens),
                to_sql(own.cache_write_tokens),
                to_sql(attr.input_tokens),
                to_sql(attr.output_tokens),
                to_sql(attr.total_tokens),
                to_sql(attr.cache_read_tokens),
                to_sql(attr.cache_write_tokens),
                to_sql(record.context_tokens),
                to_sql(record.created_at.0),
                to_sql(record.updated_at.0),
                meta,
                to_sql(record.version),
                record.spawned_by.map(|s| s.run_id.to_string()),
                record.spawned_by.map(|s| i64::from(s.turn)),
                i64::from(record.replies),
                tombstone,
                i64::from(record.artifacts),
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
    /// What an [`Attribution`](arbor_store::Attribution) writes to an ancestor.
    pub(crate) const ATTRIBUTED_USAGE: Self = Self {
        attributed_usage: true,
        ..Self::NONE
    };

    const NONE: Self = Self {
        status: false,
        own_usage: false,
        attributed_usage: false,
        context_tokens: false,
        meta: false,
        replies: false,
        artifacts: false,
        tombstone: false,
        name: false,
    };

    /// The columns `update` sets.
    pub(crate) fn of(update: &SessionUpdate) -> Self {
        Self {
            status: update.status.is_some(),
            own_usage: update.own_usage.is_some(),
            attributed_usage: update.attributed_usage.is_some(),
            context_tokens: update.context_tokens.is_some(),
            meta: update.meta.is_some(),
            replies: update.replies.is_some(),
            artifacts: update.artifacts.is_some(),
            tombstone: update.tombstone.is_some(),
            name: update.name.is_some(),
        }
    }
}

/// Writes `columns` of `record` (and its `version` and `updated_at`) to its existing row.
pub(crate) fn write_session(
    conn: &Connection,
    path: &str,
    record: &SessionRecord,
    columns: Columns,
) -> StoreResult<()> {
    let mut sql = String::from("UPDATE sessions SET version = ?2, updated_at = ?3");
    let mut values: Vec<Value> = vec![
        Value::Text(record.id.to_string()),
        Value::Integer(to_sql(record.version)),
        Value::Integer(to_sql(record.updated_at.0)),
    ];
    let mut set = |column: &str, value: Value| {
        values.push(value);
        sql.push_str(&format!(", {column} = ?{}", values.len()));
    };
    if columns.status {
        set("status", Value::Text(record.status.as_str().to_owned()));
    }
    for (on, prefix, usage) in [
        (columns.own_usage, "own", &record.own_usage),
        (
            columns.attributed_usage,
            "attributed",
            &record.attributed_usage,
        ),
    ] {
        if on {
            set(&format!("{prefix}_input_tokens"), int(usage.input_tokens));
            set(&format!("{prefix}_output_tokens"), int(usage.output_tokens));
            set(&format!("{prefix}_total_tokens"), int(usage.total_tokens));
            set(
                &format!("{prefix}_cache_read_tokens"),
                int(usage.cache_read_tokens),
            );
            set(
                &format!("{prefix}_cache_write_tokens"),
                int(usage.cache_write_tokens),
            );
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

fn int(n: u64) -> Value {
    Value::Integer(to_sql(n))
}

/// The JSON body stored for `kind`.
pub(crate) fn entry_body(kind: &EntryKind) -> StoreResult<String> {
    serde_json::to_string(kind).map_err(|e| corrupt(format_args!("transcript entry: {e}")))
}

/// Decodes a row selected with [`ENTRY_COLUMNS`].
pub(crate) fn entry_from_row(row: &Row<'_>) -> StoreResult<TranscriptEntry> {
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
