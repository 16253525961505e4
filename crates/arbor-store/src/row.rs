//! A session record as the SQL backends store it: one row of plain columns (text, integers,
//! JSON text), and the checks that turn a row read back into a [`SessionRecord`].
//!
//! Unsigned 64-bit values (usage, context size, versions, timestamps) are stored as the
//! signed 64-bit integer with the same bits, so every `u64` round-trips. Ids are their
//! canonical text. `meta` and the tombstone are JSON text. A backend reads its columns into a
//! [`SessionRow`] and calls [`SessionRow::into_record`], so every backend refuses the same
//! damaged rows with the same `Corrupt` message naming the column.

use std::str::FromStr;

use arbor_protocol::{EntryKind, SessionStatus, SpawnPoint, Timestamp, TranscriptEntry, Usage};

use crate::{SessionRecord, StoreError, StoreResult};

/// The columns of a session row, in the order the backends select them.
pub const SESSION_COLUMNS: &str = "id, parent_id, root_id, name, agent, model, depth, \
    status, own_input_tokens, own_output_tokens, own_total_tokens, own_cache_read_tokens, \
    own_cache_write_tokens, attributed_input_tokens, attributed_output_tokens, \
    attributed_total_tokens, attributed_cache_read_tokens, attributed_cache_write_tokens, \
    context_tokens, created_at, updated_at, meta, version, spawned_run, spawned_turn, replies, \
    tombstone, artifacts, own_cost, attributed_cost";

/// A `WHERE` clause built from parts that number their own values `#1`, `#2`, …: each
/// part's numbers follow the values bound before it, written `{prefix}N` (`?N` for SQLite,
/// `$N` for PostgreSQL).
#[derive(Debug, Clone)]
pub struct Filter<V> {
    sql: String,
    values: Vec<V>,
    prefix: &'static str,
}

impl<V> Filter<V> {
    /// A clause that starts as `base`, with placeholders written `{prefix}N`.
    pub fn new(base: &str, prefix: &'static str) -> Self {
        Self {
            sql: base.to_owned(),
            values: Vec::new(),
            prefix,
        }
    }

    /// Adds `AND clause`, its `#1`, `#2`, … bound to `values` in order.
    pub fn and(&mut self, clause: &str, values: Vec<V>) {
        let mut clause = clause.to_owned();
        for (i, value) in values.into_iter().enumerate() {
            self.values.push(value);
            clause = clause.replace(
                &format!("#{}", i + 1),
                &format!("{}{}", self.prefix, self.values.len()),
            );
        }
        self.sql.push_str(" AND ");
        self.sql.push_str(&clause);
    }

    /// Binds one more value (for a `LIMIT`, say): its placeholder.
    pub fn bind(&mut self, value: V) -> String {
        self.values.push(value);
        format!("{}{}", self.prefix, self.values.len())
    }

    /// The clause.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// Its values, in placeholder order.
    pub fn values(&self) -> &[V] {
        &self.values
    }
}

/// One session row, column by column ([`SESSION_COLUMNS`] order).
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct SessionRow {
    pub id: String,
    pub parent_id: Option<String>,
    pub root_id: String,
    pub name: String,
    pub agent: String,
    pub model: String,
    pub depth: i64,
    pub status: String,
    /// Input, output, total, cache read, cache write.
    pub own_usage: [i64; 5],
    /// Input, output, total, cache read, cache write.
    pub attributed_usage: [i64; 5],
    pub context_tokens: i64,
    pub created_at: i64,
    pub updated_at: i64,
    pub meta: String,
    pub version: i64,
    pub spawned_run: Option<String>,
    pub spawned_turn: Option<i64>,
    pub replies: i64,
    pub tombstone: Option<String>,
    pub artifacts: i64,
    /// Micro-units.
    pub own_cost: i64,
    /// Micro-units.
    pub attributed_cost: i64,
}

/// A backend's row, read column by column: what [`SessionRow::read`] needs of it. Each method
/// fails with `Corrupt` naming the column when its value has another type.
pub trait ReadColumns {
    /// A text column.
    fn text(&self, idx: usize, name: &str) -> StoreResult<String>;
    /// A text column that may be NULL.
    fn text_or_null(&self, idx: usize, name: &str) -> StoreResult<Option<String>>;
    /// An integer column.
    fn int(&self, idx: usize, name: &str) -> StoreResult<i64>;
    /// An integer column that may be NULL.
    fn int_or_null(&self, idx: usize, name: &str) -> StoreResult<Option<i64>>;
}

/// The columns of a transcript row, in the order the backends select them.
pub const ENTRY_COLUMNS: &str = "seq, at, run_id, kind, body";

/// The rows `entries` are stored as: each entry's kind (its own column, for queries that
/// filter on it) and its JSON body.
pub fn entry_rows(entries: &[EntryKind]) -> StoreResult<Vec<(&'static str, String)>> {
    entries
        .iter()
        .map(|kind| Ok((kind.kind_name(), entry_body(kind)?)))
        .collect()
}

