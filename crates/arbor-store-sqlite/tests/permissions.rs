//! The store holds every prompt and tool output: its files are private to their owner.
#![cfg(unix)]
// The helpers below are test code too.
#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use arbor_store::{SessionRecord, Store};
use arbor_store_sqlite::SqliteStore;

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap().to_owned();
    name.push(suffix);
    path.with_file_name(name)
}

#[tokio::test]
async fn a_new_store_file_and_its_wal_and_shm_are_owner_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arbor.db");
    let store = SqliteStore::open(&path).unwrap();
    store
        .create_session(&SessionRecord::new_root("root", "planner", "model-a"))
        .await
        .unwrap();
    let (wal, shm) = (sibling(&path, "-wal"), sibling(&path, "-shm"));
    assert_eq!(mode(&path), 0o600, "db");
    // SQLite creates these itself, with the main file's permissions.
    assert_eq!(mode(&wal), 0o600, "wal");
    assert_eq!(mode(&shm), 0o600, "shm");
}

#[test]
fn an_existing_looser_file_is_left_alone_and_warned_about() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arbor.db");
    drop(SqliteStore::open(&path).unwrap());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();

    let (store, logs) = common::capture_logs(|| SqliteStore::open(&path));
    store.unwrap();
    assert_eq!(mode(&path), 0o644, "the mode was changed");
    let warnings: Vec<&str> = logs.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{logs}");
    assert!(
        warnings[0].contains("the store file is readable or writable by other users")
            && warnings[0].contains("mode=\"644\"")
            && warnings[0].contains(&format!("chmod 600 {}", path.display())),
        "{logs}"
    );

    // Once per file and process.
    let (store, logs) = common::capture_logs(|| SqliteStore::open(&path));
    store.unwrap();
    assert!(!logs.contains("WARN"), "{logs}");
}
