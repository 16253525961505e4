//! Opening store files: persistence, migrations, and files the store must refuse untouched.
// The helpers below are test code too.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use arbor_protocol::{EntryKind, Message, RunId, SessionStatus};
use arbor_store::{SessionRecord, SessionUpdate, Store, StoreErrorKind};
use arbor_store_sqlite::{SCHEMA_VERSION, SqliteOptions, SqliteStore, Synchronous};

fn user_version(path: &Path) -> i64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
        .unwrap()
}

fn schema(path: &Path) -> Vec<(String, String)> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn
        .prepare("SELECT name, sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY name")
        .unwrap();
    stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test]
async fn data_persists_across_reopen_and_migrations_are_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arbor.db");
    let root = SessionRecord::new_root("root", "planner", "model-a");
    let child = SessionRecord::new_child(&root, "child", "worker", "model-b");
    let run = RunId::new();
    let entries = [
        EntryKind::Message {
            message: Message::user("hi"),
        },
        EntryKind::Message {
            message: Message::assistant("hello"),
        },
    ];
    {
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(store.path(), path.display().to_string());
        store.create_session(&root).await.unwrap();
        store.create_session(&child).await.unwrap();
        let update = SessionUpdate::status(SessionStatus::Succeeded);
        assert_eq!(
            store.append(child.id, run, &entries, Some(&update)).await,
            Ok(2)
        );
    }
    assert_eq!(user_version(&path), i64::from(SCHEMA_VERSION));
    let before = schema(&path);
    assert!(
        before.iter().any(|(name, _)| name == "sessions"),
        "{before:?}"
    );
    assert!(
        before.iter().any(|(name, _)| name == "transcript_entries"),
        "{before:?}"
    );

    for reopen in 0..2 {
        let store = SqliteOptions::new()
            .synchronous(Synchronous::Full)
            .open(&path)
            .unwrap();
        assert_eq!(store.session(root.id).await.unwrap(), Some(root.clone()));
        let stored = store.session(child.id).await.unwrap().unwrap();
        assert_eq!(stored.status, SessionStatus::Succeeded);
        assert_eq!(stored.version, 2);
        let transcript = store.transcript(child.id, 0, None).await.unwrap();
        let kinds: Vec<_> = transcript.iter().map(|e| e.kind.clone()).collect();
        assert_eq!(kinds, entries);
        assert!(transcript.iter().all(|e| e.run_id == run));
        // Numbering continues after a reopen.
        assert_eq!(
            store.append(root.id, run, &entries[..1], None).await,
            Ok(reopen + 1)
        );
    }
    assert_eq!(user_version(&path), i64::from(SCHEMA_VERSION));
    assert_eq!(schema(&path), before, "reopening changed the schema");
    let store = SqliteStore::open(&path).unwrap();
    let seqs: Vec<u64> = store
        .transcript(root.id, 0, None)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, vec![1, 2]);
}

#[test]
fn the_file_is_in_wal_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arbor.db");
    let store = SqliteStore::open(&path).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let mode: String = conn
        .pragma_query_value(None, "journal_mode", |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    drop(store);
}

#[tokio::test]
async fn entries_store_their_kind_tag_and_json_body() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arbor.db");
    let store = SqliteStore::open(&path).unwrap();
    let root = SessionRecord::new_root("root", "planner", "model-a");
    store.create_session(&root).await.unwrap();
    let entry = EntryKind::RunStarted {
        agent: "planner".into(),
        model: "model-a".into(),
        trace: None,
    };
    store
        .append(root.id, RunId::new(), std::slice::from_ref(&entry), None)
        .await
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let (kind, body): (String, String) = conn
        .query_row("SELECT kind, body FROM transcript_entries", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(kind, "run_started");
    assert_eq!(serde_json::from_str::<EntryKind>(&body).unwrap(), entry);
}

#[tokio::test]
async fn undecodable_rows_are_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arbor.db");
    let store = SqliteStore::open(&path).unwrap();
    let root = SessionRecord::new_root("root", "planner", "model-a");
    store.create_session(&root).await.unwrap();
    store
        .append(
            root.id,
            RunId::new(),
            &[EntryKind::Message {
                message: Message::user("x"),
            }],
            None,
        )
        .await
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute("UPDATE sessions SET meta = '{not json'", [])
        .unwrap();
    conn.execute("UPDATE transcript_entries SET kind = 'usage'", [])
        .unwrap();
    let err = store.session(root.id).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{err}");
    assert!(err.to_string().contains("meta"), "{err}");
    let err = store.transcript(root.id, 0, None).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{err}");
    conn.execute("UPDATE sessions SET meta = 'null', status = 'bogus'", [])
        .unwrap();
    let err = store.session(root.id).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{err}");
    assert!(err.to_string().contains("bogus"), "{err}");
}

#[test]
fn a_newer_schema_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arbor.db");
    drop(SqliteStore::open(&path).unwrap());
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        // Leave the file self-contained so its bytes tell the whole story.
        conn.pragma_update(None, "journal_mode", "DELETE").unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    let message = err.to_string();
    assert!(message.contains("created by a newer arbor"), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the file was modified"
    );
    assert_eq!(user_version(&path), i64::from(SCHEMA_VERSION + 1));
}

