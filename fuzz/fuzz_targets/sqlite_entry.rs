//! The SQLite store's row codec: a session and one transcript entry are written through the
//! store, then their stored columns are overwritten with fuzzed text (as a damaged or
//! foreign file would hold) and read back through the `Store` API. Reading returns a record
//! or a `Corrupt` error, never panics.
//!
//! The input is lines: the entry's `kind` column, its `body` (JSON), its `run_id`, the
//! session's `meta` (JSON), `tombstone` (JSON; empty for NULL) and `status`.
#![no_main]

use arbor_protocol::{EntryKind, RunId};
use arbor_store::{SessionRecord, Store};
use arbor_store_sqlite::SqliteStore;
use libfuzzer_sys::fuzz_target;
use rusqlite::Connection;

/// One in-memory database per process, shared by the store and the connection that damages
/// its rows.
const URI: &str = "file:arbor_fuzz_rows?mode=memory&cache=shared";

struct Db {
    store: SqliteStore,
    raw: Connection,
    rt: tokio::runtime::Runtime,
}

fn open() -> Db {
    let store = SqliteStore::open(URI).expect("an in-memory store opens");
    let raw = Connection::open(URI).expect("a second connection opens");
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime starts");
    Db { store, raw, rt }
}

thread_local! {
    static DB: Db = open();
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let mut next = || lines.next().unwrap_or_default().to_owned();
    let (kind, body, run_id, meta, tombstone, status) =
        (next(), next(), next(), next(), next(), next());
    DB.with(|db| {
        db.rt.block_on(async {
            let record = SessionRecord::new_root("fuzz", "fuzz", "scripted");
            db.store.create_session(&record).await.expect("create");
            db.store
                .append(
                    record.id,
                    RunId::new(),
                    &[EntryKind::RunStarted {
                        agent: "fuzz".into(),
                        model: "m".into(),
                        trace: None,
                    }],
                    None,
                )
                .await
                .expect("append");
            let id = record.id.to_string();
            db.raw
                .execute(
                    "UPDATE transcript_entries SET kind = ?2, body = ?3, run_id = ?4 \
                 WHERE session_id = ?1",
                    (&id, &kind, &body, &run_id),
                )
                .expect("update entry");
            let tombstone = (!tombstone.is_empty()).then_some(tombstone);
            db.raw
                .execute(
                    "UPDATE sessions SET meta = ?2, tombstone = ?3, status = ?4 WHERE id = ?1",
                    (&id, &meta, &tombstone, &status),
                )
                .expect("update session");
            let _ = db.store.transcript(record.id, 0, None).await;
            let _ = db.store.session(record.id).await;
            db.raw
                .execute_batch("DELETE FROM transcript_entries; DELETE FROM sessions;")
                .expect("clear");
        })
    });
});
