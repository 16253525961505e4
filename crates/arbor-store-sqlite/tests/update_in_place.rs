//! An update appended with entries is written in one `UPDATE`, without reading the row
//! first: it must leave exactly the record that the read-then-write path leaves, and refuse
//! what that path refuses, with the same errors.

use arbor_protocol::{EntryKind, Message, RunId, SessionStatus, Timestamp, Usage};
use arbor_store::{SessionRecord, SessionUpdate, Store, StoreError, StoreErrorKind, Tombstone};
use arbor_store_sqlite::SqliteStore;
use serde_json::json;

fn note() -> [EntryKind; 1] {
    [EntryKind::Message {
        message: Message::user("hi"),
    }]
}

/// The parts of a record an update may change, for comparing two records.
fn changed_parts(r: &SessionRecord) -> serde_json::Value {
    json!({
        "status": r.status.as_str(),
        "own": [r.own_usage.input_tokens, r.own_usage.output_tokens, r.own_usage.total_tokens,
                r.own_usage.cache_read_tokens, r.own_usage.cache_write_tokens, r.own_cost],
        "attributed": [r.attributed_usage.total_tokens, r.attributed_cost],
        "context": r.context_tokens,
        "meta": r.meta.to_value(),
        "replies": r.replies,
        "artifacts": r.artifacts,
        "tombstone": r.tombstone.as_ref().map(|t| t.reason.clone()),
        "version": r.version,
    })
}

#[tokio::test]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
async fn an_update_written_in_place_leaves_what_a_read_and_write_leaves() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("arbor.db")).unwrap();
    let root = SessionRecord::new_root("root", "planner", "model-a");
    store.create_session(&root).await.unwrap();
    let (mut a, mut b) = (
        SessionRecord::new_child(&root, "a", "worker", "model-a"),
        SessionRecord::new_child(&root, "b", "worker", "model-a"),
    );
    a.meta = json!({"mode": "sync", "keep": 1}).into();
    b.meta = a.meta.clone();
    store.create_session(&a).await.unwrap();
    store.create_session(&b).await.unwrap();

    let updates = [
        SessionUpdate {
            live_only: true,
            expected_version: Some(1),
            ..SessionUpdate::status(SessionStatus::Running)
        },
        // Usage without cost, then cost without usage: each keeps the other.
        SessionUpdate {
            own_usage: Some(Usage::new(10, 5)),
            context_tokens: Some(10),
            ..SessionUpdate::default()
        },
        SessionUpdate {
            own_cost: Some(7),
            attributed_usage: Some(Usage::new(3, 4)),
            attributed_cost: Some(2),
            replies: Some(2),
            artifacts: Some(1),
            meta: Some(json!({"mode": "sync", "keep": 2})),
            ..SessionUpdate::default()
        },
        SessionUpdate {
            tombstone: Some(Tombstone {
                at: Timestamp::now(),
                by: "host".into(),
                reason: "done with it".into(),
                final_status: SessionStatus::Succeeded,
                usage: Usage::default(),
            }),
            ..SessionUpdate::status(SessionStatus::Succeeded)
        },
    ];
    for update in &updates {
        store
            .append(a.id, RunId::new(), &note(), Some(update))
            .await
            .unwrap();
        store.update_session(b.id, update).await.unwrap();
        let (got, want) = (
            store.session(a.id).await.unwrap().unwrap(),
            store.session(b.id).await.unwrap().unwrap(),
        );
        assert_eq!(changed_parts(&got), changed_parts(&want), "{update:?}");
        assert!(got.updated_at >= a.updated_at);
    }

    // What the read-then-write path refuses, refused the same way, and nothing written.
    let before = store.session(a.id).await.unwrap().unwrap();
    let stale = SessionUpdate {
        expected_version: Some(1),
        replies: Some(9),
        ..SessionUpdate::default()
    };
    let err = store
        .append(a.id, RunId::new(), &note(), Some(&stale))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::Conflict {
            expected: 1,
            actual: before.version
        }
    );
    let live = SessionUpdate {
        live_only: true,
        ..SessionUpdate::status(SessionStatus::Running)
    };
    let err = store
        .append(a.id, RunId::new(), &note(), Some(&live))
        .await
        .unwrap_err();
    assert_eq!(
        err,
        StoreError::Deleted {
            id: a.id.to_string()
        }
    );
    let unknown = SessionRecord::new_root("ghost", "planner", "model-a");
    let err = store
        .append(unknown.id, RunId::new(), &note(), Some(&live))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::NotFound, "{err}");
    assert!(err.to_string().contains(&unknown.id.to_string()), "{err}");
    let after = store.session(a.id).await.unwrap().unwrap();
    assert_eq!(changed_parts(&after), changed_parts(&before));
    assert_eq!(
        store.transcript(a.id, 0, None).await.unwrap().len(),
        updates.len(),
        "no entry of a refused write was kept"
    );
}

