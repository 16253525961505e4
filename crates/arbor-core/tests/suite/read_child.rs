//! `read_child`: a parent reads the rest of a descendant's transcript by pages (by name or
//! session id for a child, by session id deeper down), filtered by entry kind, redacted and
//! capped; another family's session answers exactly as an unknown one.

use std::sync::Arc;

use arbor_core::supervisor::{
    ChildEntry, DelegationRequest, Ownership, ReadChild, SpawnAgentTool, Supervisor, factory_fn,
};
use arbor_core::{Agent, CoreErrorKind, SessionRef};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_store::{MemoryStore, SessionQuery, SessionRecord, Store};
use serde_json::json;

fn tree(store: &Arc<dyn Store>) -> Supervisor {
    let entry = |id: &'static str, turns: Vec<ScriptedTurn>| {
        let script = Script::new(turns);
        ChildEntry::new(
            id,
            factory_fn(move |ctx| {
                let script = script.clone();
                async move {
                    Agent::builder(ctx.child_id.clone())
                        .provider(ScriptedProvider::new(script))
                        .dyn_tool(Arc::new(SpawnAgentTool::new(ctx.delegator.clone())))
                        .build()
                }
            }),
        )
    };
    Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .redactor(arbor_core::redact::SecretRedactor::new(["hunter2"]))
        .child(entry(
            "lead",
            vec![
                ScriptedTurn::tool_call(
                    "spawn_agent",
                    json!({"child_id": "helper", "name": "helper", "input": "help"}),
                ),
                ScriptedTurn::text("lead done"),
            ],
        ))
        .child(entry(
            "helper",
            vec![ScriptedTurn::text("the password is hunter2")],
        ))
        .build()
        .unwrap()
}

async fn root(store: &Arc<dyn Store>) -> SessionRecord {
    let r = SessionRecord::new_root("root", "root", "scripted");
    store.create_session(&r).await.unwrap();
    r
}

#[tokio::test]
async fn a_parent_reads_its_descendants_by_pages_and_nothing_else() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = tree(&store);
    let top = root(&store).await;
    let lead = sup
        .delegate(
            DelegationRequest::new("lead", "go")
                .name("lead")
                .parent(SessionRef::from(&top)),
        )
        .await
        .unwrap();
    let helper = store
        .list_sessions(SessionQuery::Children(lead.session_id))
        .await
        .unwrap()
        .remove(0);

    // A child by name, messages only, two at a time.
    let ask = |child: String, kinds: Vec<&str>, limit: usize, after: u64| ReadChild {
        child,
        after,
        kinds: kinds.into_iter().map(str::to_owned).collect(),
        limit: Some(limit),
        offset: 0,
    };
    let first = sup
        .read_child(top.id, &ask("lead".into(), vec!["message"], 2, 0))
        .await
        .unwrap();
    assert_eq!(first.session_id, lead.session_id);
    assert_eq!(first.entries.len(), 2);
    assert!(
        first
            .entries
            .iter()
            .all(|e| e.kind.kind_name() == "message")
    );
    let next = first.next_after.expect("more messages after the first two");
    let rest = sup
        .read_child(top.id, &ask("lead".into(), vec!["message"], 100, next))
        .await
        .unwrap();
    assert!(rest.next_after.is_none(), "the last page says so");
    assert!(rest.entries.iter().all(|e| e.seq > next));
    // A grandchild by session id, redacted as everything that leaves the supervisor.
    let deep = sup
        .read_child(top.id, &ask(helper.id.to_string(), vec![], 100, 0))
        .await
        .unwrap();
    let text = serde_json::to_string(&deep.entries).unwrap();
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains("the password is"), "{text}");

    // Not by name deeper down; another family's session answers as an unknown one.
    let unknown = sup
        .read_child(top.id, &ask("helper".into(), vec![], 10, 0))
        .await
        .unwrap_err();
    let other = root(&store).await;
    let theirs = sup
        .delegate(
            DelegationRequest::new("lead", "go")
                .name("lead")
                .parent(SessionRef::from(&other)),
        )
        .await
        .unwrap();
    let foreign = sup
        .read_child(top.id, &ask(theirs.session_id.to_string(), vec![], 10, 0))
        .await
        .unwrap_err();
    let never = sup
        .read_child(
            top.id,
            &ask(arbor_protocol::SessionId::new().to_string(), vec![], 10, 0),
        )
        .await
        .unwrap_err();
    assert_eq!(unknown.kind(), CoreErrorKind::NotFound);
    assert_eq!(foreign.kind(), CoreErrorKind::NotFound);
    assert_eq!(
        foreign
            .to_string()
            .replace(&theirs.session_id.to_string(), "ID"),
        never.to_string().replace(
            &never.to_string()[never.to_string().find('"').unwrap() + 1..][..36],
            "ID"
        )
    );

    // Bad pages are refused naming the field.
    let e = sup
        .read_child(top.id, &ask("lead".into(), vec![], 0, 0))
        .await
        .unwrap_err();
    assert_eq!(e.field(), Some("limit"));
    let e = sup
        .read_child(top.id, &ask("lead".into(), vec!["gossip"], 5, 0))
        .await
        .unwrap_err();
    assert_eq!(e.field(), Some("kinds"));
}

#[tokio::test]
async fn the_model_reads_a_child_and_a_page_past_the_cap_is_cut_with_where_to_go_on() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let long = "x".repeat(3_000);
    let writer = Agent::builder("writer")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            long,
        )])))
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .limits(arbor_core::supervisor::LimitsInput {
            max_result_bytes: Some(1_024),
            ..Default::default()
        })
        .child(ChildEntry::agent("writer", writer))
        .build()
        .unwrap();
    let top = root(&store).await;
    sup.delegate(
        DelegationRequest::new("writer", "go")
            .name("w")
            .parent(SessionRef::from(&top)),
    )
    .await
    .unwrap();
    let tool = arbor_core::supervisor::ReadChildTool::new(sup.clone());
    let ctx = arbor_core::ToolContext::new(
        "root",
        SessionRef::from(&top),
        arbor_protocol::RunId::new(),
        "c1",
    );
    let out =
        arbor_core::DynTool::call_json(&tool, json!({"child": "w", "kinds": ["message"]}), ctx)
            .await
            .unwrap();
    assert!(out.len() <= 1_024, "{} bytes", out.len());
    let page: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(page["cut"].is_string(), "{page}");
    assert!(page["next_after"].is_u64(), "{page}");
}
