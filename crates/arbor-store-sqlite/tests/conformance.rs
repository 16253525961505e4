//! The conformance suite on the SQLite backend, file-backed and in memory.

use arbor_store_sqlite::SqliteStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_store_passes_the_conformance_suite() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("arbor.db")).unwrap();
    arbor_store::conformance::run_all(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory_store_passes_the_conformance_suite() {
    let store = SqliteStore::open_in_memory().unwrap();
    arbor_store::conformance::run_all(&store).await;
}