/// The JSON body stored for `kind`.
pub fn entry_body(kind: &EntryKind) -> StoreResult<String> {
    serde_json::to_string(kind).map_err(|e| corrupt(format_args!("transcript entry: {e}")))
}

/// Decodes a transcript row selected with [`ENTRY_COLUMNS`]: a body that does not parse, or
/// whose kind is not its `kind` column's, is `Corrupt` naming the entry.
pub fn read_entry(cols: &impl ReadColumns) -> StoreResult<TranscriptEntry> {
    let seq = from_sql(cols.int(0, "seq")?);
    let tag = cols.text(3, "kind")?;
    let body = cols.text(4, "body")?;
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
        at: Timestamp(from_sql(cols.int(1, "at")?)),
        run_id: parsed(&cols.text(2, "run_id")?, "run_id")?,
        kind,
    })
}

/// A `u64` as the `i64` with the same bits.
pub fn to_sql(value: u64) -> i64 {
    value as i64
}

/// The `u64` stored by [`to_sql`].
pub fn from_sql(value: i64) -> u64 {
    value as u64
}

fn corrupt(what: std::fmt::Arguments<'_>) -> StoreError {
    StoreError::Corrupt(what.to_string())
}

fn parsed<T: FromStr>(text: &str, name: &str) -> StoreResult<T> {
    text.parse()
        .map_err(|_| corrupt(format_args!("column {name}: cannot parse {text:?}")))
}

fn small(value: i64, name: &str) -> StoreResult<u32> {
    u32::try_from(value).map_err(|_| corrupt(format_args!("column {name}: out of range")))
}

fn usage(v: [i64; 5]) -> Usage {
    Usage {
        input_tokens: from_sql(v[0]),
        output_tokens: from_sql(v[1]),
        total_tokens: from_sql(v[2]),
        cache_read_tokens: from_sql(v[3]),
        cache_write_tokens: from_sql(v[4]),
    }
}

fn usage_row(u: &Usage) -> [i64; 5] {
    [
        to_sql(u.input_tokens),
        to_sql(u.output_tokens),
        to_sql(u.total_tokens),
        to_sql(u.cache_read_tokens),
        to_sql(u.cache_write_tokens),
    ]
}

impl SessionRow {
    /// The row that stores `record`. Fails (`Corrupt`) only when its meta or tombstone cannot
    /// be written as JSON.
    pub fn of(record: &SessionRecord) -> StoreResult<Self> {
        Ok(Self {
            id: record.id.to_string(),
            parent_id: record.parent_id.map(|p| p.to_string()),
            root_id: record.root_id.to_string(),
            name: record.name.clone(),
            agent: record.agent.clone(),
            model: record.model.clone(),
            depth: i64::from(record.depth),
            status: record.status.as_str().to_owned(),
            own_usage: usage_row(&record.own_usage),
            attributed_usage: usage_row(&record.attributed_usage),
            context_tokens: to_sql(record.context_tokens),
            created_at: to_sql(record.created_at.0),
            updated_at: to_sql(record.updated_at.0),
            meta: meta_json(record)?,
            version: to_sql(record.version),
            spawned_run: record.spawned_by.map(|s| s.run_id.to_string()),
            spawned_turn: record.spawned_by.map(|s| i64::from(s.turn)),
            replies: i64::from(record.replies),
            tombstone: tombstone_json(record)?,
            artifacts: i64::from(record.artifacts),
            own_cost: to_sql(record.own_cost),
            attributed_cost: to_sql(record.attributed_cost),
        })
    }

    /// The row `row` holds, its columns in [`SESSION_COLUMNS`] order.
    pub fn read(row: &impl ReadColumns) -> StoreResult<Self> {
        // The column names, for the errors only: nothing is built for a row that decodes.
        const OWN: [&str; 5] = [
            "own_input_tokens",
            "own_output_tokens",
            "own_total_tokens",
            "own_cache_read_tokens",
            "own_cache_write_tokens",
        ];
        const ATTRIBUTED: [&str; 5] = [
            "attributed_input_tokens",
            "attributed_output_tokens",
            "attributed_total_tokens",
            "attributed_cache_read_tokens",
            "attributed_cache_write_tokens",
        ];
        let usage = |first: usize, names: &[&str; 5]| -> StoreResult<[i64; 5]> {
            Ok([
                row.int(first, names[0])?,
                row.int(first + 1, names[1])?,
                row.int(first + 2, names[2])?,
                row.int(first + 3, names[3])?,
                row.int(first + 4, names[4])?,
            ])
        };
        Ok(Self {
            id: row.text(0, "id")?,
            parent_id: row.text_or_null(1, "parent_id")?,
            root_id: row.text(2, "root_id")?,
            name: row.text(3, "name")?,
            agent: row.text(4, "agent")?,
            model: row.text(5, "model")?,
            depth: row.int(6, "depth")?,
            status: row.text(7, "status")?,
            own_usage: usage(8, &OWN)?,
            attributed_usage: usage(13, &ATTRIBUTED)?,
            context_tokens: row.int(18, "context_tokens")?,
            created_at: row.int(19, "created_at")?,
            updated_at: row.int(20, "updated_at")?,
            meta: row.text(21, "meta")?,
            version: row.int(22, "version")?,
            spawned_run: row.text_or_null(23, "spawned_run")?,
            spawned_turn: row.int_or_null(24, "spawned_turn")?,
            replies: row.int(25, "replies")?,
            tombstone: row.text_or_null(26, "tombstone")?,
            artifacts: row.int(27, "artifacts")?,
            own_cost: row.int(28, "own_cost")?,
            attributed_cost: row.int(29, "attributed_cost")?,
        })
    }

