//! Per-child model knobs: a thinking level checked at admission against what the resolved
//! model supports (and sent with every provider call of the child, and kept on its record),
//! and `find_models`, the parent's bounded search of the models its children may run.

use std::sync::{Arc, Mutex};

use arbor_core::supervisor::{
    ChildEntry, DelegationRequest, FindModelsTool, Ownership, SpawnAgentTool, Supervisor,
    factory_fn,
};
use arbor_core::{Agent, CoreErrorKind, DynTool, SessionRef, ToolContext, ToolError};
use arbor_model::{
    ModelError, ModelProvider, ModelRequest, ModelStream, Script, ScriptedProvider, ScriptedTurn,
    ThinkingLevel,
};
use arbor_protocol::RunId;
use arbor_store::{MemoryStore, SessionQuery, SessionRecord, Store};
use async_trait::async_trait;
use serde_json::{Value, json};

use ThinkingLevel::{High, Low, Medium, Off};

/// The model and thinking level of each provider call.
type Calls = Arc<Mutex<Vec<(String, Option<ThinkingLevel>)>>>;

/// Plays a script and records the thinking level of every call.
#[derive(Debug, Clone)]
struct Recording {
    inner: ScriptedProvider,
    seen: Calls,
}

#[async_trait]
impl ModelProvider for Recording {
    fn name(&self) -> &str {
        "recording"
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        self.seen
            .lock()
            .unwrap()
            .push((request.model.to_owned(), request.thinking));
        self.inner.stream(request).await
    }
}

/// A provider whose model list fails (a refused key).
#[derive(Debug)]
struct Refusing;

#[async_trait]
impl ModelProvider for Refusing {
    fn name(&self) -> &str {
        "refusing"
    }

    async fn stream(&self, _request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        Err(ModelError::Provider {
            message: "never called".into(),
        })
    }

    async fn list_models(&self) -> Result<Option<Vec<String>>, ModelError> {
        Err(ModelError::Provider {
            message: "refusing: HTTP 401: bad key".into(),
        })
    }
}

/// The provider the `coder` entry preflights with: it offers `small` and `large`, and
/// declares `large` thinks (off, low, high).
fn offers() -> Arc<dyn ModelProvider> {
    Arc::new(ScriptedProvider::new(
        Script::new(Vec::new())
            .models(["small", "large"])
            .thinking("large".to_owned(), vec![Off, Low, High]),
    ))
}

