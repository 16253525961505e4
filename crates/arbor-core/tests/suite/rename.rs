//! Renaming a child: the new name is held among its siblings, the old one freed, and the
//! child's transcript records the rename; the model does it with `rename_child`.

use std::sync::Arc;

use arbor_core::supervisor::{
    ChildEntry, DelegationRequest, Ownership, RenameChildTool, Supervisor,
};
use arbor_core::{Agent, CoreErrorKind, DynTool, SessionRef, ToolContext, ToolError};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{EntryKind, RunId};
use arbor_store::{MemoryStore, Store};
use serde_json::json;

#[tokio::test]
async fn a_child_is_renamed_durably_and_a_taken_name_is_refused() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let worker = Agent::builder("worker")
        .provider(ScriptedProvider::new(
            Script::new(vec![ScriptedTurn::text("done")]).repeat_last(true),
        ))
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .child(ChildEntry::agent("worker", worker))
        .build()
        .unwrap();
    let root = super::support::idle_root(&store).await;
    for name in ["alpha", "beta"] {
        sup.delegate(DelegationRequest {
            parent: Some(SessionRef::from(root.record())),
            name: Some(name.into()),
            ..DelegationRequest::new("worker", "go")
        })
        .await
        .unwrap();
    }
    let e = sup
        .rename_child(
            arbor_core::supervisor::RenameChild::new(root.id(), "alpha", "beta").by("host"),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::Validation);
    assert_eq!(
        e.to_string(),
        "Agent name \"beta\" is unavailable: an agent of that name already exists at depth 1 \
         under this parent"
    );
    let renamed = sup
        .rename_child(
            arbor_core::supervisor::RenameChild::new(root.id(), "alpha", "gamma").by("host"),
        )
        .await
        .unwrap();
    assert_eq!(
        (renamed.from.as_str(), renamed.to.as_str()),
        ("alpha", "gamma")
    );
    let record = store.session(renamed.session_id).await.unwrap().unwrap();
    assert_eq!(record.name, "gamma");
    let entries = store.transcript(record.id, 0, None).await.unwrap();
    assert!(entries.iter().any(|e| e.kind
        == EntryKind::Renamed {
            from: "alpha".into(),
            to: "gamma".into(),
            by: "host".into()
        }));
    // The old name is free: a new child may take it.
    sup.delegate(DelegationRequest {
        parent: Some(SessionRef::from(root.record())),
        name: Some("alpha".into()),
        ..DelegationRequest::new("worker", "again")
    })
    .await
    .unwrap();

    // The model's tool, on its own direct children.
    let tool = RenameChildTool::new(sup.clone());
    let ctx = ToolContext::new("root", SessionRef::from(root.record()), RunId::new(), "c1");
    let out = tool
        .call_json(json!({"child": "gamma", "name": "delta"}), ctx.clone())
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["from"].as_str(), v["name"].as_str()),
        (Some("gamma"), Some("delta"))
    );
    let bad = tool
        .call_json(json!({"child": "delta", "name": "alpha"}), ctx.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(&bad, ToolError::ToModel(t) if t.contains("unavailable")),
        "alpha is taken: {bad:?}"
    );
    let missing = tool
        .call_json(json!({"child": "delta"}), ctx)
        .await
        .unwrap_err();
    let ToolError::ToModel(text) = missing else {
        panic!("{missing:?}");
    };
    assert!(text.contains("\"name\""), "{text}");
}