/// Usage attributed to an ancestor is added to its columns without reading its record:
/// the sums, the version, the entries' aggregates are what `Attribution::apply_to` gives on
/// the record, a sum past `u64::MAX` saturates there as it does on the record, and an
/// unknown ancestor refuses the whole write.
#[tokio::test]
async fn attributed_usage_adds_up_and_saturates_as_on_the_record() {
    use arbor_store::{Attribution, AttributionTarget};
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("arbor.db")).unwrap();
    let root = SessionRecord::new_root("root", "planner", "model-a");
    store.create_session(&root).await.unwrap();
    let own = SessionUpdate {
        own_usage: Some(Usage::new(100, 10)),
        own_cost: Some(1_000),
        ..SessionUpdate::default()
    };
    let root_now = store.update_session(root.id, &own).await.unwrap();
    let child = SessionRecord::new_child(&root, "kid", "worker", "model-a");
    store.create_session(&child).await.unwrap();
    let attribution = |usage: Usage, cost: u64| Attribution {
        from: child.id,
        usage,
        cost,
        targets: vec![AttributionTarget {
            session: root.id,
            via: child.id,
            target: None,
        }],
    };
    // What the record-level rule gives, step by step.
    let mut expected = root_now.clone();
    let mut expected_entries = Vec::new();
    let steps = [
        attribution(Usage::new(7, 3), 250),
        attribution(Usage::new(5, 1), 0),
        attribution(Usage::new(u64::MAX, 2), u64::MAX),
    ];
    for step in &steps {
        expected_entries.extend(step.apply_to(&step.targets[0], &mut expected));
        store
            .append_attributed(child.id, RunId::new(), &note(), None, step)
            .await
            .unwrap();
    }
    let got = store.session(root.id).await.unwrap().unwrap();
    assert_eq!(got.attributed_usage, expected.attributed_usage);
    assert_eq!(got.attributed_usage.input_tokens, u64::MAX, "saturated");
    assert_eq!(got.attributed_cost, expected.attributed_cost);
    assert_eq!(got.attributed_cost, u64::MAX, "saturated");
    assert_eq!(got.own_usage, Usage::new(100, 10));
    assert_eq!(got.version, expected.version);
    let written: Vec<EntryKind> = store
        .transcript(root.id, 0, None)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(written, expected_entries);

    let ghost = SessionRecord::new_root("ghost", "planner", "model-a");
    let mut lost = attribution(Usage::new(1, 1), 0);
    lost.targets[0].session = ghost.id;
    let before = store.transcript(child.id, 0, None).await.unwrap().len();
    let err = store
        .append_attributed(child.id, RunId::new(), &note(), None, &lost)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::NotFound, "{err}");
    assert_eq!(
        store.transcript(child.id, 0, None).await.unwrap().len(),
        before,
        "the child's own entries were not kept either"
    );
}
