//! Admission: a handle (session, name, model) before the child's first model call; names
//! unique among siblings; models that fail loudly; nothing written when admission fails.

use std::sync::Arc;

use arbor_core::supervisor::{ChildEntry, DelegationRequest, Ownership, Supervisor, factory_fn};
use arbor_core::{Agent, CoreErrorKind, RunOptions, Session};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::SessionStatus;
use arbor_store::{MemoryStore, SessionQuery, Store};

fn agent(name: &str, turns: Vec<ScriptedTurn>) -> Agent {
    Agent::builder(name)
        .provider(ScriptedProvider::new(Script::new(turns)))
        .model("small")
        .build()
        .unwrap()
}

fn hangs() -> Agent {
    agent(
        "slow",
        vec![ScriptedTurn {
            hang: true,
            ..ScriptedTurn::default()
        }],
    )
}

async fn parent(store: &Arc<dyn Store>) -> Session {
    agent("parent", vec![ScriptedTurn::text("p")])
        .session()
        .store(store.clone())
        .name("parent")
        .create()
        .await
        .unwrap()
}

/// A memory store and a supervisor whose one child, `slow`, never answers.
fn slow_tree() -> (Arc<dyn Store>, Supervisor) {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .child(ChildEntry::agent("slow", hangs()))
        .build()
        .unwrap();
    (store, sup)
}

fn request(child: &str, parent: &Session, name: Option<&str>) -> DelegationRequest {
    DelegationRequest {
        name: name.map(str::to_owned),
        parent: Some(parent.as_ref()),
        ..DelegationRequest::new(child, "Summarize the HTTP API!")
    }
}

#[tokio::test]
async fn the_handle_comes_before_the_first_model_call() {
    let (store, sup) = slow_tree();
    let p = parent(&store).await;
    let handle = sup.spawn(request("slow", &p, None)).await.unwrap();
    assert!(
        handle.name.starts_with("subagent-summarize-the-http-api-"),
        "{}",
        handle.name
    );
    assert_eq!(handle.model.as_deref(), Some("small"));
    let record = store.session(handle.session_id).await.unwrap().unwrap();
    assert_eq!(record.parent_id, Some(p.id()));
    assert_eq!(record.name, handle.name);
    assert_eq!(record.model, "small");
    assert_eq!(record.meta["mode"], "message");
    assert!(sup.cancel(&handle.delegation_id).unwrap());
    sup.shutdown().await;
    let record = store.session(handle.session_id).await.unwrap().unwrap();
    assert_eq!(record.status, SessionStatus::Aborted);
}

#[tokio::test]
async fn concurrent_spawns_of_one_name_admit_exactly_one() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .child(ChildEntry::agent("slow", hangs()))
        .limits(arbor_core::supervisor::LimitsInput {
            max_active_children: Some(16),
            ..Default::default()
        })
        .build()
        .unwrap();
    let p = parent(&store).await;
    let spawns = (0..8).map(|_| sup.spawn(request("slow", &p, Some("reviewer"))));
    let results = futures::future::join_all(spawns).await;
    let (ok, err): (Vec<_>, Vec<_>) = results.into_iter().partition(Result::is_ok);
    assert_eq!(ok.len(), 1);
    for e in err {
        let e = e.unwrap_err();
        assert_eq!(e.kind(), CoreErrorKind::Validation);
        assert_eq!(
            e.to_string(),
            "Agent name \"reviewer\" is unavailable: an agent of that name already exists at \
             depth 1 under this parent"
        );
    }
    // Losers left nothing: one record, one attempt, one slot.
    let children = store
        .list_sessions(SessionQuery::Children(p.id()))
        .await
        .unwrap();
    assert_eq!(children.len(), 1);
    assert_eq!(sup.summary()[0].attempts, 1);
    assert_eq!(sup.active_children(), 1);
    sup.shutdown().await;
    assert_eq!(sup.active_children(), 0);
}

/// A child has a task: a blank input is refused at admission, naming `input`, before
/// anything is written or counted (one check for the tool, `/v1` and MCP).
#[tokio::test]
async fn a_blank_input_is_refused_naming_it_before_anything_is_written() {
    let (store, sup) = slow_tree();
    let p = parent(&store).await;
    for input in ["", " \n\t "] {
        let e = sup
            .delegate_async(DelegationRequest::new("slow", input).parent(p.as_ref()))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), CoreErrorKind::Validation);
        assert_eq!(
            (e.field(), e.to_string().as_str()),
            (Some("input"), "input must not be blank")
        );
    }
    let kids = store
        .list_sessions(SessionQuery::Children(p.id()))
        .await
        .unwrap();
    assert!(kids.is_empty(), "{kids:?}");
    assert_eq!(sup.summary()[0].attempts, 0);
}

