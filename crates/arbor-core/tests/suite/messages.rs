//! Replies by message: a child answers with `send_message`; a child that never does is a
//! silent no-op and its parent is told; failures and cancellations have their own notices;
//! a parent follows up with a retained child, which runs a new turn (rebuilt from its
//! transcript when another supervisor, as after a restart, holds it); messages are bounded
//! and reach only the family.

use std::sync::Arc;
use std::time::Duration;

use arbor_core::registry;
use arbor_core::supervisor::{
    ChildEntry, DelegationRequest, LimitsInput, Ownership, SendMessageTool, Sender, SpawnAgentTool,
    Supervisor, factory_fn,
};
use arbor_core::{Agent, CoreErrorKind, RunOptions, Session};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{EntryKind, Message, Notice, SessionStatus};
use arbor_store::{MemoryStore, Store};
use serde_json::json;

fn send(to: &str, text: &str) -> ScriptedTurn {
    ScriptedTurn::tool_call("send_message", json!({"to": to, "text": text}))
}

/// A supervisor whose children play `scripts` (each with `send_message`).
fn supervisor(
    store: &Arc<dyn Store>,
    scripts: Vec<(&'static str, Vec<ScriptedTurn>)>,
) -> Supervisor {
    supervisor_with(store, scripts, LimitsInput::default())
}

/// The same with `limits`.
fn supervisor_with(
    store: &Arc<dyn Store>,
    scripts: Vec<(&'static str, Vec<ScriptedTurn>)>,
    limits: LimitsInput,
) -> Supervisor {
    let mut b = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .limits(limits);
    for (id, turns) in scripts {
        let script = Script::new(turns);
        b = b.child(ChildEntry::new(
            id,
            factory_fn(move |ctx| {
                let script = script.clone();
                async move {
                    Agent::builder(ctx.child_id.clone())
                        .provider(ScriptedProvider::new(script))
                        .dyn_tool(Arc::new(SendMessageTool::new(
                            ctx.delegator.supervisor().clone(),
                        )))
                        .dyn_tool(Arc::new(SpawnAgentTool::new(ctx.delegator.clone())))
                        .build()
                }
            }),
        ));
    }
    b.build().unwrap()
}

/// A root attached to `sup`, playing `turns`, with spawn_agent and send_message.
async fn root(sup: &Supervisor, store: &Arc<dyn Store>, turns: Vec<ScriptedTurn>) -> Session {
    let mut s = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new(turns)))
        .dyn_tool(Arc::new(SpawnAgentTool::new(sup.delegator())))
        .dyn_tool(Arc::new(SendMessageTool::new(sup.clone())))
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .name("root")
        .create()
        .await
        .unwrap();
    sup.attach(&mut s);
    s
}

fn spawn(child: &str, name: &str, input: &str) -> ScriptedTurn {
    ScriptedTurn::tool_call(
        "spawn_agent",
        json!({"child_id": child, "name": name, "input": input, "mode": "message"}),
    )
}

