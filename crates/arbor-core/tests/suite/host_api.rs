//! The host's entry point: a root session in the supervisor's store, the delegation tools
//! from the delegator, closure hooks and sinks, and the wiring mistakes refused loudly.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arbor_core::process::SupervisorProcess;
use arbor_core::supervisor::{
    BeforeDecision, ChildEntry, CompletionStatus, DelegationRequest, Ownership, Supervisor,
    after_fn, before_fn, sink_fn,
};
use arbor_core::{Agent, CoreErrorKind, RunOptions};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::RunStatus;
use serde_json::json;

fn leaf(name: &str, text: &str) -> Agent {
    Agent::builder(name)
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            text,
        )])))
        .build()
        .unwrap()
}

fn spawn(child: &str, input: &str) -> ScriptedTurn {
    ScriptedTurn::tool_call(
        "spawn_agent",
        json!({"child_id": child, "name": child, "input": input}),
    )
}

fn root(sup: &Supervisor, turns: Vec<ScriptedTurn>) -> Agent {
    Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new(turns)))
        .dyn_tools(sup.delegator().tools())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_host_wires_a_tree_with_root_session_tools_closures_and_a_sink() {
    let events = Arc::new(AtomicUsize::new(0));
    let seen = events.clone();
    let afters = Arc::new(Mutex::new(Vec::new()));
    let log = afters.clone();
    let sup = Supervisor::builder(Ownership::user("acme", "alice"))
        .child(ChildEntry::agent("research", leaf("research", "facts")).description("finds facts"))
        .child(ChildEntry::agent("write", leaf("write", "prose")))
        .before(before_fn(|ctx| async move {
            if ctx.input.contains("password") {
                BeforeDecision::Deny {
                    reason: Some("no secrets".into()),
                }
            } else {
                BeforeDecision::Allow
            }
        }))
        .after(after_fn(move |c| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push((c.child_id.clone(), c.status));
                Ok(())
            }
        }))
        .child_events(true)
        .child_event_sink(sink_fn(move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
        }))
        .build()
        .unwrap();
    let agent = root(
        &sup,
        vec![
            spawn("research", "find facts"),
            spawn("write", "the password is x"),
            ScriptedTurn::text("done"),
        ],
    );
    let mut session = sup.root_session(&agent, |b| b.name("brief")).await.unwrap();
    assert_eq!(session.record().name, "brief");
    let r = session
        .run("write a brief", RunOptions::default())
        .await
        .unwrap();
    assert_eq!(r.status, RunStatus::Succeeded, "{r:?}");
    sup.shutdown().await;
    // The child is recorded under the root, in the supervisor's store.
    let children = arbor_core::registry::children(sup.store().as_ref(), session.id(), false)
        .await
        .unwrap();
    let rows: Vec<(&str, String)> = children
        .iter()
        .map(|c| (c.name.as_str(), c.status.to_string()))
        .collect();
    assert_eq!(
        rows,
        [
            ("research", "succeeded".to_owned()),
            ("write", "denied".to_owned())
        ]
    );
    assert_eq!(
        *afters.lock().unwrap(),
        [
            ("research".to_owned(), CompletionStatus::Succeeded),
            ("write".to_owned(), CompletionStatus::Rejected),
        ]
    );
    assert!(
        events.load(Ordering::SeqCst) > 0,
        "the sink received child events"
    );
}

#[tokio::test]
async fn a_root_outside_the_supervisors_store_fails_its_run_instead_of_succeeding() {
    let sup = Supervisor::builder(Ownership::user("acme", "alice"))
        .child(ChildEntry::agent("research", leaf("research", "facts")))
        .build()
        .unwrap();
    let agent = root(
        &sup,
        vec![spawn("research", "x"), ScriptedTurn::text("done")],
    );
    // Created in a store of its own (the default), not the supervisor's.
    let mut session = agent.session().create().await.unwrap();
    sup.attach(&mut session);
    let r = session.run("go", RunOptions::default()).await.unwrap();
    assert_eq!(r.status, RunStatus::Failed, "{r:?}");
    let error = r.error.unwrap_or_default();
    assert!(
        error.contains("is not in the supervisor's store: create it with Supervisor::root_session"),
        "{error}"
    );
}

