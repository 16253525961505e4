//! Suspended runs nobody awaits: a message-mode child that stops on a call waiting for
//! approval is listed for the root, resumed by `Supervisor::resume_child`, and its parent
//! hears of it once, when the resumed run ends (a suspension is not terminal).

use std::sync::atomic::Ordering;

use arbor_core::CoreErrorKind;
use arbor_core::approval;
use arbor_core::process::detached_suspensions;
use arbor_core::supervisor::Sender;
use arbor_model::ScriptedTurn;
use arbor_protocol::{Notice, RunStatus, SessionStatus};
use serde_json::json;

use super::nested_support::{allow, opts, root, spawn, tree, tree_on, write};

fn spawn_message(child: &str) -> ScriptedTurn {
    ScriptedTurn::tool_call(
        "spawn_agent",
        json!({"child_id": child, "name": child, "input": "write it", "mode": "message"}),
    )
}

/// Approves the first call `waiting` holds, once.
async fn approve_first(t: &super::nested_support::Tree, waiting: &arbor_core::Suspension) {
    approval::decide(
        t.store.as_ref(),
        waiting.run_id,
        waiting.version,
        &[allow(&waiting.pending[0].id)],
    )
    .await
    .unwrap();
}

/// A root that spawned `writer` in message mode and went on; the writer waits for approval
/// of its `write`.
async fn waiting_writer(
    writer: Vec<ScriptedTurn>,
) -> (super::nested_support::Tree, arbor_core::Session) {
    let t = tree(vec![("writer", writer)], None);
    let mut root = root(
        &t,
        vec![
            spawn_message("writer"),
            ScriptedTurn::text("ok"),
            ScriptedTurn::text("noted"),
        ],
    )
    .await;
    t.sup.attach(&mut root);
    let r = root.run("go", opts(&t)).await.unwrap();
    assert_eq!(r.status, RunStatus::Succeeded, "{r:?}");
    t.sup.wait_for_mail_or_quiet(root.inbox()).await;
    (t, root)
}