#[tokio::test]
async fn bad_names_are_refused_before_anything_is_written() {
    let (store, sup) = slow_tree();
    let p = parent(&store).await;
    let mut sub = sup.subscribe();
    let long = "n".repeat(65);
    for (name, message) in [
        ("ALL", "Broadcast agent messaging is not supported"),
        ("  ", "child name must not be empty"),
        (long.as_str(), "child name must be at most 64 characters"),
    ] {
        let e = sup
            .spawn(request("slow", &p, Some(name)))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), CoreErrorKind::Validation);
        assert_eq!(e.to_string(), message);
    }
    assert!(
        store
            .list_sessions(SessionQuery::Children(p.id()))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(sub.try_recv().is_none());
    assert_eq!(sup.summary()[0].attempts, 0);
    assert_eq!(sup.active_children(), 0);
}

#[tokio::test]
async fn a_requested_model_must_be_allowed_and_pass_its_preflight() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let provider =
        ScriptedProvider::new(Script::new([ScriptedTurn::text("done")]).models(["small", "large"]));
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .child(
            ChildEntry::new(
                "coder",
                factory_fn(move |ctx| {
                    let provider = provider.clone();
                    async move {
                        Agent::builder("coder")
                            .provider(provider)
                            .model(ctx.model.unwrap_or_default())
                            .build()
                    }
                }),
            )
            .model("small")
            .allow_models(["large", "huge"])
            .preflight_with(Arc::new(ScriptedProvider::new(
                Script::new(Vec::new()).models(["small", "large"]),
            ))),
        )
        .build()
        .unwrap();
    let p = parent(&store).await;

    let e = sup
        .delegate(DelegationRequest {
            model: Some("gpt-9".into()),
            ..request("coder", &p, Some("a"))
        })
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "Requested model \"gpt-9\" is not allowed for child \"coder\"; allowed models: small, \
         large, huge"
    );
    let e = sup
        .delegate(DelegationRequest {
            model: Some("huge".into()),
            ..request("coder", &p, Some("b"))
        })
        .await
        .unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::Validation);
    assert_eq!(
        e.to_string(),
        "Model \"huge\" for child \"coder\" failed its preflight: model \"huge\" is \
         unavailable: the script offers only small, large; allowed models: small, large, huge"
    );
    assert!(
        store
            .list_sessions(SessionQuery::Children(p.id()))
            .await
            .unwrap()
            .is_empty(),
        "a refused model leaves no record"
    );

    let large = sup
        .delegate(DelegationRequest {
            model: Some("LARGE".into()),
            ..request("coder", &p, Some("c"))
        })
        .await
        .unwrap();
    let record = store.session(large.session_id).await.unwrap().unwrap();
    assert_eq!(record.model, "large");
    let default = sup.delegate(request("coder", &p, Some("d"))).await.unwrap();
    let record = store.session(default.session_id).await.unwrap().unwrap();
    assert_eq!(record.model, "small");
}

#[tokio::test]
async fn a_factory_that_builds_another_model_fails_loudly_and_the_row_says_failed() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .child(
            ChildEntry::new(
                "sneaky",
                factory_fn(|_ctx| async move {
                    Agent::builder("sneaky")
                        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
                            "x",
                        )])))
                        .model("cheaper")
                        .build()
                }),
            )
            .model("premium"),
        )
        .build()
        .unwrap();
    let p = parent(&store).await;
    let e = sup
        .delegate(request("sneaky", &p, Some("s")))
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "child \"sneaky\" factory built an agent for model \"cheaper\", but the delegation was \
         admitted for model \"premium\""
    );
    let rows = store
        .list_sessions(SessionQuery::Children(p.id()))
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].status, SessionStatus::Failed);
}

#[tokio::test]
async fn a_message_child_outlives_the_parent_run_that_spawned_it() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .child(ChildEntry::agent(
            "worker",
            agent(
                "worker",
                vec![ScriptedTurn::text("late").with_delay(std::time::Duration::from_millis(50))],
            ),
        ))
        .build()
        .unwrap();
    let spawn = arbor_core::supervisor::SpawnAgentTool::new(sup.delegator());
    let mut p = agent(
        "parent",
        vec![
            ScriptedTurn::tool_call(
                "spawn_agent",
                serde_json::json!({"child_id": "worker", "name": "w", "input": "go", "mode": "message"}),
            ),
            ScriptedTurn::text("spawned, ending my turn"),
        ],
    )
    .to_builder()
    .dyn_tool(Arc::new(spawn))
    .build()
    .unwrap()
    .session()
    .store(store.clone())
    .create()
    .await
    .unwrap();
    let r = p.run("delegate", RunOptions::default()).await.unwrap();
    assert_eq!(r.text, "spawned, ending my turn");
    let kids = store
        .list_sessions(SessionQuery::Children(p.id()))
        .await
        .unwrap();
    assert_eq!(kids.len(), 1);
    assert!(kids[0].status.is_live() || kids[0].status == SessionStatus::Idle);
    sup.shutdown().await;
    let kid = store.session(kids[0].id).await.unwrap().unwrap();
    assert_eq!(
        kid.status,
        SessionStatus::Aborted,
        "ended by the session, not the turn"
    );
}
