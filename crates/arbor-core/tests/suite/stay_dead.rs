//! Stay dead, stay inside, never loop: a delete that lands while a child registers or while
//! a follow-up starts cancels it before its first turn; a follow-up runs under the limits its
//! spawn narrowed to, in any process; a run that never started does not wake again.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arbor_core::process::SupervisorProcess;
use arbor_core::supervisor::{
    BeforeContext, BeforeDecision, BeforeHook, ChildEntry, DelegationRequest, LimitsInput,
    Ownership, Sender, Supervisor, SupervisorBuilder, factory_fn,
};
use arbor_core::{Agent, CoreError, CoreErrorKind, RunOptions, Session, SessionRef};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{EntryKind, InboxMessage, LimitKind, Notice, SessionId, SessionStatus};
use arbor_store::{MemoryStore, Store};
use async_trait::async_trait;
use serde_json::json;

use super::support::Probe;
use arbor_store::testing::{Call, FaultStore as HoldStore};

/// A supervisor whose one child `worker` plays `turns` (with the probe tool), counting its
/// builds; `fail` makes its factory fail.
fn supervisor(
    store: &Arc<dyn Store>,
    turns: Vec<ScriptedTurn>,
    builds: Arc<AtomicUsize>,
    fail: bool,
    configure: impl FnOnce(SupervisorBuilder) -> SupervisorBuilder,
) -> Supervisor {
    let script = Script::new(turns);
    let b = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .child(ChildEntry::new(
            "worker",
            factory_fn(move |ctx| {
                let script = script.clone();
                builds.fetch_add(1, Ordering::SeqCst);
                async move {
                    if fail {
                        return Err(CoreError::Validation("no credentials for worker".into()));
                    }
                    Agent::builder(ctx.child_id.clone())
                        .provider(ScriptedProvider::new(script))
                        .tool(Probe::default())
                        .build()
                }
            }),
        ));
    configure(b).build().unwrap()
}

async fn root(sup: &Supervisor, store: &Arc<dyn Store>) -> Session {
    let mut s = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            "ok",
        )])))
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

fn request(root: &Session) -> DelegationRequest {
    DelegationRequest {
        name: Some("w".into()),
        parent: Some(SessionRef::from(root.record())),
        ..DelegationRequest::new("worker", "work")
    }
}

/// Waits until nothing this supervisor started is running.
async fn quiet(sup: &Supervisor) {
    let none = arbor_core::inbox::Inbox::new();
    tokio::time::timeout(Duration::from_secs(5), sup.wait_for_mail_or_quiet(&none))
        .await
        .expect("the tree went quiet");
}

fn notices(root: &Session) -> Vec<InboxMessage> {
    root.inbox().drain()
}

async fn kinds(store: &Arc<dyn Store>, id: SessionId) -> Vec<&'static str> {
    store
        .transcript(id, 0, None)
        .await
        .unwrap()
        .iter()
        .map(|e| e.kind.kind_name())
        .collect()
}

async fn reached(held: &mut tokio::sync::oneshot::Receiver<()>) {
    tokio::time::timeout(Duration::from_secs(5), held)
        .await
        .expect("the held call was reached")
        .unwrap();
}

#[tokio::test]
async fn a_delete_while_the_child_registers_cancels_it_before_anything_runs() {
    let mem: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let hold = HoldStore::new(mem);
    let store: Arc<dyn Store> = hold.clone();
    let builds = Arc::new(AtomicUsize::new(0));
    let sup = supervisor(
        &store,
        vec![ScriptedTurn::text("done")],
        builds.clone(),
        false,
        |b| b,
    );
    let root = root(&sup, &store).await;
    // Hold the registration right after the child's record is written, before the
    // runtime knows it live.
    let mut held = hold.arm(
        true,
        |c| matches!(c, Call::Create(r) if r.parent_id.is_some()),
    );
    let spawning = tokio::spawn({
        let (sup, req) = (sup.clone(), request(&root));
        async move { sup.spawn(req).await }
    });
    reached(&mut held.reached).await;
    let deleted = sup
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(root.id(), "w")
                .by("host")
                .reason("changed my mind"),
        )
        .await
        .unwrap();
    held.release.send(()).unwrap();
    let handle = spawning.await.unwrap().unwrap();
    assert_eq!(handle.session_id, deleted.session_id);
    quiet(&sup).await;
    assert_eq!(builds.load(Ordering::SeqCst), 0, "its factory never ran");
    let child = store.session(deleted.session_id).await.unwrap().unwrap();
    assert_eq!(child.status, SessionStatus::Aborted);
    assert!(child.tombstone.is_some());
    assert!(
        !kinds(&store, child.id).await.contains(&"run_started"),
        "no run of it began"
    );
    let got = notices(&root);
    assert_eq!(got.len(), 1, "exactly one notice: {got:?}");
    assert!(
        matches!(&got[0].notice, Some(Notice::Cancelled { reason: Some(r) }) if r == "Deleted by its parent"),
        "{got:?}"
    );
}

