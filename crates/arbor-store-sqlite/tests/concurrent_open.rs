//! Many connections opening one missing store file at once: each waits its turn and succeeds.

use std::sync::{Arc, Barrier};
use std::thread;

use arbor_store_sqlite::{SCHEMA_VERSION, SqliteStore};

const ROUNDS: usize = 50;
const OPENERS: usize = 16;

#[test]
fn concurrent_first_opens_of_a_missing_file_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for round in 0..ROUNDS {
        let path = dir.path().join(format!("round-{round}.db"));
        let barrier = Arc::new(Barrier::new(OPENERS));
        let openers: Vec<_> = (0..OPENERS)
            .map(|_| {
                let (path, barrier) = (path.clone(), Arc::clone(&barrier));
                thread::spawn(move || {
                    barrier.wait();
                    SqliteStore::open(&path).map(drop)
                })
            })
            .collect();
        for opener in openers {
            if let Err(err) = opener.join().unwrap() {
                failures.push(format!("round {round}: {err}"));
            }
        }
        let conn = rusqlite::Connection::open(&path).unwrap();
        let version: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, i64::from(SCHEMA_VERSION), "round {round}");
    }
    assert!(
        failures.is_empty(),
        "{} of {} opens failed:\n{}",
        failures.len(),
        ROUNDS * OPENERS,
        failures.join("\n")
    );
}