/// A supervisor whose `coder` runs `small` (no thinking declared) or `large`, and may be
/// asked for `huge` (which its provider does not offer); `reviewer` declares `small`'s
/// levels itself.
fn supervisor(store: Arc<dyn Store>, recording: Recording) -> Supervisor {
    let coder_provider = recording.clone();
    Supervisor::builder(Ownership::user("t", "u"))
        .store(store)
        .child(
            ChildEntry::new(
                "coder",
                factory_fn(move |ctx| {
                    let provider = coder_provider.clone();
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
            .preflight_with(offers()),
        )
        .child(
            ChildEntry::agent(
                "reviewer",
                Agent::builder("reviewer")
                    .provider(recording.inner.clone())
                    .model("small")
                    .build()
                    .unwrap(),
            )
            .thinking_levels("small", [Medium, Off, Medium]),
        )
        .child(
            ChildEntry::new(
                "remote",
                factory_fn(|_| async { Err(arbor_core::CoreError::Supervisor("no".into())) }),
            )
            .model("far-1")
            .preflight_with(Arc::new(Refusing)),
        )
        .build()
        .unwrap()
}

fn recording() -> Recording {
    Recording {
        inner: ScriptedProvider::new(Script::new([ScriptedTurn::text("done")])),
        seen: Arc::default(),
    }
}

async fn parent(store: &Arc<dyn Store>) -> SessionRecord {
    let record = SessionRecord::new_root("parent", "parent", "scripted");
    store.create_session(&record).await.unwrap();
    record
}

fn ctx(parent: &SessionRecord) -> ToolContext {
    ToolContext::new("parent", SessionRef::from(parent), RunId::new(), "c1")
}

fn model_error(r: Result<String, ToolError>) -> String {
    match r {
        Err(ToolError::ToModel(m)) => m,
        other => panic!("expected a tool error, got {other:?}"),
    }
}

#[tokio::test]
async fn an_unsupported_thinking_level_is_refused_naming_the_supported_ones() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let rec = recording();
    let sup = supervisor(store.clone(), rec.clone());
    let p = parent(&store).await;
    let ask = |model: Option<&str>, thinking| DelegationRequest {
        model: model.map(str::to_owned),
        thinking: Some(thinking),
        parent: Some(SessionRef::from(&p)),
        ..DelegationRequest::new("coder", "go")
    };
    // A model that declares nothing supports only `off`: more is refused, not ignored.
    let e = sup.delegate(ask(None, High)).await.unwrap_err();
    assert_eq!(e.kind(), CoreErrorKind::Validation);
    assert_eq!(
        e.to_string(),
        "Requested thinking level \"high\" is not supported by model \"small\"; supported \
         levels: off"
    );
    // The provider's declaration for the resolved model.
    let e = sup.delegate(ask(Some("LARGE"), Medium)).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "Requested thinking level \"medium\" is not supported by model \"large\"; supported \
         levels: off, low, high"
    );
    // The entry's own declaration (sorted, once each).
    let e = sup
        .delegate(DelegationRequest {
            thinking: Some(High),
            parent: Some(SessionRef::from(&p)),
            ..DelegationRequest::new("reviewer", "go")
        })
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "Requested thinking level \"high\" is not supported by model \"small\"; supported \
         levels: off, medium"
    );
    // Refused at admission: no record, no attempt, no provider call.
    assert!(
        store
            .list_sessions(SessionQuery::Children(p.id))
            .await
            .unwrap()
            .is_empty()
    );
    assert!(sup.summary().iter().all(|s| s.attempts == 0));
    assert!(rec.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_accepted_level_reaches_every_provider_call_and_the_record() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let rec = recording();
    let sup = supervisor(store.clone(), rec.clone());
    let p = parent(&store).await;
    // The factory builds its agent without a level: the runtime forces the admitted one.
    let r = sup
        .delegate(DelegationRequest {
            model: Some("large".into()),
            thinking: Some(High),
            parent: Some(SessionRef::from(&p)),
            ..DelegationRequest::new("coder", "go")
        })
        .await
        .unwrap();
    assert_eq!(r.result.text, "done");
    assert_eq!(
        *rec.seen.lock().unwrap(),
        [("large".to_owned(), Some(High))]
    );
    let record = store.session(r.session_id).await.unwrap().unwrap();
    assert_eq!(record.meta["thinking"], "high");
    assert_eq!(record.model, "large");
    // Without a level: nothing asked, and the record says so.
    let r = sup
        .delegate(DelegationRequest {
            parent: Some(SessionRef::from(&p)),
            ..DelegationRequest::new("coder", "again")
        })
        .await
        .unwrap();
    assert_eq!(rec.seen.lock().unwrap()[1], ("small".to_owned(), None));
    let record = store.session(r.session_id).await.unwrap().unwrap();
    assert_eq!(record.meta["thinking"], Value::Null);
}

#[tokio::test]
async fn spawn_agent_takes_thinking_from_its_schema() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let rec = recording();
    let sup = supervisor(store.clone(), rec.clone());
    let p = parent(&store).await;
    let tool = SpawnAgentTool::new(sup.delegator());
    assert_eq!(
        tool.spec().parameters["properties"]["thinking"]["enum"],
        json!(["off", "minimal", "low", "medium", "high", "xhigh", "max"])
    );
    let e = model_error(
        tool.call_json(
            json!({"child_id": "coder", "input": "x", "thinking": "hgih"}),
            ctx(&p),
        )
        .await,
    );
    assert_eq!(
        e,
        "invalid arguments for spawn_agent: \"thinking\" must be one of \"off\", \"minimal\", \
         \"low\", \"medium\", \"high\", \"xhigh\", \"max\" (got the string \"hgih\")"
    );
    let e = model_error(
        tool.call_json(
            json!({"child_id": "coder", "input": "x", "thinking": "low"}),
            ctx(&p),
        )
        .await,
    );
    assert_eq!(
        e,
        "Requested thinking level \"low\" is not supported by model \"small\"; supported \
         levels: off"
    );
    let out: Value = serde_json::from_str(
        &tool
            .call_json(
                json!({"child_id": "coder", "input": "x", "model": "large", "thinking": "low", "mode": "async"}),
                ctx(&p),
            )
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (out["model"].as_str(), out["thinking"].as_str()),
        (Some("large"), Some("low"))
    );
}

