//! The SQL of the store's operations, each run on the caller's connection or inside the
//! caller's transaction (see [`SqliteStore`](crate::SqliteStore) for where they run).

use arbor_protocol::{RunId, SessionId, Timestamp};
use arbor_store::{Checkpoint, SessionRecord, SessionUpdate, StoreError, StoreResult};
use rusqlite::{Connection, params};

use rusqlite::types::Value;

use crate::codec::{
    ATTRIBUTED_COLUMNS, Columns, OWN_COLUMNS, SESSION_COLUMNS, int, session_from_row, to_sql,
    write_session,
};
use crate::error::{SqlResultExt, corrupt};

pub(crate) fn exists(conn: &Connection, path: &str, id: SessionId) -> StoreResult<bool> {
    conn.prepare_cached("SELECT 1 FROM sessions WHERE id = ?1")
        .and_then(|mut stmt| stmt.exists([id.to_string()]))
        .at(path)
}

pub(crate) fn load(
    conn: &Connection,
    path: &str,
    id: SessionId,
) -> StoreResult<Option<SessionRecord>> {
    let mut stmt = conn.prepare_cached(&crate::sql::LOAD_SESSION).at(path)?;
    let mut rows = stmt.query([id.to_string()]).at(path)?;
    rows.next().at(path)?.map(session_from_row).transpose()
}

