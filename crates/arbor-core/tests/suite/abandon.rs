//! `Supervisor::abandon_runs`: a host that lost its claim on the work (a worker whose lease
//! ran out) stops everything where it stands, as a crash would: no cancellation runs, no
//! terminal is written, no hook or event reports an end, and the runs stay `running` in the
//! store for whoever takes them over. Without it, the same drop cancels and reports once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use arbor_core::Agent;
use arbor_core::process::SupervisorProcess;
use arbor_core::supervisor::{
    AfterHook, ChildEntry, Completion, DelegationRequest, Ownership, Supervisor,
};
use arbor_model::ScriptedTurn;
use arbor_protocol::{EntryKind, SessionStatus};
use async_trait::async_trait;

use super::support::scripted;

fn hangs() -> Agent {
    scripted(vec![ScriptedTurn {
        hang: true,
        ..ScriptedTurn::default()
    }])
    .build()
    .unwrap()
}

#[derive(Debug, Default, Clone)]
struct Ends(Arc<Mutex<Vec<Completion>>>);

#[async_trait]
impl AfterHook for Ends {
    async fn after(&self, c: &Completion) -> Result<(), arbor_core::supervisor::HookError> {
        self.0.lock().unwrap().push(c.clone());
        Ok(())
    }
}

/// A sync child whose caller drops the delegation, and a joined child, both mid-turn; then
/// `abandon` (or not) and the drop. Returns the supervisor, the two children's sessions and
/// the after hook's record.
async fn two_children_dropped(abandon: bool) -> (Supervisor, Vec<arbor_protocol::SessionId>, Ends) {
    let ends = Ends::default();
    let sup = Supervisor::builder(Ownership::user("tenant", "user"))
        .child(ChildEntry::agent("a", hangs()))
        .after(ends.clone())
        .build()
        .unwrap();
    let joined = sup
        .delegate_async(DelegationRequest::new("a", "joined"))
        .await
        .unwrap();
    let mut sync = Box::pin(sup.delegate(DelegationRequest::new("a", "sync")));
    // Far enough for the sync child to be registered and mid-turn.
    assert!(
        tokio::time::timeout(Duration::from_millis(100), &mut sync)
            .await
            .is_err()
    );
    if abandon {
        sup.abandon_runs();
    }
    drop(sync);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rows = sup
        .store()
        .list_sessions(arbor_store::SessionQuery::Roots)
        .await
        .unwrap();
    let mut children = vec![joined.session_id];
    for r in rows {
        for c in sup
            .store()
            .list_sessions(arbor_store::SessionQuery::Children(r.id))
            .await
            .unwrap()
        {
            if c.id != joined.session_id {
                children.push(c.id);
            }
        }
    }
    if children.len() < 2 {
        // Top-level children are roots of their own trees.
        for r in sup
            .store()
            .list_sessions(arbor_store::SessionQuery::Roots)
            .await
            .unwrap()
        {
            if r.id != joined.session_id {
                children.push(r.id);
            }
        }
    }
    (sup, children, ends)
}

async fn finished(sup: &Supervisor, id: arbor_protocol::SessionId) -> bool {
    sup.store()
        .transcript(id, 0, None)
        .await
        .unwrap()
        .iter()
        .any(|e| matches!(e.kind, EntryKind::RunFinished { .. }))
}

#[tokio::test(start_paused = true)]
async fn an_abandoned_supervisor_leaves_its_runs_as_a_crash_would() {
    let (sup, children, ends) = two_children_dropped(true).await;
    assert_eq!(children.len(), 2, "{children:?}");
    for id in &children {
        let record = sup.store().session(*id).await.unwrap().unwrap();
        assert_eq!(record.status, SessionStatus::Running, "{id} was ended");
        assert!(!finished(&sup, *id).await, "{id} has a terminal written");
    }
    assert!(ends.0.lock().unwrap().is_empty(), "an end was reported");
    // Nothing runs any more: new work is not started either.
    tokio::time::sleep(Duration::from_secs(5)).await;
    for id in &children {
        assert!(!finished(&sup, *id).await);
    }
}

#[tokio::test(start_paused = true)]
async fn without_abandoning_the_same_drop_cancels_and_reports_once() {
    let (sup, children, ends) = two_children_dropped(false).await;
    assert_eq!(children.len(), 2, "{children:?}");
    // The dropped sync child is cancelled and reports its end; the joined one runs on.
    let ended: Vec<bool> =
        futures::future::join_all(children.iter().map(|id| finished(&sup, *id))).await;
    assert_eq!(ended, [false, true], "{children:?}");
    assert_eq!(ends.0.lock().unwrap().len(), 1);
    sup.shutdown().await;
}
