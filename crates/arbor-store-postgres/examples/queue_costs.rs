//! What the work queue's operations cost on a server: enqueue, claim (one at a time and in
//! batches), heartbeat, relay (a batch of 8 events), read relayed events, finish; in a schema
//! of its own, dropped afterwards.
//!
//! ```sh
//! ARBOR_BENCH_POSTGRES_URL=postgres://arbor@127.0.0.1:5432/arbor \
//!   cargo run --release -p arbor-store-postgres --example queue_costs
//! ```
#![allow(
    clippy::print_stdout,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs
)]

use std::time::{Duration, Instant};

use arbor_store::{SessionRecord, Store};
use arbor_store_postgres::{ChildRun, PostgresOptions, WorkQueue};
use serde_json::json;

const N: usize = 400;

fn per_op(label: &str, took: Duration, n: usize) {
    let n32 = u32::try_from(n).unwrap();
    println!(
        "{label:<34} {:>8.3} ms/op  {:>8.0} /s",
        (took / n32).as_secs_f64() * 1e3,
        n as f64 / took.as_secs_f64()
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let url = std::env::var("ARBOR_BENCH_POSTGRES_URL")
        .or_else(|_| std::env::var("ARBOR_STORE_URL"))
        .expect("set ARBOR_BENCH_POSTGRES_URL to a PostgreSQL server");
    let schema = format!("arbor_queue_costs_{}", std::process::id());
    let store = PostgresOptions::new()
        .schema(&schema)
        .connect(&url)
        .await
        .unwrap();
    let root = SessionRecord::new_root("root", "root", "m");
    store.create_session(&root).await.unwrap();
    let mut kids = Vec::with_capacity(N);
    for i in 0..N {
        let kid = SessionRecord::new_child(&root, format!("k{i}"), "kid", "m");
        store.create_session(&kid).await.unwrap();
        kids.push(kid);
    }
    let queue = WorkQueue::new(&store, "bench", Duration::from_secs(60));
    let run = |kid: &SessionRecord| ChildRun {
        session: kid.id,
        parent: root.id,
        root: root.id,
        payload: json!({"spec": "x", "input": "go"}),
        max_active: Some(32),
    };

    let t = Instant::now();
    for kid in &kids {
        queue.enqueue(&run(kid)).await.unwrap();
    }
    per_op("enqueue", t.elapsed(), N);

    // One at a time, finishing each so the tree's 32 slots never fill.
    let t = Instant::now();
    let mut held = Vec::new();
    for _ in 0..N / 2 {
        let c = queue.claim(1).await.unwrap().pop().unwrap();
        held.push(c);
        if held.len() == 16 {
            for c in held.drain(..) {
                queue.finish(&c, true, &json!({})).await.unwrap();
            }
        }
    }
    let one_at_a_time = t.elapsed();
    for c in held.drain(..) {
        queue.finish(&c, true, &json!({})).await.unwrap();
    }
    per_op("claim, one at a time (+ finish)", one_at_a_time, N / 2);

    let t = Instant::now();
    let mut claimed = 0;
    let mut last = Vec::new();
    while claimed < N / 2 {
        let batch = queue.claim(32).await.unwrap();
        claimed += batch.len();
        for c in &batch {
            if claimed < N / 2 {
                queue.finish(c, true, &json!({})).await.unwrap();
            }
        }
        last = batch;
    }
    per_op("claim, 32 at a time (+ finish)", t.elapsed(), N / 2);

    let c = last.pop().unwrap();
    let t = Instant::now();
    for _ in 0..N {
        queue.heartbeat(&c).await.unwrap();
    }
    per_op("heartbeat", t.elapsed(), N);

    let events: Vec<_> = (0..8)
        .map(|i| json!({"type": "turn_started", "turn": i}))
        .collect();
    let t = Instant::now();
    for _ in 0..N {
        queue.relay(&c, &events).await.unwrap();
    }
    per_op("relay, 8 events", t.elapsed(), N);

    let t = Instant::now();
    let mut after = 0;
    for _ in 0..N {
        let got = queue.events_after(c.session, after).await.unwrap();
        after = got.last().map_or(after, |(s, _)| *s);
    }
    per_op("read relayed events", t.elapsed(), N);

    let t = Instant::now();
    queue
        .finish(&c, true, &json!({"outcome": "ran"}))
        .await
        .unwrap();
    for c in &last {
        queue.finish(c, true, &json!({})).await.unwrap();
    }
    per_op("finish", t.elapsed(), last.len() + 1);

    store.drop_schema(&schema).await.unwrap();
}
