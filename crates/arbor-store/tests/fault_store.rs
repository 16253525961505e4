//! The fault-injecting store: one chosen write fails (changing nothing) or is held until the
//! test lets it go.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use arbor_protocol::SessionStatus;
use arbor_store::testing::{Call, FaultStore};
use arbor_store::{MemoryStore, SessionRecord, SessionUpdate, Store, StoreErrorKind};

#[tokio::test]
async fn a_failed_write_changes_nothing_and_only_the_first_match_fails() {
    let store = FaultStore::new(Arc::new(MemoryStore::new()));
    let record = SessionRecord::new_root("s", "agent", "model");
    store.create_session(&record).await.unwrap();
    store.fail_once(|call| matches!(call, Call::Update(..)));
    let e = store
        .update_session(record.id, &SessionUpdate::status(SessionStatus::Running))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), StoreErrorKind::Unavailable);
    assert_eq!(
        store.session(record.id).await.unwrap().unwrap().status,
        record.status
    );
    let updated = store
        .update_session(record.id, &SessionUpdate::status(SessionStatus::Running))
        .await
        .unwrap();
    assert_eq!(updated.status, SessionStatus::Running);
}

#[tokio::test]
async fn a_held_write_waits_until_it_is_released() {
    let store = FaultStore::new(Arc::new(MemoryStore::new()));
    let held = store.arm(false, |call| matches!(call, Call::Create(_)));
    let record = SessionRecord::new_root("s", "agent", "model");
    let id = record.id;
    let writer = {
        let store = store.clone();
        tokio::spawn(async move { store.create_session(&record).await })
    };
    held.reached.await.unwrap();
    assert!(
        store.session(id).await.unwrap().is_none(),
        "held before the write"
    );
    held.release.send(()).unwrap();
    writer.await.unwrap().unwrap();
    assert!(store.session(id).await.unwrap().is_some());
}
