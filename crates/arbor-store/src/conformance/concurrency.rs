//! Checks of concurrent writers: several OS threads hitting one store at once.

use std::collections::HashMap;

use arbor_protocol::{RunId, SessionStatus};

use super::{create, entry_tag, expect_err, get, parallel, root, tagged_entry};
use crate::{SessionUpdate, Store, StoreError, StoreErrorKind};

const TASKS: usize = 8;
const APPENDS: usize = 50;

/// 8 tasks × 50 single-entry appends on one session give exactly 400 entries numbered
/// 1..=400, each append's returned sequence number is unique, and each task's entries keep
/// their order and run id.
pub async fn concurrent_appends(store: &dyn Store) {
    const CHECK: &str = "concurrent_appends";
    let b = store.backend();
    let session = root("concurrent appends");
    create(store, CHECK, &session).await;

    let results = parallel(TASKS, |task| async move {
        let run = RunId::new();
        let mut seqs = Vec::with_capacity(APPENDS);
        for i in 0..APPENDS {
            let seq = store
                .append(session.id, run, &[tagged_entry(task, i)], None)
                .await
                .unwrap_or_else(|e| panic!("[{b}] {CHECK}: task {task} append {i} failed: {e}"));
            seqs.push(seq);
        }
        (run, seqs)
    });

    let total = (TASKS * APPENDS) as u64;
    let mut returned: Vec<u64> = results
        .iter()
        .flat_map(|(_, s)| s.iter().copied())
        .collect();
    returned.sort_unstable();
    assert_eq!(
        returned,
        (1..=total).collect::<Vec<_>>(),
        "[{b}] {CHECK}: returned sequence numbers have gaps or duplicates"
    );
    let entries = store.transcript(session.id, 0, None).await.unwrap();
    let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=total).collect::<Vec<_>>(),
        "[{b}] {CHECK}: stored sequence numbers"
    );

    let mut next = [0; TASKS];
    for entry in &entries {
        let (task, i) = entry_tag(&entry.kind);
        assert_eq!(
            i, next[task],
            "[{b}] {CHECK}: task {task}'s entries out of order"
        );
        next[task] += 1;
        assert_eq!(
            entry.run_id, results[task].0,
            "[{b}] {CHECK}: entry {} run id",
            entry.seq
        );
        assert_eq!(
            results[task].1[i], entry.seq,
            "[{b}] {CHECK}: task {task} append {i} returned another seq than it stored"
        );
    }
}

/// Concurrent multi-entry appends never interleave: each batch lands contiguously, ending at
/// the sequence number its append returned.
pub async fn concurrent_batches(store: &dyn Store) {
    const CHECK: &str = "concurrent_batches";
    const BATCHES: usize = 10;
    const BATCH: usize = 5;
    let b = store.backend();
    let session = root("concurrent batches");
    create(store, CHECK, &session).await;

    let results = parallel(4, |task| async move {
        let run = RunId::new();
        let mut lasts = Vec::with_capacity(BATCHES);
        for batch in 0..BATCHES {
            let entries: Vec<_> = (0..BATCH)
                .map(|i| tagged_entry(task, batch * BATCH + i))
                .collect();
            let last = store
                .append(session.id, run, &entries, None)
                .await
                .unwrap_or_else(|e| panic!("[{b}] {CHECK}: task {task} batch {batch} failed: {e}"));
            lasts.push(last);
        }
        lasts
    });

    let entries = store.transcript(session.id, 0, None).await.unwrap();
    assert_eq!(
        entries.len(),
        4 * BATCHES * BATCH,
        "[{b}] {CHECK}: entry count"
    );
    let by_seq: HashMap<u64, (usize, usize)> = entries
        .iter()
        .map(|e| (e.seq, entry_tag(&e.kind)))
        .collect();
    for (task, lasts) in results.iter().enumerate() {
        for (batch, &last) in lasts.iter().enumerate() {
            for i in 0..BATCH {
                let seq = last + 1 + i as u64 - BATCH as u64;
                let expected = (task, batch * BATCH + i);
                assert_eq!(
                    by_seq.get(&seq),
                    Some(&expected),
                    "[{b}] {CHECK}: batch {batch} of task {task} (ending at {last}) is not contiguous"
                );
            }
        }
    }
}

