//! Helpers of the nested-approval tests: a durable tree of scripted children with a
//! counted `write` tool, an `after` hook that records statuses, a gatekeeping `before` hook.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arbor_core::supervisor::{
    AfterHook, BeforeContext, BeforeDecision, BeforeHook, ChildEntry, Completion, CompletionStatus,
    Ownership, SpawnAgentTool, Supervisor, factory_fn,
};
use arbor_core::{Agent, RunOptions, Session, Tool, ToolContext, ToolError};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{ApprovalDecision, Verdict};
use arbor_store::{MemoryStore, Store};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

#[derive(Debug, Clone, Default)]
pub(crate) struct Write(pub(crate) Arc<AtomicUsize>);

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct WriteArgs {
    pub(crate) file: String,
}

#[async_trait]
impl Tool for Write {
    type Args = WriteArgs;
    type Output = String;
    fn name(&self) -> &str {
        "write"
    }
    fn description(&self) -> &str {
        "writes a file"
    }
    async fn call(&self, args: WriteArgs, _ctx: ToolContext) -> Result<String, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(format!("wrote {}", args.file))
    }
}

#[derive(Debug, Default, Clone)]
pub(crate) struct Afters(pub(crate) Arc<Mutex<Vec<CompletionStatus>>>);

#[async_trait]
impl AfterHook for Afters {
    async fn after(&self, c: &Completion) -> Result<(), arbor_core::supervisor::HookError> {
        self.0.lock().unwrap().push(c.status);
        Ok(())
    }
}

/// Allows the first `allow` delegations, then denies.
#[derive(Debug)]
pub(crate) struct Gatekeeper {
    pub(crate) allow: usize,
    pub(crate) seen: AtomicUsize,
}

#[async_trait]
impl BeforeHook for Gatekeeper {
    async fn before(&self, _ctx: &BeforeContext) -> BeforeDecision {
        if self.seen.fetch_add(1, Ordering::SeqCst) < self.allow {
            BeforeDecision::Allow
        } else {
            BeforeDecision::Deny {
                reason: Some("policy changed".into()),
            }
        }
    }
}

pub(crate) fn write(file: &str) -> ScriptedTurn {
    ScriptedTurn::tool_call("write", json!({ "file": file }))
}

pub(crate) fn spawn(child: &str) -> ScriptedTurn {
    ScriptedTurn::tool_call(
        "spawn_agent",
        json!({"child_id": child, "name": child, "input": format!("work, {child}")}),
    )
}

pub(crate) struct Tree {
    pub(crate) sup: Supervisor,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) writes: Write,
    pub(crate) afters: Afters,
}

pub(crate) fn tree(
    children: Vec<(&'static str, Vec<ScriptedTurn>)>,
    hook: Option<Gatekeeper>,
) -> Tree {
    tree_on(Arc::new(MemoryStore::new()), children, hook)
}

/// [`tree`] on `store` (a fault-injecting one, or what a crashed process left).
pub(crate) fn tree_on(
    store: Arc<dyn Store>,
    children: Vec<(&'static str, Vec<ScriptedTurn>)>,
    hook: Option<Gatekeeper>,
) -> Tree {
    let writes = Write::default();
    let afters = Afters::default();
    let mut b = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .durable_approvals("rev-1")
        .after(afters.clone());
    if let Some(h) = hook {
        b = b.before(h);
    }
    for (id, turns) in children {
        let script = Script::new(turns);
        let writes = writes.clone();
        b = b.child(ChildEntry::new(
            id,
            factory_fn(move |ctx| {
                let (script, writes) = (script.clone(), writes.clone());
                async move {
                    Agent::builder(ctx.child_id.clone())
                        .provider(ScriptedProvider::new(script))
                        .tool(writes)
                        .dyn_tool(Arc::new(SpawnAgentTool::new(ctx.delegator.clone())))
                        .build()
                }
            }),
        ));
    }
    Tree {
        sup: b.build().unwrap(),
        store,
        writes,
        afters,
    }
}

/// A durable tree whose one child, `writer`, writes once and answers; `configure` adds to
/// the supervisor and `entry` to the writer's catalog entry.
pub(crate) fn writer_tree(
    configure: impl FnOnce(
        arbor_core::supervisor::SupervisorBuilder,
    ) -> arbor_core::supervisor::SupervisorBuilder,
    entry: impl FnOnce(ChildEntry) -> ChildEntry,
) -> Tree {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let writes = Write::default();
    let writer = Agent::builder("writer")
        .provider(ScriptedProvider::new(Script::new([
            write("x"),
            ScriptedTurn::text("written"),
        ])))
        .tool(writes.clone())
        .build()
        .unwrap();
    let b = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .durable_approvals("rev-1")
        .child(entry(ChildEntry::agent("writer", writer)));
    Tree {
        sup: configure(b).build().unwrap(),
        store,
        writes,
        afters: Afters::default(),
    }
}

pub(crate) async fn root(t: &Tree, turns: Vec<ScriptedTurn>) -> Session {
    Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new(turns)))
        .dyn_tool(Arc::new(SpawnAgentTool::new(t.sup.delegator())))
        .build()
        .unwrap()
        .session()
        .store(t.store.clone())
        .create()
        .await
        .unwrap()
}

pub(crate) fn opts(t: &Tree) -> RunOptions {
    RunOptions::default().with_nested(Arc::new(t.sup.clone()))
}

pub(crate) fn allow(id: &str) -> ApprovalDecision {
    ApprovalDecision::new(id, Verdict::AllowOnce)
}

pub(crate) fn types(
    sub: &mut arbor_core::Subscription<arbor_protocol::SupervisorEnvelope>,
) -> Vec<&'static str> {
    let mut out = Vec::new();
    while let Some(e) = sub.try_recv() {
        out.push(e.event.type_name());
    }
    out
}
