//! Nested approvals under faults: a child deleted while it waits, a parent resume cancelled
//! while its child resumes, a child that cannot be rebuilt for its resume, and what the
//! `after` hook learns of a rejection.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arbor_core::approval;
use arbor_core::supervisor::{
    AfterHook, ChildEntry, Completion, CompletionStatus, DelegationRequest, Outcome, Ownership,
    Supervisor, factory_fn,
};
use arbor_core::{Agent, CoreError, RunOptions, Session};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{Message, RunStatus};
use arbor_store::{MemoryStore, Store};
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::nested_support::{
    Gatekeeper, Tree, Write, allow, opts, root, spawn, tree, write, writer_tree,
};

/// Each completion's status and error.
type Seen = Vec<(CompletionStatus, Option<String>)>;

/// Records each completion's status and error.
#[derive(Debug, Default, Clone)]
struct Completions(Arc<Mutex<Seen>>);

#[async_trait]
impl AfterHook for Completions {
    async fn after(&self, c: &Completion) -> Result<(), arbor_core::supervisor::HookError> {
        self.0.lock().unwrap().push((c.status, c.error.clone()));
        Ok(())
    }
}

fn spawn_result(r: &Session) -> String {
    r.messages()
        .iter()
        .find_map(|m| match m {
            Message::Tool(t) if t.name == "spawn_agent" => Some(t.content.clone()),
            _ => None,
        })
        .unwrap()
}

async fn suspended_writer(t: &Tree) -> (Session, approval::Suspension) {
    let mut r = root(t, vec![spawn("writer"), ScriptedTurn::text("went on")]).await;
    let first = r.run("go", opts(t)).await.unwrap();
    assert_eq!(first.status, RunStatus::Suspended);
    (r, first.suspension.unwrap())
}

#[tokio::test]
async fn deleting_a_suspended_child_lets_its_parent_resume_and_go_on() {
    let t = tree(
        vec![("writer", vec![write("x"), ScriptedTurn::text("written")])],
        None,
    );
    let (mut r, waiting) = suspended_writer(&t).await;
    let child = waiting.pending[0].clone();
    let deleted = t
        .sup
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(r.id(), "writer")
                .by("host")
                .reason("not needed"),
        )
        .await
        .unwrap();
    // A resume with nothing decided finds the child gone: its call fails, the run goes on.
    let done = r.resume(waiting.run_id, opts(&t)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(done.text, "went on");
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 0);
    assert_eq!(
        spawn_result(&r),
        "the child \"writer\" was deleted while it waited for approval; its call did not finish"
    );
    // Nothing of the child waits any more.
    let left = approval::suspensions(t.store.as_ref(), deleted.session_id)
        .await
        .unwrap();
    assert!(left.is_empty(), "{left:?}");
    assert!(child.id.starts_with("sub_"));
}

#[tokio::test]
async fn approving_a_deleted_childs_call_fails_that_call_and_the_parent_goes_on() {
    let t = tree(
        vec![("writer", vec![write("x"), ScriptedTurn::text("written")])],
        None,
    );
    let (mut r, waiting) = suspended_writer(&t).await;
    t.sup
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(r.id(), "writer")
                .by("host")
                .reason("not needed"),
        )
        .await
        .unwrap();
    let done = r
        .approve(
            waiting.run_id,
            waiting.version,
            &[allow(&waiting.pending[0].id)],
            opts(&t),
        )
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(
        t.writes.0.load(Ordering::SeqCst),
        0,
        "a deleted child never runs"
    );
    assert!(spawn_result(&r).contains("was deleted"));
}

