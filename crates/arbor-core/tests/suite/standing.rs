//! Standing decisions (issue 39, item 8): a call that would wait for a decision and that
//! the host decided once and for all runs (or is rejected) at once, written down in its
//! session's transcript as decided by `standing`; a child inherits its parent's, and its
//! catalog entry can narrow them, never widen them.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use arbor_core::Agent;
use arbor_core::approval::standing::{CallPattern, StandingLayer};
use arbor_core::supervisor::{ChildEntry, Ownership, SpawnAgentTool, Supervisor, factory_fn};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{EntryKind, RunStatus, Verdict};
use arbor_store::{MemoryStore, SessionQuery, Store};
use serde_json::json;

use super::nested_support::{Write, spawn, write};

/// A durable tree whose `writer` writes `files` then answers; the supervisor's standing
/// layer is `top`, the writer's entry narrows with `entry`.
fn tree(
    files: &[&str],
    top: StandingLayer,
    entry: Option<StandingLayer>,
) -> (Supervisor, Arc<dyn Store>, Write) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let writes = Write::default();
    let mut turns: Vec<ScriptedTurn> = files.iter().map(|f| write(f)).collect();
    turns.push(ScriptedTurn::text("written"));
    let script = Script::new(turns);
    let w = writes.clone();
    let mut child = ChildEntry::new(
        "writer",
        factory_fn(move |ctx| {
            let (script, w) = (script.clone(), w.clone());
            async move {
                Agent::builder(ctx.child_id.clone())
                    .provider(ScriptedProvider::new(script))
                    .tool(w)
                    .build()
            }
        }),
    );
    if let Some(layer) = entry {
        child = child.standing(layer);
    }
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .durable_approvals("rev-1")
        .standing(top)
        .child(child)
        .build()
        .unwrap();
    (sup, store, writes)
}

fn notes_only() -> StandingLayer {
    StandingLayer::default()
        .allow_always(CallPattern::tool("write").with_arguments(json!({"file": "notes/*"})))
        .reject_always(CallPattern::tool("write").with_arguments(json!({"file": "/etc/*"})))
}

async fn run_root(sup: &Supervisor, store: &Arc<dyn Store>) -> arbor_core::RunResult {
    let mut root = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new([
            spawn("writer"),
            ScriptedTurn::text("done"),
        ])))
        .dyn_tool(Arc::new(SpawnAgentTool::new(sup.delegator())))
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .create()
        .await
        .unwrap();
    root.run("go", opts_of(sup)).await.unwrap()
}

fn opts_of(sup: &Supervisor) -> arbor_core::RunOptions {
    arbor_core::RunOptions::default().with_nested(Arc::new(sup.clone()))
}

/// The `decision` entries of the writer's transcript: (tool's file, verdict, by, reason).
async fn decisions(store: &Arc<dyn Store>) -> Vec<(Verdict, Option<String>, Option<String>)> {
    let writer = store
        .list_sessions(SessionQuery::Roots)
        .await
        .unwrap()
        .into_iter()
        .next()
        .unwrap();
    let child = store
        .list_sessions(SessionQuery::Children(writer.id))
        .await
        .unwrap()
        .remove(0);
    store
        .transcript(child.id, 0, None)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EntryKind::Decision {
                verdict,
                by,
                reason,
                ..
            } => Some((verdict, by, reason)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_standing_allow_runs_the_call_at_once_and_writes_it_down() {
    let (sup, store, writes) = tree(&["notes/a.md"], notes_only(), None);
    let r = run_root(&sup, &store).await;
    assert_eq!(r.status, RunStatus::Succeeded, "{:?}", r.error);
    assert_eq!(writes.0.load(Ordering::SeqCst), 1, "it ran, without asking");
    assert_eq!(
        decisions(&store).await,
        [(
            Verdict::AllowOnce,
            Some("standing".to_owned()),
            Some(r#"standing decision: allow write {"file":"notes/*"}"#.to_owned())
        )]
    );
}

#[tokio::test]
async fn what_no_standing_decision_covers_still_waits_and_a_standing_reject_never_runs() {
    let (sup, store, writes) = tree(&["/etc/passwd", "src/main.rs"], notes_only(), None);
    let r = run_root(&sup, &store).await;
    // The reject was decided at once (the model read it); the other call waits.
    assert_eq!(r.status, RunStatus::Suspended, "{:?}", r.error);
    let pending = &r.suspension.as_ref().unwrap().pending;
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].arguments["file"], "src/main.rs");
    assert_eq!(writes.0.load(Ordering::SeqCst), 0);
    let d = decisions(&store).await;
    assert_eq!(d.len(), 1, "{d:?}");
    assert_eq!(d[0].0, Verdict::RejectOnce);
}

#[tokio::test]
async fn a_childs_entry_narrows_what_it_inherits_and_never_widens_it() {
    // The entry allows reads and everything under src/ (the supervisor never allowed src/).
    let narrow = StandingLayer::default()
        .allow_always(CallPattern::tool("read*"))
        .allow_always(CallPattern::tool("write").with_arguments(json!({"file": "src/*"})));
    for file in ["notes/a.md", "src/main.rs"] {
        let (sup, store, writes) = tree(&[file], notes_only(), Some(narrow.clone()));
        let r = run_root(&sup, &store).await;
        assert_eq!(r.status, RunStatus::Suspended, "{file}: {:?}", r.error);
        assert_eq!(writes.0.load(Ordering::SeqCst), 0, "{file}");
        assert!(decisions(&store).await.is_empty(), "{file}");
    }
}