fn user_texts(session: &Session) -> Vec<String> {
    session
        .messages()
        .iter()
        .filter_map(|m| match m {
            Message::User { content } => Some(content.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_child_replies_by_message_and_the_parent_reads_it_on_its_next_turn() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = supervisor(
        &store,
        vec![(
            "worker",
            vec![send("parent", "result: 42"), ScriptedTurn::text("sent")],
        )],
    );
    let mut root = root(
        &sup,
        &store,
        vec![
            spawn("worker", "w", "compute"),
            ScriptedTurn::text("spawned; ending my turn"),
            ScriptedTurn::text("got 42"),
        ],
    )
    .await;
    let first = root.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(first.text, "spawned; ending my turn");
    sup.wait_for_mail_or_quiet(root.inbox()).await;
    sup.wait_for_mail_or_quiet(&arbor_core::inbox::Inbox::new())
        .await;
    assert_eq!(root.inbox().len(), 1, "one reply, no notice");
    let second = root.run_inbox(RunOptions::default()).await.unwrap();
    assert_eq!(second.text, "got 42");
    let texts = user_texts(&root);
    assert_eq!(texts.last().unwrap(), "[from child:w]\n\nresult: 42");
    let kids = registry::children(store.as_ref(), root.id(), false)
        .await
        .unwrap();
    assert_eq!(kids.len(), 1);
    assert_eq!((kids[0].replies, kids[0].silent), (1, false));
    assert_eq!(kids[0].status, SessionStatus::Succeeded);
    // The read is durable: a reload has nothing pending.
    let entries = store.transcript(root.id(), 0, None).await.unwrap();
    assert!(
        entries
            .iter()
            .any(|e| matches!(e.kind, EntryKind::InboxRead { .. }))
    );
    assert!(root.inbox().is_empty());
}

#[tokio::test]
async fn a_silent_child_is_counted_and_its_parent_told_once() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = supervisor(
        &store,
        vec![(
            "quiet",
            vec![ScriptedTurn::text("I did   the work\n but told   nobody")],
        )],
    );
    let mut root = root(
        &sup,
        &store,
        vec![spawn("quiet", "q", "work"), ScriptedTurn::text("waiting")],
    )
    .await;
    root.run("go", RunOptions::default()).await.unwrap();
    sup.wait_for_mail_or_quiet(root.inbox()).await;
    let pending = root.inbox().drain();
    assert_eq!(pending.len(), 1);
    assert_eq!(
        pending[0].notice,
        Some(Notice::CompletedWithoutReply {
            preview: Some("I did the work but told nobody".into())
        })
    );
    assert!(
        pending[0].text.starts_with("Child q ("),
        "{}",
        pending[0].text
    );
    let tree = registry::tree(store.as_ref(), root.id()).await.unwrap();
    assert_eq!(registry::silent_count(&tree), 1);
    assert!(
        registry::children(store.as_ref(), root.id(), false)
            .await
            .unwrap()[0]
            .silent
    );
}

#[tokio::test]
async fn a_failed_child_sends_one_failure_notice() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = supervisor(
        &store,
        vec![(
            "broken",
            vec![ScriptedTurn {
                fail: Some("upstream 503".into()),
                ..ScriptedTurn::default()
            }],
        )],
    );
    let mut root = root(
        &sup,
        &store,
        vec![spawn("broken", "b", "work"), ScriptedTurn::text("waiting")],
    )
    .await;
    root.run("go", RunOptions::default()).await.unwrap();
    sup.wait_for_mail_or_quiet(root.inbox()).await;
    let pending = root.inbox().drain();
    assert_eq!(pending.len(), 1);
    match &pending[0].notice {
        Some(Notice::Failed { error }) => assert!(error.contains("upstream 503"), "{error}"),
        other => panic!("{other:?}"),
    }
    let kids = registry::children(store.as_ref(), root.id(), false)
        .await
        .unwrap();
    assert_eq!(kids[0].status, SessionStatus::Failed);
}

#[tokio::test]
async fn a_cancelled_child_sends_one_cancellation_notice() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = supervisor(
        &store,
        vec![(
            "sleeper",
            vec![ScriptedTurn {
                hang: true,
                ..ScriptedTurn::default()
            }],
        )],
    );
    let mut root = root(
        &sup,
        &store,
        vec![spawn("sleeper", "s", "wait"), ScriptedTurn::text("waiting")],
    )
    .await;
    root.run("go", RunOptions::default()).await.unwrap();
    // The spawn's handle, as the model read it.
    let handle: serde_json::Value = serde_json::from_str(
        &root
            .messages()
            .iter()
            .find_map(|m| match m {
                Message::Tool(t) if t.name == "spawn_agent" => Some(t.content.clone()),
                _ => None,
            })
            .unwrap(),
    )
    .unwrap();
    assert_eq!(handle["status"], "running");
    assert_eq!(handle["name"], "s");
    assert_eq!(handle["child_id"], "sleeper");
    let kid = registry::find_child(store.as_ref(), root.id(), "s")
        .await
        .unwrap();
    assert_eq!(handle["session_id"], kid.id.to_string());
    assert!(
        sup.cancel(handle["delegation_id"].as_str().unwrap())
            .unwrap()
    );
    sup.wait_for_mail_or_quiet(root.inbox()).await;
    let pending = root.inbox().drain();
    assert_eq!(pending.len(), 1, "{pending:?}");
    match &pending[0].notice {
        Some(Notice::Cancelled { reason }) => {
            assert_eq!(reason.as_deref(), Some("Async delegation cancelled"))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        pending[0].text,
        format!(
            "Child s ({}) was cancelled: Async delegation cancelled.",
            kid.id
        )
    );
    // Released: it leaves the registry (a `revoked` tombstone), its record stays.
    let kids = registry::children(store.as_ref(), root.id(), false)
        .await
        .unwrap();
    assert!(kids.is_empty(), "{kids:?}");
    let all = registry::children(store.as_ref(), root.id(), true)
        .await
        .unwrap();
    assert_eq!(all[0].status, SessionStatus::Aborted);
    // A second cancel is harmless and sends nothing more.
    sup.cancel(handle["delegation_id"].as_str().unwrap()).ok();
    sup.wait_for_mail_or_quiet(root.inbox()).await;
    assert!(root.inbox().is_empty());
}

#[tokio::test]
async fn a_follow_up_to_a_retained_child_runs_a_new_turn_in_its_context() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = supervisor(
        &store,
        vec![(
            "reviewer",
            vec![
                send("parent", "first review done"),
                ScriptedTurn::text("idle"),
                send("parent", "regression test checked"),
                ScriptedTurn::text("idle again"),
            ],
        )],
    );
    let mut root = root(
        &sup,
        &store,
        vec![
            spawn("reviewer", "api", "review"),
            ScriptedTurn::text("waiting"),
            send("api", "Check the new regression test"),
            ScriptedTurn::text("asked"),
            ScriptedTurn::text("all done"),
        ],
    )
    .await;
    root.run("go", RunOptions::default()).await.unwrap();
    sup.wait_for_mail_or_quiet(root.inbox()).await;
    // Reads the first reply and follows up by name.
    let r = root.run_inbox(RunOptions::default()).await.unwrap();
    assert_eq!(r.text, "asked");
    sup.wait_for_mail_or_quiet(root.inbox()).await;
    let r = root.run_inbox(RunOptions::default()).await.unwrap();
    assert_eq!(r.text, "all done");
    assert_eq!(
        user_texts(&root).last().unwrap(),
        "[from child:api]\n\nregression test checked"
    );
    // The child ran twice in one session: its second run saw the first.
    let kid = registry::find_child(store.as_ref(), root.id(), "api")
        .await
        .unwrap();
    assert_eq!(kid.replies, 2);
    let entries = store.transcript(kid.id, 0, None).await.unwrap();
    let runs = entries
        .iter()
        .filter(|e| matches!(e.kind, EntryKind::RunStarted { .. }))
        .count();
    assert_eq!(runs, 2);
    assert!(entries.iter().any(|e| matches!(
        &e.kind,
        EntryKind::Message { message: Message::User { content } }
            if content == "[from parent]\n\nCheck the new regression test"
    )));
}

