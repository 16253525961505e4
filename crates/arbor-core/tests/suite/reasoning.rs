//! A model's reasoning: kept in the transcript (a `reasoning` entry after its assistant
//! message, redacted), sent back with its message on the run's next turns (the request's
//! `reasoning`, by the message's first call id), rebuilt when the session is reopened, and
//! not carried into the next run.

use std::sync::{Arc, Mutex};

use arbor_core::{Agent, RunOptions};
use arbor_model::{
    ModelError, ModelEvent, ModelProvider, ModelRequest, ModelStream, Reasonings, Script,
    ScriptedProvider, ScriptedTurn,
};
use arbor_protocol::{EntryKind, Reasoning};
use arbor_store::{MemoryStore, Store};
use async_trait::async_trait;
use futures::StreamExt;
use serde_json::json;

use super::wire_support::Look;

/// Plays a script, putting a thinking block before every turn that calls tools, and keeps
/// the reasoning each request carried.
#[derive(Debug, Clone)]
struct Thinker {
    inner: ScriptedProvider,
    seen: Arc<Mutex<Vec<Reasonings>>>,
}

fn block(text: &str) -> Reasoning {
    Reasoning::Thinking {
        thinking: text.to_owned(),
        signature: format!("sig-{text}"),
    }
}

#[async_trait]
impl ModelProvider for Thinker {
    fn name(&self) -> &str {
        "thinker"
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        self.seen
            .lock()
            .unwrap()
            .push(request.reasoning.cloned().unwrap_or_default());
        let events: Vec<_> = self.inner.stream(request).await?.collect().await;
        let calls = events
            .iter()
            .any(|e| matches!(e, Ok(ModelEvent::ToolCall(_))));
        let mut out = Vec::new();
        if calls {
            out.push(Ok(ModelEvent::Reasoning(block("plan"))));
        }
        out.extend(events);
        Ok(Box::pin(futures::stream::iter(out)))
    }
}

fn thinker(turns: Vec<ScriptedTurn>) -> (Thinker, Arc<Mutex<Vec<Reasonings>>>) {
    let p = Thinker {
        inner: ScriptedProvider::new(Script::new(turns)),
        seen: Arc::default(),
    };
    let seen = p.seen.clone();
    (p, seen)
}

#[tokio::test]
async fn reasoning_is_kept_and_sent_back_in_its_loop_only() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (p, seen) = thinker(vec![
        ScriptedTurn::tool_call("look", json!({})),
        ScriptedTurn::text("first answer"),
        ScriptedTurn::tool_call("look", json!({})),
        ScriptedTurn::text("second answer"),
    ]);
    let agent = Agent::builder("a").provider(p).tool(Look).build().unwrap();
    let mut session = agent.session().store(store.clone()).create().await.unwrap();
    session.run("go", RunOptions::default()).await.unwrap();

    // A reasoning entry right after the assistant message it preceded.
    let entries = store.transcript(session.id(), 0, None).await.unwrap();
    let at = entries
        .iter()
        .position(|e| matches!(e.kind, EntryKind::Reasoning { .. }))
        .expect("a reasoning entry");
    let EntryKind::Reasoning { turn, blocks } = &entries[at].kind else {
        unreachable!()
    };
    assert_eq!((*turn, blocks.as_slice()), (1, [block("plan")].as_slice()));
    let EntryKind::Message {
        message: arbor_protocol::Message::Assistant { tool_calls, .. },
    } = &entries[at - 1].kind
    else {
        panic!("{:?}", entries[at - 1].kind)
    };
    let call = tool_calls[0].id.clone();
    {
        // The turn after the call carried its thinking, by the call's id.
        let seen = seen.lock().unwrap();
        assert!(seen[0].is_empty());
        assert_eq!(seen[1].get(&call), Some(&vec![block("plan")]));
    }
    // The next run starts a new loop: the first run's thinking is not sent again.
    session.run("again", RunOptions::default()).await.unwrap();
    let seen = seen.lock().unwrap();
    assert!(seen[2].is_empty(), "{:?}", seen[2]);
    assert_eq!(seen[3].values().collect::<Vec<_>>(), [&vec![block("plan")]]);
}

#[tokio::test]
async fn a_run_resumed_by_another_session_object_sends_the_kept_thinking_back() {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let (p, seen) = thinker(vec![
        ScriptedTurn::tool_call("look", json!({})),
        ScriptedTurn::text("done"),
    ]);
    let agent = Agent::builder("a")
        .provider(p)
        .tool(Look)
        .interrupt_before_tool(true)
        .build()
        .unwrap();
    let mut s = agent.session().store(store.clone()).create().await.unwrap();
    let r = s.run("go", RunOptions::default()).await.unwrap();
    let waiting = r.suspension.clone().expect("suspended before the call");
    drop(s);
    // As after a restart: the loop's thinking comes back from the transcript.
    let mut again = agent
        .open_session(store.clone(), r.session_id)
        .await
        .unwrap();
    let done = again
        .approve(
            r.run_id,
            waiting.version,
            &[arbor_protocol::ApprovalDecision::new(
                waiting.pending[0].id.clone(),
                arbor_protocol::Verdict::AllowOnce,
            )],
            RunOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(done.text, "done");
    let seen = seen.lock().unwrap();
    assert_eq!(
        seen[1].get(&waiting.pending[0].call_id),
        Some(&vec![block("plan")]),
        "{seen:?}"
    );
}