    /// The record this row holds, or `Corrupt` naming the first column that does not decode.
    pub fn into_record(self) -> StoreResult<SessionRecord> {
        let parent_id = self
            .parent_id
            .as_deref()
            .map(|p| parsed(p, "parent_id"))
            .transpose()?;
        let depth = self.depth;
        let status = self.status;
        Ok(SessionRecord {
            id: parsed(&self.id, "id")?,
            parent_id,
            root_id: parsed(&self.root_id, "root_id")?,
            name: self.name,
            agent: self.agent,
            model: self.model,
            depth: u32::try_from(depth)
                .map_err(|_| corrupt(format_args!("column depth: {depth} is out of range")))?,
            status: SessionStatus::parse(&status)
                .ok_or_else(|| corrupt(format_args!("column status: unknown status {status:?}")))?,
            own_usage: usage(self.own_usage),
            attributed_usage: usage(self.attributed_usage),
            own_cost: from_sql(self.own_cost),
            attributed_cost: from_sql(self.attributed_cost),
            context_tokens: from_sql(self.context_tokens),
            created_at: Timestamp(from_sql(self.created_at)),
            updated_at: Timestamp(from_sql(self.updated_at)),
            meta: crate::Meta::from_json_text(self.meta)
                .map_err(|e| corrupt(format_args!("column meta: {e}")))?,
            version: from_sql(self.version),
            spawned_by: match (self.spawned_run, self.spawned_turn) {
                (Some(run), Some(turn)) => Some(SpawnPoint {
                    run_id: parsed(&run, "spawned_run")?,
                    turn: small(turn, "spawned_turn")?,
                }),
                (None, None) => None,
                _ => {
                    return Err(corrupt(format_args!(
                        "columns spawned_run and spawned_turn: one without the other"
                    )));
                }
            },
            replies: small(self.replies, "replies")?,
            tombstone: self
                .tombstone
                .map(|t| {
                    serde_json::from_str(&t)
                        .map_err(|e| corrupt(format_args!("column tombstone: {e}")))
                })
                .transpose()?,
            artifacts: small(self.artifacts, "artifacts")?,
        })
    }
}

/// `record.meta` as the JSON text a row stores.
pub fn meta_json(record: &SessionRecord) -> StoreResult<String> {
    record
        .meta
        .to_json()
        .map_err(|e| corrupt(format_args!("meta: {e}")))
}

/// `record.tombstone` as the JSON text a row stores, `None` while not deleted.
pub fn tombstone_json(record: &SessionRecord) -> StoreResult<Option<String>> {
    record
        .tombstone
        .as_ref()
        .map(|t| serde_json::to_string(t).map_err(|e| corrupt(format_args!("tombstone: {e}"))))
        .transpose()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_record_round_trips_and_damaged_columns_are_named() {
        let root = SessionRecord::new_root("root", "planner", "model-a");
        let mut child = SessionRecord::new_child(&root, "kid", "worker", "model-b");
        child.own_usage = Usage::new(u64::MAX, 3);
        child.spawned_by = Some(SpawnPoint {
            run_id: arbor_protocol::RunId::new(),
            turn: 2,
        });
        let row = SessionRow::of(&child).unwrap();
        assert_eq!(row.clone().into_record().unwrap(), child);

        let bad = |f: &dyn Fn(&mut SessionRow)| {
            let mut r = row.clone();
            f(&mut r);
            r.into_record().unwrap_err().to_string()
        };
        assert!(bad(&|r| r.depth = -1).contains("column depth: -1 is out of range"));
        assert!(bad(&|r| r.status = "nope".into()).contains("column status: unknown status"));
        assert!(bad(&|r| r.spawned_turn = None).contains("one without the other"));
        assert!(bad(&|r| r.meta = "{".into()).contains("column meta:"));
        assert!(bad(&|r| r.id = "x".into()).contains("column id: cannot parse \"x\""));
    }
}