#[tokio::test]
async fn a_message_child_waiting_for_approval_is_listed_resumed_and_heard_of_once() {
    let (t, root) = waiting_writer(vec![write("x"), ScriptedTurn::text("written")]).await;
    // The suspension is not terminal: no notice reached the parent, nothing ran.
    assert!(root.inbox().is_empty(), "{:?}", root.inbox().drain());
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 0);
    let waiting = detached_suspensions(t.store.as_ref(), root.id())
        .await
        .unwrap();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    let child = waiting[0].session_id;
    assert_eq!(waiting[0].pending.len(), 1);
    assert_eq!(waiting[0].pending[0].tool, "write");
    let record = t.store.session(child).await.unwrap().unwrap();
    assert_eq!(record.status, SessionStatus::Suspended);
    // The supervisor's typed view: which child, nobody awaits it, what it waits on.
    let typed = t.sup.suspended_delegations().await.unwrap();
    assert_eq!(typed.len(), 1, "{typed:?}");
    assert_eq!(
        (
            typed[0].child_id.as_str(),
            typed[0].path.as_slice(),
            typed[0].depth
        ),
        ("writer", &["writer".to_owned()][..], 1)
    );
    assert!(!typed[0].awaited && !typed[0].follow_up);
    assert_eq!(typed[0].suspension, waiting[0]);
    // The root's own run carries none of it.
    assert!(
        approval::suspensions(t.store.as_ref(), root.id())
            .await
            .unwrap()
            .is_empty()
    );

    // Undecided, it is not resumed.
    let e = t.sup.resume_child(child).await.unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::Validation);
    assert_eq!(
        e.to_string(),
        format!("1 call(s) of session {child} still wait for a decision: decide them first")
    );
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 0);

    approve_first(&t, &waiting[0]).await;
    let decided = t.sup.suspended_delegations().await.unwrap();
    assert!(decided[0].suspension.pending.is_empty(), "{decided:?}");
    let done = t.sup.resume_child(child).await.unwrap();
    assert_eq!(done.result.status, RunStatus::Succeeded);
    assert_eq!(done.result.text, "written");
    assert_eq!(
        t.writes.0.load(Ordering::SeqCst),
        1,
        "the approved call ran once"
    );
    let record = t.store.session(child).await.unwrap().unwrap();
    assert_eq!(record.status, SessionStatus::Succeeded);
    // The parent hears of it once: it finished without replying.
    let heard = root.inbox().drain();
    assert_eq!(heard.len(), 1, "{heard:?}");
    assert!(
        matches!(heard[0].notice, Some(Notice::CompletedWithoutReply { .. })),
        "{heard:?}"
    );
    assert!(
        detached_suspensions(t.store.as_ref(), root.id())
            .await
            .unwrap()
            .is_empty()
    );
    assert!(t.sup.suspended_delegations().await.unwrap().is_empty());
    // Nothing is left to resume, and nothing runs twice.
    let again = t.sup.resume_child(child).await.unwrap_err();
    assert_eq!(again.kind(), CoreErrorKind::Validation);
    assert!(
        again
            .to_string()
            .contains("is not suspended (it is succeeded)"),
        "{again}"
    );
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_message_to_a_suspended_child_waits_for_its_resume_and_is_read_once() {
    let (t, root) = waiting_writer(vec![write("x"), ScriptedTurn::text("written")]).await;
    let waiting = detached_suspensions(t.store.as_ref(), root.id())
        .await
        .unwrap()
        .remove(0);
    let child = waiting.session_id;
    t.sup
        .send_message(Sender::Host, child, "one more thing")
        .await
        .unwrap();
    t.sup.wait_for_mail_or_quiet(root.inbox()).await;
    // No follow-up run started beside the suspended one: the message waits, kept.
    let record = t.store.session(child).await.unwrap().unwrap();
    assert_eq!(record.status, SessionStatus::Suspended);
    assert_eq!(
        detached_suspensions(t.store.as_ref(), root.id())
            .await
            .unwrap()
            .len(),
        1
    );

    approve_first(&t, &waiting).await;
    t.sup.resume_child(child).await.unwrap();
    // The resumed run read the message that waited (or a follow-up would have).
    t.sup
        .wait_for_mail_or_quiet(&arbor_core::inbox::Inbox::new())
        .await;
    let transcript = t.store.transcript(child, 0, None).await.unwrap();
    let texts: Vec<String> = transcript
        .iter()
        .filter_map(|e| match &e.kind {
            arbor_protocol::EntryKind::Message { message } => Some(message.text().to_owned()),
            _ => None,
        })
        .collect();
    assert_eq!(
        texts
            .iter()
            .filter(|t| t.contains("one more thing"))
            .count(),
        1,
        "{texts:?}"
    );
    let record = t.store.session(child).await.unwrap().unwrap();
    assert_eq!(record.status, SessionStatus::Succeeded);
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_sync_childs_suspension_is_resumed_through_its_caller_not_alone() {
    let t = tree(
        vec![("writer", vec![write("x"), ScriptedTurn::text("written")])],
        None,
    );
    let mut root = root(&t, vec![spawn("writer"), ScriptedTurn::text("done")]).await;
    let r = root.run("go", opts(&t)).await.unwrap();
    assert_eq!(r.status, RunStatus::Suspended);
    // Listed at the root through its own run, not as a detached one.
    assert!(
        detached_suspensions(t.store.as_ref(), root.id())
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(r.suspension.as_ref().unwrap().pending[0].tool, "write");
    // Typed: its caller's run awaits it.
    let typed = t.sup.suspended_delegations().await.unwrap();
    assert_eq!(typed.len(), 1, "{typed:?}");
    assert!(typed[0].awaited, "{typed:?}");
    assert_eq!(typed[0].suspension.pending[0].tool, "write");
    let child = t
        .store
        .list_sessions(arbor_store::SessionQuery::Children(root.id()))
        .await
        .unwrap()[0]
        .id;
    let own = approval::suspensions(t.store.as_ref(), child)
        .await
        .unwrap();
    approve_first(&t, &own[0]).await;
    let e = t.sup.resume_child(child).await.unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::Validation);
    assert!(
        e.to_string().contains("is carried by its caller's run"),
        "{e}"
    );
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn deleting_a_suspended_message_child_closes_what_it_waited_on() {
    let (t, root) = waiting_writer(vec![write("x"), ScriptedTurn::text("written")]).await;
    let waiting = detached_suspensions(t.store.as_ref(), root.id())
        .await
        .unwrap()
        .remove(0);
    let child = waiting.session_id;
    approve_first(&t, &waiting).await;
    let deleted = t
        .sup
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(root.id(), "writer")
                .by("host")
                .reason("not needed"),
        )
        .await
        .unwrap();
    assert_eq!(deleted.session_id, child);
    // Nothing of it waits or runs any more, even approved.
    let record = t.store.session(child).await.unwrap().unwrap();
    assert_eq!(record.status, SessionStatus::Aborted);
    assert!(
        approval::suspensions(t.store.as_ref(), child)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        detached_suspensions(t.store.as_ref(), root.id())
            .await
            .unwrap()
            .is_empty()
    );
    let e = t.sup.resume_child(child).await.unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::Denied);
    assert_eq!(e.to_string(), "Unknown or deleted session");
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 0);
    // A second delete is harmless.
    let again = t
        .sup
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(root.id(), child.to_string())
                .by("host")
                .reason("again"),
        )
        .await
        .unwrap();
    assert!(again.already);
}

