//! A sync child continued for its caller after a crash (issue 39, item 7) that then asks a
//! question or waits for approval (item 4): the continued caller's cut-off call waits with
//! it, as it would have before the crash. The caller's run suspends with the child's
//! question listed at the root; once answered, resuming the caller resumes the child, and the
//! child's answer is the caller's call result.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use arbor_core::RunOptions;
use arbor_core::supervisor::{Supervisor, decide_at, waiting_at};
use arbor_core::tool::ask::{ASK_HUMAN, answer};
use arbor_model::{Script, ScriptedTurn};
use arbor_protocol::{EntryKind, Message, RunStatus, SessionStatus};
use arbor_store::{MemoryStore, SessionQuery, Store};
use serde_json::json;

use super::recover::{crashed_with_its_child_in_flight, tree_of};
use super::support::Probe;

fn opts(sup: Supervisor) -> RunOptions {
    RunOptions::default().with_nested(Arc::new(sup))
}

#[tokio::test]
async fn a_child_continued_for_its_caller_that_asks_has_its_answer_reach_the_caller() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let tool = Probe::default();
    let script = Script::new([
        ScriptedTurn::tool_call("probe", json!({"ms": 10_000, "tag": "t"})),
        ScriptedTurn::tool_call(
            ASK_HUMAN,
            json!({"question": "Ship it?", "choices": ["yes", "no"]}),
        ),
        ScriptedTurn::text("child done"),
    ]);
    let tree = |tool: Probe| tree_of(&store, tool, script.clone(), true);
    let root_id = crashed_with_its_child_in_flight(&store, tree(tool.clone()));
    assert_eq!(store.mark_interrupted().await.unwrap().len(), 2);

    // A new process continues the root: its cut-off spawn rejoins the child, which goes on
    // and asks; the root waits with it instead of reading an interruption.
    let (sup, root_agent) = tree(tool.clone());
    let mut root = root_agent
        .open_session(store.clone(), root_id)
        .await
        .unwrap();
    let (continued, r) = root.continue_interrupted(opts(sup)).await.unwrap();
    assert_eq!(r.status, RunStatus::Suspended, "{:?} {:?}", r.error, r.text);
    assert_eq!(continued.rejoined_calls, ["spawn_agent"], "{continued:?}");
    assert!(continued.interrupted_calls.is_empty(), "{continued:?}");
    assert_eq!(
        store.session(root_id).await.unwrap().unwrap().status,
        SessionStatus::Suspended
    );
    let waiting = waiting_at(store.as_ref(), root_id).await.unwrap();
    let pending: Vec<_> = waiting.iter().flat_map(|s| s.pending.clone()).collect();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].tool, ASK_HUMAN);
    assert_eq!(pending[0].arguments["question"], "Ship it?");
    assert_eq!(
        pending[0].path,
        ["worker"],
        "the catalog path, as before a crash"
    );
    decide_at(store.as_ref(), root_id, &[answer(&pending[0].id, "yes")])
        .await
        .unwrap();

    // Another process resumes the root: the child gets its answer, ends, and its answer is
    // the root's call result.
    let (sup, root_agent) = tree(tool.clone());
    let mut root = root_agent
        .open_session(store.clone(), root_id)
        .await
        .unwrap();
    let done = root.resume(r.run_id, opts(sup)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{:?}", done.error);
    assert_eq!(done.text, "root done");
    let results: Vec<_> = root
        .messages()
        .iter()
        .filter_map(|m| match m {
            Message::Tool(t) => Some(t.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 1, "one result for the one call: {results:?}");
    assert!(!results[0].is_error, "{results:?}");
    assert!(results[0].content.contains("child done"), "{results:?}");
    assert_eq!(tool.calls.load(Ordering::SeqCst), 1, "never run again");
    let child = store
        .list_sessions(SessionQuery::Children(root_id))
        .await
        .unwrap()
        .remove(0);
    assert_eq!(child.status, SessionStatus::Succeeded);
    let asked: Vec<_> = store
        .transcript(child.id, 0, None)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EntryKind::Message {
                message: Message::Tool(t),
            } if t.name == ASK_HUMAN => Some(t.content),
            _ => None,
        })
        .collect();
    assert_eq!(asked, ["yes"]);
    assert!(
        waiting_at(store.as_ref(), root_id)
            .await
            .unwrap()
            .is_empty(),
        "nothing waits any more"
    );
}
