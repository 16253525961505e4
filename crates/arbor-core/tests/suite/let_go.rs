//! A child deleted while its calls wait for a decision: the calls will never be answered, so
//! the provider that made them is told ([`ModelProvider::abandon`]) and can let go of what
//! waits on its side (a remote A2A task in `input-required` is cancelled). Whether the child
//! waited on its own (message mode) or under its caller's suspended run (sync), once per
//! delete; a call that was decided and whose run went on is never handed over.

use std::sync::{Arc, Mutex};

use arbor_core::process::detached_suspensions;
use arbor_core::supervisor::{ChildEntry, DeleteChild, Ownership, SpawnAgentTool, Supervisor};
use arbor_core::{Agent, Session};
use arbor_model::{
    ModelError, ModelProvider, ModelRequest, ModelStream, Script, ScriptedProvider, ScriptedTurn,
};
use arbor_protocol::RunStatus;
use arbor_store::{MemoryStore, Store};
use async_trait::async_trait;
use serde_json::json;

use super::nested_support::{Write, allow, spawn, write};

/// A provider whose turns are scripted and that records the calls it is told to let go of.
#[derive(Debug)]
struct Remote {
    inner: ScriptedProvider,
    abandoned: Arc<Mutex<Vec<Vec<String>>>>,
}

#[async_trait]
impl ModelProvider for Remote {
    fn name(&self) -> &str {
        "remote"
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        self.inner.stream(request).await
    }

    async fn abandon(&self, call_ids: &[String]) -> Result<(), ModelError> {
        self.abandoned.lock().unwrap().push(call_ids.to_vec());
        Ok(())
    }
}

struct Tree {
    sup: Supervisor,
    store: Arc<dyn Store>,
    abandoned: Arc<Mutex<Vec<Vec<String>>>>,
}

/// A durable tree whose child `writer` (on the recording provider) writes once, gated, then
/// answers.
fn tree() -> Tree {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let abandoned = Arc::new(Mutex::new(Vec::new()));
    let writer = Agent::builder("writer")
        .provider(Remote {
            inner: ScriptedProvider::new(Script::new([write("x"), ScriptedTurn::text("written")])),
            abandoned: abandoned.clone(),
        })
        .tool(Write::default())
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .durable_approvals("rev-1")
        .child(ChildEntry::agent("writer", writer))
        .build()
        .unwrap();
    Tree {
        sup,
        store,
        abandoned,
    }
}

async fn root(t: &Tree, turns: Vec<ScriptedTurn>) -> Session {
    let mut root = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new(turns)))
        .dyn_tool(Arc::new(SpawnAgentTool::new(t.sup.delegator())))
        .build()
        .unwrap()
        .session()
        .store(t.store.clone())
        .create()
        .await
        .unwrap();
    t.sup.attach(&mut root);
    root
}

fn opts_of(t: &Tree) -> arbor_core::RunOptions {
    arbor_core::RunOptions::default().with_nested(Arc::new(t.sup.clone()))
}

/// A root that spawned `writer` by message and went on; the writer waits on its `write`.
/// Returns the root and the writer's waiting call's id (as its provider made it).
async fn message_writer(t: &Tree) -> (Session, arbor_core::Suspension) {
    let spawn_message = ScriptedTurn::tool_call(
        "spawn_agent",
        json!({"child_id": "writer", "name": "writer", "input": "write it", "mode": "message"}),
    );
    let mut root = root(
        t,
        vec![
            spawn_message,
            ScriptedTurn::text("ok"),
            ScriptedTurn::text("noted"),
        ],
    )
    .await;
    let r = root.run("go", opts_of(t)).await.unwrap();
    assert_eq!(r.status, RunStatus::Succeeded, "{r:?}");
    t.sup.wait_for_mail_or_quiet(root.inbox()).await;
    let mut waiting = detached_suspensions(t.store.as_ref(), root.id())
        .await
        .unwrap();
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    (root, waiting.remove(0))
}

async fn delete_writer(t: &Tree, root: &Session) {
    let deleted = t
        .sup
        .delete_child(DeleteChild::new(root.id(), "writer").by("host"))
        .await
        .unwrap();
    assert!(!deleted.already);
}

#[tokio::test]
async fn deleting_a_message_child_that_waits_hands_its_call_to_its_provider() {
    let t = tree();
    let (root, waiting) = message_writer(&t).await;
    let call = waiting.pending[0].call_id.clone();
    assert!(t.abandoned.lock().unwrap().is_empty());
    delete_writer(&t, &root).await;
    assert_eq!(*t.abandoned.lock().unwrap(), vec![vec![call]]);
    // Nothing of it waits; a second delete changes nothing and hands nothing over again.
    let again = t
        .sup
        .delete_child(DeleteChild::new(root.id(), waiting.session_id.to_string()).by("host"))
        .await
        .unwrap();
    assert!(again.already);
    assert_eq!(t.abandoned.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn deleting_a_sync_child_under_a_suspended_caller_hands_its_call_over_at_once() {
    let t = tree();
    let mut r = root(&t, vec![spawn("writer"), ScriptedTurn::text("went on")]).await;
    let first = r.run("go", opts_of(&t)).await.unwrap();
    assert_eq!(first.status, RunStatus::Suspended);
    let waiting = first.suspension.unwrap();
    let call = waiting.pending[0].call_id.clone();
    assert_eq!(waiting.pending[0].path, ["writer"]);
    delete_writer(&t, &r).await;
    // At the delete, not only once the caller goes on.
    assert_eq!(*t.abandoned.lock().unwrap(), vec![vec![call.clone()]]);
    // The caller going on closes the child's wait, and hands nothing over again.
    let done = r.resume(waiting.run_id, opts_of(&t)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(*t.abandoned.lock().unwrap(), vec![vec![call]]);
}

#[tokio::test]
async fn a_call_that_was_decided_and_ran_is_never_handed_over() {
    let t = tree();
    let (root, waiting) = message_writer(&t).await;
    arbor_core::approval::decide(
        t.store.as_ref(),
        waiting.run_id,
        waiting.version,
        &[allow(&waiting.pending[0].id)],
    )
    .await
    .unwrap();
    let done = t.sup.resume_child(waiting.session_id).await.unwrap();
    assert_eq!(done.result.status, RunStatus::Succeeded);
    delete_writer(&t, &root).await;
    assert!(t.abandoned.lock().unwrap().is_empty());
}
