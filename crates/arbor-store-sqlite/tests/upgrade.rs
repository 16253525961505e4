//! Upgrading stores written by older schemas: every row is kept and the store opens.
// The helpers below are test code too.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use arbor_protocol::{EntryKind, Message};
use arbor_store::{SessionQuery, Store};
use arbor_store_sqlite::{SCHEMA_VERSION, SqliteStore};

const ROOT: &str = "01a238b5-0000-7000-8000-000000000001";
const OTHER_ROOT: &str = "01a238b5-0000-7000-8000-000000000002";

/// Writes a store as schema version 1 (migration 0001 only) left it: sibling names were not
/// unique then. `children` are `(id suffix, parent, name, created_at)`.
fn first_schema_store(path: &Path, children: &[(u32, &str, &str, i64)]) {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(include_str!("../migrations/0001_sessions.sql"))
        .unwrap();
    conn.execute_batch("PRAGMA user_version = 1; PRAGMA application_id = 1634886258;")
        .unwrap();
    let insert = "INSERT INTO sessions (id, parent_id, root_id, name, agent, model, depth, \
                  status, created_at, updated_at, meta, version) \
                  VALUES (?1, ?2, ?3, ?4, 'a', 'm', ?5, 'succeeded', ?6, ?6, 'null', 1)";
    for root in [ROOT, OTHER_ROOT] {
        // Two roots with one name: roots need not be unique, they stay as they are.
        conn.execute(
            insert,
            rusqlite::params![root, None::<String>, root, "main", 0, 0],
        )
        .unwrap();
    }
    for (n, parent, name, at) in children {
        let id = format!("01a238b5-0000-7000-8000-1000000000{n:02}");
        conn.execute(insert, rusqlite::params![id, parent, parent, name, 1, at])
            .unwrap();
        let body = serde_json::to_string(&EntryKind::Message {
            message: Message::user(format!("to {name}")),
        })
        .unwrap();
        conn.execute(
            "INSERT INTO transcript_entries (session_id, seq, at, run_id, kind, body) \
             VALUES (?1, 1, 1, '01a238b5-0000-7000-8000-0000000000ff', 'message', ?2)",
            [&id, &body],
        )
        .unwrap();
    }
}

fn count(path: &Path, table: &str) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| r.get(0))
        .unwrap()
}

#[tokio::test]
async fn a_first_schema_store_with_same_named_siblings_opens_with_unique_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.db");
    let long = "x".repeat(64);
    let children = [
        // Three `kid`s under ROOT; `kid-2` is taken by a real sibling, so the renames skip it.
        (1, ROOT, "kid", 10),
        (2, ROOT, "kid", 20),
        (3, ROOT, "kid", 20),
        (4, ROOT, "kid-2", 5),
        // A name at the 64-character limit stays within it when suffixed.
        (5, ROOT, long.as_str(), 1),
        (6, ROOT, long.as_str(), 2),
        // The same name under another parent is no clash.
        (7, OTHER_ROOT, "kid", 30),
    ];
    first_schema_store(&path, &children);
    let (sessions, entries) = (count(&path, "sessions"), count(&path, "transcript_entries"));

    let (store, logs) = common::capture_logs(|| SqliteStore::open(&path));
    let store = store.unwrap();
    assert_eq!(count(&path, "sessions"), sessions);
    assert_eq!(count(&path, "transcript_entries"), entries);

    let names: BTreeMap<String, String> = store
        .list_sessions(SessionQuery::Children(ROOT.parse().unwrap()))
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.id.to_string()[24..].to_owned(), r.name))
        .collect();
    let truncated = format!("{}-2", "x".repeat(62));
    let expected: BTreeMap<String, String> = [
        ("100000000001", "kid"),
        ("100000000002", "kid-3"),
        ("100000000003", "kid-4"),
        ("100000000004", "kid-2"),
        ("100000000005", long.as_str()),
        ("100000000006", truncated.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    assert_eq!(names, expected);
    let other = store
        .list_sessions(SessionQuery::Children(OTHER_ROOT.parse().unwrap()))
        .await
        .unwrap();
    assert_eq!(other.len(), 1);
    assert_eq!(other[0].name, "kid");
    let roots = store.list_sessions(SessionQuery::Roots).await.unwrap();
    assert!(roots.iter().all(|r| r.name == "main"), "{roots:?}");
    for n in 1..=7 {
        let id = format!("01a238b5-0000-7000-8000-1000000000{n:02}");
        assert_eq!(
            store
                .transcript(id.parse().unwrap(), 0, None)
                .await
                .unwrap()
                .len(),
            1
        );
    }

    // One warning per renamed session, naming it, its parent, and both names.
    let warnings: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("WARN") && l.contains("renamed"))
        .collect();
    assert_eq!(warnings.len(), 3, "{logs}");
    for (id, from, to) in [
        ("01a238b5-0000-7000-8000-100000000002", "kid", "kid-3"),
        ("01a238b5-0000-7000-8000-100000000003", "kid", "kid-4"),
        (
            "01a238b5-0000-7000-8000-100000000006",
            long.as_str(),
            truncated.as_str(),
        ),
    ] {
        assert!(
            warnings.iter().any(|w| w.contains(id)
                && w.contains(ROOT)
                && w.contains(&format!("from={from:?}"))
                && w.contains(&format!("to={to:?}"))
                && w.contains("renamed a session whose name a sibling had")),
            "{id}: {logs}"
        );
    }
    drop(store);

    // Reopening changes nothing more.
    let (store, logs) = common::capture_logs(|| SqliteStore::open(&path));
    store.unwrap();
    assert!(!logs.contains("renamed"), "{logs}");
    let conn = rusqlite::Connection::open(&path).unwrap();
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap();
    assert_eq!(version, i64::from(SCHEMA_VERSION));
}