/// Of 8 concurrent compare-and-swap writers expecting the same version, exactly one wins and
/// the others get `Conflict`; the same holds for appends carrying a CAS update, and the
/// losers write no entry.
pub async fn concurrent_cas(store: &dyn Store) {
    const CHECK: &str = "concurrent_cas";
    let b = store.backend();
    let session = root("concurrent cas");
    create(store, CHECK, &session).await;

    let results = parallel(TASKS, |task| async move {
        let update = SessionUpdate {
            expected_version: Some(1),
            context_tokens: Some(task as u64),
            ..SessionUpdate::default()
        };
        store.update_session(session.id, &update).await
    });
    let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(
        winners.len(),
        1,
        "[{b}] {CHECK}: {} updates won",
        winners.len()
    );
    let winner = winners[0].clone();
    assert_eq!(winner.version, 2, "[{b}] {CHECK}: winner version");
    for result in &results {
        if let Err(e) = result {
            let conflict = StoreError::Conflict {
                expected: 1,
                actual: 2,
            };
            assert_eq!(e, &conflict, "[{b}] {CHECK}: loser error");
        }
    }
    assert_eq!(
        get(store, CHECK, session.id).await,
        winner,
        "[{b}] {CHECK}: stored record"
    );

    let results = parallel(TASKS, |task| async move {
        let update = SessionUpdate {
            expected_version: Some(2),
            status: Some(SessionStatus::Succeeded),
            context_tokens: Some(100 + task as u64),
            ..SessionUpdate::default()
        };
        let entries = [tagged_entry(task, 0), tagged_entry(task, 1)];
        store
            .append(session.id, RunId::new(), &entries, Some(&update))
            .await
    });
    let winners: Vec<usize> = (0..TASKS).filter(|t| results[*t].is_ok()).collect();
    assert_eq!(
        winners.len(),
        1,
        "[{b}] {CHECK}: {} appends won",
        winners.len()
    );
    let task = winners[0];
    assert_eq!(results[task], Ok(2), "[{b}] {CHECK}: winning append's seq");
    for result in &results {
        if let Err(e) = result {
            assert_eq!(
                e.kind(),
                StoreErrorKind::Conflict,
                "[{b}] {CHECK}: loser error {e}"
            );
        }
    }
    let entries = store.transcript(session.id, 0, None).await.unwrap();
    let tags: Vec<_> = entries.iter().map(|e| entry_tag(&e.kind)).collect();
    assert_eq!(
        tags,
        vec![(task, 0), (task, 1)],
        "[{b}] {CHECK}: only the winner's entries"
    );
    let record = get(store, CHECK, session.id).await;
    assert_eq!(
        (record.version, record.context_tokens),
        (3, 100 + task as u64),
        "[{b}] {CHECK}: the winner's update"
    );
}

/// Of 8 concurrent creates of one id, exactly one succeeds and the others get
/// `AlreadyExists`.
pub async fn concurrent_creates(store: &dyn Store) {
    const CHECK: &str = "concurrent_creates";
    let b = store.backend();
    let template = root("contested");
    let results = parallel(TASKS, |task| {
        let mut record = template.clone();
        record.name = format!("contender {task}");
        async move { (record.clone(), store.create_session(&record).await) }
    });
    let winners: Vec<_> = results.iter().filter(|(_, r)| r.is_ok()).collect();
    assert_eq!(
        winners.len(),
        1,
        "[{b}] {CHECK}: {} creates won",
        winners.len()
    );
    for (_, result) in &results {
        if result.is_err() {
            expect_err(b, CHECK, result.clone(), StoreErrorKind::AlreadyExists);
        }
    }
    assert_eq!(
        get(store, CHECK, template.id).await,
        winners[0].0,
        "[{b}] {CHECK}: stored record"
    );
}