#[tokio::test]
async fn find_models_lists_only_allowed_and_offered_models_with_their_levels() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = supervisor(store.clone(), recording());
    let p = parent(&store).await;
    let tool = FindModelsTool::new(sup.clone());
    let call = |args: Value| {
        let tool = tool.clone();
        let ctx = ctx(&p);
        async move {
            let out = tool.call_json(args, ctx).await.unwrap();
            serde_json::from_str::<Value>(&out).unwrap()
        }
    };
    // Everything: `huge` is allowed but not offered; the remote entry's list failed.
    let all = call(Value::Null).await;
    assert_eq!(
        all,
        json!({
            "models": [
                {"model": "large", "child_id": "coder", "default": false, "thinking": ["off", "low", "high"]},
                {"model": "small", "child_id": "coder", "default": true, "thinking": ["off"]},
                {"model": "small", "child_id": "reviewer", "default": true, "thinking": ["off", "medium"]},
            ],
            "matched": 3,
            "truncated": false,
            "unavailable": [{"child_id": "remote", "error": "provider error: refusing: HTTP 401: bad key"}],
        })
    );
    // Case-insensitive; exact before prefix before substring; the limit bounds the answer.
    let found = call(json!({"query": "SMALL", "limit": 1, "child_id": "reviewer"})).await;
    assert_eq!(found["models"][0]["child_id"], "reviewer");
    assert_eq!(
        (found["matched"].as_u64(), found["truncated"].as_bool()),
        (Some(1), Some(false))
    );
    let found = call(json!({"query": "ar"})).await;
    let models: Vec<&str> = found["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["model"].as_str().unwrap())
        .collect();
    assert_eq!(models, ["large"]);
    let found = call(json!({"query": "co", "limit": 1})).await;
    assert_eq!(
        (found["matched"].as_u64(), found["truncated"].as_bool()),
        (Some(2), Some(true))
    );
    assert_eq!(found["models"].as_array().unwrap().len(), 1);
    assert_eq!(call(json!({"query": "gpt"})).await["models"], json!([]));
}

#[tokio::test]
async fn find_models_refuses_bad_arguments_naming_them() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let sup = supervisor(store.clone(), recording());
    let p = parent(&store).await;
    let tool = FindModelsTool::for_children(sup.clone(), &["coder".into()]).unwrap();
    let err = |args: Value| {
        let tool = tool.clone();
        let ctx = ctx(&p);
        async move { model_error(tool.call_json(args, ctx).await) }
    };
    assert_eq!(
        err(json!({"limit": 21})).await,
        "invalid arguments for find_models: \"limit\" must be an integer from 1 to 20 (got the \
         number 21)"
    );
    assert_eq!(
        err(json!({"limit": 0})).await,
        "invalid arguments for find_models: \"limit\" must be an integer from 1 to 20 (got the \
         number 0)"
    );
    assert_eq!(
        err(json!({"query": "x", "provider": "openai"})).await,
        "invalid arguments for find_models: \"provider\" is not a field of find_models (got the \
         string \"openai\"); accepted fields: child_id, limit, query"
    );
    assert_eq!(
        err(json!({"child_id": "reviewer"})).await,
        "invalid arguments for find_models: \"child_id\" must be \"coder\" (got the \
         string \"reviewer\")"
    );
    assert_eq!(
        err(json!({"query": "q".repeat(201)})).await,
        "invalid arguments for find_models: \"query\" must be at most 200 characters"
    );
    assert_eq!(
        FindModelsTool::for_children(sup, &["ghost".into()])
            .unwrap_err()
            .to_string(),
        "Invalid child id: ghost"
    );
}
