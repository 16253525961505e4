//! A `before` hook that lowers `max_active_children` (a per-tenant quota) is enforced at the
//! moment its decision is applied, atomically, and every slot is released exactly once.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arbor_core::supervisor::{
    BeforeContext, BeforeDecision, BeforeHook, ChildEntry, DelegationRequest, LimitsInput,
    Ownership, Supervisor,
};
use arbor_core::{Agent, CoreErrorKind};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::SupervisorEvent;
use async_trait::async_trait;
use tokio::sync::Barrier;

/// Lowers the cap to 2; the first three calls wait until all three are inside the hook.
#[derive(Debug)]
struct Quota(Arc<Barrier>, AtomicUsize);

#[async_trait]
impl BeforeHook for Quota {
    async fn before(&self, _: &BeforeContext) -> BeforeDecision {
        if self.1.fetch_add(1, Ordering::SeqCst) < 3 {
            self.0.wait().await;
        }
        BeforeDecision::Modify {
            input: None,
            limits: Some(LimitsInput {
                max_active_children: Some(2),
                ..LimitsInput::default()
            }),
            permission: None,
        }
    }
}

fn slow() -> Agent {
    Agent::builder("child")
        .provider(ScriptedProvider::new(Script::new(vec![
            ScriptedTurn::text("done").with_delay(Duration::from_millis(500)),
        ])))
        .build()
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_hook_that_lowers_max_active_children_is_enforced() {
    let sup = Supervisor::builder(Ownership::user("tenant", "user"))
        .child(ChildEntry::agent("a", slow()))
        .limits(LimitsInput {
            max_active_children: Some(3),
            ..LimitsInput::default()
        })
        .before(Quota(Arc::new(Barrier::new(3)), AtomicUsize::new(0)))
        .build()
        .unwrap();
    let mut sub = sup.subscribe();
    let (x, y, z) = tokio::join!(
        sup.delegate(DelegationRequest::new("a", "one")),
        sup.delegate(DelegationRequest::new("a", "two")),
        sup.delegate(DelegationRequest::new("a", "three")),
    );
    let results = [x, y, z];
    let ran = results.iter().filter(|r| r.is_ok()).count();
    assert_eq!(ran, 2, "{results:?}");
    let err = results.into_iter().find_map(Result::err).unwrap();
    assert_eq!(err.kind(), CoreErrorKind::Limit);
    assert_eq!(err.to_string(), "Active child limit exceeded");
    let info = err.limit().unwrap();
    assert_eq!(
        (info.limit, info.maximum, info.observed),
        (arbor_protocol::LimitKind::MaxActiveChildren, 2, 3)
    );
    // Every slot (and its confirmation) was released exactly once.
    assert_eq!(sup.active_children(), 0);
    let mut failed = 0;
    while let Some(e) = sub.try_recv() {
        if matches!(e.event, SupervisorEvent::ChildFailed { .. }) {
            failed += 1;
        }
    }
    assert_eq!(failed, 1);
    assert_eq!(sup.summary()[0].failures, 1);
    // Freed: the quota admits two at once again.
    let (x, y) = tokio::join!(
        sup.delegate(DelegationRequest::new("a", "four")),
        sup.delegate(DelegationRequest::new("a", "five")),
    );
    assert!(x.is_ok() && y.is_ok(), "{x:?} {y:?}");
    assert_eq!(sup.active_children(), 0);
}