/// A child the host itself started to join (no calling run: an MCP client or an HTTP host
/// acting as the root) that stops on a call waiting for approval has no caller's run to
/// carry its approvals: it is listed at the root, decided there and resumed on its own; the
/// approved call runs once and the resumed run's answer is the child's.
#[tokio::test]
async fn a_child_the_host_joins_waiting_for_approval_is_listed_and_resumed_on_its_own() {
    let t = tree(
        vec![("writer", vec![write("x"), ScriptedTurn::text("written")])],
        None,
    );
    let root = root(&t, vec![ScriptedTurn::text("unused")]).await;
    let handle = t
        .sup
        .delegate_async(
            arbor_core::supervisor::DelegationRequest::new("writer", "write it")
                .parent(arbor_core::SessionRef::from(root.record())),
        )
        .await
        .unwrap();
    let e = t
        .sup
        .wait(&handle.delegation_id, Default::default())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::Suspended, "{e}");
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 0);
    let waiting = detached_suspensions(t.store.as_ref(), root.id())
        .await
        .unwrap();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(waiting[0].session_id, handle.session_id);
    assert_eq!(waiting[0].pending[0].tool, "write");
    approve_first(&t, &waiting[0]).await;
    let done = t.sup.resume_child(handle.session_id).await.unwrap();
    assert_eq!(done.result.status, RunStatus::Succeeded);
    assert_eq!(done.result.text, "written");
    assert_eq!(done.delegation_id, handle.delegation_id);
    assert_eq!(
        t.writes.0.load(Ordering::SeqCst),
        1,
        "the approved call ran once"
    );
    assert!(
        detached_suspensions(t.store.as_ref(), root.id())
            .await
            .unwrap()
            .is_empty()
    );
}

/// A delete a crash cut short after it removed the child's suspended run but before it
/// settled the child's record leaves a deleted child `suspended` that nothing can resume;
/// the next close of dead suspensions (every `arbor resume` runs one) settles it `aborted`
/// (the crash harness found this, seed 1053).
#[tokio::test]
async fn a_deleted_child_left_suspended_by_a_cut_short_close_is_settled_aborted() {
    let (t, root) = waiting_writer(vec![write("x"), ScriptedTurn::text("written")]).await;
    let child = detached_suspensions(t.store.as_ref(), root.id())
        .await
        .unwrap()
        .remove(0)
        .session_id;
    t.sup
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(root.id(), "writer")
                .by("host")
                .reason("not needed"),
        )
        .await
        .unwrap();
    // What the crash left: the tombstone written and the run's checkpoint gone, the record
    // still `suspended`.
    let record = t.store.session(child).await.unwrap().unwrap();
    assert_eq!(record.status, SessionStatus::Aborted);
    let cut = arbor_store::SessionUpdate {
        expected_version: Some(record.version),
        ..arbor_store::SessionUpdate::status(SessionStatus::Suspended)
    };
    t.store.update_session(child, &cut).await.unwrap();
    assert!(
        approval::suspensions(t.store.as_ref(), child)
            .await
            .unwrap()
            .is_empty()
    );

    let closed = arbor_core::process::close_dead_suspensions(t.store.as_ref(), root.id())
        .await
        .unwrap();
    assert_eq!(closed, 1);
    let record = t.store.session(child).await.unwrap().unwrap();
    assert_eq!(record.status, SessionStatus::Aborted);
    assert!(record.tombstone.is_some());
    // Settled once: a second close finds nothing.
    let again = arbor_core::process::close_dead_suspensions(t.store.as_ref(), root.id())
        .await
        .unwrap();
    assert_eq!(again, 0);
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 0, "nothing of it ran");
}

