//! What stays bounded in a long-lived supervisor: the sessions it tracks after many
//! children have come and gone, and an `after` hook that never returns.

use std::sync::Arc;
use std::time::Duration;

use arbor_core::process::SupervisorProcess;
use arbor_core::supervisor::{
    AfterHook, ChildEntry, Completion, DelegationRequest, Ownership, Supervisor,
};
use arbor_core::{Agent, SessionRef};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_store::{MemoryStore, Store};
use async_trait::async_trait;

fn worker() -> Agent {
    Agent::builder("worker")
        .provider(ScriptedProvider::new(
            Script::new(vec![ScriptedTurn::text("done")]).repeat_last(true),
        ))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_supervisor_tracks_what_is_live_not_every_child_that_ran() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .child(ChildEntry::agent("worker", worker()))
        .build()
        .unwrap();
    let mut root = super::support::idle_root(&store).await;
    sup.attach(&mut root);
    for i in 0..300 {
        let req = DelegationRequest {
            parent: Some(SessionRef::from(root.record())),
            name: Some(format!("w{i}")),
            ..DelegationRequest::new("worker", "go")
        };
        // Message mode: each child notifies the root, which drains its inbox.
        sup.spawn(req).await.unwrap();
        let none = arbor_core::inbox::Inbox::new();
        sup.wait_for_mail_or_quiet(&none).await;
        root.inbox().drain();
    }
    assert_eq!(
        sup.tracked_sessions(),
        1,
        "only the host's root stays tracked after 300 children"
    );
}

/// A hook that never returns.
#[derive(Debug)]
struct Stuck;

#[async_trait]
impl AfterHook for Stuck {
    async fn after(&self, _c: &Completion) -> Result<(), arbor_core::supervisor::HookError> {
        std::future::pending().await
    }
}

#[tokio::test(start_paused = true)]
async fn an_after_hook_that_never_returns_is_abandoned_at_its_timeout() {
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .child(ChildEntry::agent("worker", worker()))
        .after(Stuck)
        .after_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let mut sub = sup.subscribe();
    let started = tokio::time::Instant::now();
    let done = sup
        .delegate(DelegationRequest::new("worker", "go"))
        .await
        .unwrap();
    assert_eq!(done.result.text, "done");
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    assert_eq!(sup.active_children(), 0, "the slot is free");
    let mut errors = Vec::new();
    while let Some(e) = sub.try_recv() {
        if let arbor_protocol::SupervisorEvent::DelegationError { error, .. } = &e.event {
            errors.push(error.clone());
        }
    }
    assert_eq!(errors, ["after hook timed out after 2000 ms"]);
    tokio::time::timeout(Duration::from_secs(1), sup.shutdown())
        .await
        .expect("shutdown is not held by the hook");
}

#[test]
fn the_after_timeout_is_checked_at_build() {
    let e = Supervisor::builder(Ownership::user("t", "u"))
        .child(ChildEntry::agent("worker", worker()))
        .after_timeout(Duration::ZERO)
        .build()
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "after_timeout must be positive and at most 600000 ms"
    );
}

#[tokio::test]
async fn an_answer_past_max_answer_bytes_ends_the_run_failed() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let big = "x".repeat(3000);
    let mut s = Agent::builder("talker")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            big,
        )])))
        .max_answer_bytes(1024)
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .create()
        .await
        .unwrap();
    let r = s
        .run("talk", arbor_core::RunOptions::default())
        .await
        .unwrap();
    assert_eq!(r.status, arbor_protocol::RunStatus::Failed);
    assert_eq!(r.stop_reason, arbor_protocol::StopReason::ProviderError);
    assert_eq!(
        r.error.as_deref(),
        Some(
            "answer too large: the model's answer passed 1024 bytes of text and tool calls \
             (max_answer_bytes)"
        )
    );
    let e = Agent::builder("talker")
        .provider(ScriptedProvider::new(Script::default()))
        .max_answer_bytes(0)
        .build()
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "max_answer_bytes must be a positive integer at most 67108864"
    );
}

