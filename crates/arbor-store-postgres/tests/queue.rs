//! Child runs as claimable work: slots that never overshoot across claimers, takeovers after
//! a lease runs out with one report per run, cancellation, and wake-ups.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use arbor_protocol::SessionId;
use arbor_store::{SessionRecord, Store, StoreErrorKind};
use arbor_store_postgres::{ChildRun, Heartbeat, PostgresStore, RunState, Wake, WorkQueue};
use serde_json::json;
use sqlx::Connection;
use tokio::sync::Mutex;

/// A root and `n` children of it, created in the store.
async fn family(store: &PostgresStore, n: usize) -> (SessionRecord, Vec<SessionRecord>) {
    let root = SessionRecord::new_root("root", "planner", "model-a");
    store.create_session(&root).await.unwrap();
    let mut kids = Vec::new();
    for i in 0..n {
        let kid = SessionRecord::new_child(&root, format!("kid-{i}"), "worker", "model-b");
        store.create_session(&kid).await.unwrap();
        kids.push(kid);
    }
    (root, kids)
}

fn run_of(root: &SessionRecord, kid: &SessionRecord, max_active: Option<u32>) -> ChildRun {
    ChildRun {
        session: kid.id,
        parent: root.id,
        root: root.id,
        payload: json!({"child": kid.name}),
        max_active,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_workers_never_exceed_max_active_and_every_run_is_reported_once() {
    let Some(url) = common::server("four_workers_never_exceed_max_active") else {
        return;
    };
    let (store, schema) = common::fresh_store(&url).await;
    let (root, kids) = family(&store, 100).await;
    let host = WorkQueue::new(&store, "host", Duration::from_secs(5));
    for kid in &kids {
        host.enqueue(&run_of(&root, kid, Some(8))).await.unwrap();
    }

    // The live count, sampled from the database while the workers run.
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (host, stop, peak) = (host.clone(), stop.clone(), peak.clone());
        tokio::spawn(async move {
            let mut samples = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let live = host.live(root.id).await.unwrap();
                peak.fetch_max(live, Ordering::Relaxed);
                samples += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            samples
        })
    };

    // Each report that landed, by session; and the claims killed workers abandoned.
    let reports: Arc<Mutex<HashMap<SessionId, u32>>> = Arc::default();
    let abandoned = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for w in 0..4u64 {
        let queue = WorkQueue::new(&store, format!("worker-{w}"), Duration::from_millis(400));
        let (reports, abandoned) = (reports.clone(), abandoned.clone());
        workers.push(tokio::spawn(async move {
            let mut round = 0u64;
            loop {
                round += 1;
                let claims = queue.claim(3).await.unwrap();
                if claims.is_empty() {
                    if reports.lock().await.len() == 100 {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                }
                // Every seventh round of a worker is a crash: its claims are left to expire.
                if (round + w).is_multiple_of(7) {
                    abandoned.fetch_add(claims.len() as u64, Ordering::Relaxed);
                    continue;
                }
                for claim in claims {
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    assert_eq!(
                        queue.heartbeat(&claim).await.unwrap(),
                        Heartbeat::Held { cancel: false }
                    );
                    let outcome = json!({"by": w, "attempt": claim.attempt});
                    if queue.finish(&claim, true, &outcome).await.unwrap() {
                        *reports.lock().await.entry(claim.session).or_default() += 1;
                    }
                }
            }
        }));
    }
    for worker in workers {
        tokio::time::timeout(Duration::from_secs(60), worker)
            .await
            .expect("the workers finished every run")
            .unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let samples = sampler.await.unwrap();

    let reports = reports.lock().await;
    assert_eq!(reports.len(), 100);
    assert!(reports.values().all(|&n| n == 1), "{reports:?}");
    let peak = peak.load(Ordering::Relaxed);
    assert!(peak <= 8, "{peak} live children with max_active = 8");
    assert!(
        peak >= 2,
        "the workers never ran children side by side ({peak})"
    );
    assert!(samples > 10, "{samples} samples");
    assert!(abandoned.load(Ordering::Relaxed) > 0, "no worker crashed");
    // Every abandoned claim was taken over: an attempt above 1 for each.
    let taken_over: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT COALESCE(SUM(attempts - 1), 0)::BIGINT FROM \"{schema}\".child_runs"
    )))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(taken_over as u64, abandoned.load(Ordering::Relaxed));
    assert_eq!(host.live(root.id).await.unwrap(), 0, "a slot leaked");
    common::drop_schema(&store, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_claim_is_taken_over_and_only_the_new_holder_reports() {
    let Some(url) = common::server("a_lapsed_claim_is_taken_over") else {
        return;
    };
    let (store, schema) = common::fresh_store(&url).await;
    let (root, kids) = family(&store, 1).await;
    let first = WorkQueue::new(&store, "first", Duration::from_millis(200));
    let second = WorkQueue::new(&store, "second", Duration::from_secs(5));
    first
        .enqueue(&run_of(&root, &kids[0], Some(1)))
        .await
        .unwrap();

    let ids = [root.id, kids[0].id];
    assert_eq!(
        store.held_by_queue(&ids).await.unwrap(),
        [kids[0].id],
        "queued"
    );
    let held = first.claim(1).await.unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].attempt, 1);
    assert_eq!(held[0].payload, json!({"child": "kid-0"}));
    // While the lease holds, nobody else gets it, and the slot is taken.
    assert!(second.claim(1).await.unwrap().is_empty());
    assert_eq!(second.live(root.id).await.unwrap(), 1);

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        second.live(root.id).await.unwrap(),
        0,
        "a lapsed claim still counted"
    );
    // Still the queue's, for a takeover: a crash sweep leaves it alone.
    assert_eq!(store.held_by_queue(&ids).await.unwrap(), [kids[0].id]);
    let taken = second.claim(1).await.unwrap();
    assert_eq!(taken.len(), 1);
    assert_eq!(taken[0].attempt, 2);

    // The first holder wakes up: its claim is gone, and its report is refused.
    assert_eq!(first.heartbeat(&held[0]).await.unwrap(), Heartbeat::Lost);
    assert!(!first.finish(&held[0], true, &json!("first")).await.unwrap());
    assert!(
        second
            .finish(&taken[0], true, &json!("second"))
            .await
            .unwrap()
    );
    assert_eq!(
        second.state(kids[0].id).await.unwrap(),
        Some((RunState::Done, Some(json!("second"))))
    );
    // A finished run is claimed by nobody, and held by no queue.
    assert!(first.claim(5).await.unwrap().is_empty());
    assert!(store.held_by_queue(&ids).await.unwrap().is_empty());
    common::drop_schema(&store, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancels_reach_queued_and_claimed_runs_and_wakeups_arrive() {
    let Some(url) = common::server("cancels_reach_queued_and_claimed_runs") else {
        return;
    };
    let (store, schema) = common::fresh_store(&url).await;
    let (root, kids) = family(&store, 2).await;
    let queue = WorkQueue::new(&store, "worker", Duration::from_secs(5));
    let mut wakeups = queue.listen().await.unwrap();

    queue.enqueue(&run_of(&root, &kids[0], None)).await.unwrap();
    assert_eq!(wakeups.next(Duration::from_secs(5)).await, Some(Wake::Work));
    let claim = queue.claim(1).await.unwrap().remove(0);
    queue.enqueue(&run_of(&root, &kids[1], None)).await.unwrap();

    // Queued: cancelled at once, never claimed.
    assert_eq!(queue.cancel(kids[1].id).await.unwrap(), RunState::Cancelled);
    assert!(queue.claim(5).await.unwrap().is_empty());
    // Claimed: the holder hears it at its next heartbeat, then reports.
    assert_eq!(queue.cancel(kids[0].id).await.unwrap(), RunState::Claimed);
    assert_eq!(
        queue.heartbeat(&claim).await.unwrap(),
        Heartbeat::Held { cancel: true }
    );
    assert!(
        queue
            .finish(&claim, false, &json!({"cancelled": true}))
            .await
            .unwrap()
    );
    // The waiting parent is woken for that run (after the wake-ups for the enqueue).
    let mut finished = None;
    while let Some(wake) = wakeups.next(Duration::from_secs(5)).await {
        if wake == Wake::Finished(kids[0].id) {
            finished = Some(wake);
            break;
        }
    }
    assert_eq!(finished, Some(Wake::Finished(kids[0].id)));
    assert_eq!(
        queue.state(kids[0].id).await.unwrap(),
        Some((RunState::Failed, Some(json!({"cancelled": true}))))
    );

    // A run that ended is queued again (a suspended run resumed): claimed anew as a first
    // claim (not a takeover), the old outcome gone.
    let mut resumed = run_of(&root, &kids[0], None);
    resumed.payload = json!({"resume": true});
    queue.enqueue(&resumed).await.unwrap();
    assert_eq!(
        queue.state(kids[0].id).await.unwrap(),
        Some((RunState::Queued, None))
    );
    // Bad input: a second enqueue while queued, an unknown session, an unknown cancel.
    let again = queue.enqueue(&resumed).await.unwrap_err();
    assert_eq!(again.kind(), StoreErrorKind::AlreadyExists, "{again}");
    let claim = queue.claim(5).await.unwrap().remove(0);
    assert_eq!(
        (claim.attempt, &claim.payload),
        (1, &json!({"resume": true}))
    );
    let again = queue.enqueue(&resumed).await.unwrap_err();
    assert_eq!(
        again.kind(),
        StoreErrorKind::AlreadyExists,
        "claimed: {again}"
    );
    let stranger = SessionRecord::new_root("stranger", "x", "y");
    let unknown = queue
        .enqueue(&run_of(&root, &stranger, None))
        .await
        .unwrap_err();
    assert_eq!(unknown.kind(), StoreErrorKind::NotFound, "{unknown}");
    let err = queue.cancel(stranger.id).await.unwrap_err();
    assert_eq!(err.kind(), StoreErrorKind::NotFound, "{err}");
    assert_eq!(queue.state(stranger.id).await.unwrap(), None);
    common::drop_schema(&store, &schema).await;
}

/// A refused enqueue (the run is queued already) leaves no lock behind. Its transaction used
/// to be dropped, its rollback left to the pool's return of the connection, a task of the
/// runtime: until that ran, the `ON CONFLICT` row lock stayed, and a `SKIP LOCKED` claim would
/// pass over the run. The interleaving is forced: right after the refusal, this runtime's one
/// thread blocks while another thread takes the row's lock with `NOWAIT`, so a rollback left
/// to a task has not run yet.
#[tokio::test]
async fn a_refused_enqueue_leaves_no_lock_for_claims_to_skip() {
    let Some(url) = common::server("a_refused_enqueue_leaves_no_lock") else {
        return;
    };
    let (store, schema) = common::fresh_store(&url).await;
    let (root, kids) = family(&store, 1).await;
    let queue = WorkQueue::new(&store, "parent", Duration::from_secs(5));
    queue.enqueue(&run_of(&root, &kids[0], None)).await.unwrap();
    let again = queue
        .enqueue(&run_of(&root, &kids[0], None))
        .await
        .unwrap_err();
    assert_eq!(again.kind(), StoreErrorKind::AlreadyExists);
    // Blocking this thread: nothing of this runtime runs meanwhile.
    let sql =
        format!("SELECT 1 FROM \"{schema}\".child_runs WHERE session_id = $1 FOR UPDATE NOWAIT");
    let session = kids[0].id.to_string();
    let locked = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(async {
                        let mut other = sqlx::PgConnection::connect(&url).await.unwrap();
                        sqlx::query(sqlx::AssertSqlSafe(sql))
                            .bind(&session)
                            .fetch_optional(&mut other)
                            .await
                            .map(|_| ())
                            .map_err(|e| e.to_string())
                    })
            })
            .join()
            .unwrap()
    });
    assert_eq!(locked, Ok(()), "the refused enqueue still held the row");
    let claims = queue.claim(1).await.unwrap();
    assert_eq!(claims.len(), 1, "the run was skipped as locked");
    common::drop_schema(&store, &schema).await;
}

