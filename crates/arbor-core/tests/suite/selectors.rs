//! One selector rule for every verb: a selector that is one child's name and another child's
//! session id is refused as ambiguous, naming both, and nothing is deleted or sent.

use std::sync::Arc;

use arbor_core::registry::{self, DeleteTarget};
use arbor_core::supervisor::{ChildEntry, Ownership, SendMessageTool, Supervisor};
use arbor_core::{Agent, CoreErrorKind, DynTool, SessionRef, ToolContext, ToolError};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{RunId, SessionStatus, Timestamp, Usage};
use arbor_store::{MemoryStore, SessionRecord, SessionUpdate, Store, Tombstone};
use serde_json::json;

struct Family {
    store: Arc<dyn Store>,
    sup: Supervisor,
    parent: SessionRecord,
}

async fn family() -> Family {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let agent = Agent::builder("child")
        .provider(ScriptedProvider::new(Script::new(vec![
            ScriptedTurn::text("x"),
        ])))
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .child(ChildEntry::agent("child", agent))
        .build()
        .unwrap();
    let parent = SessionRecord::new_root("parent", "root", "m");
    store.create_session(&parent).await.unwrap();
    Family { store, sup, parent }
}

impl Family {
    async fn child(&self, name: &str) -> SessionRecord {
        let r = SessionRecord::new_child(&self.parent, name, "child", "m");
        self.store.create_session(&r).await.unwrap();
        r
    }

    async fn tombstone(&self, r: &SessionRecord) {
        let tombstone = Tombstone {
            at: Timestamp::now(),
            by: "test".into(),
            reason: "gone".into(),
            final_status: SessionStatus::Succeeded,
            usage: Usage::default(),
        };
        self.store
            .update_session(
                r.id,
                &SessionUpdate {
                    tombstone: Some(tombstone),
                    ..SessionUpdate::default()
                },
            )
            .await
            .unwrap();
    }

    async fn live(&self, r: &SessionRecord) -> bool {
        let stored = self.store.session(r.id).await.unwrap().unwrap();
        stored.tombstone.is_none()
    }
}

fn ambiguity(selector: &str, named: &SessionRecord, ided: &SessionRecord) -> String {
    format!(
        "Selector \"{selector}\" is ambiguous: it is the name of session {} and the session id \
         of \"{}\"; use a name or session id only one of them has",
        named.id, ided.name
    )
}

#[tokio::test]
async fn a_name_that_is_another_childs_id_is_ambiguous_for_every_verb() {
    let f = family().await;
    let a = f.child("alpha").await;
    // A second child whose name is the first one's session id.
    let b = f.child(&a.id.to_string()).await;
    let selector = a.id.to_string();
    let expected = ambiguity(&selector, &b, &a);

    let e = f
        .sup
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(f.parent.id, &selector)
                .by("user")
                .reason("cleanup"),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::Validation);
    assert_eq!(e.to_string(), expected);
    assert!(f.live(&a).await && f.live(&b).await, "nothing was deleted");

    let e = registry::find_child(f.store.as_ref(), f.parent.id, &selector)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), expected);
    let e = registry::delete_target(f.store.as_ref(), f.parent.id, &selector)
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), expected);

    // The model's send_message: the same refusal, nothing delivered.
    let tool = SendMessageTool::new(f.sup.clone());
    let ctx = ToolContext::new("root", SessionRef::from(&f.parent), RunId::new(), "c1");
    let e = tool
        .call_json(json!({"to": selector, "text": "hi"}), ctx.clone())
        .await
        .unwrap_err();
    match e {
        ToolError::ToModel(text) => assert_eq!(text, expected),
        other => panic!("{other:?}"),
    }

    // What only one of them has still selects it.
    let by_name = registry::find_child(f.store.as_ref(), f.parent.id, "alpha")
        .await
        .unwrap();
    assert_eq!(by_name.id, a.id);
    let d = f
        .sup
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(f.parent.id, b.id.to_string())
                .by("user")
                .reason("cleanup"),
        )
        .await
        .unwrap();
    assert_eq!(d.session_id, b.id);
    assert!(f.live(&a).await && !f.live(&b).await);
}

#[tokio::test]
async fn a_deleted_childs_id_counts_but_its_name_does_not() {
    let f = family().await;
    // A deleted child, and a live one named by the deleted one's id: deleting "by that id"
    // could mean the no-op or the live child, so it is refused.
    let gone = f.child("gone").await;
    f.tombstone(&gone).await;
    let twin = f.child(&gone.id.to_string()).await;
    let e = f
        .sup
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(f.parent.id, gone.id.to_string())
                .by("user")
                .reason("x"),
        )
        .await
        .unwrap_err();
    assert_eq!(e.to_string(), ambiguity(&gone.id.to_string(), &twin, &gone));
    assert!(f.live(&twin).await);

    // A deleted child's name is free again: the live child of that name is the target.
    let old = f.child("reused").await;
    f.tombstone(&old).await;
    let new = f.child("reused").await;
    match registry::delete_target(f.store.as_ref(), f.parent.id, "reused")
        .await
        .unwrap()
    {
        DeleteTarget::Live(r) => assert_eq!(r.id, new.id),
        other => panic!("{other:?}"),
    }
    // Deleted twice by name or id: harmless.
    let d = f
        .sup
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(f.parent.id, "reused")
                .by("user")
                .reason("x"),
        )
        .await
        .unwrap();
    assert!(!d.already);
    let again = f
        .sup
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(f.parent.id, "reused")
                .by("user")
                .reason("x"),
        )
        .await
        .unwrap();
    assert!(again.already);
    assert_eq!(again.session_id, new.id);
    let by_id = f
        .sup
        .delete_child(
            arbor_core::supervisor::DeleteChild::new(f.parent.id, old.id.to_string())
                .by("user")
                .reason("x"),
        )
        .await
        .unwrap();
    assert!(by_id.already);
    assert_eq!(by_id.session_id, old.id);
}

#[tokio::test]
async fn a_sibling_and_a_child_of_one_name_are_ambiguous_to_send_message() {
    let f = family().await;
    let me = f.child("me").await;
    let sibling = f.child("api").await;
    let mine = SessionRecord::new_child(&me, "api", "child", "m");
    f.store.create_session(&mine).await.unwrap();
    let tool = SendMessageTool::new(f.sup.clone());
    let ctx = ToolContext::new("me", SessionRef::from(&me), RunId::new(), "c1");
    let e = tool
        .call_json(json!({"to": "api", "text": "hi"}), ctx)
        .await
        .unwrap_err();
    let (first, second) = if sibling.id < mine.id {
        (sibling.id, mine.id)
    } else {
        (mine.id, sibling.id)
    };
    match e {
        ToolError::ToModel(text) => assert_eq!(
            text,
            format!(
                "Selector \"api\" is ambiguous: it is the name of session {first} and the name \
                 of session {second}; use a name or session id only one of them has"
            )
        ),
        other => panic!("{other:?}"),
    }
}
