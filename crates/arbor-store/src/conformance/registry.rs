//! Checks of what the child registry relies on: sibling names, tombstones and usage
//! attribution to ancestors.

use arbor_protocol::{EntryKind, RunId, SessionId, SessionStatus, SpawnPoint, Timestamp, Usage};

use super::{child, create, expect_err, get, parallel, root};
use crate::{
    Attribution, AttributionTarget, SessionUpdate, Store, StoreError, StoreErrorKind, Tombstone,
};

fn tombstone() -> Tombstone {
    Tombstone {
        at: Timestamp::now(),
        by: "conformance".into(),
        reason: "test".into(),
        final_status: SessionStatus::Succeeded,
        usage: Usage::default(),
    }
}

/// Two children of one parent cannot share a name; children of another parent and roots
/// can; a deleted child's name is free again.
pub async fn sibling_names_are_unique_until_deleted(store: &dyn Store) {
    const CHECK: &str = "sibling_names_are_unique_until_deleted";
    let b = store.backend();
    let (p1, p2) = (root("names parent"), root("names parent"));
    create(store, CHECK, &p1).await;
    create(store, CHECK, &p2).await;
    let first = child(&p1, "worker");
    create(store, CHECK, &first).await;
    let e = expect_err(
        b,
        CHECK,
        store.create_session(&child(&p1, "worker")).await,
        StoreErrorKind::AlreadyExists,
    );
    assert_eq!(
        e,
        StoreError::NameTaken {
            name: "worker".into()
        },
        "[{b}] {CHECK}"
    );
    create(store, CHECK, &child(&p2, "worker")).await;
    create(store, CHECK, &child(&p1, "Worker")).await;
    store
        .update_session(
            first.id,
            &SessionUpdate {
                tombstone: Some(tombstone()),
                ..SessionUpdate::default()
            },
        )
        .await
        .unwrap_or_else(|e| panic!("[{b}] {CHECK}: tombstone failed: {e}"));
    create(store, CHECK, &child(&p1, "worker")).await;
    assert!(
        get(store, CHECK, first.id).await.tombstone.is_some(),
        "[{b}] {CHECK}: the tombstone stays"
    );
}

/// 8 concurrent creates of one name under one parent: exactly one succeeds, the others get
/// `NameTaken`.
pub async fn concurrent_same_name_creates_one_wins(store: &dyn Store) {
    const CHECK: &str = "concurrent_same_name_creates_one_wins";
    let b = store.backend();
    let parent = root("race parent");
    create(store, CHECK, &parent).await;
    let results = parallel(8, |_| {
        let record = child(&parent, "contested");
        async move { store.create_session(&record).await }
    });
    let wins = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(wins, 1, "[{b}] {CHECK}: {results:?}");
    for r in results.into_iter().filter_map(Result::err) {
        assert!(
            matches!(r, StoreError::NameTaken { .. }),
            "[{b}] {CHECK}: {r}"
        );
    }
}

fn chain(store_targets: &[(SessionId, SessionId)]) -> Vec<AttributionTarget> {
    store_targets
        .iter()
        .map(|&(session, via)| AttributionTarget {
            session,
            via,
            target: None,
        })
        .collect()
}

