//! Checks of transcripts (append, read) and of `mark_interrupted`.

use std::collections::HashSet;

use arbor_protocol::{RunId, SessionId, SessionStatus, Timestamp, Usage};
use serde_json::json;

use super::{all_entry_kinds, child, create, expect_err, get, root, tagged_entry};
use crate::{SessionUpdate, Store, StoreError, StoreErrorKind};

/// Appends number entries 1..n contiguously across calls and per session, return the last
/// sequence number (the current one for an empty append), stamp each entry with its run and
/// a time within the call, and round-trip every entry kind. An append without an update
/// leaves the session record alone.
pub async fn append_numbers_entries(store: &dyn Store) {
    const CHECK: &str = "append_numbers_entries";
    let b = store.backend();
    let session = root("appended");
    let other = child(&session, "other");
    create(store, CHECK, &session).await;
    create(store, CHECK, &other).await;
    let (run1, run2) = (RunId::new(), RunId::new());
    let kinds = all_entry_kinds();

    let append = |id: SessionId, run: RunId, entries: Vec<_>| async move {
        store
            .append(id, run, &entries, None)
            .await
            .unwrap_or_else(|e| panic!("[{b}] {CHECK}: append failed: {e}"))
    };
    assert_eq!(
        append(session.id, run1, vec![]).await,
        0,
        "[{b}] {CHECK}: empty append"
    );
    let t0 = Timestamp::now();
    assert_eq!(
        append(session.id, run1, kinds[..3].to_vec()).await,
        3,
        "[{b}] {CHECK}"
    );
    assert_eq!(
        append(session.id, run2, vec![]).await,
        3,
        "[{b}] {CHECK}: empty append"
    );
    assert_eq!(
        append(other.id, run2, kinds[..2].to_vec()).await,
        2,
        "[{b}] {CHECK}: other"
    );
    let last = append(session.id, run2, kinds[3..].to_vec()).await;
    let t1 = Timestamp::now();
    assert_eq!(last, kinds.len() as u64, "[{b}] {CHECK}: last seq");

    let entries = store.transcript(session.id, 0, None).await.unwrap();
    assert_eq!(entries.len(), kinds.len(), "[{b}] {CHECK}: entry count");
    let mut previous = Timestamp(0);
    for (i, (entry, kind)) in entries.iter().zip(&kinds).enumerate() {
        assert_eq!(entry.seq, i as u64 + 1, "[{b}] {CHECK}: seq of entry {i}");
        assert_eq!(&entry.kind, kind, "[{b}] {CHECK}: kind of entry {i}");
        let run = if i < 3 { run1 } else { run2 };
        assert_eq!(entry.run_id, run, "[{b}] {CHECK}: run of entry {i}");
        assert!(
            t0 <= entry.at && entry.at <= t1 && previous <= entry.at,
            "[{b}] {CHECK}: entry {i} written at {:?}, outside {t0:?}..={t1:?} or before {previous:?}",
            entry.at
        );
        previous = entry.at;
    }
    let others = store.transcript(other.id, 0, None).await.unwrap();
    let seqs: Vec<u64> = others.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        vec![1, 2],
        "[{b}] {CHECK}: transcripts are per session"
    );
    assert_eq!(
        get(store, CHECK, session.id).await,
        session,
        "[{b}] {CHECK}: an append without update changed the record"
    );
}