#[tokio::test(start_paused = true)]
async fn a_follow_up_that_finds_no_free_slot_starts_when_one_frees() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = supervisor_with(
        &store,
        vec![
            (
                "reviewer",
                vec![
                    send("parent", "v1"),
                    ScriptedTurn::text("idle"),
                    send("parent", "v2"),
                    ScriptedTurn::text("idle again"),
                ],
            ),
            (
                "slow",
                vec![ScriptedTurn::text("slow done").with_delay(Duration::from_secs(5))],
            ),
        ],
        LimitsInput {
            max_active_children: Some(1),
            ..LimitsInput::default()
        },
    );
    let mut turns = vec![
        spawn("reviewer", "api", "review"),
        ScriptedTurn::text("waiting"),
        // The only slot goes to `slow`; the follow-up to `api` must wait for it.
        spawn("slow", "s", "take your time"),
        send("api", "again please"),
        ScriptedTurn::text("asked"),
    ];
    turns.extend((0..6).map(|_| ScriptedTurn::text("reading")));
    let mut root = root(&sup, &store, turns).await;
    root.run("go", RunOptions::default()).await.unwrap();
    sup.wait_for_mail_or_quiet(root.inbox()).await;
    let r = root.run_inbox(RunOptions::default()).await.unwrap();
    assert_eq!(r.text, "asked");
    assert_eq!(sup.active_children(), 1);
    for _ in 0..4 {
        if user_texts(&root).iter().any(|t| t.ends_with("\n\nv2")) {
            break;
        }
        sup.wait_for_mail_or_quiet(root.inbox()).await;
        if root.inbox().is_empty() {
            break;
        }
        root.run_inbox(RunOptions::default()).await.unwrap();
    }
    assert!(
        user_texts(&root)
            .iter()
            .any(|t| t == "[from child:api]\n\nv2"),
        "{:?}",
        user_texts(&root)
    );
    let kid = registry::find_child(store.as_ref(), root.id(), "api")
        .await
        .unwrap();
    let runs = store
        .transcript(kid.id, 0, None)
        .await
        .unwrap()
        .iter()
        .filter(|e| matches!(e.kind, EntryKind::RunStarted { .. }))
        .count();
    assert_eq!(runs, 2);
    assert_eq!(sup.active_children(), 0);
}

