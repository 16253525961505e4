//! Another connection holding the file: writes fail with `Locked` after the busy timeout.

use std::time::{Duration, Instant};

use arbor_protocol::{EntryKind, Message, RunId};
use arbor_store::{SessionRecord, Store, StoreError, StoreErrorKind};
use arbor_store_sqlite::SqliteOptions;

fn short_timeout() -> SqliteOptions {
    SqliteOptions::new().busy_timeout(Duration::from_millis(100))
}

#[tokio::test]
async fn a_write_while_another_connection_holds_the_file_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arbor.db");
    let store = short_timeout().open(&path).unwrap();
    let root = SessionRecord::new_root("root", "planner", "model-a");
    store.create_session(&root).await.unwrap();

    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();

    let started = Instant::now();
    let entry = EntryKind::Message {
        message: Message::user("hi"),
    };
    let err = store
        .append(root.id, RunId::new(), std::slice::from_ref(&entry), None)
        .await
        .unwrap_err();
    assert!(
        started.elapsed() >= Duration::from_millis(90),
        "did not wait"
    );
    assert_eq!(err.kind(), StoreErrorKind::Locked, "{err}");
    assert_eq!(
        err,
        StoreError::Locked {
            path: path.display().to_string()
        }
    );
    assert_eq!(
        err.to_string(),
        format!("store {} is locked by another process", path.display())
    );
    let child = SessionRecord::new_child(&root, "child", "worker", "model-b");
    let err = store.create_session(&child).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Locked, "{err}");

    // WAL: readers are not blocked by the writer.
    assert_eq!(store.session(root.id).await.unwrap(), Some(root.clone()));
    assert_eq!(store.transcript(root.id, 0, None).await, Ok(vec![]));

    other.execute_batch("COMMIT").unwrap();
    assert_eq!(
        store.append(root.id, RunId::new(), &[entry], None).await,
        Ok(1)
    );
    store.create_session(&child).await.unwrap();
}

#[test]
fn opening_a_file_another_connection_holds_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arbor.db");
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let err = short_timeout().open(&path).unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Locked, "{err}");
    assert_eq!(
        err.to_string(),
        format!("store {} is locked by another process", path.display())
    );
    other.execute_batch("COMMIT").unwrap();
    short_timeout().open(&path).unwrap();
}
