//! Damaged store files: a clear `Corrupt` error naming the file and how to recover.
// The helpers below are test code too.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use arbor_protocol::{EntryKind, Message, RunId};
use arbor_store::{SessionRecord, Store, StoreErrorKind};
use arbor_store_sqlite::SqliteStore;

/// A store with a root and a few transcript entries, closed (checkpointed into the file).
async fn filled_store(path: &Path) -> SessionRecord {
    let store = SqliteStore::open(path).unwrap();
    let root = SessionRecord::new_root("root", "planner", "model-a");
    store.create_session(&root).await.unwrap();
    let entries: Vec<EntryKind> = (0..200)
        .map(|i| EntryKind::Message {
            message: Message::user(format!("entry {i} {}", "x".repeat(200))),
        })
        .collect();
    store
        .append(root.id, RunId::new(), &entries, None)
        .await
        .unwrap();
    root
}

/// Overwrites every page but the first (the header and schema) with garbage.
fn damage_pages(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let page = 4096;
    assert!(bytes.len() > 4 * page, "{}", bytes.len());
    for (i, b) in bytes[page..].iter_mut().enumerate() {
        *b = (i * 31 % 251) as u8;
    }
    std::fs::write(path, bytes).unwrap();
}

fn recovery_hint(path: &Path) -> String {
    let p = path.display();
    format!(
        "arbor left it as it is. To recover, stop every arbor using it and keep a copy, then \
         salvage what SQLite can still read with `sqlite3 {p} .recover | sqlite3 \
         {p}.recovered` and use that file, or move the damaged file aside to start an empty \
         store"
    )
}

#[tokio::test]
async fn damaged_pages_are_corrupt_with_a_recovery_hint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arbor.db");
    let root = filled_store(&path).await;
    damage_pages(&path);
    // The schema is on the first page, so the store opens; reading the damage fails.
    let store = SqliteStore::open(&path).unwrap();
    let err = store.transcript(root.id, 0, None).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "stored data is corrupt: the store file {} is damaged (database disk image is \
             malformed); {}",
            path.display(),
            recovery_hint(&path)
        )
    );

    let err = store.check().await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{err}");
    let message = err.to_string();
    let prefix = format!(
        "stored data is corrupt: the store file {} is damaged (",
        path.display()
    );
    assert!(message.starts_with(&prefix), "{message}");
    assert!(message.ends_with(&recovery_hint(&path)), "{message}");
}

#[tokio::test]
async fn a_damaged_header_is_corrupt_with_a_recovery_hint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arbor.db");
    filled_store(&path).await;
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[..16].copy_from_slice(b"not a header at ");
    std::fs::write(&path, &bytes).unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "stored data is corrupt: the store file {} is damaged (it is not a SQLite \
             database, or its header is damaged; if it is not a store, name another file); {}",
            path.display(),
            recovery_hint(&path)
        )
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the file was modified"
    );
}

#[tokio::test]
async fn a_healthy_store_passes_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arbor.db");
    filled_store(&path).await;
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.check().await, Ok(()));
    assert_eq!(SqliteStore::open_in_memory().unwrap().check().await, Ok(()));
}

#[tokio::test]
async fn a_dangling_parent_fails_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arbor.db");
    let root = filled_store(&path).await;
    {
        // Written by a tool that does not enforce foreign keys.
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "foreign_keys", false).unwrap();
        conn.execute(
            "UPDATE sessions SET parent_id = '01a238b5-0000-7000-8000-00000000dead' WHERE id = ?1",
            [root.id.to_string()],
        )
        .unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    let err = store.check().await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Corrupt, "{err}");
    assert!(
        err.to_string().contains(
            "is damaged (row 1 of sessions refers to a missing row of sessions); arbor left it"
        ),
        "{err}"
    );
}