#[tokio::test]
async fn a_sink_that_could_receive_nothing_is_refused_at_build() {
    let e = Supervisor::builder(Ownership::user("acme", "alice"))
        .child(ChildEntry::agent("research", leaf("research", "facts")))
        // No child_events(true), and no child streams by its own policy.
        .child_event_sink(sink_fn(|_| {}))
        .build()
        .unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::Config);
    assert!(
        e.to_string().contains("the sink would receive nothing"),
        "{e}"
    );
}

#[tokio::test]
async fn a_message_mode_spawn_without_a_parent_is_refused() {
    let sup = Supervisor::builder(Ownership::user("acme", "alice"))
        .child(ChildEntry::agent("research", leaf("research", "facts")))
        .build()
        .unwrap();
    let e = sup
        .delegator()
        .spawn(DelegationRequest::new("research", "x"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::Validation);
    assert_eq!(
        e.to_string(),
        "a message-mode child needs a parent session to answer: set DelegationRequest::parent"
    );
    assert_eq!(sup.active_children(), 0);
}

#[tokio::test]
async fn the_delegators_tools_and_the_request_builder() {
    let sup = Supervisor::builder(Ownership::user("acme", "alice"))
        .child(ChildEntry::agent("research", leaf("research", "facts")))
        .child(ChildEntry::agent("write", leaf("write", "prose")))
        .build()
        .unwrap();
    let d = sup.delegator();
    let names: Vec<String> = d.tools().iter().map(|t| t.spec().name.clone()).collect();
    assert_eq!(
        names,
        [
            "send_message",
            "spawn_agent",
            "wait_agent",
            "cancel_agent",
            "list_children",
            "rename_child",
            "find_models"
        ]
    );
    let reply: Vec<String> = d
        .reply_tools()
        .iter()
        .map(|t| t.spec().name.clone())
        .collect();
    assert_eq!(reply, ["send_message"]);
    let e = d.tools_for(&["nope".to_owned()]).unwrap_err();
    assert_eq!(e.to_string(), "Invalid child id: nope");
    let only = d.tools_for(&["write".to_owned()]).unwrap();
    let spawn = only
        .iter()
        .find(|t| t.spec().name == "spawn_agent")
        .unwrap();
    assert_eq!(
        spawn.spec().parameters["properties"]["child_id"]["enum"],
        json!(["write"])
    );

    let request = DelegationRequest::new("write", "a poem")
        .name("poet")
        .thread("t1")
        .model("m");
    assert_eq!(request.name.as_deref(), Some("poet"));
    assert_eq!(request.thread_id.as_deref(), Some("t1"));
    assert_eq!(request.model.as_deref(), Some("m"));
}

#[tokio::test]
async fn refusals_say_why_in_a_typed_reason() {
    use arbor_core::DenyReason;
    let sup = Supervisor::builder(Ownership::user("acme", "alice"))
        .child(ChildEntry::agent("research", leaf("research", "facts")))
        .before(before_fn(|ctx| async move {
            if ctx.input == "forbidden" {
                BeforeDecision::Deny {
                    reason: Some("not today".into()),
                }
            } else {
                BeforeDecision::Allow
            }
        }))
        .build()
        .unwrap();
    let d = sup.delegator();
    let e = d
        .delegate(DelegationRequest::new("nope", "x"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::Denied);
    assert_eq!(e.deny_reason(), Some(DenyReason::NotAllowListed));
    assert_eq!(e.to_string(), "Child is not allow-listed");

    let e = d
        .delegate(DelegationRequest::new("research", "forbidden"))
        .await
        .unwrap_err();
    assert_eq!(e.deny_reason(), Some(DenyReason::Hook));
    assert!(e.to_string().contains("not today"), "{e}");

    let e = sup
        .wait("no-such-delegation", Default::default())
        .await
        .unwrap_err();
    assert_eq!(e.deny_reason(), Some(DenyReason::Unknown));
    assert_eq!(e.to_string(), "Unknown async delegation");

    let agent = root(&sup, vec![ScriptedTurn::text("done")]);
    let session = sup.root_session(&agent, |b| b).await.unwrap();
    sup.close_session(session.id());
    let e = d
        .delegate(DelegationRequest::new("research", "x").parent(session.as_ref()))
        .await
        .unwrap_err();
    assert_eq!(e.deny_reason(), Some(DenyReason::ParentClosed));
    assert_eq!(
        e.to_string(),
        "Cannot spawn a child after its parent was closed"
    );
}

#[tokio::test]
async fn a_host_reads_one_childs_counters_and_peeks_at_an_inbox() {
    let sup = Supervisor::builder(Ownership::user("acme", "alice"))
        .child(ChildEntry::agent("research", leaf("research", "facts")))
        .build()
        .unwrap();
    let agent = root(&sup, vec![ScriptedTurn::text("done")]);
    let session = sup.root_session(&agent, |b| b).await.unwrap();
    let handle = sup
        .delegator()
        .spawn(DelegationRequest::new("research", "go").parent(session.as_ref()))
        .await
        .unwrap();
    sup.wait_for_mail_or_quiet(session.inbox()).await;
    let research = sup.summary_of("research").unwrap();
    assert_eq!(research.attempts, 1);
    assert!(sup.summary_of("nope").is_none());
    // The child's notice waits in the root's inbox; peeking leaves it there.
    let seen = session.inbox().peek();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].from, Some(handle.session_id));
    assert_eq!(session.inbox().len(), 1);
    assert_eq!(session.inbox().drain(), seen);
}