/// A grandchild's usage lands in its own transcript and, in the same write, in the child's
/// and the root's attributed usage, each with a `usage_attributed` entry naming where the
/// path below was spawned and the resulting aggregate.
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
pub async fn attributions_reach_every_ancestor(store: &dyn Store) {
    const CHECK: &str = "attributions_reach_every_ancestor";
    let b = store.backend();
    let mut top = root("attr root");
    top.own_usage = Usage::new(40, 0);
    create(store, CHECK, &top).await;
    let spawn = SpawnPoint {
        run_id: RunId::new(),
        turn: 2,
    };
    let mut mid = child(&top, "mid");
    mid.spawned_by = Some(spawn);
    create(store, CHECK, &mid).await;
    let leaf = child(&mid, "leaf");
    create(store, CHECK, &leaf).await;

    let usage = Usage::new(10, 5);
    let run = RunId::new();
    let own = EntryKind::Usage {
        turn: 1,
        usage,
        context_tokens: 10,
    };
    let attribution = Attribution {
        from: leaf.id,
        usage,
        cost: 700,
        targets: vec![
            AttributionTarget {
                session: mid.id,
                via: leaf.id,
                target: None,
            },
            AttributionTarget {
                session: top.id,
                via: mid.id,
                target: Some(spawn),
            },
        ],
    };
    let update = SessionUpdate {
        own_usage: Some(usage),
        own_cost: Some(700),
        ..SessionUpdate::default()
    };
    store
        .append_attributed(
            leaf.id,
            run,
            std::slice::from_ref(&own),
            Some(&update),
            &attribution,
        )
        .await
        .unwrap_or_else(|e| panic!("[{b}] {CHECK}: append_attributed failed: {e}"));
    let leaf_now = get(store, CHECK, leaf.id).await;
    assert_eq!(leaf_now.own_usage, usage, "[{b}] {CHECK}: leaf own");
    assert_eq!(leaf_now.own_cost, 700, "[{b}] {CHECK}: leaf own cost");
    let mid_now = get(store, CHECK, mid.id).await;
    assert_eq!(
        mid_now.attributed_usage, usage,
        "[{b}] {CHECK}: mid attributed"
    );
    assert_eq!(
        (mid_now.attributed_cost, mid_now.aggregate_cost()),
        (700, 700),
        "[{b}] {CHECK}: mid attributed cost"
    );
    assert_eq!(
        mid_now.version,
        mid.version + 1,
        "[{b}] {CHECK}: mid version"
    );
    let top_now = get(store, CHECK, top.id).await;
    assert_eq!(
        top_now.attributed_usage, usage,
        "[{b}] {CHECK}: root attributed"
    );
    assert_eq!(
        top_now.aggregate_usage(),
        Usage::new(50, 5),
        "[{b}] {CHECK}: root aggregate"
    );
    assert_eq!(
        top_now.aggregate_cost(),
        700,
        "[{b}] {CHECK}: root aggregate cost"
    );
    let entries = store.transcript(top.id, 0, None).await.unwrap();
    assert_eq!(entries.len(), 2, "[{b}] {CHECK}: root entries");
    assert_eq!(
        entries[1].kind,
        EntryKind::CostAttributed {
            from: leaf.id,
            via: mid.id,
            micros: 700,
            aggregate_micros: 700,
        },
        "[{b}] {CHECK}: root cost entry"
    );
    assert_eq!(
        entries[1].run_id, spawn.run_id,
        "[{b}] {CHECK}: cost filed under"
    );
    assert_eq!(
        entries[0].run_id, spawn.run_id,
        "[{b}] {CHECK}: filed under"
    );
    assert_eq!(
        entries[0].kind,
        EntryKind::UsageAttributed {
            from: leaf.id,
            via: mid.id,
            target: Some(spawn),
            child_usage: usage,
            aggregate: Usage::new(50, 5),
        },
        "[{b}] {CHECK}: root entry"
    );
    let mid_entries = store.transcript(mid.id, 0, None).await.unwrap();
    assert_eq!(mid_entries[0].run_id, run, "[{b}] {CHECK}: mid filed under");
    assert_eq!(
        store.transcript(leaf.id, 0, None).await.unwrap()[0].kind,
        own,
        "[{b}] {CHECK}: leaf entry"
    );
}

/// An attribution to an unknown ancestor, or a stale version on the session's own update,
/// writes nothing anywhere.
pub async fn append_attributed_is_atomic(store: &dyn Store) {
    const CHECK: &str = "append_attributed_is_atomic";
    let b = store.backend();
    let top = root("atomic attr");
    create(store, CHECK, &top).await;
    let kid = child(&top, "kid");
    create(store, CHECK, &kid).await;
    let usage = Usage::new(3, 3);
    let entry = EntryKind::Usage {
        turn: 1,
        usage,
        context_tokens: 3,
    };
    let unknown = Attribution {
        from: kid.id,
        usage,
        cost: 9,
        targets: chain(&[(top.id, kid.id), (SessionId::new(), top.id)]),
    };
    expect_err(
        b,
        CHECK,
        store
            .append_attributed(
                kid.id,
                RunId::new(),
                std::slice::from_ref(&entry),
                None,
                &unknown,
            )
            .await,
        StoreErrorKind::NotFound,
    );
    let stale = SessionUpdate {
        expected_version: Some(kid.version + 5),
        own_usage: Some(usage),
        ..SessionUpdate::default()
    };
    let fine = Attribution {
        from: kid.id,
        usage,
        cost: 9,
        targets: chain(&[(top.id, kid.id)]),
    };
    expect_err(
        b,
        CHECK,
        store
            .append_attributed(kid.id, RunId::new(), &[entry], Some(&stale), &fine)
            .await,
        StoreErrorKind::Conflict,
    );
    assert_eq!(
        get(store, CHECK, top.id).await,
        top,
        "[{b}] {CHECK}: root changed"
    );
    assert_eq!(
        get(store, CHECK, kid.id).await,
        kid,
        "[{b}] {CHECK}: kid changed"
    );
    for id in [top.id, kid.id] {
        assert!(
            store.transcript(id, 0, None).await.unwrap().is_empty(),
            "[{b}] {CHECK}: an entry was written"
        );
    }
}