/// An append's update is applied in the same write: with a matching (or no)
/// `expected_version` both land; with a stale one the whole append fails with `Conflict`,
/// writing no entry and changing no field.
pub async fn append_with_update_is_atomic(store: &dyn Store) {
    const CHECK: &str = "append_with_update_is_atomic";
    let b = store.backend();
    let session = root("atomic");
    create(store, CHECK, &session).await;
    let run = RunId::new();
    let entries = |n: usize| (0..n).map(|i| tagged_entry(0, i)).collect::<Vec<_>>();

    let update = SessionUpdate {
        expected_version: Some(1),
        status: Some(SessionStatus::Succeeded),
        own_usage: Some(Usage::new(30, 4)),
        context_tokens: Some(30),
        meta: Some(json!({"turns": 1})),
        ..SessionUpdate::default()
    };
    let seq = store
        .append(session.id, run, &entries(2), Some(&update))
        .await;
    assert_eq!(seq, Ok(2), "[{b}] {CHECK}: append with matching version");
    let after = get(store, CHECK, session.id).await;
    let mut expected = session.clone();
    expected.status = SessionStatus::Succeeded;
    expected.own_usage = Usage::new(30, 4);
    expected.context_tokens = 30;
    expected.meta = json!({"turns": 1}).into();
    expected.version = 2;
    expected.updated_at = after.updated_at;
    assert_eq!(after, expected, "[{b}] {CHECK}: update not applied as set");
    assert!(
        after.updated_at >= session.updated_at,
        "[{b}] {CHECK}: updated_at went back"
    );

    for (label, n) in [("entries", 3), ("no entries", 0)] {
        let stale = SessionUpdate {
            expected_version: Some(1),
            status: Some(SessionStatus::Failed),
            context_tokens: Some(999),
            ..SessionUpdate::default()
        };
        let result = store
            .append(session.id, run, &entries(n), Some(&stale))
            .await;
        let err = expect_err(b, CHECK, result, StoreErrorKind::Conflict);
        assert_eq!(
            err,
            StoreError::Conflict {
                expected: 1,
                actual: 2
            },
            "[{b}] {CHECK}: stale append with {label}"
        );
        let written = store.transcript(session.id, 0, None).await.unwrap();
        assert_eq!(
            written.len(),
            2,
            "[{b}] {CHECK}: a refused append ({label}) wrote entries"
        );
        assert_eq!(
            get(store, CHECK, session.id).await,
            after,
            "[{b}] {CHECK}: a refused append ({label}) changed the record"
        );
    }

    let bump = SessionUpdate {
        expected_version: Some(2),
        context_tokens: Some(9),
        ..SessionUpdate::default()
    };
    let seq = store.append(session.id, run, &[], Some(&bump)).await;
    assert_eq!(seq, Ok(2), "[{b}] {CHECK}: empty append with update");
    let got = get(store, CHECK, session.id).await;
    assert_eq!(
        (got.version, got.context_tokens),
        (3, 9),
        "[{b}] {CHECK}: empty append's update"
    );

    let unconditional = SessionUpdate::status(SessionStatus::Aborted);
    let seq = store
        .append(session.id, run, &entries(1), Some(&unconditional))
        .await;
    assert_eq!(
        seq,
        Ok(3),
        "[{b}] {CHECK}: append with unconditional update"
    );
    let got = get(store, CHECK, session.id).await;
    assert_eq!(
        (got.version, got.status),
        (4, SessionStatus::Aborted),
        "[{b}] {CHECK}"
    );
}

/// Appending to an unknown session fails with `NotFound`, with or without entries or update.
pub async fn append_to_unknown_is_not_found(store: &dyn Store) {
    const CHECK: &str = "append_to_unknown_is_not_found";
    let b = store.backend();
    let id = SessionId::new();
    let update = SessionUpdate::status(SessionStatus::Failed);
    for (entries, update) in [
        (vec![tagged_entry(0, 0)], None),
        (vec![], None),
        (vec![tagged_entry(0, 0)], Some(&update)),
    ] {
        let result = store.append(id, RunId::new(), &entries, update).await;
        let err = expect_err(b, CHECK, result, StoreErrorKind::NotFound);
        assert_eq!(err, StoreError::session_not_found(id), "[{b}] {CHECK}");
    }
    assert_eq!(
        store.session(id).await.unwrap(),
        None,
        "[{b}] {CHECK}: session created"
    );
}

/// `transcript(after, limit)` returns the entries after `after`, oldest first, at most `limit`.
pub async fn transcript_pages(store: &dyn Store) {
    const CHECK: &str = "transcript_pages";
    let b = store.backend();
    let session = root("paged");
    create(store, CHECK, &session).await;
    let run = RunId::new();
    let mut index = 0;
    for batch in [3, 3, 4] {
        let entries: Vec<_> = (index..index + batch).map(|i| tagged_entry(0, i)).collect();
        index += batch;
        let seq = store.append(session.id, run, &entries, None).await;
        assert_eq!(seq, Ok(index as u64), "[{b}] {CHECK}: append");
    }
    let page = |after: u64, limit: Option<usize>| async move {
        let entries = store
            .transcript(session.id, after, limit)
            .await
            .unwrap_or_else(|e| {
                panic!("[{b}] {CHECK}: transcript({after}, {limit:?}) failed: {e}")
            });
        for entry in &entries {
            let (_, i) = super::entry_tag(&entry.kind);
            assert_eq!(
                entry.seq,
                i as u64 + 1,
                "[{b}] {CHECK}: entry {} body",
                entry.seq
            );
        }
        entries.iter().map(|e| e.seq).collect::<Vec<u64>>()
    };
    let all: Vec<u64> = (1..=10).collect();
    let cases: [(u64, Option<usize>, Vec<u64>); 10] = [
        (0, None, all.clone()),
        (0, Some(usize::MAX), all),
        (0, Some(3), vec![1, 2, 3]),
        (3, Some(3), vec![4, 5, 6]),
        (8, Some(5), vec![9, 10]),
        (9, None, vec![10]),
        (10, None, vec![]),
        (100, None, vec![]),
        (u64::MAX, None, vec![]),
        (0, Some(0), vec![]),
    ];
    for (after, limit, expected) in cases {
        assert_eq!(
            page(after, limit).await,
            expected,
            "[{b}] {CHECK}: transcript({after}, {limit:?})"
        );
    }
    let mut walked = Vec::new();
    let mut after = 0;
    loop {
        let seqs = page(after, Some(4)).await;
        let Some(&last) = seqs.last() else { break };
        walked.extend(seqs);
        after = last;
    }
    assert_eq!(
        walked,
        (1..=10).collect::<Vec<u64>>(),
        "[{b}] {CHECK}: paging walk"
    );
}

