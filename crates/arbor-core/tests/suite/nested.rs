//! Durable nested approvals: a child's gated call suspends the whole tree; the root sees it
//! with a `sub_` id and the child's path; a decision at the root resumes the child, which
//! runs the call exactly once and ends terminal-symmetric with a live delegation.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arbor_core::process::NestedResumer;
use arbor_core::supervisor::{
    BeforeContext, BeforeDecision, BeforeHook, ChildEntry, CompletionStatus, Outcome, Ownership,
    Supervisor,
};
use arbor_core::{Agent, RunOptions};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{ApprovalDecision, Message, RunId, RunStatus, SessionId, Verdict};
use arbor_store::Store;
use async_trait::async_trait;
use serde_json::json;

use super::nested_support::*;

#[tokio::test]
async fn a_gated_child_call_is_approved_at_the_root_and_runs_exactly_once() {
    let t = tree(
        vec![(
            "writer",
            vec![write("a.txt"), ScriptedTurn::text("written")],
        )],
        None,
    );
    let mut sub = t.sup.subscribe();
    let mut r = root(&t, vec![spawn("writer"), ScriptedTurn::text("root done")]).await;
    let first = r.run("go", opts(&t)).await.unwrap();
    assert_eq!(first.status, RunStatus::Suspended);
    let waiting = first.suspension.unwrap();
    assert_eq!(waiting.pending.len(), 1);
    let p = &waiting.pending[0];
    assert!(p.id.starts_with("sub_") && p.id.len() == 68, "{}", p.id);
    assert_eq!(
        (p.tool.as_str(), p.path.clone()),
        ("write", vec!["writer".to_owned()])
    );
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 0);
    // Not terminal: no finish, no after; the attempt is suspended (nothing of it runs).
    assert_eq!(
        types(&mut sub),
        ["delegation_admitted", "delegation_started"]
    );
    assert!(t.afters.0.lock().unwrap().is_empty());
    assert_eq!(
        (t.sup.summary()[0].attempts, t.sup.summary()[0].outcome),
        (1, Outcome::Suspended)
    );
    assert_eq!(
        t.sup.active_children(),
        0,
        "a suspended child holds no slot"
    );

    let done = r
        .approve(first.run_id, waiting.version, &[allow(&p.id)], opts(&t))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(done.text, "root done");
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 1);
    let spawn_result = r
        .messages()
        .iter()
        .find_map(|m| match m {
            Message::Tool(t) if t.name == "spawn_agent" => Some(t.content.clone()),
            _ => None,
        })
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&spawn_result).unwrap();
    assert_eq!(v["text"], "written");
    assert_eq!(
        types(&mut sub),
        ["delegation_started", "delegation_finished"]
    );
    assert_eq!(*t.afters.0.lock().unwrap(), [CompletionStatus::Succeeded]);
    let row = &t.sup.summary()[0];
    assert_eq!(
        (row.attempts, row.outcome),
        (1, Outcome::Succeeded),
        "resume is no attempt"
    );
}

