use std::sync::Arc;

use arbor_core::RunOptions;
use arbor_model::ScriptedTurn;
use arbor_protocol::{EntryKind, Message, SessionStatus, Usage};
use arbor_store::{MemoryStore, Store};
use serde_json::json;

use super::support::*;

#[tokio::test]
async fn own_usage_and_context_size_are_separate_numbers() {
    let agent = scripted(vec![
        ScriptedTurn::tool_call("echo", json!({"text": "x"})).with_usage(100, 10),
        ScriptedTurn::text("first").with_usage(300, 20),
        ScriptedTurn::text("second").with_usage(350, 5),
    ])
    .tool(arbor_core::builtin::Echo);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let agent = agent.build().unwrap();
    let mut s = agent.session().store(store.clone()).create().await.unwrap();
    let r1 = s.run("one", RunOptions::default()).await.unwrap();
    assert_eq!(r1.usage, Usage::new(400, 30));
    assert_eq!(s.context_tokens(), 300);
    let r2 = s.run("two", RunOptions::default()).await.unwrap();
    assert_eq!(r2.usage, Usage::new(350, 5));
    // Own usage sums every turn; the context is the last prompt only.
    assert_eq!(s.usage(), Usage::new(750, 35));
    assert_eq!(s.context_tokens(), 350);
    let record = store.session(s.id()).await.unwrap().unwrap();
    assert_eq!(record.own_usage, Usage::new(750, 35));
    assert_eq!(record.context_tokens, 350);
    assert_eq!(record.status, SessionStatus::Succeeded);
    assert_eq!(record.aggregate_usage(), record.own_usage);
}

#[tokio::test]
async fn the_transcript_records_everything_and_a_session_reopens_from_it() {
    let agent = scripted(vec![
        ScriptedTurn::tool_call("echo", json!({"text": "x"})).with_usage(10, 5),
        ScriptedTurn::text("done").with_usage(20, 2),
        ScriptedTurn::text("follow-up answer").with_usage(30, 1),
    ])
    .tool(arbor_core::builtin::Echo)
    .build()
    .unwrap();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let mut s = agent
        .session()
        .store(store.clone())
        .name("first")
        .create()
        .await
        .unwrap();
    s.run("go", RunOptions::default()).await.unwrap();
    let entries = store.transcript(s.id(), 0, None).await.unwrap();
    let kinds: Vec<_> = entries.iter().map(|e| e.kind.kind_name()).collect();
    assert_eq!(
        kinds,
        vec![
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
    let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=8).collect::<Vec<_>>());
    match &entries[7].kind {
        EntryKind::RunFinished { usage, .. } => assert_eq!(*usage, Usage::new(30, 7)),
        other => panic!("{other:?}"),
    }

    // A new process would reopen it from the store: messages and usage come back.
    let id = s.id();
    let messages = s.messages().to_vec();
    drop(s);
    let mut again = agent.open_session(store.clone(), id).await.unwrap();
    assert_eq!(again.messages(), &messages[..]);
    assert_eq!(again.usage(), Usage::new(30, 7));
    assert_eq!(again.record().name, "first");
    let r = again.run("and then?", RunOptions::default()).await.unwrap();
    assert_eq!(r.text, "follow-up answer");
    assert!(matches!(
        again.messages().last(),
        Some(Message::Assistant { .. })
    ));
    assert_eq!(again.usage(), Usage::new(60, 8));

    let other = scripted(vec![]).build().unwrap();
    let renamed = arbor_core::Agent::builder("other")
        .shared_provider(other.provider().clone())
        .build()
        .unwrap();
    let err = renamed.open_session(store.clone(), id).await.unwrap_err();
    assert!(err.to_string().contains("runs agent \"tester\""), "{err}");
    let err = agent
        .open_session(store, arbor_protocol::SessionId::new())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), arbor_core::CoreErrorKind::NotFound);
}

/// A write that lands after its caller stopped waiting (the run's future dropped while its
/// turn was being stored, as a timeout does) must not be lost from the session's own usage:
/// the next turn adds to what the store holds, not to the session's stale copy.
#[tokio::test]
async fn a_turn_stored_after_its_run_was_dropped_still_counts_in_own_usage() {
    use arbor_store::testing::{Call, FaultStore};
    let faults = FaultStore::new(Arc::new(MemoryStore::new()));
    let store: Arc<dyn Store> = faults.clone();
    let agent = scripted(vec![
        ScriptedTurn::tool_call("echo", json!({"text": "x"})).with_usage(10, 5),
        ScriptedTurn::text("after").with_usage(20, 2),
    ])
    .tool(arbor_core::builtin::Echo)
    .build()
    .unwrap();
    let mut s = agent.session().store(store.clone()).create().await.unwrap();
    // The first turn's write lands, then is held: its caller never hears the answer.
    let held = faults.arm(true, |call| {
        matches!(call, Call::Append(_, entries, Some(update))
            if update.own_usage.is_some() && entries.iter().any(|e| e.kind_name() == "usage"))
    });
    let run = s.run("go", RunOptions::default());
    let dropped = tokio::select! {
        _ = run => false,
        _ = held.reached => true,
    };
    assert!(dropped, "the run was dropped while its turn was stored");
    drop(held.release);
    let stored = store.session(s.id()).await.unwrap().unwrap();
    assert_eq!(stored.own_usage, Usage::new(10, 5), "the first turn landed");

    // The session runs again (its conversation never heard of the dropped turn, so the
    // script answers from its start): every turn of it adds to the stored usage.
    let r = s.run("again", RunOptions::default()).await.unwrap();
    assert_eq!(r.usage, Usage::new(30, 7));
    let stored = store.session(s.id()).await.unwrap().unwrap();
    assert_eq!(
        stored.own_usage,
        Usage::new(40, 12),
        "10+5 landed, then 30+7"
    );
    assert_eq!(s.usage(), Usage::new(40, 12));
}