#[tokio::test]
async fn a_delete_while_a_follow_up_starts_cancels_it_before_its_first_turn() {
    let mem: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let hold = HoldStore::new(mem);
    let store: Arc<dyn Store> = hold.clone();
    let builds = Arc::new(AtomicUsize::new(0));
    let sup = supervisor(
        &store,
        vec![ScriptedTurn::text("first"), ScriptedTurn::text("second")],
        builds.clone(),
        false,
        |b| b,
    );
    let root = root(&sup, &store).await;
    let handle = sup.spawn(request(&root)).await.unwrap();
    quiet(&sup).await;
    assert_eq!(notices(&root).len(), 1, "completed without reply");
    // Hold the follow-up once it has taken its run lease.
    let child = handle.session_id;
    let mut held = hold.arm(
        true,
        move |c| matches!(c, Call::Update(id, u) if *id == child && u.live_only),
    );
    sup.send_message(Sender::Host, child, "one more thing")
        .await
        .unwrap();
    reached(&mut held.reached).await;
    let deleted = sup
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(root.id(), "w")
                .by("host")
                .reason("stop"),
        )
        .await
        .unwrap();
    assert!(
        deleted.run_cancelled,
        "the starting follow-up was cancelled"
    );
    held.release.send(()).unwrap();
    quiet(&sup).await;
    assert_eq!(
        builds.load(Ordering::SeqCst),
        1,
        "no rebuild for the follow-up"
    );
    let runs = kinds(&store, child).await;
    assert_eq!(
        runs.iter().filter(|k| **k == "run_started").count(),
        1,
        "only the first run began: {runs:?}"
    );
    let got = notices(&root);
    assert_eq!(got.len(), 1, "exactly one notice: {got:?}");
    assert!(matches!(got[0].notice, Some(Notice::Cancelled { .. })));
}

#[tokio::test]
async fn a_child_whose_startup_failed_is_started_once_and_refuses_later_messages() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let builds = Arc::new(AtomicUsize::new(0));
    let sup = supervisor(&store, vec![], builds.clone(), true, |b| b);
    let root = root(&sup, &store).await;
    let handle = sup.spawn(request(&root)).await.unwrap();
    quiet(&sup).await;
    let err = sup
        .send_message(Sender::Host, handle.session_id, "try again")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), CoreErrorKind::Denied);
    assert_eq!(
        err.to_string(),
        "\"w\" could not start (no credentials for worker); it takes no messages: spawn a new child"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        builds.load(Ordering::SeqCst),
        1,
        "started once, never again"
    );
    let got = notices(&root);
    assert_eq!(got.len(), 1, "one failure, one notice: {got:?}");
    assert!(
        matches!(&got[0].notice, Some(Notice::Failed { error }) if error == "no credentials for worker"),
        "{got:?}"
    );
}

/// Allows the first delegation, denies every later one, counting them.
#[derive(Debug, Default, Clone)]
struct FirstOnly(Arc<AtomicUsize>);

#[async_trait]
impl BeforeHook for FirstOnly {
    async fn before(&self, _ctx: &BeforeContext) -> BeforeDecision {
        if self.0.fetch_add(1, Ordering::SeqCst) == 0 {
            BeforeDecision::Allow
        } else {
            BeforeDecision::Deny {
                reason: Some("quota used".into()),
            }
        }
    }
}