#[tokio::test]
async fn another_supervisor_on_the_same_store_rebuilds_a_retained_child_for_a_follow_up() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let scripts = || {
        vec![(
            "reviewer",
            vec![
                send("parent", "v1"),
                ScriptedTurn::text("idle"),
                send("parent", "v2 after restart"),
                ScriptedTurn::text("idle"),
            ],
        )]
    };
    let first = supervisor(&store, scripts());
    let mut top = root(
        &first,
        &store,
        vec![spawn("reviewer", "api", "review"), ScriptedTurn::text("w")],
    )
    .await;
    top.run("go", RunOptions::default()).await.unwrap();
    first.wait_for_mail_or_quiet(top.inbox()).await;
    first.shutdown().await;
    let root_id = top.id();
    drop(top);

    // "After the restart": a new supervisor and the root rebuilt from the store.
    let second = supervisor(&store, scripts());
    let agent = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new([])))
        .build()
        .unwrap();
    let mut reopened = agent.open_session(store.clone(), root_id).await.unwrap();
    second.attach(&mut reopened);
    assert_eq!(reopened.inbox().len(), 1, "the unread reply survived");
    let kid = registry::find_child(store.as_ref(), root_id, "api")
        .await
        .unwrap();
    second
        .send_message(Sender::Host, kid.id, "again, please")
        .await
        .unwrap();
    second
        .wait_for_mail_or_quiet(&arbor_core::inbox::Inbox::new())
        .await;
    let texts: Vec<String> = reopened
        .inbox()
        .drain()
        .into_iter()
        .map(|m| m.text)
        .collect();
    assert_eq!(texts, ["v1", "v2 after restart"]);
}

#[tokio::test(start_paused = true)]
async fn messages_are_bounded_in_size_queue_and_rate() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = supervisor(
        &store,
        vec![(
            "busy",
            vec![ScriptedTurn {
                hang: true,
                ..ScriptedTurn::default()
            }],
        )],
    );
    let top = root(&sup, &store, vec![]).await;
    let handle = sup
        .spawn(DelegationRequest {
            name: Some("b".into()),
            parent: Some(top.as_ref()),
            ..DelegationRequest::new("busy", "work")
        })
        .await
        .unwrap();
    let to = handle.session_id;
    // Let the child reach its (hanging) first turn: it has read its inbox by then, so every
    // message below stays pending.
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    let big = "x".repeat(16 * 1024 + 1);
    let e = sup.send_message(Sender::Host, to, &big).await.unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::Limit);
    assert_eq!(e.to_string(), "Message exceeds 16384 bytes");
    for i in 0..3 {
        sup.send_message(Sender::Host, to, &format!("m{i}"))
            .await
            .unwrap();
    }
    let e = sup.send_message(Sender::Host, to, "m3").await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "Agent messaging rate limit exceeded; retry after 1000ms"
    );
    assert_eq!(
        e.limit().map(|l| (l.limit, l.maximum, l.observed)),
        Some((arbor_protocol::LimitKind::MessagesPerSecond, 1, 2))
    );
    // The rate is per pair: another sender reaches the same inbox at once.
    sup.send_message(Sender::Session(top.id()), to, "from the parent")
        .await
        .unwrap();
    for i in 3..19 {
        tokio::time::advance(Duration::from_millis(1000)).await;
        sup.send_message(Sender::Host, to, &format!("m{i}"))
            .await
            .unwrap();
    }
    tokio::time::advance(Duration::from_millis(1000)).await;
    let e = sup.send_message(Sender::Host, to, "m20").await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "The inbox of \"b\" is full (20 pending messages); retry later"
    );
    // Refused sends wrote nothing: 20 received entries.
    let received = store
        .transcript(to, 0, None)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| matches!(e.kind, EntryKind::InboxReceived { .. }))
        .count();
    assert_eq!(received, 20);
    sup.shutdown().await;
}

