//! Read-only opens for inspection: nothing created, switched or migrated; writes refused.
// The helpers below are test code too.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

use arbor_protocol::{EntryKind, Message, RunId};
use arbor_store::{SessionQuery, SessionRecord, Store, StoreError, StoreErrorKind};
use arbor_store_sqlite::{SCHEMA_VERSION, SqliteOptions, SqliteStore};

/// A closed store (its WAL checkpointed into the file and removed) with a root and an entry.
async fn closed_store(path: &Path) -> SessionRecord {
    let store = SqliteStore::open(path).unwrap();
    let root = SessionRecord::new_root("root", "planner", "model-a");
    store.create_session(&root).await.unwrap();
    let entry = EntryKind::Message {
        message: Message::user("hi"),
    };
    store
        .append(root.id, RunId::new(), &[entry], None)
        .await
        .unwrap();
    root
}

/// Reads `root` back through a read-only store at `path` and checks writes are refused.
async fn inspect(path: &Path, root: &SessionRecord) {
    let store = SqliteStore::open_read_only(path).unwrap();
    assert_eq!(store.session(root.id).await.unwrap().as_ref(), Some(root));
    assert_eq!(
        store
            .list_sessions(SessionQuery::Roots)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(store.transcript(root.id, 0, None).await.unwrap().len(), 1);
    assert_eq!(store.check().await, Ok(()));
    let err = store
        .create_session(&SessionRecord::new_root("other", "planner", "model-a"))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::Invalid(format!(
            "store {} is open read-only: it cannot be written",
            path.display()
        ))
    );
    assert_eq!(
        store.mark_interrupted().await.unwrap_err().kind(),
        StoreErrorKind::Invalid
    );
}

#[tokio::test]
async fn a_read_only_open_reads_and_refuses_writes_without_touching_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arbor.db");
    let root = closed_store(&path).await;
    let bytes = std::fs::read(&path).unwrap();
    inspect(&path, &root).await;
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the file was modified"
    );
}

#[test]
fn a_read_only_open_creates_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arbor.db");
    let err = SqliteStore::open_read_only(&path).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "store {} cannot be used: no store file there (a read-only open creates none)",
            path.display()
        )
    );
    assert!(!path.exists());
}

#[test]
fn a_read_only_open_refuses_an_older_schema_and_leaves_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v1.db");
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(include_str!("../migrations/0001_sessions.sql"))
            .unwrap();
        conn.execute_batch("PRAGMA user_version = 1; PRAGMA application_id = 1634886258;")
            .unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    let err = SqliteOptions::new()
        .read_only(true)
        .open(&path)
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable, "{err}");
    assert_eq!(
        err.to_string(),
        format!(
            "store {} cannot be used: its schema (version 1) is older than this arbor's \
             ({SCHEMA_VERSION}) and a read-only open does not upgrade it; open it read-write \
             once (any arbor command that writes) to upgrade it",
            path.display()
        )
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the file was modified"
    );
}

const RO_DIR_ENV: &str = "ARBOR_TEST_READ_ONLY_DIR";

/// A store in a directory mounted read-only (even root cannot write there): the test binary
/// runs [`read_only_directory_child`] in a private mount namespace.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_store_in_a_read_only_directory_can_be_inspected() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arbor.db");
    let root = closed_store(&path).await;
    std::fs::write(dir.path().join("root-id"), root.id.to_string()).unwrap();
    // A private mount namespace needs the privilege to make one: without it, say so and skip.
    let can = Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            "mount --bind / / 2>/dev/null || mount -t tmpfs none /mnt",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !can {
        eprintln!("skipped: no private mount namespace here (unshare -m with mount)");
        return;
    }
    let script = "mount --bind \"$D\" \"$D\" && mount -o remount,ro,bind \"$D\" && \
                  exec \"$0\" --exact read_only_directory_child --nocapture --test-threads=1";
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", script])
        .arg(std::env::current_exe().unwrap())
        .env("D", dir.path())
        .env(RO_DIR_ENV, dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("read-only directory: inspected"),
        "{stdout}\n{stderr}"
    );
}

/// Runs only inside [`a_store_in_a_read_only_directory_can_be_inspected`].
#[tokio::test]
async fn read_only_directory_child() {
    let Some(dir) = std::env::var_os(RO_DIR_ENV) else {
        return;
    };
    let dir = Path::new(&dir);
    let path = dir.join("arbor.db");
    assert!(
        std::fs::write(dir.join("probe"), "x").is_err(),
        "the directory is writable"
    );
    let id = std::fs::read_to_string(dir.join("root-id")).unwrap();
    let root = SqliteStore::open_read_only(&path)
        .unwrap()
        .session(id.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    inspect(&path, &root).await;
    // A read-write open cannot work here, and says so.
    assert!(SqliteStore::open(&path).is_err());
    println!("read-only directory: inspected");
}
