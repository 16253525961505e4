//! `spawn_agent`'s arguments: arbitrary JSON through the public tool (`call_json`) against a
//! supervisor with scripted children. Every call returns (a result or a `ToolError`), never
//! panics; a fresh runtime per input drops whatever an async spawn left running.
#![no_main]

use arbor_core::supervisor::{ChildEntry, LimitsInput, Ownership, SpawnAgentTool, Supervisor};
use arbor_core::{Agent, DynTool, SessionRef, ToolContext};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::RunId;
use libfuzzer_sys::fuzz_target;

fn child(text: &str) -> Option<Agent> {
    Agent::builder("child")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            text,
        )
        .with_usage(7, 3)])))
        .build()
        .ok()
}

async fn call(arguments: serde_json::Value) {
    let (Some(a), Some(b)) = (child("found it"), child("written")) else {
        return;
    };
    let Ok(sup) = Supervisor::builder(Ownership::user("t", "u"))
        .child(
            ChildEntry::agent("research", a)
                .description("reads sources")
                .model("small")
                .allow_models(["small", "large"]),
        )
        .child(ChildEntry::agent("write", b))
        .limits(LimitsInput {
            max_active_children: Some(2),
            ..LimitsInput::default()
        })
        .build()
    else {
        return;
    };
    let record = arbor_store::SessionRecord::new_root("parent", "parent", "scripted");
    if sup.store().create_session(&record).await.is_err() {
        return;
    }
    let ctx = ToolContext::new("parent", SessionRef::from(&record), RunId::new(), "c1");
    let tool = SpawnAgentTool::new(sup.delegator());
    // Ok (a result or a handle) or a ToolError: both are answers; only a panic is a bug.
    let _ = tool.call_json(arguments, ctx).await;
}

fuzz_target!(|data: &[u8]| {
    let Ok(arguments) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
    else {
        return;
    };
    rt.block_on(call(arguments));
});