#[tokio::test]
async fn reach_is_the_family_only() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = supervisor(
        &store,
        vec![
            (
                "middle",
                vec![spawn("leaf", "leaf", "go"), ScriptedTurn::text("spawned")],
            ),
            (
                "leaf",
                vec![
                    send("root", "hi grandparent"),
                    send("sib", "hi sibling"),
                    ScriptedTurn::text("x"),
                ],
            ),
        ],
    );
    let top = root(&sup, &store, vec![]).await;
    let middle = sup
        .delegate(DelegationRequest {
            name: Some("m".into()),
            parent: Some(top.as_ref()),
            ..DelegationRequest::new("middle", "spawn a leaf")
        })
        .await
        .unwrap();
    sup.wait_for_mail_or_quiet(&arbor_core::inbox::Inbox::new())
        .await;
    let leaf = registry::find_child(store.as_ref(), middle.session_id, "leaf")
        .await
        .unwrap();
    let e = sup
        .send_message(Sender::Session(leaf.id), top.id(), "direct")
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "Agent reach is limited to parent, siblings, and children"
    );
    let e = sup
        .send_message(Sender::Session(leaf.id), leaf.id, "me")
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "A session cannot message itself");
    // Another tree's root and a session that never existed get one and the same answer.
    let stranger = root(&sup, &store, vec![]).await;
    let foreign = sup
        .send_message(Sender::Session(leaf.id), stranger.id(), "psst")
        .await
        .unwrap_err();
    let unknown = sup
        .send_message(
            Sender::Session(leaf.id),
            arbor_protocol::SessionId::new(),
            "psst",
        )
        .await
        .unwrap_err();
    assert_eq!(foreign.to_string(), "Unknown or deleted session");
    assert_eq!(foreign.to_string(), unknown.to_string());
    assert_eq!(foreign.kind(), unknown.kind());
    // The leaf's own tool calls got the same answers, as tool errors.
    let results: Vec<String> = store
        .transcript(leaf.id, 0, None)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EntryKind::Message {
                message: Message::Tool(r),
            } => Some(r.content),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            "No agent named \"root\" among this session's parent, siblings and children",
            "No agent named \"sib\" among this session's parent, siblings and children",
        ]
    );
    sup.shutdown().await;
}

fn hang() -> ScriptedTurn {
    ScriptedTurn {
        hang: true,
        ..ScriptedTurn::default()
    }
}

#[tokio::test]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
async fn deleting_a_child_cancels_its_subtree_and_leaves_a_tombstone_and_the_transcript() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = supervisor(
        &store,
        vec![
            (
                "middle",
                vec![
                    spawn("leaf", "leaf", "wait forever"),
                    ScriptedTurn::text("spawned"),
                ],
            ),
            ("leaf", vec![hang()]),
        ],
    );
    let top = root(&sup, &store, vec![]).await;
    let middle = sup
        .delegate(DelegationRequest {
            name: Some("m".into()),
            parent: Some(top.as_ref()),
            ..DelegationRequest::new("middle", "spawn a leaf")
        })
        .await
        .unwrap();
    let leaf = registry::find_child(store.as_ref(), middle.session_id, "leaf")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(sup.active_children(), 1, "the leaf runs on");

    let deleted = sup
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(top.id(), "m")
                .by("user:alice")
                .reason("no longer needed"),
        )
        .await
        .unwrap();
    assert!(!deleted.already);
    assert_eq!(deleted.cancelled, [leaf.id]);
    assert_eq!(deleted.tombstone.by, "user:alice");
    assert_eq!(deleted.tombstone.final_status, SessionStatus::Succeeded);
    sup.wait_for_mail_or_quiet(&arbor_core::inbox::Inbox::new())
        .await;
    assert_eq!(sup.active_children(), 0, "the subtree stopped");
    let leaf_now = store.session(leaf.id).await.unwrap().unwrap();
    assert_eq!(leaf_now.status, SessionStatus::Aborted);

    // Gone from listings and messaging; its transcript stays.
    assert!(
        registry::children(store.as_ref(), top.id(), false)
            .await
            .unwrap()
            .is_empty()
    );
    let listed = registry::children(store.as_ref(), top.id(), true)
        .await
        .unwrap();
    assert_eq!(
        listed[0].tombstone.as_ref().unwrap().reason,
        "no longer needed"
    );
    let e = sup
        .send_message(Sender::Host, middle.session_id, "hello?")
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Unknown or deleted session");
    assert!(
        !store
            .transcript(middle.session_id, 0, None)
            .await
            .unwrap()
            .is_empty()
    );
    // Twice is harmless, by its id or by its old name.
    let again = sup
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(top.id(), middle.session_id.to_string())
                .by("user:alice")
                .reason("again"),
        )
        .await
        .unwrap();
    assert!(again.already);
    assert_eq!(again.tombstone, deleted.tombstone);
    let by_name = sup
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(top.id(), "m")
                .by("u")
                .reason("r"),
        )
        .await
        .unwrap();
    assert!(by_name.already);
    assert_eq!(by_name.tombstone, deleted.tombstone);
    let e = sup
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(top.id(), "never-was")
                .by("u")
                .reason("r"),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::NotFound);
    // A foreign id gets the same error as an unknown name.
    let e2 = sup
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(top.id(), leaf.id.to_string())
                .by("u")
                .reason("r"),
        )
        .await
        .unwrap_err();
    assert_eq!(e2.kind(), CoreErrorKind::NotFound);
    // The name is free again.
    sup.delegate(DelegationRequest {
        name: Some("m".into()),
        parent: Some(top.as_ref()),
        ..DelegationRequest::new("middle", "again")
    })
    .await
    .unwrap();
    sup.shutdown().await;
}

