//! A host embedding the supervisor: two allow-listed children, a `before` hook that keeps
//! secrets out of a child's task, a sink that counts child events, and a root agent that
//! delegates through the delegator's tools. Scripted models, so it runs anywhere:
//! `cargo run -p arbor-core --example host`.

// An example program: it prints what it did.
#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use arbor_core::supervisor::{
    BeforeDecision, ChildEntry, Ownership, Supervisor, before_fn, sink_fn,
};
use arbor_core::{Agent, CoreResult, RunOptions};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use serde_json::json;

/// A child that answers `text` (a real host gives it a real provider).
fn leaf(name: &str, text: &str) -> CoreResult<Agent> {
    Agent::builder(name)
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            text,
        )])))
        .build()
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> CoreResult<()> {
    let events = Arc::new(AtomicUsize::new(0));
    let counted = events.clone();
    let supervisor = Supervisor::builder(Ownership::user("acme", "alice"))
        .child(
            ChildEntry::agent("research", leaf("research", "three facts")?)
                .description("finds facts"),
        )
        .child(
            ChildEntry::agent("write", leaf("write", "a short brief")?).description("writes prose"),
        )
        .before(before_fn(|ctx| async move {
            if ctx.input.to_lowercase().contains("password") {
                BeforeDecision::Deny {
                    reason: Some("no secrets in a child's task".into()),
                }
            } else {
                BeforeDecision::Allow
            }
        }))
        // Child events on, and a sink for them (it must not block).
        .child_events(true)
        .child_event_sink(sink_fn(move |_event| {
            counted.fetch_add(1, Ordering::Relaxed);
        }))
        .build()?;

    // The root's model asks for both children, then answers. Its tools come from the
    // delegator: spawn_agent, wait_agent, cancel_agent, send_message, list_children, …
    let root = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new([
            ScriptedTurn::tool_call(
                "spawn_agent",
                json!({"child_id": "research", "input": "facts about X"}),
            ),
            ScriptedTurn::tool_call(
                "spawn_agent",
                json!({"child_id": "write", "input": "a brief from these facts"}),
            ),
            ScriptedTurn::text("Here is the brief."),
        ])))
        .dyn_tools(supervisor.delegator().tools())
        .build()?;

    // The root lives in the supervisor's store and is attached to it.
    let mut session = supervisor.root_session(&root, |s| s.name("brief")).await?;
    let result = session
        .run("Write a brief on X", RunOptions::default())
        .await?;
    supervisor.shutdown().await;

    let children =
        arbor_core::registry::children(supervisor.store().as_ref(), session.id(), false).await?;
    println!("root: {:?}, {:?}", result.status, result.text);
    for child in &children {
        println!(
            "  {} ({}): {} own tokens",
            child.name, child.status, child.usage.own.total_tokens
        );
    }
    println!(
        "{} child events reached the sink",
        events.load(Ordering::Relaxed)
    );
    assert_eq!(children.len(), 2);
    assert!(events.load(Ordering::Relaxed) > 0);
    Ok(())
}