/// 8 children × 25 attributions to one parent at once: the parent's attributed usage is the
/// exact sum, and its entries' aggregates are 200 distinct values up to that sum.
pub async fn concurrent_attributions_sum(store: &dyn Store) {
    const CHECK: &str = "concurrent_attributions_sum";
    let b = store.backend();
    let top = root("attr sum");
    create(store, CHECK, &top).await;
    let kids: Vec<_> = (0..8).map(|i| child(&top, &format!("kid-{i}"))).collect();
    for kid in &kids {
        create(store, CHECK, kid).await;
    }
    let kids = &kids;
    let top_id = top.id;
    parallel(8, |task| async move {
        let kid = &kids[task];
        let attribution = Attribution {
            from: kid.id,
            usage: Usage::new(1, 2),
            cost: 5,
            targets: chain(&[(top_id, kid.id)]),
        };
        for i in 0..25u32 {
            let entry = EntryKind::Usage {
                turn: i + 1,
                usage: attribution.usage,
                context_tokens: 1,
            };
            store
                .append_attributed(kid.id, RunId::new(), &[entry], None, &attribution)
                .await
                .unwrap_or_else(|e| panic!("[{b}] {CHECK}: task {task} failed: {e}"));
        }
    });
    let top_now = get(store, CHECK, top.id).await;
    assert_eq!(
        top_now.attributed_usage,
        Usage::new(200, 400),
        "[{b}] {CHECK}: sum"
    );
    assert_eq!(top_now.attributed_cost, 1_000, "[{b}] {CHECK}: cost sum");
    let mut totals: Vec<u64> = store
        .transcript(top.id, 0, None)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EntryKind::UsageAttributed { aggregate, .. } => Some(aggregate.total_tokens),
            EntryKind::CostAttributed { .. } => None,
            other => panic!("[{b}] {CHECK}: unexpected entry {other:?}"),
        })
        .collect();
    totals.sort_unstable();
    assert_eq!(
        totals,
        (1..=200).map(|i| i * 3).collect::<Vec<_>>(),
        "[{b}] {CHECK}: aggregates"
    );
}

/// A rename (`SessionUpdate::name`) frees the old name and takes the new one among live
/// siblings: a taken name is refused with `NameTaken`, changing nothing; a deleted sibling's
/// name is free; a root may take any name.
pub async fn renames_keep_sibling_names_unique(store: &dyn Store) {
    const CHECK: &str = "renames_keep_sibling_names_unique";
    let b = store.backend();
    let parent = root("renames");
    create(store, CHECK, &parent).await;
    let (a, c) = (child(&parent, "alpha"), child(&parent, "gamma"));
    create(store, CHECK, &a).await;
    create(store, CHECK, &c).await;
    let rename = |name: &str| SessionUpdate {
        name: Some(name.to_owned()),
        ..SessionUpdate::default()
    };
    let err = expect_err(
        b,
        CHECK,
        store.update_session(a.id, &rename("gamma")).await,
        StoreErrorKind::AlreadyExists,
    );
    assert_eq!(
        err,
        StoreError::NameTaken {
            name: "gamma".into()
        },
        "[{b}] {CHECK}"
    );
    assert_eq!(get(store, CHECK, a.id).await.name, "alpha", "[{b}] {CHECK}");
    let renamed = store.update_session(a.id, &rename("beta")).await;
    let renamed = renamed.unwrap_or_else(|e| panic!("[{b}] {CHECK}: rename failed: {e}"));
    assert_eq!(renamed.name, "beta", "[{b}] {CHECK}");
    // The old name is free again, the new one is held.
    let reuse = child(&parent, "alpha");
    create(store, CHECK, &reuse).await;
    let clash = child(&parent, "beta");
    expect_err(
        b,
        CHECK,
        store.create_session(&clash).await,
        StoreErrorKind::AlreadyExists,
    );
    // Renaming to its own name changes nothing but the version.
    let same = store.update_session(a.id, &rename("beta")).await;
    assert!(same.is_ok(), "[{b}] {CHECK}: a rename to its own name");
}
