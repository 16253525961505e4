//! A throwaway schema on the test server (`ARBOR_TEST_POSTGRES_URL`, set by
//! `.ci/postgres.sh`), or a loud skip when there is none.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicU32, Ordering};

use arbor_store_postgres::{PostgresOptions, PostgresStore};

/// The test server's URL, or `None` after saying loudly that the test is skipped.
pub(crate) fn server(test: &str) -> Option<String> {
    match std::env::var("ARBOR_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => Some(url),
        _ => {
            // Straight to the process's stderr: the test harness would hide an `eprintln!`
            // of a passing test.
            assert!(
                std::env::var("CI").as_deref() != Ok("true"),
                "{test}: no PostgreSQL server under CI=true (a CI run without one is not green)"
            );
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {test}: no PostgreSQL server (set ARBOR_TEST_POSTGRES_URL, or run \
                 `. .ci/postgres.sh` first)"
            );
            None
        }
    }
}

/// A schema name no other test (or test run) uses.
pub(crate) fn fresh_schema() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "arbor_test_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A store in a fresh schema of the test server, and that schema's name.
pub(crate) async fn fresh_store(url: &str) -> (PostgresStore, String) {
    let schema = fresh_schema();
    let store = PostgresOptions::new()
        .schema(&schema)
        .max_connections(8)
        .connect(url)
        .await
        .unwrap();
    (store, schema)
}

/// Drops `schema` and everything in it.
pub(crate) async fn drop_schema(store: &PostgresStore, schema: &str) {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP SCHEMA \"{schema}\" CASCADE"
    )))
    .execute(store.pool())
    .await
    .unwrap();
}
