//! A connection lost mid-operation (the server restarted, failed over, or ended the session)
//! before the commit: the operation runs again on a new connection and lands once. Forced
//! deterministically: the store's write waits on a row lock the test holds, the test ends
//! that backend (`pg_terminate_backend`, what a restart does to every session), then lets
//! the lock go. Needs `ARBOR_TEST_POSTGRES_URL`; skips loudly without it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::time::{Duration, Instant};

use arbor_protocol::{EntryKind, Message, RunId, SessionStatus};
use arbor_store::{SessionRecord, SessionUpdate, Store};
use sqlx::Connection;

/// Holds `session`'s row lock on a connection of its own until it is committed.
async fn lock_row(url: &str, schema: &str, session: &str) -> sqlx::PgConnection {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT 1 FROM \"{schema}\".sessions WHERE id = $1 FOR UPDATE"
    )))
    .bind(session)
    .fetch_one(&mut conn)
    .await
    .unwrap();
    conn
}

/// Ends every backend waiting on a lock in `schema`'s tables (the store's write), once one
/// waits; returns how many it ended.
async fn end_the_waiting_backend(url: &str) -> i64 {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let start = Instant::now();
    loop {
        let ended: i64 = sqlx::query_scalar(
            "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()",
        )
        .fetch_one(&mut conn)
        .await
        .unwrap();
        if ended > 0 {
            return ended;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the write never waited"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_connection_is_lost_before_it_commits_runs_again_once() {
    let Some(url) = common::server("a_write_whose_connection_is_lost") else {
        return;
    };
    let (store, schema) = common::fresh_store(&url).await;
    let root = SessionRecord::new_root("root", "agent", "model");
    store.create_session(&root).await.unwrap();
    let run = RunId::new();

    // An append (a transaction), cut off while it waits for the row.
    let mut holder = lock_row(&url, &schema, &root.id.to_string()).await;
    let append = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .append(
                    root.id,
                    run,
                    &[EntryKind::Message {
                        message: Message::user("once"),
                    }],
                    Some(&SessionUpdate::status(SessionStatus::Running)),
                )
                .await
        }
    });
    assert_eq!(end_the_waiting_backend(&url).await, 1);
    sqlx::query("COMMIT").execute(&mut holder).await.unwrap();
    let seq = append
        .await
        .unwrap()
        .expect("run again on a new connection");
    let entries = store.transcript(root.id, 0, None).await.unwrap();
    assert_eq!(entries.len(), 1, "landed once: {entries:?}");
    assert_eq!(entries[0].seq, seq);
    let record = store.session(root.id).await.unwrap().unwrap();
    assert_eq!(record.status, SessionStatus::Running);
    assert_eq!(record.version, root.version + 1, "one update");

    // A compare-and-swap update, the same way: its expected version still holds.
    let mut holder = lock_row(&url, &schema, &root.id.to_string()).await;
    let update = tokio::spawn({
        let store = store.clone();
        let expected = record.version;
        async move {
            store
                .update_session(
                    root.id,
                    &SessionUpdate {
                        expected_version: Some(expected),
                        ..SessionUpdate::status(SessionStatus::Succeeded)
                    },
                )
                .await
        }
    });
    assert_eq!(end_the_waiting_backend(&url).await, 1);
    sqlx::query("COMMIT").execute(&mut holder).await.unwrap();
    let updated = update.await.unwrap().expect("run again, no conflict");
    assert_eq!(updated.status, SessionStatus::Succeeded);
    assert_eq!(updated.version, record.version + 1);
    common::drop_schema(&store, &schema).await;
}
