//! The conformance suite on the in-memory backend.

use arbor_store::MemoryStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_passes_the_conformance_suite() {
    let store = MemoryStore::new();
    arbor_store::conformance::run_all(&store).await;
}
