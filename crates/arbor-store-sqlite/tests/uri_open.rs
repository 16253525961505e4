//! A `file:` URI names a database, not a file to create: a shared in-memory store opened
//! twice through one URI is one store, and no file of the URI's name appears in the working
//! directory (the fuzz target's store once left an empty one behind).

use arbor_store::{SessionRecord, Store};
use arbor_store_sqlite::SqliteStore;

#[tokio::test]
async fn a_shared_memory_uri_is_one_store_and_leaves_no_file() {
    let uri = "file:arbor_uri_open_test?mode=memory&cache=shared";
    let first = SqliteStore::open(uri).unwrap();
    let second = SqliteStore::open(uri).unwrap();
    let record = SessionRecord::new_root("a", "a", "scripted");
    first.create_session(&record).await.unwrap();
    let seen = second.session(record.id).await.unwrap();
    assert_eq!(seen.map(|r| r.id), Some(record.id));
    let cwd = std::env::current_dir().unwrap();
    assert!(
        !cwd.join(uri).exists(),
        "no file named after the URI in {}",
        cwd.display()
    );
}