#[tokio::test]
async fn a_follow_up_the_hook_denies_drops_its_message_once_and_does_not_loop() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let hook = FirstOnly::default();
    let sup = supervisor(
        &store,
        vec![ScriptedTurn::text("first"), ScriptedTurn::text("second")],
        Arc::new(AtomicUsize::new(0)),
        false,
        {
            let hook = hook.clone();
            |b| b.before(hook)
        },
    );
    let root = root(&sup, &store).await;
    let handle = sup.spawn(request(&root)).await.unwrap();
    quiet(&sup).await;
    notices(&root);
    let receipt = sup
        .send_message(Sender::Host, handle.session_id, "more")
        .await
        .unwrap();
    quiet(&sup).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(hook.0.load(Ordering::SeqCst), 2, "one attempt, no loop");
    let got = notices(&root);
    assert_eq!(got.len(), 1, "one notice: {got:?}");
    assert!(
        matches!(&got[0].notice, Some(Notice::Failed { error }) if error == "quota used"),
        "{got:?}"
    );
    let entries = store.transcript(handle.session_id, 0, None).await.unwrap();
    let dropped: Vec<_> = entries
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::InboxDropped { ids, reason } => Some((ids.clone(), reason.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert_eq!(dropped[0].0, [receipt.id]);
    assert_eq!(dropped[0].1, "the run could not start: quota used");
}

#[tokio::test]
async fn a_follow_up_keeps_the_limits_its_spawn_narrowed_to_in_another_process() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let probe = |tag: &str| ScriptedTurn::tool_call("probe", json!({"ms": 0, "tag": tag}));
    let turns = vec![
        ScriptedTurn::text("first"),
        probe("a"),
        probe("b"),
        ScriptedTurn::text("never"),
    ];
    let sup = supervisor(
        &store,
        turns.clone(),
        Arc::new(AtomicUsize::new(0)),
        false,
        |b| b,
    );
    let root = root(&sup, &store).await;
    let req = DelegationRequest {
        limits: LimitsInput {
            max_tool_calls: Some(1),
            ..LimitsInput::default()
        },
        ..request(&root)
    };
    let handle = sup.spawn(req).await.unwrap();
    quiet(&sup).await;
    // Another process (a second supervisor on the same store) runs the follow-up.
    let other = supervisor(&store, turns, Arc::new(AtomicUsize::new(0)), false, |b| b);
    other
        .send_message(Sender::Host, handle.session_id, "go on")
        .await
        .unwrap();
    quiet(&other).await;
    let child = store.session(handle.session_id).await.unwrap().unwrap();
    assert_eq!(child.status, SessionStatus::Failed);
    let last = store
        .transcript(child.id, 0, None)
        .await
        .unwrap()
        .into_iter()
        .rev()
        .find_map(|e| match e.kind {
            EntryKind::RunFinished { breach, .. } => Some(breach),
            _ => None,
        })
        .unwrap()
        .expect("a limit fired");
    assert_eq!(
        (last.limit, last.maximum, last.observed),
        (LimitKind::MaxToolCalls, 1, 2)
    );
    let _ = RunOptions::default();
}

#[tokio::test]
async fn a_second_process_never_starts_a_run_of_a_child_running_elsewhere() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let turns = vec![
        ScriptedTurn::text("first").with_delay(Duration::from_millis(400)),
        ScriptedTurn::text("second"),
    ];
    let owner = supervisor(
        &store,
        turns.clone(),
        Arc::new(AtomicUsize::new(0)),
        false,
        |b| b,
    );
    let root = root(&owner, &store).await;
    let handle = owner.spawn(request(&root)).await.unwrap();
    // While the owner's run is live, another process (a second supervisor on the store)
    // sends a message: it is stored, and that process starts no run of its own.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let other_builds = Arc::new(AtomicUsize::new(0));
    let other = supervisor(&store, turns, other_builds.clone(), false, |b| b);
    let receipt = other
        .send_message(Sender::Host, handle.session_id, "and this")
        .await
        .unwrap();
    quiet(&other).await;
    assert_eq!(other_builds.load(Ordering::SeqCst), 0, "no second run");
    quiet(&owner).await;
    let entries = store.transcript(handle.session_id, 0, None).await.unwrap();
    let started = entries
        .iter()
        .filter(|e| matches!(e.kind, EntryKind::RunStarted { .. }))
        .count();
    assert_eq!(started, 1, "one run, never two overlapping");
    assert!(
        entries.iter().any(|e| matches!(&e.kind,
            EntryKind::InboxReceived { message } if message.id == receipt.id)),
        "the message is kept for whoever runs the child next"
    );
}

