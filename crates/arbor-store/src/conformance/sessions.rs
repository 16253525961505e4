//! Checks of session records: create, get, update and list.

use arbor_protocol::{SessionId, SessionStatus, Timestamp, Usage};
use serde_json::json;

use super::{child, create, expect_err, get, root};
use crate::{SessionQuery, SessionRecord, SessionUpdate, Store, StoreError, StoreErrorKind};

/// A created session reads back equal, every field included: ids, depth, status, both usages
/// (up to `u64::MAX`), context size, timestamps, meta JSON of every shape and the version.
pub async fn create_round_trips_every_field(store: &dyn Store) {
    const CHECK: &str = "create_round_trips_every_field";
    let b = store.backend();

    let mut top = SessionRecord::new_root("root \"one\" 'quoted' ✓", "planner", "model-a");
    top.status = SessionStatus::Suspended;
    top.own_usage = Usage {
        input_tokens: 11,
        output_tokens: 22,
        total_tokens: 33,
        cache_read_tokens: 44,
        cache_write_tokens: 55,
    };
    top.attributed_usage = Usage {
        input_tokens: 1,
        output_tokens: 2,
        total_tokens: u64::MAX,
        cache_read_tokens: 4,
        cache_write_tokens: 1 << 40,
    };
    top.own_cost = 4_380;
    top.attributed_cost = u64::MAX;
    top.context_tokens = 12_345;
    top.created_at = Timestamp(1_700_000_000_001);
    top.updated_at = Timestamp(1_700_000_000_999);
    top.meta = json!({
        "definition": {"name": "planner", "tools": ["a", "b"]},
        "numbers": {"int": 1, "neg": -3, "float": 1.5, "big": u64::MAX},
        "flags": [true, false, null],
        "text": "héllo ✓ \u{1F600} a'b\"c\\d\n",
        "empty": {},
    })
    .into();
    top.version = 7;
    create(store, CHECK, &top).await;
    assert_eq!(
        get(store, CHECK, top.id).await,
        top,
        "[{b}] {CHECK}: root differs"
    );

    let mut mid = child(&top, "child");
    mid.status = SessionStatus::Failed;
    mid.spawned_by = Some(arbor_protocol::SpawnPoint {
        run_id: arbor_protocol::RunId::new(),
        turn: 4,
    });
    mid.replies = 2;
    mid.artifacts = 5;
    mid.meta = json!([1, "two", {"three": 3}]).into();
    mid.context_tokens = u64::MAX;
    create(store, CHECK, &mid).await;
    let got = get(store, CHECK, mid.id).await;
    assert_eq!(got, mid, "[{b}] {CHECK}: child differs");
    assert_eq!(
        got.parent_id,
        Some(top.id),
        "[{b}] {CHECK}: child parent_id"
    );
    assert_eq!(got.root_id, top.id, "[{b}] {CHECK}: child root_id");
    assert_eq!(got.depth, 1, "[{b}] {CHECK}: child depth");

    let mut leaf = child(&mid, "grandchild");
    leaf.meta = json!("just a string").into();
    create(store, CHECK, &leaf).await;
    let got = get(store, CHECK, leaf.id).await;
    assert_eq!(got, leaf, "[{b}] {CHECK}: grandchild differs");
    assert_eq!(got.root_id, top.id, "[{b}] {CHECK}: grandchild root_id");
    assert_eq!(got.depth, 2, "[{b}] {CHECK}: grandchild depth");

    // Defaults: null meta, zero usage, idle.
    let plain = child(&mid, "plain");
    create(store, CHECK, &plain).await;
    assert_eq!(
        get(store, CHECK, plain.id).await,
        plain,
        "[{b}] {CHECK}: defaults differ"
    );
}