#[tokio::test]
async fn a_childs_long_answer_reaches_its_parent_cut_with_a_marker() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let answer = "é".repeat(35_000); // 70,000 bytes
    let talker = Agent::builder("talker")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            answer.clone(),
        )])))
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .child(ChildEntry::agent("talker", talker))
        .build()
        .unwrap();
    let mut parent = Agent::builder("parent")
        .provider(ScriptedProvider::new(Script::new([
            ScriptedTurn::tool_call(
                "spawn_agent",
                serde_json::json!({"child_id": "talker", "input": "say a lot"}),
            ),
            ScriptedTurn::text("read it"),
        ])))
        .dyn_tool(Arc::new(arbor_core::supervisor::SpawnAgentTool::new(
            sup.delegator(),
        )))
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .create()
        .await
        .unwrap();
    parent
        .run("go", arbor_core::RunOptions::default())
        .await
        .unwrap();
    let result = parent
        .messages()
        .iter()
        .find_map(|m| match m {
            arbor_protocol::Message::Tool(t) => Some(t.content.clone()),
            _ => None,
        })
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&result).unwrap();
    let text = v["text"].as_str().unwrap();
    let child = store
        .list_sessions(arbor_store::SessionQuery::Children(parent.id()))
        .await
        .unwrap()
        .remove(0);
    // 64 KiB on a character boundary (é is two bytes), then the marker.
    let shown = 64 * 1024;
    assert!(text.starts_with(&answer[..shown]));
    assert_eq!(
        &text[shown..],
        format!(
            "\n[truncated: {shown} of 70000 bytes shown; the whole answer is in the transcript of session {}]",
            child.id
        )
    );
    // The child's own transcript keeps the whole answer.
    let whole = store
        .transcript(child.id, 0, None)
        .await
        .unwrap()
        .into_iter()
        .any(|e| {
            matches!(&e.kind, arbor_protocol::EntryKind::Message {
            message: arbor_protocol::Message::Assistant { content, .. }
        } if *content == answer)
        });
    assert!(whole);
}

#[tokio::test]
async fn a_child_that_dies_on_a_limit_is_attributed_on_child_failed() {
    use arbor_core::supervisor::LimitsInput;
    use arbor_protocol::{LimitKind, SupervisorEvent};
    let probe = |tag: &str| {
        ScriptedTurn::tool_call(
            "probe",
            serde_json::json!({"ms": 0, "tag": format!("secret-{tag}")}),
        )
    };
    let looping = Agent::builder("looper")
        .provider(ScriptedProvider::new(Script::new([
            probe("a"),
            probe("b"),
            probe("c"),
        ])))
        .tool(super::support::Probe::default())
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .child(ChildEntry::agent("looper", looping))
        .build()
        .unwrap();
    let mut sub = sup.subscribe();
    let req = DelegationRequest {
        limits: LimitsInput {
            max_tool_calls: Some(2),
            ..LimitsInput::default()
        },
        ..DelegationRequest::new("looper", "go")
    };
    sup.delegate(req).await.unwrap_err();
    let mut failed = None;
    while let Some(e) = sub.try_recv() {
        if let SupervisorEvent::ChildFailed { .. } = &e.event {
            failed = Some(e.event.clone());
        }
    }
    let Some(SupervisorEvent::ChildFailed {
        limit,
        consumed,
        closest_other_axes,
        recent_tool_calls,
        ..
    }) = failed
    else {
        panic!("no child_failed");
    };
    assert_eq!(limit.unwrap().limit, LimitKind::MaxToolCalls);
    let consumed = consumed.unwrap();
    assert_eq!((consumed.turns, consumed.provider_attempts), (3, 3));
    assert!(consumed.request_bytes > 0);
    let axes = closest_other_axes.unwrap();
    assert_eq!(axes.len(), 3);
    assert!(axes.iter().all(|a| a.axis != LimitKind::MaxToolCalls));
    let calls = recent_tool_calls.unwrap();
    assert_eq!(calls.len(), 3, "the breaching turn's call included");
    assert!(
        calls
            .iter()
            .all(|c| c.name == "probe" && c.arg_hash.starts_with("sha256:"))
    );
    let shown = serde_json::to_string(&calls).unwrap();
    assert!(!shown.contains("secret-"), "arguments never appear");
}

