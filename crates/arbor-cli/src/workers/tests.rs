//! The relay of a child's events through the store, both ends of it as the CLI runs them:
//! the worker's writer ([`relay_events`](super::worker)) and the parent's reader
//! ([`QueueRunner`]), against the test server of `ARBOR_TEST_POSTGRES_URL` (skipped loudly
//! without one).

use std::sync::Arc;
use std::time::Duration;

use arbor_core::session::events::EventBus;
use arbor_core::supervisor::{ChildRunner, RemoteChild, RemoteOutcome};
use arbor_protocol::{AgentEvent, EventEnvelope, RunId, Timestamp};
use arbor_store::{SessionRecord, Store};
use arbor_store_postgres::{PostgresOptions, WorkQueue};

use super::runner::{QueueRunner, Waiters};

fn envelope(seq: u64, session: arbor_protocol::SessionId, run: RunId, turn: u32) -> EventEnvelope {
    EventEnvelope {
        seq,
        at: Timestamp::now(),
        session_id: session,
        run_id: run,
        event: AgentEvent::TurnStarted { turn },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
async fn a_childs_events_go_from_its_worker_to_its_parents_bus_in_order_before_its_outcome() {
    let Ok(url) = std::env::var("ARBOR_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "a_childs_events_go_from_its_worker_to_its_parents_bus: no PostgreSQL server under \
             CI=true (a CI run without one is not green)"
        );
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED a_childs_events_go_from_its_worker_to_its_parents_bus: no PostgreSQL \
             server (set ARBOR_TEST_POSTGRES_URL, or run `. .ci/postgres.sh` first)"
        );
        return;
    };
    let schema = format!("arbor_cli_relay_{}", std::process::id());
    let store = PostgresOptions::new()
        .schema(&schema)
        .connect(&url)
        .await
        .unwrap();
    let root = SessionRecord::new_root("root", "root", "scripted");
    store.create_session(&root).await.unwrap();
    let kid = SessionRecord::new_child(&root, "kid", "kid", "scripted");
    store.create_session(&kid).await.unwrap();

    let mut parent = QueueRunner::new(
        Arc::new(Waiters::new(WorkQueue::new(
            &store,
            "parent",
            Duration::from_secs(5),
        ))),
        "fingerprint".to_owned(),
    );
    // The parent's wait stops between its read of the events and its read of the state
    // until the test lets it go on.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    parent.between_reads = Some(Arc::clone(&gate));
    let bus = Arc::new(EventBus::new(kid.id, 256));
    let mut seen = bus.subscribe();
    let child = RemoteChild {
        session: kid.id,
        parent: root.id,
        root: root.id,
        child_id: "kid".into(),
        input: "go".into(),
        limits: Default::default(),
        max_active: 4,
        cancel: Default::default(),
        resume_run: None,
        mapping: None,
        events: Some(bus),
    };
    let waiting = tokio::spawn(async move { parent.run(child).await });

    // The worker's side: claim, relay the run's events as they come, report.
    let worker = WorkQueue::new(&store, "worker", Duration::from_secs(5));
    let claim = loop {
        if let Some(c) = worker.claim(1).await.unwrap().pop() {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(claim.payload["stream"], true, "{}", claim.payload);
    let run = RunId::new();
    let relay = |turns: std::ops::RangeInclusive<u32>| {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        for turn in turns {
            tx.send(envelope(u64::from(turn), kid.id, run, turn))
                .unwrap();
        }
        drop(tx);
        tokio::spawn(super::worker::relay_events(
            worker.clone(),
            claim.clone(),
            rx,
        ))
    };
    // The first 64 events, read by the parent (then held before its state read).
    relay(1..=64).await.unwrap();
    gate.add_permits(1);
    let mut turns = Vec::new();
    while turns.len() < 64 {
        match tokio::time::timeout(Duration::from_secs(10), seen.recv()).await {
            Ok(Some(e)) => {
                if let AgentEvent::TurnStarted { turn } = e.event {
                    turns.push(turn);
                }
            }
            other => panic!("the first events never arrived: {other:?}"),
        }
    }
    // The rest, and the outcome, land between the parent's read of the events and its read
    // of the state: the state says done, and the events it has not read yet must still
    // reach the bus before the delegation ends.
    relay(65..=100).await.unwrap();
    let outcome = RemoteOutcome::Failed {
        kind: "Supervisor".into(),
        message: "done here".into(),
    };
    assert!(
        worker
            .finish(&claim, false, &serde_json::to_value(&outcome).unwrap())
            .await
            .unwrap()
    );
    gate.add_permits(1_000);
    let err = waiting.await.unwrap().unwrap_err();
    assert_eq!(err.to_string(), "done here");
    // Every event reached the parent's bus, in order, before its outcome.
    while let Some(e) = seen.try_recv() {
        if let AgentEvent::TurnStarted { turn } = e.event {
            turns.push(turn);
        }
    }
    assert_eq!(turns, (1..=100).collect::<Vec<_>>());
    // Forgotten once the outcome was read.
    assert!(worker.events_after(kid.id, 0).await.unwrap().is_empty());
    store.drop_schema(&schema).await.unwrap();
}