#[tokio::test]
async fn a_parent_resume_cancelled_while_its_child_resumes_leaves_the_child_one_terminal() {
    let completions = Completions::default();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let slow = Agent::builder("writer")
        .provider(ScriptedProvider::new(Script::new([
            write("x"),
            ScriptedTurn::text("written").with_delay(Duration::from_secs(5)),
        ])))
        .tool(Write::default())
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .durable_approvals("rev-1")
        .after(completions.clone())
        .child(ChildEntry::agent("writer", slow))
        .build()
        .unwrap();
    let t = Tree {
        sup,
        store,
        writes: Write::default(),
        afters: Default::default(),
    };
    let (mut r, waiting) = suspended_writer(&t).await;
    let cancel = CancellationToken::new();
    let decisions = [allow(&waiting.pending[0].id)];
    let resuming = r.approve(
        waiting.run_id,
        waiting.version,
        &decisions,
        opts(&t).with_cancel(cancel.clone()),
    );
    let canceller = async {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    };
    let (ended, ()) = tokio::join!(resuming, canceller);
    assert_eq!(ended.unwrap().status, RunStatus::Aborted);
    // The child's resumed delegation still reports exactly one terminal.
    tokio::time::timeout(Duration::from_secs(2), async {
        while completions.0.lock().unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the child's after hook ran");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let got = completions.0.lock().unwrap().clone();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, CompletionStatus::Aborted);
    assert_eq!(t.sup.summary()[0].outcome, Outcome::Aborted);
    assert_eq!(t.sup.active_children(), 0);
    // Nothing of either run is left waiting or claimed.
    assert!(
        t.store
            .list_checkpoints(approval::RUN_NAMESPACE)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_child_that_cannot_be_rebuilt_stays_suspended_and_a_later_resume_finishes_it() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let writes = Write::default();
    let builds = Arc::new(AtomicUsize::new(0));
    let script = Script::new([write("x"), ScriptedTurn::text("written")]);
    let factory = {
        let (writes, builds) = (writes.clone(), builds.clone());
        factory_fn(move |ctx| {
            let (script, writes) = (script.clone(), writes.clone());
            // The rebuild for the first resume fails (a provider outage, say).
            let n = builds.fetch_add(1, Ordering::SeqCst);
            async move {
                if n == 1 {
                    return Err(CoreError::Validation("provider unreachable".into()));
                }
                Agent::builder(ctx.child_id.clone())
                    .provider(ScriptedProvider::new(script))
                    .tool(writes)
                    .build()
            }
        })
    };
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .durable_approvals("rev-1")
        .child(ChildEntry::new("writer", factory))
        .build()
        .unwrap();
    let t = Tree {
        sup,
        store,
        writes: writes.clone(),
        afters: Default::default(),
    };
    let (mut r, waiting) = suspended_writer(&t).await;
    let e = r
        .approve(
            waiting.run_id,
            waiting.version,
            &[allow(&waiting.pending[0].id)],
            opts(&t),
        )
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "provider unreachable");
    assert_eq!(writes.0.load(Ordering::SeqCst), 0);
    assert_eq!(t.sup.summary()[0].outcome, Outcome::Suspended);
    // The decision was kept: a plain resume, once the child can be built, finishes it.
    let done = r.resume(waiting.run_id, opts(&t)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(writes.0.load(Ordering::SeqCst), 1, "ran once");
    let v: serde_json::Value = serde_json::from_str(&spawn_result(&r)).unwrap();
    assert_eq!(v["text"], "written");
    assert_eq!(t.sup.summary()[0].outcome, Outcome::Succeeded);
}

#[tokio::test]
async fn the_after_hook_learns_why_a_delegation_was_rejected() {
    let completions = Completions::default();
    let t = writer_tree(
        |b| {
            b.before(Gatekeeper {
                allow: 0,
                seen: AtomicUsize::new(0),
            })
            .after(completions.clone())
        },
        |e| e,
    );
    let e = t
        .sup
        .delegate(DelegationRequest::new("writer", "go"))
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "policy changed");
    assert_eq!(
        *completions.0.lock().unwrap(),
        [(
            CompletionStatus::Rejected,
            Some("policy changed".to_owned())
        )]
    );
    let _ = RunOptions::default();
}