#[tokio::test]
async fn a_message_mode_child_can_reply_without_its_factory_adding_the_tool() {
    // The child's agent has no tools at all; its model replies by message.
    let child = Agent::builder("research")
        .provider(ScriptedProvider::new(Script::new([
            ScriptedTurn::tool_call(
                "send_message",
                json!({"to": "parent", "text": "three facts"}),
            ),
            ScriptedTurn::text("sent"),
        ])))
        .build()
        .unwrap();
    assert!(child.tools().get("send_message").is_none());
    let sup = Supervisor::builder(Ownership::user("acme", "alice"))
        .child(ChildEntry::agent("research", child))
        .build()
        .unwrap();
    let agent = root(&sup, vec![ScriptedTurn::text("done")]);
    let session = sup.root_session(&agent, |b| b).await.unwrap();
    sup.delegator()
        .spawn(DelegationRequest::new("research", "go").parent(session.as_ref()))
        .await
        .unwrap();
    sup.wait_for_mail_or_quiet(session.inbox()).await;
    let mail = session.inbox().drain();
    assert_eq!(mail.len(), 1, "{mail:?}");
    assert_eq!(mail[0].text, "three facts");
    assert!(mail[0].notice.is_none(), "a reply, not a notice");
}

#[tokio::test]
async fn a_hosts_cancel_reason_reaches_the_after_hook_and_the_events() {
    let slow = Agent::builder("slow")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            "late",
        )
        .with_delay(std::time::Duration::from_secs(30))])))
        .build()
        .unwrap();
    let afters = Arc::new(Mutex::new(Vec::new()));
    let log = afters.clone();
    let sup = Supervisor::builder(Ownership::user("acme", "alice"))
        .child(ChildEntry::agent("slow", slow))
        .after(after_fn(move |c| {
            let log = log.clone();
            async move {
                log.lock().unwrap().push((c.status, c.error.clone()));
                Ok(())
            }
        }))
        .build()
        .unwrap();
    let mut events = sup.subscribe();
    let handle = sup
        .delegator()
        .delegate_async(DelegationRequest::new("slow", "take your time"))
        .await
        .unwrap();
    assert!(
        sup.cancel_with(&handle.delegation_id, "the user closed the tab")
            .unwrap()
    );
    let out = sup
        .wait(&handle.delegation_id, Default::default())
        .await
        .unwrap();
    assert!(
        matches!(out, arbor_core::supervisor::WaitOutcome::Cancelled { .. }),
        "{out:?}"
    );
    sup.shutdown().await;
    let afters = afters.lock().unwrap().clone();
    assert_eq!(afters.len(), 1, "{afters:?}");
    assert_eq!(afters[0].0, CompletionStatus::Aborted);
    assert_eq!(
        afters[0].1.as_deref(),
        Some("Async delegation cancelled: the user closed the tab")
    );
    let mut said = Vec::new();
    while let Some(e) = events.try_recv() {
        said.push(serde_json::to_string(&e.event).unwrap());
    }
    assert!(
        said.iter()
            .any(|e| e.contains("Async delegation cancelled: the user closed the tab")),
        "{said:#?}"
    );
}