/// The contract's `maxActiveChildren` counts the whole tree: runs under two different parents
/// of one root share its slots, while another tree's runs do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_active_counts_the_whole_tree_not_each_parent() {
    let Some(url) = common::server("max_active_counts_the_whole_tree") else {
        return;
    };
    let (store, schema) = common::fresh_store(&url).await;
    let (root, leads) = family(&store, 2).await;
    let mut grandchildren = Vec::new();
    for lead in &leads {
        for i in 0..3 {
            let kid = SessionRecord::new_child(lead, format!("g-{i}"), "worker", "model-b");
            store.create_session(&kid).await.unwrap();
            grandchildren.push(ChildRun {
                session: kid.id,
                parent: lead.id,
                root: root.id,
                payload: json!({}),
                max_active: Some(3),
            });
        }
    }
    let (other_root, other_kids) = family(&store, 1).await;
    let queue = WorkQueue::new(&store, "w", Duration::from_secs(5));
    for run in &grandchildren {
        queue.enqueue(run).await.unwrap();
    }
    queue
        .enqueue(&run_of(&other_root, &other_kids[0], Some(3)))
        .await
        .unwrap();
    // Six runs of one tree under two parents with three slots: three go, and the other
    // tree's run is not held back by them.
    let claims = queue.claim(10).await.unwrap();
    let ours = claims.iter().filter(|c| c.root == root.id).count();
    assert_eq!(ours, 3, "{claims:?}");
    assert!(claims.iter().any(|c| c.root == other_root.id));
    assert_eq!(queue.live(root.id).await.unwrap(), 3);
    assert!(queue.claim(10).await.unwrap().is_empty());
    // One ends: one more of the tree goes, whichever parent it has.
    let done = claims.iter().find(|c| c.root == root.id).unwrap();
    assert!(queue.finish(done, true, &json!("ok")).await.unwrap());
    assert_eq!(queue.claim(10).await.unwrap().len(), 1);
    assert_eq!(queue.live(root.id).await.unwrap(), 3);
    common::drop_schema(&store, &schema).await;
}

