//! Store calls waiting on a busy file do not hold up the async runtime they are awaited on.

use std::time::{Duration, Instant};

use arbor_protocol::{EntryKind, Message, RunId};
use arbor_store::{SessionRecord, Store, StoreErrorKind};
use arbor_store_sqlite::SqliteOptions;

fn entry() -> EntryKind {
    EntryKind::Message {
        message: Message::user("hi"),
    }
}

/// On a single-threaded runtime: a write waiting for another connection's lock, a 50 ms timer
/// beside it, and a timeout around a second write all keep their time.
#[tokio::test(flavor = "current_thread")]
async fn a_write_waiting_for_the_lock_leaves_timers_and_timeouts_on_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arbor.db");
    let store = SqliteOptions::new()
        .busy_timeout(Duration::from_secs(3))
        .open(&path)
        .unwrap();
    let root = SessionRecord::new_root("root", "planner", "model-a");
    store.create_session(&root).await.unwrap();

    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let started = Instant::now();

    // A write bounded by a timeout is given up on time, not after the lock's wait.
    let timed_out = tokio::time::timeout(
        Duration::from_millis(100),
        store.append(root.id, RunId::new(), &[entry()], None),
    )
    .await;
    assert!(timed_out.is_err(), "{timed_out:?}");
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "the timeout fired after {:?}",
        started.elapsed()
    );

    // The holder lets go after 1 s; meanwhile the runtime keeps serving timers.
    let holder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(1));
        other.execute_batch("COMMIT").unwrap();
    });
    let started = Instant::now();
    let sleeper = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        started.elapsed()
    };
    let entries = [entry()];
    let write = store.append(root.id, RunId::new(), &entries, None);
    let (slept, written) = tokio::join!(sleeper, write);
    holder.join().unwrap();
    assert!(
        slept < Duration::from_millis(500),
        "a 50 ms timer fired after {slept:?}"
    );
    // The abandoned write may have landed once the lock was free; this one follows it.
    let seq = written.unwrap();
    assert!(seq == 1 || seq == 2, "{seq}");
    assert!(started.elapsed() >= Duration::from_millis(900));
    let stored = store.transcript(root.id, 0, None).await.unwrap();
    assert_eq!(stored.len() as u64, seq);

    // With the lock held past the busy timeout the write still fails with Locked.
    let quick = SqliteOptions::new()
        .busy_timeout(Duration::from_millis(100))
        .open(&path)
        .unwrap();
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let err = quick
        .append(root.id, RunId::new(), &entries, None)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::Locked, "{err}");
}
