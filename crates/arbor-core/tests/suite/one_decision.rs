//! One decision per call: a child's call that waits at the root is listed under two ids (the
//! root's `sub_…`, the child's own `apr_…`), and both name one record. The first decision
//! wins; a second, through either id, is refused naming it; the decision is written into the
//! child's transcript with who, when and why.

use std::sync::atomic::Ordering;

use arbor_core::supervisor::{decide_at, waiting_at};
use arbor_core::{DenyReason, Session};
use arbor_model::ScriptedTurn;
use arbor_protocol::{
    ApprovalDecision, DecidedBy, EntryKind, RunId, RunStatus, SessionId, Verdict,
};

use super::nested_support::*;

struct Waiting {
    t: Tree,
    root: Session,
    run: RunId,
    /// The call's id at the root.
    at_root: String,
    writer: SessionId,
    /// The same call's id at the child.
    at_child: String,
}

async fn waiting() -> Waiting {
    let t = tree(
        vec![(
            "writer",
            vec![write("a.txt"), ScriptedTurn::text("written")],
        )],
        None,
    );
    let mut root = root(&t, vec![spawn("writer"), ScriptedTurn::text("root done")]).await;
    let first = root.run("go", opts(&t)).await.unwrap();
    assert_eq!(first.status, RunStatus::Suspended);
    let at_root = first.suspension.unwrap().pending[0].id.clone();
    let writer = arbor_core::registry::find_child(t.store.as_ref(), root.id(), "writer")
        .await
        .unwrap()
        .id;
    let listed = waiting_at(t.store.as_ref(), writer).await.unwrap();
    let at_child = listed[0].pending[0].id.clone();
    assert!(at_root.starts_with("sub_") && at_child.starts_with("apr_"));
    // Both listings name the session that made the call.
    let at_top = waiting_at(t.store.as_ref(), root.id()).await.unwrap();
    assert_eq!(at_top[0].pending[0].session_id, Some(writer));
    assert_eq!(listed[0].pending[0].session_id, Some(writer));
    Waiting {
        run: first.run_id,
        t,
        root,
        at_root,
        writer,
        at_child,
    }
}

fn decision(id: &str, verdict: Verdict, by: &str, reason: &str) -> ApprovalDecision {
    ApprovalDecision {
        decided_by: Some(DecidedBy::new(Some("acme".into()), Some(by.into()))),
        ..ApprovalDecision::new(id, verdict).with_reason(reason)
    }
}