/// A delete anywhere above a claimed run (its own session, its parent) cancels it at its
/// worker's next heartbeat, whichever process wrote the tombstone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tombstone_on_the_run_or_above_it_cancels_it_at_the_next_heartbeat() {
    let Some(url) = common::server("a_tombstone_cancels_at_the_next_heartbeat") else {
        return;
    };
    let (store, schema) = common::fresh_store(&url).await;
    let (root, leads) = family(&store, 2).await;
    let mut runs = Vec::new();
    for lead in &leads {
        let kid = SessionRecord::new_child(lead, "leaf", "worker", "model-b");
        store.create_session(&kid).await.unwrap();
        runs.push(ChildRun {
            session: kid.id,
            parent: lead.id,
            root: root.id,
            payload: json!({}),
            max_active: None,
        });
    }
    let queue = WorkQueue::new(&store, "worker", Duration::from_secs(5));
    for run in &runs {
        queue.enqueue(run).await.unwrap();
    }
    let claims = queue.claim(2).await.unwrap();
    assert_eq!(claims.len(), 2);
    for claim in &claims {
        assert_eq!(
            queue.heartbeat(claim).await.unwrap(),
            Heartbeat::Held { cancel: false }
        );
    }
    let tombstone = |r: &SessionRecord| arbor_store::SessionUpdate {
        tombstone: Some(arbor_store::Tombstone {
            at: arbor_protocol::Timestamp::now(),
            by: "user:another-host".into(),
            reason: "not needed".into(),
            final_status: r.status,
            usage: r.own_usage,
        }),
        ..Default::default()
    };
    // The first leaf's parent is deleted; the second leaf itself.
    store
        .update_session(leads[0].id, &tombstone(&leads[0]))
        .await
        .unwrap();
    let second = store.session(runs[1].session).await.unwrap().unwrap();
    store
        .update_session(second.id, &tombstone(&second))
        .await
        .unwrap();
    for claim in &claims {
        assert_eq!(
            queue.heartbeat(claim).await.unwrap(),
            Heartbeat::Held { cancel: true },
            "{claim:?}"
        );
    }
    common::drop_schema(&store, &schema).await;
}