#[tokio::test]
async fn cancelling_the_session_token_closes_the_event_stream_after_the_terminals() {
    let slow = Agent::builder("slow")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            "late",
        )
        .with_delay(std::time::Duration::from_secs(30))])))
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("acme", "alice"))
        .child(ChildEntry::agent("slow", slow))
        .build()
        .unwrap();
    let mut events = sup.subscribe();
    sup.delegator()
        .delegate_async(DelegationRequest::new("slow", "x"))
        .await
        .unwrap();
    // The host ends the session with the token, not with shutdown().
    sup.session_token().cancel();
    let mut seen = Vec::new();
    let closed = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        while let Some(e) = events.recv().await {
            seen.push(e.event.type_name());
        }
    })
    .await;
    assert!(closed.is_ok(), "the stream never closed: {seen:?}");
    assert_eq!(seen.first(), Some(&"delegation_admitted"), "{seen:?}");
    // The child's terminal report came before the end of the stream.
    assert!(
        matches!(
            seen.last(),
            Some(&("delegation_error" | "delegation_cancelled" | "delegation_failed"))
        ),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_host_cancels_one_childs_run_by_its_session() {
    let slow = Agent::builder("slow")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            "late",
        )
        .with_delay(std::time::Duration::from_secs(30))])))
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .child(ChildEntry::agent("slow", slow))
        .build()
        .unwrap();
    let handle = sup
        .delegate_async(DelegationRequest::new("slow", "wait"))
        .await
        .unwrap();
    // Not yet running (or already): wait until its run is in flight.
    let mut cancelled = false;
    for _ in 0..200 {
        if sup.cancel_session(handle.session_id).await.unwrap() {
            cancelled = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(cancelled, "its run never started");
    // Through its handle: the wait says it was cancelled, and the hosted child is
    // released (`revoked`) once its run has ended.
    let outcome = sup
        .wait(&handle.delegation_id, Default::default())
        .await
        .unwrap();
    assert!(
        matches!(
            outcome,
            arbor_core::supervisor::WaitOutcome::Cancelled { .. }
        ),
        "{outcome:?}"
    );
    let store = sup.store().clone();
    let mut record = store.session(handle.session_id).await.unwrap().unwrap();
    for _ in 0..200 {
        if record.tombstone.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        record = store.session(handle.session_id).await.unwrap().unwrap();
    }
    assert_eq!(record.status, arbor_protocol::SessionStatus::Aborted);
    assert_eq!(
        record.tombstone.map(|t| t.reason),
        Some("revoked".to_owned())
    );
    // Nothing runs now, and an unknown session: a cancel says so.
    assert!(!sup.cancel_session(handle.session_id).await.unwrap());
    let unknown = arbor_protocol::SessionId::new();
    assert!(!sup.cancel_session(unknown).await.unwrap());
}

/// A host that opens one root per conversation: each root runs (with a child), is closed
/// and dropped, and the supervisor keeps nothing of it; roots dropped without a close are
/// let go too. The guard of a closed root holds while its host holds it.
#[tokio::test]
async fn a_host_root_closed_and_dropped_leaves_nothing_in_the_supervisor() {
    let sup = Supervisor::builder(Ownership::user("acme", "alice"))
        .child(ChildEntry::agent("research", leaf("research", "facts")))
        .build()
        .unwrap();
    for i in 0..2_000u32 {
        let agent = root(
            &sup,
            vec![spawn("research", "look"), ScriptedTurn::text("done")],
        );
        let mut session = sup.root_session(&agent, |b| b).await.unwrap();
        let r = session.run("go", RunOptions::default()).await.unwrap();
        assert_eq!(r.status, RunStatus::Succeeded);
        if i % 2 == 0 {
            // Closed while held: no child may start under it.
            sup.close_session(session.id());
            let e = sup
                .delegator()
                .delegate(DelegationRequest::new("research", "x").parent(session.as_ref()))
                .await
                .unwrap_err();
            assert_eq!(e.deny_reason(), Some(arbor_core::DenyReason::ParentClosed));
        }
        drop(session);
    }
    // The next root the host opens (or closes) lets go of those it dropped.
    let agent = root(&sup, vec![ScriptedTurn::text("done")]);
    let last = sup.root_session(&agent, |b| b).await.unwrap();
    assert_eq!(sup.tracked_sessions(), 1, "only the root the host holds");
    assert_eq!(sup.closed_sessions(), 0, "no closed tree is remembered");
    sup.close_session(last.id());
    drop(last);
    sup.release_dropped();
    assert_eq!((sup.tracked_sessions(), sup.closed_sessions()), (0, 0));
}