/// A crash just after a message-mode child's run stored its `suspended` status (the crash
/// harness found it, seed 6: the process died before the run's delegation mapping was
/// written, so nothing listed or resumed the child and the tree never finished). The mapping
/// is now stored before the suspension: whatever the crash leaves, a restarted supervisor
/// lists the child's suspension and resumes it, and the approved call runs once.
#[tokio::test]
async fn a_crash_as_a_message_child_suspends_leaves_it_listed_and_resumable() {
    use arbor_store::testing::{Call, FaultStore};
    let stored: std::sync::Arc<dyn arbor_store::Store> =
        std::sync::Arc::new(arbor_store::MemoryStore::new());
    let faults = FaultStore::new(stored.clone());
    // The process dies at that write: it is done, and nothing after it is.
    let held = faults.arm(true, |call| {
        matches!(call, Call::Append(_, _, Some(u)) if u.status == Some(SessionStatus::Suspended))
    });
    let writer = || vec![write("x"), ScriptedTurn::text("written")];
    let t = tree_on(faults.clone(), vec![("writer", writer())], None);
    let mut root = root(&t, vec![spawn_message("writer"), ScriptedTurn::text("ok")]).await;
    t.sup.attach(&mut root);
    let r = root.run("go", opts(&t)).await.unwrap();
    assert_eq!(r.status, RunStatus::Succeeded, "{r:?}");
    held.reached.await.unwrap();

    // A new process on what was stored.
    let after = tree_on(stored.clone(), vec![("writer", writer())], None);
    let waiting = detached_suspensions(stored.as_ref(), root.id())
        .await
        .unwrap();
    assert_eq!(waiting.len(), 1, "the suspension is listed: {waiting:?}");
    assert_eq!(waiting[0].pending[0].tool, "write");
    let child = waiting[0].session_id;
    assert_eq!(
        stored.session(child).await.unwrap().unwrap().status,
        SessionStatus::Suspended
    );
    let typed = after.sup.suspended_delegations().await.unwrap();
    assert_eq!(typed.len(), 1, "{typed:?}");
    assert!(!typed[0].awaited);
    approve_first(&after, &waiting[0]).await;
    let done = after.sup.resume_child(child).await.unwrap();
    assert_eq!(done.result.status, RunStatus::Succeeded);
    assert_eq!(done.result.text, "written");
    assert_eq!(
        after.writes.0.load(Ordering::SeqCst),
        1,
        "the approved call ran once"
    );
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 0);
    assert!(
        detached_suspensions(stored.as_ref(), root.id())
            .await
            .unwrap()
            .is_empty()
    );
    // The dead process never goes on.
    std::mem::forget(held.release);
}

/// `wait_for_quiet` returns once no run the runtime started is in flight: a message-mode
/// child still on a slow first turn when its root's run ended is waited for, and it reaches
/// its own suspension (a host that shut the supervisor down at once would cancel it).
#[tokio::test(start_paused = true)]
async fn waiting_for_quiet_lets_a_running_message_child_reach_its_own_suspension() {
    let t = tree(
        vec![(
            "writer",
            vec![
                write("x").with_delay(std::time::Duration::from_secs(5)),
                ScriptedTurn::text("written"),
            ],
        )],
        None,
    );
    let mut root = root(&t, vec![spawn_message("writer"), ScriptedTurn::text("ok")]).await;
    t.sup.attach(&mut root);
    let r = root.run("go", opts(&t)).await.unwrap();
    assert_eq!(r.status, RunStatus::Succeeded, "{r:?}");
    assert_eq!(
        t.sup.active_children(),
        1,
        "the writer's turn is still going"
    );
    let before = tokio::time::Instant::now();
    t.sup.wait_for_quiet().await;
    assert!(before.elapsed() >= std::time::Duration::from_secs(4));
    let waiting = detached_suspensions(t.store.as_ref(), root.id())
        .await
        .unwrap();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    assert_eq!(waiting[0].pending[0].tool, "write");
    // Quiet already: it returns at once.
    tokio::time::timeout(std::time::Duration::from_millis(1), t.sup.wait_for_quiet())
        .await
        .unwrap();
}

/// `wait_for_quiet` waits through what a message sent to a running child starts: the
/// child's run reads it (or a follow-up run does), and only then is the tree quiet.
#[tokio::test(start_paused = true)]
async fn waiting_for_quiet_waits_for_the_work_a_message_starts() {
    let t = tree(
        vec![(
            "writer",
            vec![
                ScriptedTurn::text("first").with_delay(std::time::Duration::from_secs(2)),
                ScriptedTurn::text("second").with_delay(std::time::Duration::from_secs(3)),
            ],
        )],
        None,
    );
    let mut root = root(&t, vec![spawn_message("writer"), ScriptedTurn::text("ok")]).await;
    t.sup.attach(&mut root);
    let r = root.run("go", opts(&t)).await.unwrap();
    assert_eq!(r.status, RunStatus::Succeeded, "{r:?}");
    let child = t
        .store
        .list_sessions(arbor_store::SessionQuery::Tree(root.id()))
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.name == "writer")
        .unwrap()
        .id;
    let before = tokio::time::Instant::now();
    t.sup
        .send_message(Sender::Host, child, "one more thing")
        .await
        .unwrap();
    t.sup.wait_for_quiet().await;
    assert!(
        before.elapsed() >= std::time::Duration::from_secs(5),
        "quiet after {:?}",
        before.elapsed()
    );
    let answers: Vec<String> = t
        .store
        .transcript(child, 0, None)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            arbor_protocol::EntryKind::Message {
                message: arbor_protocol::Message::Assistant { content, .. },
            } => Some(content),
            _ => None,
        })
        .collect();
    assert_eq!(answers, ["first", "second"]);
}