#[tokio::test]
async fn a_three_level_chain_is_approved_stage_by_stage_with_growing_paths() {
    let t = tree(
        vec![
            (
                "lead",
                vec![spawn("helper"), ScriptedTurn::text("lead done")],
            ),
            (
                "helper",
                vec![write("deep.txt"), ScriptedTurn::text("helper done")],
            ),
        ],
        None,
    );
    let mut r = root(&t, vec![spawn("lead"), ScriptedTurn::text("all done")]).await;
    let s1 = r.run("go", opts(&t)).await.unwrap().suspension.unwrap();
    assert_eq!(s1.pending.len(), 1);
    assert_eq!(
        s1.pending[0].tool, "spawn_agent",
        "stage 1: the lead's delegation"
    );
    assert_eq!(s1.pending[0].path, ["lead"]);
    // The root's id hashes the lead's run id and the lead's own decision id.
    let lead = arbor_core::registry::find_child(t.store.as_ref(), r.id(), "lead")
        .await
        .unwrap();
    let lead_run = arbor_core::approval::suspensions(t.store.as_ref(), lead.id)
        .await
        .unwrap()
        .remove(0);
    assert!(lead_run.pending[0].id.starts_with("apr_"));
    assert_eq!(
        s1.pending[0].id,
        arbor_core::approval::nested_id(lead_run.run_id, &lead_run.pending[0].id)
    );
    let run = s1.run_id;
    let r2 = r
        .approve(run, s1.version, &[allow(&s1.pending[0].id)], opts(&t))
        .await
        .unwrap();
    let s2 = r2.suspension.unwrap();
    assert_eq!(s2.pending.len(), 1);
    assert_eq!(
        s2.pending[0].tool, "write",
        "stage 2: the helper's side effect"
    );
    assert_eq!(s2.pending[0].path, ["lead", "helper"]);
    assert_ne!(s2.pending[0].id, s1.pending[0].id);
    // The helper's decision is wrapped once per level on its way up.
    let lead_run = arbor_core::approval::suspension(t.store.as_ref(), lead_run.run_id)
        .await
        .unwrap();
    assert!(lead_run.pending[0].id.starts_with("sub_"));
    assert_eq!(
        s2.pending[0].id,
        arbor_core::approval::nested_id(lead_run.run_id, &lead_run.pending[0].id)
    );
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 0);
    let done = r
        .approve(run, s2.version, &[allow(&s2.pending[0].id)], opts(&t))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(done.text, "all done");
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 1);
    assert_eq!(
        t.afters.0.lock().unwrap().len(),
        2,
        "one after per delegation"
    );
}

#[tokio::test]
async fn allow_for_run_holds_on_its_path_and_not_for_a_sibling() {
    let t = tree(
        vec![
            (
                "a",
                vec![write("a1"), write("a2"), ScriptedTurn::text("a done")],
            ),
            (
                "b",
                vec![write("b1"), write("b2"), ScriptedTurn::text("b done")],
            ),
        ],
        None,
    );
    let mut r = root(
        &t,
        vec![
            ScriptedTurn {
                tool_calls: vec![
                    arbor_model::ScriptedToolCall {
                        id: Some("ca".into()),
                        name: "spawn_agent".into(),
                        arguments: json!({"child_id": "a", "name": "a", "input": "x"}),
                    },
                    arbor_model::ScriptedToolCall {
                        id: Some("cb".into()),
                        name: "spawn_agent".into(),
                        arguments: json!({"child_id": "b", "name": "b", "input": "x"}),
                    },
                ],
                ..ScriptedTurn::default()
            },
            ScriptedTurn::text("both done"),
        ],
    )
    .await;
    let s1 = r.run("go", opts(&t)).await.unwrap().suspension.unwrap();
    assert_eq!(s1.pending.len(), 2);
    let of = |s: &arbor_core::approval::Suspension, path: &str| {
        s.pending
            .iter()
            .find(|p| p.path == [path])
            .unwrap()
            .id
            .clone()
    };
    let decisions = [
        ApprovalDecision::new(of(&s1, "a"), Verdict::AllowForRun),
        ApprovalDecision::new(of(&s1, "b"), Verdict::AllowOnce),
    ];
    let r2 = r
        .approve(s1.run_id, s1.version, &decisions, opts(&t))
        .await
        .unwrap();
    // a's second write ran on its run-wide decision; b's waits.
    let s2 = r2.suspension.unwrap();
    assert_eq!(s2.pending.len(), 1);
    assert_eq!(s2.pending[0].path, ["b"]);
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 3);
    let done = r
        .approve(s1.run_id, s2.version, &[allow(&s2.pending[0].id)], opts(&t))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn the_before_hook_runs_again_at_resume_and_may_deny() {
    let t = tree(
        vec![("writer", vec![write("x"), ScriptedTurn::text("written")])],
        Some(Gatekeeper {
            allow: 1,
            seen: AtomicUsize::new(0),
        }),
    );
    let mut sub = t.sup.subscribe();
    let mut r = root(&t, vec![spawn("writer"), ScriptedTurn::text("went on")]).await;
    let s1 = r.run("go", opts(&t)).await.unwrap().suspension.unwrap();
    types(&mut sub);
    let done = r
        .approve(s1.run_id, s1.version, &[allow(&s1.pending[0].id)], opts(&t))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(
        t.writes.0.load(Ordering::SeqCst),
        0,
        "denied: the call never ran"
    );
    assert_eq!(types(&mut sub), ["delegation_rejected"]);
    assert_eq!(*t.afters.0.lock().unwrap(), [CompletionStatus::Rejected]);
    let result = r
        .messages()
        .iter()
        .find_map(|m| match m {
            Message::Tool(t) if t.name == "spawn_agent" => Some(t.content.clone()),
            _ => None,
        })
        .unwrap();
    assert!(result.contains("policy changed"), "{result}");
    assert_eq!(t.sup.summary()[0].outcome, Outcome::Rejected);
}