/// A run's events go from its holder to whoever streams them, in order, with a wake-up; a
/// holder whose lease was taken over relays nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_are_relayed_in_order_by_the_holder_only() {
    let Some(url) = common::server("events_are_relayed_in_order") else {
        return;
    };
    let (store, schema) = common::fresh_store(&url).await;
    let (root, kids) = family(&store, 1).await;
    let first = WorkQueue::new(&store, "first", Duration::from_millis(200));
    let second = WorkQueue::new(&store, "second", Duration::from_secs(5));
    let mut wakeups = second.listen().await.unwrap();
    first.enqueue(&run_of(&root, &kids[0], None)).await.unwrap();
    let claim = first.claim(1).await.unwrap().remove(0);
    let batch: Vec<_> = (0..5).map(|i| json!({"n": i})).collect();
    first.relay(&claim, &batch[..3]).await.unwrap();
    first.relay(&claim, &batch[3..]).await.unwrap();
    let mut woken = false;
    while let Some(wake) = wakeups.next(Duration::from_secs(5)).await {
        if wake == Wake::Events(kids[0].id) {
            woken = true;
            break;
        }
    }
    assert!(woken, "no wake-up for relayed events");
    let all = second.events_after(kids[0].id, 0).await.unwrap();
    let values: Vec<_> = all.iter().map(|(_, v)| v.clone()).collect();
    assert_eq!(values, batch);
    let later = second.events_after(kids[0].id, all[2].0).await.unwrap();
    assert_eq!(later.len(), 2);
    // Taken over: the old holder's events are refused.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(second.claim(1).await.unwrap().len(), 1);
    first.relay(&claim, &[json!({"late": true})]).await.unwrap();
    assert_eq!(second.events_after(kids[0].id, 0).await.unwrap().len(), 5);
    second.forget_events(kids[0].id).await.unwrap();
    assert!(second.events_after(kids[0].id, 0).await.unwrap().is_empty());
    common::drop_schema(&store, &schema).await;
}