/// Creating a session whose id exists fails with `AlreadyExists` and changes nothing.
pub async fn create_duplicate_id_is_refused(store: &dyn Store) {
    const CHECK: &str = "create_duplicate_id_is_refused";
    let b = store.backend();
    let original = root("original");
    create(store, CHECK, &original).await;

    let mut dup = original.clone();
    dup.name = "impostor".into();
    dup.status = SessionStatus::Failed;
    dup.meta = json!({"impostor": true}).into();
    let err = expect_err(
        b,
        CHECK,
        store.create_session(&dup).await,
        StoreErrorKind::AlreadyExists,
    );
    assert_eq!(
        err,
        StoreError::AlreadyExists {
            what: "session",
            id: original.id.to_string()
        },
        "[{b}] {CHECK}"
    );
    assert_eq!(
        get(store, CHECK, original.id).await,
        original,
        "[{b}] {CHECK}: record changed"
    );
    let roots = store.list_sessions(SessionQuery::Roots).await.unwrap();
    let copies = roots.iter().filter(|r| r.id == original.id).count();
    assert_eq!(copies, 1, "[{b}] {CHECK}: {copies} sessions with one id");
}

/// Creating a child of a session that does not exist fails with `NotFound` and creates
/// nothing.
pub async fn create_child_of_unknown_parent_is_not_found(store: &dyn Store) {
    const CHECK: &str = "create_child_of_unknown_parent_is_not_found";
    let b = store.backend();
    let phantom = root("never created");
    let orphan = child(&phantom, "orphan");
    let err = expect_err(
        b,
        CHECK,
        store.create_session(&orphan).await,
        StoreErrorKind::NotFound,
    );
    assert_eq!(
        err,
        StoreError::session_not_found(phantom.id),
        "[{b}] {CHECK}"
    );
    assert_eq!(
        store.session(orphan.id).await.unwrap(),
        None,
        "[{b}] {CHECK}: orphan stored"
    );
    assert_eq!(
        store.session(phantom.id).await.unwrap(),
        None,
        "[{b}] {CHECK}: parent stored"
    );
}

/// Getting an unknown session is `Ok(None)`, not an error.
pub async fn unknown_session_is_none(store: &dyn Store) {
    let b = store.backend();
    let got = store.session(SessionId::new()).await;
    assert_eq!(got, Ok(None), "[{b}] unknown_session_is_none");
}

/// `before` with the fields `update` sets, the version bumped and `updated_at` as stored.
fn expected_after(
    before: &SessionRecord,
    update: &SessionUpdate,
    got: &SessionRecord,
) -> SessionRecord {
    let mut expected = before.clone();
    if let Some(status) = update.status {
        expected.status = status;
    }
    if let Some(usage) = update.own_usage {
        expected.own_usage = usage;
    }
    if let Some(usage) = update.attributed_usage {
        expected.attributed_usage = usage;
    }
    if let Some(cost) = update.own_cost {
        expected.own_cost = cost;
    }
    if let Some(cost) = update.attributed_cost {
        expected.attributed_cost = cost;
    }
    if let Some(tokens) = update.context_tokens {
        expected.context_tokens = tokens;
    }
    if let Some(meta) = &update.meta {
        expected.meta = meta.clone().into();
    }
    if let Some(replies) = update.replies {
        expected.replies = replies;
    }
    if let Some(artifacts) = update.artifacts {
        expected.artifacts = artifacts;
    }
    if let Some(tombstone) = &update.tombstone {
        expected.tombstone = Some(tombstone.clone());
    }
    expected.version = before.version + 1;
    expected.updated_at = got.updated_at;
    expected
}