#[tokio::test]
async fn unknown_or_forged_nested_runs_fail_closed_without_echo() {
    let t = tree(vec![("writer", vec![write("x")])], None);
    let forged = RunId::new();
    let e = t
        .sup
        .resume_nested(forged, SessionId::new(), vec![allow("apr_x")])
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Unknown delegated run");
    assert!(!e.to_string().contains(&forged.to_string()));
    // A real suspended child, but a decision id that is not one of its own.
    let mut r = root(&t, vec![spawn("writer")]).await;
    let s1 = r.run("go", opts(&t)).await.unwrap().suspension.unwrap();
    let e = r
        .approve(s1.run_id, s1.version, &[allow("sub_forged")], opts(&t))
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Unknown approval");
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 0);
}

#[test]
fn durable_approvals_need_a_revision() {
    let e = Supervisor::builder(Ownership::user("t", "u"))
        .durable_approvals("  ")
        .child(ChildEntry::agent(
            "c",
            Agent::builder("c")
                .provider(ScriptedProvider::new(Script::default()))
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "definition_revision is required when durable approvals are configured"
    );
}

#[tokio::test]
async fn each_resume_attempt_gets_fresh_event_caps() {
    let t = writer_tree(
        |b| {
            b.child_events(true)
                .limits(arbor_core::supervisor::LimitsInput {
                    max_child_events_per_delegation: Some(2),
                    ..Default::default()
                })
        },
        |e| e,
    );
    let mut sub = t.sup.subscribe();
    let mut r = root(&t, vec![spawn("writer"), ScriptedTurn::text("ok")]).await;
    let s1 = r.run("go", opts(&t)).await.unwrap().suspension.unwrap();
    let capped = |types: &[&str]| {
        types
            .iter()
            .filter(|t| **t == "delegation_child_events_capped")
            .count()
    };
    let before = types(&mut sub);
    assert_eq!(capped(&before), 1, "{before:?}");
    r.approve(s1.run_id, s1.version, &[allow(&s1.pending[0].id)], opts(&t))
        .await
        .unwrap();
    let after = types(&mut sub);
    assert_eq!(
        capped(&after),
        1,
        "the resumed attempt had its own cap: {after:?}"
    );
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_changed_definition_refuses_the_resume_and_publishes_nothing() {
    let t = tree(
        vec![("writer", vec![write("x"), ScriptedTurn::text("w")])],
        None,
    );
    let mut r = root(&t, vec![spawn("writer"), ScriptedTurn::text("ok")]).await;
    let s1 = r.run("go", opts(&t)).await.unwrap().suspension.unwrap();
    // Another process, built from another revision of the definition.
    let other = Supervisor::builder(Ownership::user("t", "u"))
        .store(t.store.clone())
        .durable_approvals("rev-2")
        .after(t.afters.clone())
        .child(ChildEntry::agent(
            "writer",
            Agent::builder("writer")
                .provider(ScriptedProvider::new(Script::new([write("x")])))
                .tool(t.writes.clone())
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap();
    let mut sub = other.subscribe();
    let e = r
        .approve(
            s1.run_id,
            s1.version,
            &[allow(&s1.pending[0].id)],
            RunOptions::default().with_nested(Arc::new(other.clone())),
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("definition revision"), "{e}");
    assert!(sub.try_recv().is_none(), "nothing published");
    assert!(t.afters.0.lock().unwrap().is_empty(), "no hook ran");
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 0);
    let root_now = t.store.session(r.id()).await.unwrap().unwrap();
    assert_eq!(
        root_now.status,
        arbor_protocol::SessionStatus::Suspended,
        "it still waits"
    );
    // The right supervisor resumes it later, with the decision kept.
    let done = r.resume(s1.run_id, opts(&t)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_rebuild_refused_for_want_of_a_slot_keeps_the_decision_for_a_later_resume() {
    let blocker = Agent::builder("blocker")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn {
            hang: true,
            ..ScriptedTurn::default()
        }])))
        .build()
        .unwrap();
    let t = writer_tree(
        |b| {
            b.limits(arbor_core::supervisor::LimitsInput {
                max_active_children: Some(1),
                ..Default::default()
            })
            .child(ChildEntry::agent("blocker", blocker))
        },
        |e| e,
    );
    let mut r = root(&t, vec![spawn("writer"), ScriptedTurn::text("ok")]).await;
    let s1 = r.run("go", opts(&t)).await.unwrap().suspension.unwrap();
    let decision = allow(&s1.pending[0].id);
    // The suspended writer holds no slot; a host's child takes the only one.
    let busy = t
        .sup
        .delegate_async(arbor_core::supervisor::DelegationRequest::new(
            "blocker", "hold",
        ))
        .await
        .unwrap();
    let e = r
        .approve(s1.run_id, s1.version, &[decision], opts(&t))
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Active child limit exceeded");
    assert_eq!(
        e.limit().map(|l| l.limit),
        Some(arbor_protocol::LimitKind::MaxActiveChildren)
    );
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 0);
    // The root keeps its decision, unsent; the child's call still waits for it.
    let root_waiting = arbor_core::approval::suspension(t.store.as_ref(), s1.run_id)
        .await
        .unwrap();
    assert!(root_waiting.pending.is_empty());
    let child = arbor_core::registry::find_child(t.store.as_ref(), r.id(), "writer")
        .await
        .unwrap();
    let child_waiting = arbor_core::approval::suspensions(t.store.as_ref(), child.id)
        .await
        .unwrap();
    assert_eq!(child_waiting.len(), 1);
    assert_eq!(
        child_waiting[0].pending.len(),
        1,
        "nothing decided on the child"
    );
    let (_, checkpoint) = arbor_core::approval::load(t.store.as_ref(), s1.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(checkpoint.claimed_at_ms, None, "the failed resume let go");
    // Once the slot frees, a resume delivers the kept decision and the call runs once.
    t.sup.cancel(&busy.delegation_id).unwrap();
    t.sup
        .wait(
            &busy.delegation_id,
            arbor_core::supervisor::WaitOptions::default(),
        )
        .await
        .unwrap();
    let done = r.resume(s1.run_id, opts(&t)).await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{:?}", done.error);
    assert_eq!(done.text, "ok");
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_root_approval_never_widens_the_childs_own_permission() {
    let t = writer_tree(
        |b| b,
        |e| {
            e.permission(arbor_core::Permission::new(
                arbor_core::permission::DenyTools::new(["write"]),
            ))
        },
    );
    let mut r = root(&t, vec![spawn("writer"), ScriptedTurn::text("ok")]).await;
    let s1 = r.run("go", opts(&t)).await.unwrap().suspension.unwrap();
    assert_eq!(s1.pending[0].tool, "write");
    let done = r
        .approve(s1.run_id, s1.version, &[allow(&s1.pending[0].id)], opts(&t))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(
        t.writes.0.load(Ordering::SeqCst),
        0,
        "the child's policy still holds"
    );
    let child = arbor_core::registry::find_child(t.store.as_ref(), r.id(), "writer")
        .await
        .unwrap();
    let results: Vec<String> = t
        .store
        .transcript(child.id, 0, None)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            arbor_protocol::EntryKind::Message {
                message: Message::Tool(t),
            } => Some(t.content),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        ["permission denied: tool `write` is denied by policy"]
    );
}

#[tokio::test]
async fn a_nested_resume_names_the_childs_session_or_fails_closed() {
    let t = tree(
        vec![("writer", vec![write("x"), ScriptedTurn::text("w")])],
        None,
    );
    let mut r = root(&t, vec![spawn("writer"), ScriptedTurn::text("ok")]).await;
    assert!(r.run("go", opts(&t)).await.unwrap().suspension.is_some());
    let child = arbor_core::registry::find_child(t.store.as_ref(), r.id(), "writer")
        .await
        .unwrap();
    let child_run = arbor_core::approval::suspensions(t.store.as_ref(), child.id)
        .await
        .unwrap()
        .remove(0);
    // The child's real run id, with another session's id: as unknown as a forged run.
    let e = t
        .sup
        .resume_nested(
            child_run.run_id,
            r.id(),
            vec![allow(&child_run.pending[0].id)],
        )
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), "Unknown delegated run");
    assert_eq!(t.writes.0.load(Ordering::SeqCst), 0);
    let still = arbor_core::approval::suspension(t.store.as_ref(), child_run.run_id)
        .await
        .unwrap();
    assert_eq!(still.version, child_run.version, "nothing decided");
    // Delegation ids are never reused: a second supervisor over the same store (a new
    // process) hands out fresh ones.
    let other = Supervisor::builder(Ownership::user("t", "u"))
        .store(t.store.clone())
        .durable_approvals("rev-1")
        .child(ChildEntry::agent(
            "writer",
            Agent::builder("writer")
                .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
                    "w",
                )])))
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap();
    let first_delegation = child.meta["delegation_id"].as_str().unwrap().to_owned();
    let h = other
        .delegate_async(arbor_core::supervisor::DelegationRequest::new(
            "writer", "x",
        ))
        .await
        .unwrap();
    assert_ne!(h.delegation_id, first_delegation);
    assert_ne!(h.delegation_id, child_run.run_id.to_string());
}

