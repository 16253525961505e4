//! Shared test helpers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use arbor_core::Subscription;
use arbor_core::{Agent, AgentBuilder, Session, Tool, ToolContext, ToolError};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{AgentEvent, EventEnvelope};
use async_trait::async_trait;
use schemars::JsonSchema;
use serde::Deserialize;

pub(crate) fn scripted(turns: Vec<ScriptedTurn>) -> AgentBuilder {
    Agent::builder("tester").provider(ScriptedProvider::new(Script::new(turns)))
}

pub(crate) fn looping(turn: ScriptedTurn) -> AgentBuilder {
    Agent::builder("tester").provider(ScriptedProvider::new(
        Script::new(vec![turn]).repeat_last(true),
    ))
}

pub(crate) async fn session(agent: AgentBuilder) -> Session {
    agent.build().unwrap().session().create().await.unwrap()
}

pub(crate) fn drain(sub: &mut Subscription) -> Vec<Arc<EventEnvelope>> {
    let mut out = Vec::new();
    while let Some(e) = sub.try_recv() {
        out.push(e);
    }
    out
}

pub(crate) fn types(events: &[Arc<EventEnvelope>]) -> Vec<&'static str> {
    events.iter().map(|e| e.event.type_name()).collect()
}

pub(crate) fn find<'a>(events: &'a [Arc<EventEnvelope>], ty: &str) -> Vec<&'a AgentEvent> {
    events
        .iter()
        .filter(|e| e.event.type_name() == ty)
        .map(|e| &e.event)
        .collect()
}

/// A tool that counts calls and how many run at once, and waits `ms` inside.
#[derive(Debug, Clone, Default)]
pub(crate) struct Probe {
    pub(crate) exclusive: bool,
    pub(crate) calls: Arc<AtomicUsize>,
    pub(crate) active: Arc<AtomicUsize>,
    pub(crate) peak: Arc<AtomicUsize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProbeArgs {
    pub(crate) ms: u64,
    pub(crate) tag: String,
}

#[async_trait]
impl Tool for Probe {
    type Args = ProbeArgs;
    type Output = String;

    fn name(&self) -> &str {
        if self.exclusive {
            "probe_exclusive"
        } else {
            "probe"
        }
    }

    fn description(&self) -> &str {
        "test probe"
    }

    fn exclusive(&self) -> bool {
        self.exclusive
    }

    async fn call(&self, args: ProbeArgs, _ctx: ToolContext) -> Result<String, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let now = self.active.fetch_add(1, Ordering::SeqCst) + 1;
        self.peak.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(args.ms)).await;
        self.active.fetch_sub(1, Ordering::SeqCst);
        Ok(args.tag)
    }
}

/// A root session on `store` whose agent never runs (the host's side of a tree).
pub(crate) async fn idle_root(store: &Arc<dyn arbor_store::Store>) -> Session {
    Agent::builder("root")
        .provider(ScriptedProvider::new(Script::default()))
        .build()
        .unwrap()
        .session()
        .store(store.clone())
        .create()
        .await
        .unwrap()
}

/// The contents of the tool results in `messages`, in order.
pub(crate) fn tool_results(messages: &[arbor_protocol::Message]) -> Vec<String> {
    messages
        .iter()
        .filter_map(|m| match m {
            arbor_protocol::Message::Tool(r) => Some(r.content.clone()),
            _ => None,
        })
        .collect()
}
