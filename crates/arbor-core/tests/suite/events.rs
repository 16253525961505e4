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