/// Records the limits each `before` call saw.
#[derive(Debug, Default, Clone)]
struct SeenLimits(Arc<Mutex<Vec<arbor_core::supervisor::SupervisorLimits>>>);

#[async_trait]
impl BeforeHook for SeenLimits {
    async fn before(&self, ctx: &BeforeContext) -> BeforeDecision {
        self.0.lock().unwrap().push(ctx.limits);
        BeforeDecision::Allow
    }
}

#[tokio::test]
async fn a_resumed_child_keeps_its_report_milestones_and_budget_share() {
    let seen = SeenLimits::default();
    let hook = seen.clone();
    let t = writer_tree(|b| b.before(hook).child_events(true), |e| e);
    let mut sub = t.sup.subscribe();
    let spawn = ScriptedTurn::tool_call(
        "spawn_agent",
        json!({"child_id": "writer", "name": "writer", "input": "w",
               "report": "milestones", "milestone": {"every_turns": 2}, "budget_share": 0.5}),
    );
    let mut r = root(&t, vec![spawn, ScriptedTurn::text("ok")]).await;
    let s1 = r.run("go", opts(&t)).await.unwrap().suspension.unwrap();
    let before: Vec<&str> = types(&mut sub);
    assert!(
        !before.contains(&"child_milestone"),
        "turn 1 is no milestone: {before:?}"
    );
    let done = r
        .approve(s1.run_id, s1.version, &[allow(&s1.pending[0].id)], opts(&t))
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    // The resumed attempt reports turn 2 as a milestone, as the spawn asked.
    let mut milestones = Vec::new();
    while let Some(e) = sub.try_recv() {
        if let arbor_protocol::SupervisorEvent::ChildMilestone { turn, .. } = &e.event {
            milestones.push(*turn);
        }
    }
    assert_eq!(milestones, [2]);
    // Both `before` calls saw the halved run limits.
    let seen = seen.0.lock().unwrap().clone();
    let half = arbor_core::supervisor::SupervisorLimits::DEFAULT.scaled(0.5);
    assert_eq!(seen.len(), 2);
    assert!(
        seen.iter()
            .all(|l| l.max_steps == half.max_steps && l.max_tokens == half.max_tokens)
    );
    assert_eq!(half.max_tokens, 10_000);
}

#[tokio::test]
async fn a_nested_resume_needs_durable_approvals() {
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .child(ChildEntry::agent(
            "c",
            Agent::builder("c")
                .provider(ScriptedProvider::new(Script::default()))
                .build()
                .unwrap(),
        ))
        .build()
        .unwrap();
    let e = sup
        .resume_nested(RunId::new(), SessionId::new(), vec![allow("sub_x")])
        .await
        .unwrap_err();
    assert_eq!(e.kind(), arbor_core::CoreErrorKind::Validation);
    assert_eq!(
        e.to_string(),
        "Nested-run resume requires durable approvals and a definition revision"
    );
}