#[tokio::test]
async fn a_session_max_depth_narrows_durably_and_children_inherit_it() {
    use arbor_core::CoreErrorKind;
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .child(ChildEntry::agent("worker", worker()))
        .build()
        .unwrap();
    let root = super::support::idle_root(&store).await;
    assert_eq!(sup.session_max_depth(root.id()).await.unwrap(), 4);
    assert_eq!(sup.set_session_max_depth(root.id(), 1).await.unwrap(), 1);
    let e = sup.set_session_max_depth(root.id(), 2).await.unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::Validation);
    assert_eq!(
        e.to_string(),
        format!(
            "max_depth can only be lowered: session {} allows depth 1, 2 was asked",
            root.id()
        )
    );
    // A child at depth 1 is admitted, and inherits the value.
    let child = sup
        .delegate(DelegationRequest {
            parent: Some(SessionRef::from(root.record())),
            ..DelegationRequest::new("worker", "go")
        })
        .await
        .unwrap();
    assert_eq!(sup.session_max_depth(child.session_id).await.unwrap(), 1);
    // Its own child would be at depth 2: refused before anything is written.
    let record = store.session(child.session_id).await.unwrap().unwrap();
    let e = sup
        .delegate(DelegationRequest {
            parent: Some(SessionRef::from(&record)),
            ..DelegationRequest::new("worker", "deeper")
        })
        .await
        .unwrap_err();
    let info = e.limit().unwrap();
    assert_eq!(
        (info.limit, info.maximum, info.observed),
        (arbor_protocol::LimitKind::MaxDepth, 1, 2)
    );
    let under = store
        .list_sessions(arbor_store::SessionQuery::Children(child.session_id))
        .await
        .unwrap();
    assert!(under.is_empty());
    // Another process reads the same value.
    let other = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .child(ChildEntry::agent("worker", worker()))
        .build()
        .unwrap();
    assert_eq!(other.session_max_depth(root.id()).await.unwrap(), 1);
}

#[tokio::test]
async fn a_child_cancelled_through_its_handle_is_revoked() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let slow = Agent::builder("slow")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            "late",
        )
        .with_delay(Duration::from_secs(5))])))
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .child(ChildEntry::agent("slow", slow))
        .build()
        .unwrap();
    let root = super::support::idle_root(&store).await;
    let handle = sup
        .delegate_async(DelegationRequest {
            parent: Some(SessionRef::from(root.record())),
            ..DelegationRequest::new("slow", "take your time")
        })
        .await
        .unwrap();
    assert!(sup.cancel(&handle.delegation_id).unwrap());
    let waited = sup
        .wait(&handle.delegation_id, Default::default())
        .await
        .unwrap();
    assert!(matches!(
        waited,
        arbor_core::supervisor::WaitOutcome::Cancelled { .. }
    ));
    sup.shutdown().await;
    let record = store.session(handle.session_id).await.unwrap().unwrap();
    let tombstone = record.tombstone.expect("revoked");
    assert_eq!(
        (tombstone.by.as_str(), tombstone.reason.as_str()),
        ("host", "revoked")
    );
    assert_eq!(
        tombstone.final_status,
        arbor_protocol::SessionStatus::Aborted
    );
    let listed = arbor_core::registry::children(store.as_ref(), root.id(), false)
        .await
        .unwrap();
    assert!(listed.is_empty(), "a released child leaves the registry");
}