#[tokio::test]
async fn closing_a_parent_tears_down_its_live_descendants_and_refuses_new_children() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = supervisor(&store, vec![("leaf", vec![hang()])]);
    let top = root(&sup, &store, vec![]).await;
    let mut handles = Vec::new();
    for name in ["a", "b"] {
        handles.push(
            sup.spawn(DelegationRequest {
                name: Some(name.into()),
                parent: Some(top.as_ref()),
                ..DelegationRequest::new("leaf", "wait")
            })
            .await
            .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let closed = sup.close_session(top.id());
    assert_eq!(closed.len(), 2);
    sup.wait_for_mail_or_quiet(&arbor_core::inbox::Inbox::new())
        .await;
    assert_eq!(sup.active_children(), 0);
    for h in &handles {
        let r = store.session(h.session_id).await.unwrap().unwrap();
        assert_eq!(r.status, SessionStatus::Aborted);
    }
    let e = sup
        .spawn(DelegationRequest {
            name: Some("c".into()),
            parent: Some(top.as_ref()),
            ..DelegationRequest::new("leaf", "late")
        })
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "Cannot spawn a child after its parent was closed"
    );
    assert_eq!(
        registry::children(store.as_ref(), top.id(), false)
            .await
            .unwrap()
            .len(),
        2,
        "nothing half-written"
    );
    assert!(top.inbox().is_empty(), "no notices to a closed parent");
}

#[tokio::test]
async fn siblings_message_each_other_and_an_idle_sibling_runs_on_it() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = supervisor(
        &store,
        vec![
            (
                "listener",
                vec![
                    send("parent", "ready"),
                    ScriptedTurn::text("idle"),
                    ScriptedTurn::text("heard you"),
                ],
            ),
            (
                "talker",
                vec![send("listener", "psst"), ScriptedTurn::text("told")],
            ),
        ],
    );
    let top = root(&sup, &store, vec![]).await;
    let spawn_named = |child: &'static str| DelegationRequest {
        name: Some(child.into()),
        parent: Some(top.as_ref()),
        ..DelegationRequest::new(child, "go")
    };
    sup.spawn(spawn_named("listener")).await.unwrap();
    // The listener has finished its first task (it replied "ready") before the talker starts.
    top.inbox().ready().await;
    sup.wait_for_mail_or_quiet(&arbor_core::inbox::Inbox::new())
        .await;
    sup.spawn(spawn_named("talker")).await.unwrap();
    sup.wait_for_mail_or_quiet(&arbor_core::inbox::Inbox::new())
        .await;
    let listener = registry::find_child(store.as_ref(), top.id(), "listener")
        .await
        .unwrap();
    let users: Vec<String> = store
        .transcript(listener.id, 0, None)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EntryKind::Message {
                message: Message::User { content },
            } => Some(content),
            _ => None,
        })
        .collect();
    assert_eq!(users, ["go", "[from sibling:talker]\n\npsst"]);
    let runs = store
        .transcript(listener.id, 0, None)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| matches!(e.kind, EntryKind::RunFinished { .. }))
        .count();
    assert_eq!(runs, 2, "the idle sibling ran again on the message");
}
