//! Connecting: the schema is migrated once, refused untouched when it is not ours or newer,
//! and no error shows the password.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use arbor_store::{SessionRecord, Store, StoreErrorKind};
use arbor_store_postgres::{PostgresOptions, SCHEMA_VERSION};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connects_at_once_migrate_once_and_data_persists_across_reconnects() {
    let Some(url) = common::server("connects_at_once_migrate_once") else {
        return;
    };
    let schema = common::fresh_schema();
    // 32 stores connect to the same new schema at the same moment.
    let opens: Vec<_> = (0..32)
        .map(|_| {
            let (url, schema) = (url.clone(), schema.clone());
            tokio::spawn(async move {
                PostgresOptions::new()
                    .schema(schema)
                    .max_connections(2)
                    .connect(&url)
                    .await
            })
        })
        .collect();
    let mut stores = Vec::new();
    for open in opens {
        stores.push(open.await.unwrap().unwrap());
    }
    let applied: Vec<(i64,)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT version FROM \"{schema}\".arbor_migrations ORDER BY version"
    )))
    .fetch_all(stores[0].pool())
    .await
    .unwrap();
    assert_eq!(
        applied,
        (1..=SCHEMA_VERSION).map(|v| (v,)).collect::<Vec<_>>()
    );

    let root = SessionRecord::new_root("root", "planner", "model-a");
    stores[3].create_session(&root).await.unwrap();
    for store in &stores {
        store.close().await;
    }
    let again = PostgresOptions::new()
        .schema(&schema)
        .connect(&url)
        .await
        .unwrap();
    assert_eq!(again.session(root.id).await.unwrap(), Some(root));
    common::drop_schema(&again, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_or_foreign_schema_is_refused_untouched() {
    let Some(url) = common::server("a_newer_or_foreign_schema_is_refused_untouched") else {
        return;
    };
    let (store, schema) = common::fresh_store(&url).await;
    let newer = SCHEMA_VERSION + 1;
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO \"{schema}\".arbor_migrations VALUES ({newer}, 'future', 0)"
    )))
    .execute(store.pool())
    .await
    .unwrap();
    let err = PostgresOptions::new()
        .schema(&schema)
        .connect(&url)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable);
    assert!(
        err.to_string().contains(&format!(
            "its schema is version {newer}, written by a newer arbor"
        )),
        "{err}"
    );
    common::drop_schema(&store, &schema).await;

    // Another application's `sessions` table.
    let foreign = common::fresh_schema();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE SCHEMA \"{foreign}\"; CREATE TABLE \"{foreign}\".sessions (x INT)"
    )))
    .execute(store.pool())
    .await
    .unwrap();
    let err = PostgresOptions::new()
        .schema(&foreign)
        .connect(&url)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable);
    assert!(err.to_string().contains("not an arbor store's"), "{err}");
    let tables: Vec<(String,)> = sqlx::query_as(
        "SELECT table_name::TEXT FROM information_schema.tables WHERE table_schema = $1",
    )
    .bind(&foreign)
    .fetch_all(store.pool())
    .await
    .unwrap();
    assert_eq!(
        tables,
        vec![("sessions".to_owned(),)],
        "the schema was changed"
    );
    common::drop_schema(&store, &foreign).await;
}

#[tokio::test]
async fn errors_name_the_server_without_its_password() {
    // A port nothing listens on (the test server's, after it is taken away, would do too).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let url =
        format!("postgres://arbor:hunter2-secret@127.0.0.1:{port}/arbor?password=also-secret");
    let err = PostgresOptions::new()
        .acquire_timeout(std::time::Duration::from_secs(2))
        .connect(&url)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Unavailable);
    let text = format!("{err} {err:?}");
    assert!(
        text.contains(&format!("postgres://arbor@127.0.0.1:{port}/arbor")),
        "{text}"
    );
    assert!(
        !text.contains("hunter2") && !text.contains("also-secret"),
        "{text}"
    );

    for (bad, field) in [
        ("mysql://x@y/z", "scheme \"mysql\""),
        ("not a url", "not a postgres:// URL"),
    ] {
        let err = PostgresOptions::new().connect(bad).await.unwrap_err();
        assert_eq!(err.kind(), StoreErrorKind::Invalid, "{bad}");
        assert!(err.to_string().contains(field), "{err}");
    }
    let err = PostgresOptions::new()
        .schema("Bad-Name")
        .connect("postgres://x@127.0.0.1/y")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Invalid);
}