/// An update changes only the fields it sets, bumps the version by exactly 1, moves
/// `updated_at` forward (never back) and returns the stored record.
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
pub async fn update_applies_only_set_fields(store: &dyn Store) {
    const CHECK: &str = "update_applies_only_set_fields";
    let b = store.backend();
    let mut record = root("updated");
    record.own_usage = Usage::new(1, 1);
    record.meta = json!({"before": true}).into();
    create(store, CHECK, &record).await;

    let updates = [
        ("status", SessionUpdate::status(SessionStatus::Succeeded)),
        (
            "own_usage",
            SessionUpdate {
                own_usage: Some(Usage::new(10, 5)),
                ..SessionUpdate::default()
            },
        ),
        (
            "attributed_usage",
            SessionUpdate {
                attributed_usage: Some(Usage {
                    cache_read_tokens: 9,
                    ..Usage::new(7, 3)
                }),
                ..SessionUpdate::default()
            },
        ),
        (
            "own_cost",
            SessionUpdate {
                own_cost: Some(1_234),
                ..SessionUpdate::default()
            },
        ),
        (
            "attributed_cost",
            SessionUpdate {
                attributed_cost: Some(u64::MAX - 1),
                ..SessionUpdate::default()
            },
        ),
        (
            "context_tokens",
            SessionUpdate {
                context_tokens: Some(4321),
                ..SessionUpdate::default()
            },
        ),
        (
            "meta",
            SessionUpdate {
                meta: Some(json!({"after": [1, 2, 3]})),
                ..SessionUpdate::default()
            },
        ),
        ("nothing", SessionUpdate::default()),
        (
            "everything",
            SessionUpdate {
                expected_version: Some(record.version + 8),
                status: Some(SessionStatus::Aborted),
                own_usage: Some(Usage::new(100, 50)),
                attributed_usage: Some(Usage::new(200, 70)),
                own_cost: Some(77),
                attributed_cost: Some(88),
                context_tokens: Some(99),
                meta: Some(serde_json::Value::Null),
                replies: Some(3),
                artifacts: Some(u32::MAX),
                tombstone: Some(crate::Tombstone {
                    at: Timestamp(1_700_000_000_000),
                    by: "user \"x\"".into(),
                    reason: "done with it".into(),
                    final_status: SessionStatus::Succeeded,
                    usage: Usage::new(5, 6),
                }),
                live_only: false,
                name: None,
            },
        ),
    ];
    for (label, update) in updates {
        let before = get(store, CHECK, record.id).await;
        let t0 = Timestamp::now();
        let got = store
            .update_session(record.id, &update)
            .await
            .unwrap_or_else(|e| panic!("[{b}] {CHECK}: update {label} failed: {e}"));
        assert_eq!(
            got,
            expected_after(&before, &update, &got),
            "[{b}] {CHECK}: update {label} changed the wrong fields"
        );
        assert!(
            got.updated_at >= before.updated_at.max(t0),
            "[{b}] {CHECK}: update {label}: updated_at {:?} is before {:?}",
            got.updated_at,
            before.updated_at.max(t0)
        );
        assert_eq!(
            get(store, CHECK, record.id).await,
            got,
            "[{b}] {CHECK}: update {label} returned another record than it stored"
        );
    }
    assert_eq!(
        get(store, CHECK, record.id).await.version,
        10,
        "[{b}] {CHECK}: final version"
    );
}

/// An update whose `expected_version` differs from the stored version fails with
/// `Conflict { expected, actual }` and changes nothing.
pub async fn update_with_stale_version_conflicts(store: &dyn Store) {
    const CHECK: &str = "update_with_stale_version_conflicts";
    let b = store.backend();
    let record = root("cas");
    create(store, CHECK, &record).await;

    let cas = |expected: u64, tokens: u64| SessionUpdate {
        expected_version: Some(expected),
        context_tokens: Some(tokens),
        status: Some(SessionStatus::Failed),
        ..SessionUpdate::default()
    };
    let got = store.update_session(record.id, &cas(1, 10)).await;
    let current = got.unwrap_or_else(|e| panic!("[{b}] {CHECK}: matching CAS failed: {e}"));
    assert_eq!(current.version, 2, "[{b}] {CHECK}: version after CAS");
    assert_eq!(current.context_tokens, 10, "[{b}] {CHECK}");

    for stale in [1, 0, 3, 99] {
        let err = expect_err(
            b,
            CHECK,
            store.update_session(record.id, &cas(stale, 20)).await,
            StoreErrorKind::Conflict,
        );
        assert_eq!(
            err,
            StoreError::Conflict {
                expected: stale,
                actual: 2
            },
            "[{b}] {CHECK}: conflict fields"
        );
        assert_eq!(
            get(store, CHECK, record.id).await,
            current,
            "[{b}] {CHECK}: a refused update (expected {stale}) changed the record"
        );
    }
    let got = store.update_session(record.id, &cas(2, 30)).await;
    let next = got.unwrap_or_else(|e| panic!("[{b}] {CHECK}: second CAS failed: {e}"));
    assert_eq!(
        (next.version, next.context_tokens),
        (3, 30),
        "[{b}] {CHECK}"
    );
}