pub(crate) fn select_sessions(
    conn: &Connection,
    path: &str,
    filter: &str,
    param: Option<String>,
) -> StoreResult<Vec<SessionRecord>> {
    let mut stmt = conn
        .prepare_cached(&crate::sql::sessions_where(filter))
        .at(path)?;
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
pub(crate) fn apply_update(
    conn: &Connection,
    path: &str,
    id: SessionId,
    update: &SessionUpdate,
) -> StoreResult<SessionRecord> {
    let mut record = load(conn, path, id)?.ok_or_else(|| StoreError::session_not_found(id))?;
    record.check_version(update)?;
    if let (Some(name), Some(parent), None) = (&update.name, record.parent_id, &record.tombstone)
        && *name != record.name
    {
        let taken = conn
            .prepare_cached(
                "SELECT 1 FROM sessions WHERE parent_id = ?1 AND name = ?2 AND tombstone IS NULL",
            )
            .and_then(|mut stmt| stmt.exists(params![parent.to_string(), name]))
            .at(path)?;
        if taken {
            return Err(StoreError::NameTaken { name: name.clone() });
        }
    }
    record.apply(update);
    write_session(conn, path, &record, Columns::of(update))?;
    Ok(record)
}

pub(crate) use arbor_store::row::entry_rows as encode;

/// Applies `update` (if any) and appends `bodies` to `session`, inside the caller's
/// transaction; returns the last sequence number.
pub(crate) fn append_in(
    tx: &Connection,
    path: &str,
    session: SessionId,
    run: RunId,
    bodies: &[(&'static str, String)],
    update: Option<&SessionUpdate>,
) -> StoreResult<u64> {
    match update {
        // Nothing of the record is needed back: written without reading it, if it can be.
        Some(update) => {
            let written = update_in_place(tx, path, session, update)?;
            if !written {
                drop(apply_update(tx, path, session, update)?);
            }
        }
        None if !exists(tx, path, session)? => {
            return Err(StoreError::session_not_found(session));
        }
        None => {}
    }
    let last: i64 = tx
        .prepare_cached(crate::sql::LAST_SEQ)
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

pub(crate) fn name_taken(tx: &Connection, path: &str, record: &SessionRecord) -> StoreResult<bool> {
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

pub(crate) fn checkpoint_version(
    tx: &Connection,
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

pub(crate) fn checkpoint_from_row(row: &rusqlite::Row<'_>) -> StoreResult<Checkpoint> {
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

/// Sessions by the string their root keeps at the JSON path `group` of its meta, root or
/// not, and status: one query, no record loaded.
pub(crate) fn census(
    conn: &Connection,
    path: &str,
    group: &str,
) -> StoreResult<Vec<arbor_store::StatusCount>> {
    let mut stmt = conn
        .prepare_cached(
            "SELECT grp, is_root, status, sum(n), sum(cost) FROM ( \
               SELECT CASE WHEN json_type(r.meta, ?1) = 'text' \
                      THEN json_extract(r.meta, ?1) END AS grp, \
                      t.is_root AS is_root, t.status AS status, t.n AS n, t.cost AS cost \
               FROM (SELECT root_id, parent_id IS NULL AS is_root, status, count(*) AS n, \
                            sum(own_cost) AS cost \
                     FROM sessions GROUP BY root_id, is_root, status) t \
               JOIN sessions r ON r.id = t.root_id) \
             GROUP BY grp, is_root, status",
        )
        .at(path)?;
    let mut rows = stmt.query([group]).at(path)?;
    // One row per tree and status: summed per group.
    let mut counts: std::collections::HashMap<
        (Option<String>, bool, &'static str),
        arbor_store::StatusCount,
    > = std::collections::HashMap::new();
    while let Some(row) = rows.next().at(path)? {
        let group: Option<String> = row.get(0).at(path)?;
        let root: bool = row.get(1).at(path)?;
        let word: String = row.get(2).at(path)?;
        let n: i64 = row.get(3).at(path)?;
        let cost: i64 = row.get(4).at(path)?;
        let status = arbor_protocol::SessionStatus::parse(&word)
            .ok_or_else(|| StoreError::Corrupt(format!("session status {word:?}")))?;
        let at = counts
            .entry((group.clone(), root, status.as_str()))
            .or_insert(arbor_store::StatusCount {
                group,
                root,
                status,
                sessions: 0,
                own_cost_micros: 0,
            });
        at.sessions += u64::try_from(n).unwrap_or(0);
        at.own_cost_micros = at
            .own_cost_micros
            .saturating_add(u64::try_from(cost).unwrap_or(0));
    }
    Ok(counts.into_values().collect())
}

/// A page of roots, newest first, in one query through the parent index (its NULL parents
/// are the roots, in creation order).
pub(crate) fn roots_page(
    conn: &Connection,
    path: &str,
    page: &arbor_store::RootPage,
) -> StoreResult<Vec<SessionRecord>> {
    use rusqlite::types::Value as Sql;
    let mut filter = arbor_store::row::Filter::<Sql>::new("parent_id IS NULL", "?");
    if let Some((at, id)) = page.after {
        filter.and(
            "(created_at, id) < (CAST(#1 AS INTEGER), CAST(#2 AS TEXT))",
            vec![Sql::Integer(to_sql(at.0)), Sql::Text(id.to_string())],
        );
    }
    if let Some(status) = page.status {
        filter.and("status = #1", vec![Sql::Text(status.as_str().to_owned())]);
    }
    if let Some(at) = page.created_from {
        filter.and("created_at >= #1", vec![Sql::Integer(to_sql(at.0))]);
    }
    if let Some(at) = page.created_before {
        filter.and("created_at < #1", vec![Sql::Integer(to_sql(at.0))]);
    }
    for (keys, value) in &page.meta {
        filter.and(
            "json_type(meta, CAST(#1 AS TEXT)) = 'text' \
             AND json_extract(meta, CAST(#1 AS TEXT)) = CAST(#2 AS TEXT)",
            vec![Sql::Text(json_path(keys)), Sql::Text(value.clone())],
        );
    }
    for (keys, value) in &page.meta_or_absent {
        filter.and(
            "(json_type(meta, CAST(#1 AS TEXT)) IS NULL \
             OR json_type(meta, CAST(#1 AS TEXT)) = 'null' \
             OR (json_type(meta, CAST(#1 AS TEXT)) = 'text' \
                 AND json_extract(meta, CAST(#1 AS TEXT)) = CAST(#2 AS TEXT)))",
            vec![Sql::Text(json_path(keys)), Sql::Text(value.clone())],
        );
    }
    let limit = filter.bind(Sql::Integer(i64::from(page.limit)));
    let sql = format!(
        "SELECT {SESSION_COLUMNS} FROM sessions WHERE {} \
         ORDER BY created_at DESC, id DESC LIMIT CAST({limit} AS INTEGER)",
        filter.sql()
    );
    let mut stmt = conn.prepare_cached(&sql).at(path)?;
    let mut rows = stmt
        .query(rusqlite::params_from_iter(filter.values().iter()))
        .at(path)?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().at(path)? {
        out.push(session_from_row(row)?);
    }
    Ok(out)
}

/// The JSON path of `keys` (checked: a-z A-Z 0-9 _ -), each quoted: `$."labels"."user"`.
fn json_path(keys: &[String]) -> String {
    std::iter::once("$".to_owned())
        .chain(keys.iter().map(|k| format!("\"{k}\"")))
        .collect::<Vec<_>>()
        .join(".")
}

/// Applies `update` to session `id`'s row in one `UPDATE`, without reading the row first,
/// where nothing in it depends on the row: `Ok(false)` (nothing written) for an update that
/// renames (its new name is checked against its siblings first), which the caller applies
/// by reading the record. The version check and `live_only` are conditions of the same
/// statement; when it changes no row, the record is read to say why (not found, deleted or
/// a conflict), as [`SessionRecord::check_version`] says it.
pub(crate) fn update_in_place(
    conn: &Connection,
    path: &str,
    id: arbor_protocol::SessionId,
    update: &SessionUpdate,
) -> StoreResult<bool> {
    use std::fmt::Write as _;
    if update.name.is_some() {
        return Ok(false);
    }
    let mut sql = String::with_capacity(256);
    sql.push_str("UPDATE sessions SET version = version + 1, updated_at = MAX(updated_at, ?2)");
    let mut values: Vec<Value> = vec![
        Value::Text(id.to_string()),
        int(arbor_protocol::Timestamp::now().0),
    ];
    let mut set = |column: &str, value: Value| {
        values.push(value);
        let _ = write!(sql, ", {column} = ?{}", values.len());
    };
    if let Some(status) = update.status {
        set("status", Value::Text(status.as_str().to_owned()));
    }
    for (names, usage, cost) in [
        (&OWN_COLUMNS, update.own_usage, update.own_cost),
        (
            &ATTRIBUTED_COLUMNS,
            update.attributed_usage,
            update.attributed_cost,
        ),
    ] {
        if let Some(cost) = cost {
            set(names[0], int(cost));
        }
        if let Some(usage) = usage {
            set(names[1], int(usage.input_tokens));
            set(names[2], int(usage.output_tokens));
            set(names[3], int(usage.total_tokens));
            set(names[4], int(usage.cache_read_tokens));
            set(names[5], int(usage.cache_write_tokens));
        }
    }
    if let Some(tokens) = update.context_tokens {
        set("context_tokens", int(tokens));
    }
    if let Some(meta) = &update.meta {
        let text = serde_json::to_string(meta).map_err(|e| corrupt(format_args!("meta: {e}")))?;
        set("meta", Value::Text(text));
    }
    if let Some(replies) = update.replies {
        set("replies", Value::Integer(i64::from(replies)));
    }
    if let Some(artifacts) = update.artifacts {
        set("artifacts", Value::Integer(i64::from(artifacts)));
    }
    if let Some(tombstone) = &update.tombstone {
        let text = serde_json::to_string(tombstone)
            .map_err(|e| corrupt(format_args!("tombstone: {e}")))?;
        set("tombstone", Value::Text(text));
    }
    sql.push_str(" WHERE id = ?1");
    if let Some(expected) = update.expected_version {
        values.push(int(expected));
        let _ = write!(sql, " AND version = ?{}", values.len());
    }
    if update.live_only {
        sql.push_str(" AND tombstone IS NULL");
    }
    let changed = conn
        .prepare_cached(&sql)
        .and_then(|mut stmt| stmt.execute(rusqlite::params_from_iter(values)))
        .at(path)?;
    if changed == 1 {
        return Ok(true);
    }
    // Why not: the record says.
    let record = load(conn, path, id)?.ok_or_else(|| StoreError::session_not_found(id))?;
    record.check_version(update)?;
    Err(corrupt(format_args!(
        "session {id}: an update changed {changed} rows"
    )))
}

/// Adds `attribution` to ancestor `target`'s attributed usage and cost, reading only its
/// usage and cost columns (not the whole record), and returns the entries for its
/// transcript, as [`Attribution::apply_to`] does on a record: the sums saturate as there,
/// and the version and time are bumped.
pub(crate) fn attribute(
    conn: &Connection,
    path: &str,
    attribution: &arbor_store::Attribution,
    target: &arbor_store::AttributionTarget,
) -> StoreResult<Vec<arbor_protocol::EntryKind>> {
    let id = target.session.to_string();
    let read = conn
        .prepare_cached(crate::sql::USAGE_OF)
        .and_then(|mut stmt| {
            stmt.query_row([&id], |row| {
                let mut v = [0_i64; 12];
                for (i, slot) in v.iter_mut().enumerate() {
                    *slot = row.get(i)?;
                }
                Ok(v)
            })
        });
    let v = match read {
        Err(rusqlite::Error::QueryReturnedNoRows) => {
            return Err(StoreError::session_not_found(target.session));
        }
        other => other.at(path)?,
    };
    let usage = |a: &[i64]| arbor_protocol::Usage {
        input_tokens: arbor_store::row::from_sql(a[0]),
        output_tokens: arbor_store::row::from_sql(a[1]),
        total_tokens: arbor_store::row::from_sql(a[2]),
        cache_read_tokens: arbor_store::row::from_sql(a[3]),
        cache_write_tokens: arbor_store::row::from_sql(a[4]),
    };
    let (own, own_cost) = (usage(&v[0..5]), arbor_store::row::from_sql(v[5]));
    let attributed = usage(&v[6..11]) + attribution.usage;
    let attributed_cost = arbor_store::row::from_sql(v[11]).saturating_add(attribution.cost);
    conn.prepare_cached(crate::sql::ADD_ATTRIBUTED)
        .and_then(|mut stmt| {
            stmt.execute(params![
                id,
                to_sql(attributed.input_tokens),
                to_sql(attributed.output_tokens),
                to_sql(attributed.total_tokens),
                to_sql(attributed.cache_read_tokens),
                to_sql(attributed.cache_write_tokens),
                to_sql(attributed_cost),
                to_sql(Timestamp::now().0),
            ])
        })
        .at(path)?;
    Ok(attribution.entries(
        target,
        own + attributed,
        own_cost.saturating_add(attributed_cost),
    ))
}
