//! Checks of versioned checkpoints: create, compare-and-swap writes, listing, deletion.

use serde_json::json;

use super::{expect_err, parallel};
use crate::{Store, StoreError, StoreErrorKind};

fn ns(check: &str) -> String {
    format!("conformance-{check}-{}", arbor_protocol::RunId::new())
}

/// A checkpoint is created at version 1 (expected 0), each write bumps it, a stale or
/// premature version is a `Conflict` that changes nothing, and the value round-trips.
pub async fn checkpoint_writes_are_compare_and_swap(store: &dyn Store) {
    const CHECK: &str = "checkpoint_writes_are_compare_and_swap";
    let b = store.backend();
    let ns = ns(CHECK);
    let v1 = json!({"pending": [{"id": "a", "args": {"x": "é \"q\""}}], "n": u64::MAX});
    assert_eq!(
        store.put_checkpoint(&ns, "run-1", &v1, 0).await,
        Ok(1),
        "[{b}] {CHECK}: create"
    );
    let e = expect_err(
        b,
        CHECK,
        store.put_checkpoint(&ns, "run-1", &json!("again"), 0).await,
        StoreErrorKind::Conflict,
    );
    assert_eq!(
        e,
        StoreError::Conflict {
            expected: 0,
            actual: 1
        }
    );
    expect_err(
        b,
        CHECK,
        store.put_checkpoint(&ns, "run-2", &json!(1), 3).await,
        StoreErrorKind::Conflict,
    );
    let got = store.checkpoint(&ns, "run-1").await.unwrap().unwrap();
    assert_eq!(
        (got.version, &got.value),
        (1, &v1),
        "[{b}] {CHECK}: unchanged"
    );
    assert_eq!(
        store
            .put_checkpoint(&ns, "run-1", &json!({"pending": []}), 1)
            .await,
        Ok(2)
    );
    assert_eq!(store.checkpoint(&ns, "run-2").await.unwrap(), None);
    let listed = store.list_checkpoints(&ns).await.unwrap();
    assert_eq!(listed.len(), 1, "[{b}] {CHECK}: list");
    assert_eq!(listed[0].version, 2);
    expect_err(
        b,
        CHECK,
        store.delete_checkpoint(&ns, "run-1", 1).await,
        StoreErrorKind::Conflict,
    );
    store.delete_checkpoint(&ns, "run-1", 2).await.unwrap();
    expect_err(
        b,
        CHECK,
        store.delete_checkpoint(&ns, "run-1", 2).await,
        StoreErrorKind::NotFound,
    );
    assert!(store.list_checkpoints(&ns).await.unwrap().is_empty());
}

/// 8 writers racing on one version: exactly one wins.
pub async fn concurrent_checkpoint_writes_one_winner(store: &dyn Store) {
    const CHECK: &str = "concurrent_checkpoint_writes_one_winner";
    let b = store.backend();
    let ns = ns(CHECK);
    store.put_checkpoint(&ns, "k", &json!(0), 0).await.unwrap();
    let ns = &ns;
    let results = parallel(8, |task| async move {
        store.put_checkpoint(ns, "k", &json!(task), 1).await
    });
    let wins: Vec<_> = results.iter().filter(|r| r.is_ok()).collect();
    assert_eq!(wins.len(), 1, "[{b}] {CHECK}: {results:?}");
    assert_eq!(store.checkpoint(ns, "k").await.unwrap().unwrap().version, 2);
}