#[test]
fn a_file_that_is_not_sqlite_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.db");
    // Deterministic pseudo-random bytes (xorshift), several pages long.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let bytes: Vec<u8> = (0..16 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(&path, &bytes).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            StoreErrorKind::Unavailable | StoreErrorKind::Corrupt
        ),
        "{err}"
    );
    let message = err.to_string();
    assert!(message.contains("not a SQLite database"), "{message}");
    assert!(message.contains(&path.display().to_string()), "{message}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the file was modified"
    );
}

#[test]
fn another_applications_database_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("other.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
            .unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("not an arbor store"), "{err}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the file was modified"
    );
}

#[test]
fn an_unopenable_path_is_unavailable_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-dir").join("arbor.db");
    let err = SqliteStore::open(&missing).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    assert!(
        err.to_string().contains(&missing.display().to_string()),
        "{err}"
    );
    assert!(
        !missing.parent().unwrap().exists(),
        "open created the directory"
    );

    let err = SqliteStore::open(dir.path()).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    assert!(
        err.to_string().contains(&dir.path().display().to_string()),
        "{err}"
    );
}

#[tokio::test]
async fn a_version_1_store_is_migrated_and_keeps_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.db");
    {
        // What arbor 0.1 with schema version 1 wrote: a root and a child.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(include_str!("../migrations/0001_sessions.sql"))
            .unwrap();
        conn.execute_batch(
            "PRAGMA user_version = 1; PRAGMA application_id = 1634886258;
             INSERT INTO sessions (id, parent_id, root_id, name, agent, model, depth, status,
                 created_at, updated_at, meta, version)
             VALUES ('01a238b5-0000-7000-8000-000000000001', NULL,
                     '01a238b5-0000-7000-8000-000000000001', 'root', 'a', 'm', 0, 'succeeded',
                     1, 2, 'null', 3),
                    ('01a238b5-0000-7000-8000-000000000002',
                     '01a238b5-0000-7000-8000-000000000001',
                     '01a238b5-0000-7000-8000-000000000001', 'kid', 'a', 'm', 1, 'succeeded',
                     1, 2, 'null', 1);",
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(user_version(&path), i64::from(SCHEMA_VERSION));
    let kid = store
        .session("01a238b5-0000-7000-8000-000000000002".parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (kid.name.as_str(), kid.replies, kid.tombstone.is_none()),
        ("kid", 0, true)
    );
    assert_eq!(kid.spawned_by, None);
    // The new sibling-name rule holds on migrated rows too.
    let twin = SessionRecord::new_child(&kid_parent(&store).await, "kid", "a", "m");
    assert_eq!(
        store.create_session(&twin).await.unwrap_err().kind(),
        StoreErrorKind::AlreadyExists
    );
}

async fn kid_parent(store: &SqliteStore) -> SessionRecord {
    store
        .session("01a238b5-0000-7000-8000-000000000001".parse().unwrap())
        .await
        .unwrap()
        .unwrap()
}

/// The log's size in pages (frames of a page and a 24-byte header, after a 32-byte header).
fn wal_pages(path: &Path) -> u64 {
    let wal = path.with_extension("db-wal");
    let len = std::fs::metadata(wal).map_or(0, |m| m.len());
    len.saturating_sub(32) / (4096 + 24)
}

/// Writes `n` root sessions with a transcript entry each.
async fn fill(store: &SqliteStore, n: usize) {
    for i in 0..n {
        let root = SessionRecord::new_root(format!("root-{i}"), "planner", "model-a");
        store.create_session(&root).await.unwrap();
        let entry = EntryKind::Message {
            message: Message::user("x".repeat(300)),
        };
        store
            .append(root.id, RunId::new(), &[entry], None)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn the_log_is_copied_back_at_the_configured_size_not_sqlites_default() {
    let dir = tempfile::tempdir().unwrap();
    let default = dir.path().join("default.db");
    let store = SqliteStore::open(&default).unwrap();
    fill(&store, 600).await;
    // SQLite's own default would have checkpointed (and reused the log) at 1,000 pages.
    let pages = wal_pages(&default);
    assert!(
        pages > 1_000,
        "the log was copied back early: {pages} pages"
    );
    assert!(
        pages < u64::from(arbor_store_sqlite::CHECKPOINT_PAGES),
        "{pages}"
    );
    drop(store);

    let small = dir.path().join("small.db");
    let store = SqliteOptions::new()
        .checkpoint_pages(100)
        .open(&small)
        .unwrap();
    fill(&store, 600).await;
    let pages = wal_pages(&small);
    assert!(
        pages < 150,
        "the log grew past its threshold: {pages} pages"
    );
    // Every row is in the file, whichever part of it holds them.
    let all = store
        .list_sessions(arbor_store::SessionQuery::Roots)
        .await
        .unwrap();
    assert_eq!(all.len(), 600);
}