/// The `decision` entries of `session`'s transcript: (verdict, by, tenant, reason).
async fn written(w: &Waiting, session: SessionId) -> Vec<(Verdict, String, String, String)> {
    w.t.store
        .transcript(session, 0, None)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.kind {
            EntryKind::Decision {
                verdict,
                by,
                tenant,
                reason,
                tool,
                ..
            } => {
                assert_eq!(tool, "write");
                Some((
                    verdict,
                    by.unwrap_or_default(),
                    tenant.unwrap_or_default(),
                    reason.unwrap_or_default(),
                ))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_rejection_at_the_root_holds_against_an_allow_through_the_childs_id_in_both_orders() {
    for root_first in [true, false] {
        let mut w = waiting().await;
        let reject = decision(&w.at_root, Verdict::RejectOnce, "alice", "not today");
        let allow = decision(&w.at_child, Verdict::AllowOnce, "bob", "fine by me");
        let (root_id, writer) = (w.root.id(), w.writer);
        let ((first, at_first), (second, at_second)) = if root_first {
            ((reject, root_id), (allow, writer))
        } else {
            ((allow, writer), (reject, root_id))
        };
        decide_at(w.t.store.as_ref(), at_first, std::slice::from_ref(&first))
            .await
            .unwrap();
        // Decided through one id: waiting through neither.
        for at in [root_id, writer] {
            let listed = waiting_at(w.t.store.as_ref(), at).await.unwrap();
            assert!(
                listed.iter().all(|s| s.pending.is_empty()),
                "root_first={root_first}: {listed:?}"
            );
        }
        let e = decide_at(w.t.store.as_ref(), at_second, &[second])
            .await
            .unwrap_err();
        assert_eq!(e.deny_reason(), Some(DenyReason::Decided), "{e}");
        let (verdict, who, why) = if root_first {
            ("reject_once", "alice (tenant acme)", "not today")
        } else {
            ("allow_once", "bob (tenant acme)", "fine by me")
        };
        let text = e.to_string();
        assert!(
            text.starts_with(&format!(
                "This call was already decided: {verdict} by {who} on "
            )) && text.ends_with(&format!(" GMT ({why}); a call is decided once")),
            "{text}"
        );
        // The first decision is what runs.
        let done = w.root.resume(w.run, opts(&w.t)).await.unwrap();
        assert_eq!(done.status, RunStatus::Succeeded);
        assert_eq!(
            w.t.writes.0.load(Ordering::SeqCst),
            usize::from(!root_first),
            "root_first={root_first}"
        );
        // Written once, into the transcript of the session whose call it decided.
        let entries = written(&w, w.writer).await;
        assert_eq!(entries.len(), 1, "{entries:?}");
        assert_eq!(entries[0].1, who.split(' ').next().unwrap());
        assert_eq!(entries[0].2, "acme");
        assert_eq!(entries[0].3, why);
        assert!(written(&w, root_id).await.is_empty());
    }
}

#[tokio::test]
async fn an_allow_through_the_childs_id_alone_lets_the_root_resume_run_the_call() {
    let mut w = waiting().await;
    let left = decide_at(
        w.t.store.as_ref(),
        w.writer,
        &[decision(&w.at_child, Verdict::AllowOnce, "bob", "ok")],
    )
    .await
    .unwrap();
    assert!(left.pending.is_empty());
    let done = w.root.resume(w.run, opts(&w.t)).await.unwrap();
    assert_eq!(
        (done.status, done.text.as_str()),
        (RunStatus::Succeeded, "root done")
    );
    assert_eq!(w.t.writes.0.load(Ordering::SeqCst), 1);
    assert_eq!(written(&w, w.writer).await[0].0, Verdict::AllowOnce);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_conflicting_decisions_at_once_through_the_two_ids_record_exactly_one() {
    for _ in 0..20 {
        let w = waiting().await;
        let store = w.t.store.clone();
        let (a, b) = (w.at_root.clone(), w.at_child.clone());
        let (root_id, writer) = (w.root.id(), w.writer);
        let s1 = store.clone();
        let s2 = store.clone();
        let one = tokio::spawn(async move {
            decide_at(
                s1.as_ref(),
                root_id,
                &[decision(&a, Verdict::RejectOnce, "alice", "no")],
            )
            .await
        });
        let two = tokio::spawn(async move {
            decide_at(
                s2.as_ref(),
                writer,
                &[decision(&b, Verdict::AllowOnce, "bob", "yes")],
            )
            .await
        });
        let (one, two) = (one.await.unwrap(), two.await.unwrap());
        assert_eq!(
            usize::from(one.is_ok()) + usize::from(two.is_ok()),
            1,
            "{one:?} {two:?}"
        );
        let refused = one.err().or(two.err()).unwrap();
        assert_eq!(refused.deny_reason(), Some(DenyReason::Decided));
        assert_eq!(written(&w, writer).await.len(), 1);
    }
}

#[tokio::test]
async fn a_forged_or_foreign_id_gets_the_one_unknown_answer_and_changes_nothing() {
    let w = waiting().await;
    let before = arbor_core::approval::load(w.t.store.as_ref(), w.run)
        .await
        .unwrap()
        .unwrap();
    for (at, id) in [
        (w.root.id(), "sub_0000".to_owned()),
        // The child's id is not the root's to decide, nor the root's the child's.
        (w.root.id(), w.at_child.clone()),
        (w.writer, w.at_root.clone()),
    ] {
        let e = decide_at(
            w.t.store.as_ref(),
            at,
            &[ApprovalDecision::new(id, Verdict::AllowOnce)],
        )
        .await
        .unwrap_err();
        assert_eq!(
            (e.deny_reason(), e.to_string().as_str()),
            (Some(DenyReason::Unknown), "Unknown approval")
        );
    }
    let after = arbor_core::approval::load(w.t.store.as_ref(), w.run)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(before, after);
    assert!(written(&w, w.writer).await.is_empty());
}

#[tokio::test]
async fn a_second_decision_while_a_resume_holds_the_run_is_refused_naming_the_first() {
    let w = waiting().await;
    decide_at(
        w.t.store.as_ref(),
        w.root.id(),
        &[decision(&w.at_root, Verdict::AllowOnce, "alice", "go")],
    )
    .await
    .unwrap();
    // A resume claims the run (as `Session::resume` does before it runs anything).
    let (version, mut held) = arbor_core::approval::load(w.t.store.as_ref(), w.run)
        .await
        .unwrap()
        .unwrap();
    held.claimed_at_ms = Some(arbor_protocol::Timestamp::now().0);
    arbor_core::approval::save(w.t.store.as_ref(), &held, version)
        .await
        .unwrap();
    for (at, id) in [(w.root.id(), &w.at_root), (w.writer, &w.at_child)] {
        let e = decide_at(
            w.t.store.as_ref(),
            at,
            &[decision(id, Verdict::RejectOnce, "bob", "stop")],
        )
        .await
        .unwrap_err();
        assert_eq!(e.deny_reason(), Some(DenyReason::Decided), "{e}");
        assert!(e.to_string().contains("allow_once by alice"), "{e}");
    }
}