/// Reading the transcript of an unknown session fails with `NotFound`; a session without
/// entries has an empty transcript.
pub async fn transcript_of_unknown_is_not_found(store: &dyn Store) {
    const CHECK: &str = "transcript_of_unknown_is_not_found";
    let b = store.backend();
    let id = SessionId::new();
    for (after, limit) in [(0, None), (5, Some(1))] {
        let err = expect_err(
            b,
            CHECK,
            store.transcript(id, after, limit).await,
            StoreErrorKind::NotFound,
        );
        assert_eq!(err, StoreError::session_not_found(id), "[{b}] {CHECK}");
    }
    let empty = root("empty");
    create(store, CHECK, &empty).await;
    for (after, limit) in [(0, None), (5, Some(1))] {
        let got = store.transcript(empty.id, after, limit).await;
        assert_eq!(got, Ok(vec![]), "[{b}] {CHECK}: empty transcript");
    }
}

/// `mark_interrupted` turns every `running` session (and only those) into `interrupted`,
/// bumping its version, and returns their ids; other sessions stay as they were.
pub async fn mark_interrupted(store: &dyn Store) {
    const CHECK: &str = "mark_interrupted";
    let b = store.backend();
    let statuses = [
        SessionStatus::Idle,
        SessionStatus::Running,
        SessionStatus::Succeeded,
        SessionStatus::Failed,
        SessionStatus::Aborted,
        SessionStatus::Suspended,
        SessionStatus::Denied,
        SessionStatus::Interrupted,
    ];
    let top = root("interrupted root");
    create(store, CHECK, &top).await;
    let mut records = vec![top.clone()];
    for (i, status) in statuses
        .into_iter()
        .chain([SessionStatus::Running])
        .enumerate()
    {
        let mut record = child(&top, &format!("{}-{i}", status.as_str()));
        record.status = status;
        record.own_usage = Usage::new(5, 5);
        record.meta = json!({"status": status.as_str()}).into();
        create(store, CHECK, &record).await;
        records.push(record);
    }
    let t0 = Timestamp::now();
    let marked = store
        .mark_interrupted()
        .await
        .unwrap_or_else(|e| panic!("[{b}] {CHECK}: mark_interrupted failed: {e}"));
    let unique: HashSet<SessionId> = marked.iter().copied().collect();
    assert_eq!(
        unique.len(),
        marked.len(),
        "[{b}] {CHECK}: duplicate ids {marked:?}"
    );
    for id in &marked {
        let status = get(store, CHECK, *id).await.status;
        assert_eq!(
            status,
            SessionStatus::Interrupted,
            "[{b}] {CHECK}: returned {id} is {status}"
        );
    }
    for before in &records {
        let after = get(store, CHECK, before.id).await;
        if before.status == SessionStatus::Running {
            assert!(
                unique.contains(&before.id),
                "[{b}] {CHECK}: running {} not returned",
                before.id
            );
            let mut expected = before.clone();
            expected.status = SessionStatus::Interrupted;
            expected.version = before.version + 1;
            expected.updated_at = after.updated_at;
            assert_eq!(after, expected, "[{b}] {CHECK}: interrupted record");
            assert!(
                after.updated_at >= before.updated_at.max(t0),
                "[{b}] {CHECK}: updated_at not moved"
            );
        } else {
            assert!(
                !unique.contains(&before.id),
                "[{b}] {CHECK}: {} session {} returned",
                before.status,
                before.id
            );
            assert_eq!(
                &after, before,
                "[{b}] {CHECK}: {} session changed",
                before.status
            );
        }
    }
    let again = store.mark_interrupted().await.unwrap();
    let ours: Vec<_> = again
        .iter()
        .filter(|id| records.iter().any(|r| r.id == **id))
        .collect();
    assert!(
        ours.is_empty(),
        "[{b}] {CHECK}: second call returned {ours:?} again"
    );
}
