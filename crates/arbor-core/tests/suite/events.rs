use arbor_core::RunOptions;
use arbor_model::ScriptedTurn;
use arbor_protocol::AgentEvent;
use serde_json::json;

use super::support::*;

#[tokio::test]
async fn a_run_publishes_events_in_order() {
    let agent = scripted(vec![
        ScriptedTurn::tool_call("echo", json!({"text": "x"})).with_usage(10, 5),
        ScriptedTurn::text("all good").with_usage(20, 3),
    ])
    .tool(arbor_core::builtin::Echo);
    let mut s = session(agent).await;
    let mut sub = s.subscribe();
    s.run("go", RunOptions::default()).await.unwrap();
    let events = drain(&mut sub);
    assert_eq!(
        types(&events),
        vec![
            "run_started",
            "turn_started",
            "provider_turn_started",
            "provider_turn_finished",
            "tool_execution_started",
            "tool_execution_finished",
            "turn_finished",
            "turn_started",
            "provider_turn_started",
            "message_delta",
            "message_delta",
            "provider_turn_finished",
            "turn_finished",
            "run_finished",
        ]
    );
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=14).collect::<Vec<_>>());
    assert!(events.iter().all(|e| e.session_id == s.id()));
    assert_eq!(
        events[3].event,
        AgentEvent::ProviderTurnFinished {
            turn: 1,
            usage: arbor_protocol::Usage::new(10, 5),
            tool_calls: 1,
        }
    );
}

#[tokio::test]
async fn a_subscriber_that_falls_behind_gets_a_lag_marker() {
    // 40 echo turns publish far more than a 4-event queue holds.
    let mut turns: Vec<_> = (0..40)
        .map(|_| ScriptedTurn::tool_call("echo", json!({"text": "x"})))
        .collect();
    turns.push(ScriptedTurn::text("done"));
    let agent = scripted(turns)
        .tool(arbor_core::builtin::Echo)
        .event_capacity(4)
        .limits(arbor_protocol::RunLimits::HARD);
    let mut s = session(agent).await;
    let mut slow = s.subscribe();
    let mut counted = s.subscribe();
    let counter = tokio::spawn(async move {
        let mut n = 0u64;
        let mut missed = 0u64;
        while let Some(e) = counted.recv().await {
            match e.event {
                AgentEvent::EventsLagged { missed: m } => missed += m,
                _ => n += 1,
            }
        }
        (n, missed)
    });
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.turns, 41);
    let total = s
        .events()
        .publish(r.run_id, AgentEvent::TurnFinished { turn: 0 });
    let marker = slow.recv().await.unwrap();
    match marker.event {
        AgentEvent::EventsLagged { missed } => {
            // The queue kept the last 4 of `total` events.
            assert_eq!(missed, total - 4);
            assert_eq!(marker.seq, total - 3);
        }
        ref other => panic!("expected a lag marker, got {other:?}"),
    }
    let rest = drain(&mut slow);
    assert_eq!(rest.len(), 4);
    assert_eq!(rest.last().unwrap().seq, total);
    drop(s);
    let (seen, missed) = counter.await.unwrap();
    // Whatever the reader kept up with plus what it was told it missed is everything.
    assert_eq!(seen + missed, total);
}

type Log = std::sync::Arc<std::sync::Mutex<Vec<String>>>;
type Slot = std::sync::Arc<std::sync::Mutex<Option<arbor_core::Subscription>>>;

/// Store writes and published events, in the order they happened: each write first logs
/// the events published before it.
fn witnessed(store: &arbor_store::testing::FaultStore) -> (Log, Slot) {
    use arbor_store::testing::Call;
    use std::sync::{Arc, Mutex};
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let sub: Arc<Mutex<Option<arbor_core::Subscription>>> = Arc::default();
    let (l, s) = (log.clone(), sub.clone());
    // A fault that never fires: it sees every write.
    store.fail_once(move |call| {
        let mut log = l.lock().unwrap();
        if let Some(sub) = s.lock().unwrap().as_mut() {
            while let Some(e) = sub.try_recv() {
                log.push(format!("event {}", e.event.type_name()));
            }
        }
        if let Call::Append(_, entries, update) = call {
            let kinds: Vec<&str> = entries.iter().map(|e| e.kind_name()).collect();
            let status = update.and_then(|u| u.status).map(|s| format!(" {s}"));
            log.push(format!("write {kinds:?}{}", status.unwrap_or_default()));
        }
        false
    });
    (log, sub)
}

#[tokio::test]
async fn a_runs_last_turn_is_written_with_its_end_and_announced_after_the_write() {
    let store =
        arbor_store::testing::FaultStore::new(std::sync::Arc::new(arbor_store::MemoryStore::new()));
    let (log, sub) = witnessed(&store);
    let agent = scripted(vec![
        ScriptedTurn::tool_call("echo", json!({"text": "x"})).with_usage(10, 5),
        ScriptedTurn::text("all good").with_usage(20, 3),
    ])
    .tool(arbor_core::builtin::Echo);
    let mut s = agent
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .create()
        .await
        .unwrap();
    *sub.lock().unwrap() = Some(s.subscribe());
    let r = s.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, arbor_protocol::RunStatus::Succeeded);
    let mut rest = sub.lock().unwrap().take().unwrap();
    let mut log = log.lock().unwrap().clone();
    log.extend(
        drain(&mut rest)
            .iter()
            .map(|e| format!("event {}", e.event.type_name())),
    );
    let log: Vec<&str> = log.iter().map(String::as_str).collect();
    assert_eq!(
        log,
        [
            r#"write ["run_started", "message"] running"#,
            "event run_started",
            "event turn_started",
            "event provider_turn_started",
            r#"write ["message", "usage"]"#,
            "event provider_turn_finished",
            "event tool_execution_started",
            "event tool_execution_finished",
            r#"write ["message"]"#,
            "event turn_finished",
            "event turn_started",
            "event provider_turn_started",
            "event message_delta",
            "event message_delta",
            // The last turn and the run's end: one write, and the turn's events after it.
            r#"write ["message", "usage", "run_finished"] succeeded"#,
            "event provider_turn_finished",
            "event turn_finished",
            "event run_finished",
        ]
    );
    // What was written is what a reader finds.
    use arbor_store::Store;
    let entries = store.transcript(s.id(), 0, None).await.unwrap();
    let kinds: Vec<&str> = entries.iter().map(|e| e.kind.kind_name()).collect();
    assert_eq!(
        kinds,
        [
            "run_started",
            "message",
            "message",
            "usage",
            "message",
            "message",
            "usage",
            "run_finished"
        ]
    );
    let stored = store.session(s.id()).await.unwrap().unwrap();
    assert_eq!(stored.own_usage, arbor_protocol::Usage::new(30, 8));
}