#[tokio::test]
async fn a_teardown_whose_tombstone_failed_is_finished_after_the_next_run() {
    let mem: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let hold = HoldStore::new(mem);
    let store: Arc<dyn Store> = hold.clone();
    let sup = supervisor(
        &store,
        vec![ScriptedTurn::text("done")],
        Arc::new(AtomicUsize::new(0)),
        false,
        |b| b,
    );
    let root = root(&sup, &store).await;
    let first = sup.spawn(request(&root)).await.unwrap();
    quiet(&sup).await;
    // The store fails the tombstone's write: the delete reports it, the child is closed.
    hold.fail_once(|c| matches!(c, Call::Update(_, u) if u.tombstone.is_some()));
    let e = sup
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(root.id(), "w")
                .by("host")
                .reason("done with it"),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::Store);
    let record = store.session(first.session_id).await.unwrap().unwrap();
    assert!(record.tombstone.is_none());
    // The next run that ends finishes it.
    let req = DelegationRequest {
        name: Some("w2".into()),
        ..request(&root)
    };
    sup.spawn(req).await.unwrap();
    quiet(&sup).await;
    let record = store.session(first.session_id).await.unwrap().unwrap();
    let tombstone = record.tombstone.expect("finished after the next run");
    assert_eq!(tombstone.reason, "done with it");
    assert_eq!(sup.retry_cleanups().await, 0);
}

/// Holds each delegation's start until a permit is given, then allows or denies it.
#[derive(Debug, Clone)]
struct Gate {
    open: Arc<tokio::sync::Semaphore>,
    allow: bool,
}

#[async_trait]
impl BeforeHook for Gate {
    async fn before(&self, _ctx: &BeforeContext) -> BeforeDecision {
        let _ = self.open.acquire().await.map(|p| p.forget());
        if self.allow {
            BeforeDecision::Allow
        } else {
            BeforeDecision::Deny {
                reason: Some("no quota".into()),
            }
        }
    }
}

/// The contract's send-after-spawn row: a send to a child admitted but not started yet
/// waits for the start; a failed start fails the send with the startup error (the message is
/// not queued to be dropped), a start that succeeds gets the message read.
#[tokio::test]
async fn a_message_sent_before_the_child_started_waits_and_fails_with_its_startup_error() {
    for allow in [false, true] {
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let gate = Gate {
            open: Arc::new(tokio::sync::Semaphore::new(0)),
            allow,
        };
        let sup = supervisor(
            &store,
            vec![ScriptedTurn::text("done"), ScriptedTurn::text("read it")],
            Arc::new(AtomicUsize::new(0)),
            false,
            {
                let gate = gate.clone();
                |b| b.before(gate)
            },
        );
        let root = root(&sup, &store).await;
        let handle = sup.spawn(request(&root)).await.unwrap();
        let child = handle.session_id;
        let send = tokio::spawn({
            let sup = sup.clone();
            async move { sup.send_message(Sender::Host, child, "an early word").await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !send.is_finished(),
            "allow={allow}: the send waits for the start"
        );
        // The first start; and a follow-up run, if the message lands after the first run
        // read its inbox, passes the hook again.
        gate.open.add_permits(2);
        let sent = tokio::time::timeout(Duration::from_secs(5), send)
            .await
            .expect("the send ends once the start does")
            .unwrap();
        quiet(&sup).await;
        let entries = store.transcript(child, 0, None).await.unwrap();
        if allow {
            let receipt = sent.unwrap();
            let read = entries.iter().any(
                |e| matches!(&e.kind, EntryKind::InboxRead { ids } if ids.contains(&receipt.id)),
            );
            assert!(read, "the message was read: {entries:?}");
        } else {
            let e = sent.unwrap_err();
            assert_eq!(e.kind(), CoreErrorKind::Denied);
            assert_eq!(
                e.to_string(),
                "\"w\" could not start (no quota); it takes no messages: spawn a new child"
            );
            assert!(
                !entries
                    .iter()
                    .any(|e| matches!(e.kind, EntryKind::InboxReceived { .. })),
                "nothing was queued to be dropped: {entries:?}"
            );
        }
    }
}