/// An update marked `live_only` (a run start) is refused with `Deleted` once the session
/// has a tombstone, atomically with the check: nothing changes, not even with entries
/// appended in the same write. Without the mark, a deleted session's record still updates.
pub async fn updates_for_live_sessions_refuse_a_deleted_one(store: &dyn Store) {
    const CHECK: &str = "updates_for_live_sessions_refuse_a_deleted_one";
    let b = store.backend();
    let parent = root("live-only");
    create(store, CHECK, &parent).await;
    let record = child(&parent, "doomed");
    create(store, CHECK, &record).await;
    let start = SessionUpdate {
        live_only: true,
        ..SessionUpdate::status(SessionStatus::Running)
    };
    let running = store.update_session(record.id, &start).await;
    let running = running.unwrap_or_else(|e| panic!("[{b}] {CHECK}: live update failed: {e}"));
    assert_eq!(running.status, SessionStatus::Running, "[{b}] {CHECK}");
    let tombstone = crate::Tombstone {
        at: Timestamp::now(),
        by: "host".into(),
        reason: "gone".into(),
        final_status: SessionStatus::Succeeded,
        usage: Usage::default(),
    };
    let deleted = SessionUpdate {
        tombstone: Some(tombstone),
        status: Some(SessionStatus::Succeeded),
        ..SessionUpdate::default()
    };
    let deleted = store.update_session(record.id, &deleted).await;
    let deleted = deleted.unwrap_or_else(|e| panic!("[{b}] {CHECK}: tombstone failed: {e}"));
    let err = expect_err(
        b,
        CHECK,
        store.update_session(record.id, &start).await,
        StoreErrorKind::NotFound,
    );
    assert_eq!(
        err,
        StoreError::Deleted {
            id: record.id.to_string()
        },
        "[{b}] {CHECK}"
    );
    let entry = arbor_protocol::EntryKind::RunStarted {
        agent: "a".into(),
        model: "m".into(),
        trace: None,
    };
    let appended = store
        .append(
            record.id,
            arbor_protocol::RunId::new(),
            std::slice::from_ref(&entry),
            Some(&start),
        )
        .await;
    expect_err(b, CHECK, appended, StoreErrorKind::NotFound);
    assert_eq!(
        get(store, CHECK, record.id).await,
        deleted,
        "[{b}] {CHECK}: a refused run start changed the record"
    );
    let transcript = store.transcript(record.id, 0, None).await;
    let transcript = transcript.unwrap_or_else(|e| panic!("[{b}] {CHECK}: transcript: {e}"));
    assert!(
        transcript.is_empty(),
        "[{b}] {CHECK}: a refused run start appended entries"
    );
    let settle = SessionUpdate::status(SessionStatus::Aborted);
    let settled = store.update_session(record.id, &settle).await;
    let settled = settled.unwrap_or_else(|e| panic!("[{b}] {CHECK}: plain update failed: {e}"));
    assert_eq!(settled.status, SessionStatus::Aborted, "[{b}] {CHECK}");
}

/// Updating an unknown session fails with `NotFound` and creates nothing.
pub async fn update_unknown_is_not_found(store: &dyn Store) {
    const CHECK: &str = "update_unknown_is_not_found";
    let b = store.backend();
    let id = SessionId::new();
    for update in [
        SessionUpdate::status(SessionStatus::Failed),
        SessionUpdate {
            expected_version: Some(1),
            ..SessionUpdate::default()
        },
    ] {
        let err = expect_err(
            b,
            CHECK,
            store.update_session(id, &update).await,
            StoreErrorKind::NotFound,
        );
        assert_eq!(err, StoreError::session_not_found(id), "[{b}] {CHECK}");
    }
    assert_eq!(
        store.session(id).await.unwrap(),
        None,
        "[{b}] {CHECK}: session created"
    );
}
