//! The conformance suite on the PostgreSQL backend, in a schema of its own.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_passes_the_conformance_suite() {
    let Some(url) = common::server("postgres_store_passes_the_conformance_suite") else {
        return;
    };
    let (store, schema) = common::fresh_store(&url).await;
    arbor_store::conformance::run_all(&store).await;
    common::drop_schema(&store, &schema).await;
}
