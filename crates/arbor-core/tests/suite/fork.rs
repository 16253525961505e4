//! Forked context (issue 39, item 1): a child starts isolated by default; a spawn that asks
//! (`context: all` or `{last_turns: N}`) starts it with its parent's conversation up to the
//! spawn, without the pending call, redacted, recorded once in the child's transcript as
//! `forked`; the child's prompt tokens are its own and the totals reconcile; a catalog entry
//! may forbid or require it.

use std::sync::{Arc, Mutex};

use arbor_core::SecretRedactor;
use arbor_core::session::fork::{ContextPolicy, ForkContext};
use arbor_core::supervisor::{
    ChildEntry, DelegationRequest, Ownership, SpawnAgentTool, Supervisor,
};
use arbor_core::{Agent, CoreErrorKind, RunOptions};
use arbor_model::{
    ModelError, ModelProvider, ModelRequest, ModelStream, Script, ScriptedProvider, ScriptedTurn,
};
use arbor_protocol::{EntryKind, Message, RunStatus};
use arbor_store::SessionQuery;
use async_trait::async_trait;
use serde_json::json;

/// Plays a script and keeps the messages of every call.
#[derive(Debug, Clone)]
struct Recording {
    inner: ScriptedProvider,
    seen: Arc<Mutex<Vec<Vec<Message>>>>,
}

#[async_trait]
impl ModelProvider for Recording {
    fn name(&self) -> &str {
        "recording"
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        self.seen.lock().unwrap().push(request.messages.to_vec());
        self.inner.stream(request).await
    }
}

struct Family {
    sup: Supervisor,
    seen: Arc<Mutex<Vec<Vec<Message>>>>,
}

fn family(policy: ContextPolicy) -> Family {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let helper = Agent::builder("helper")
        .provider(Recording {
            // A scripted model plays the turn its request's assistant messages count to: a
            // forked request carries the parent's, so the one answer repeats.
            inner: ScriptedProvider::new(
                Script::new([ScriptedTurn::text("helped").with_usage(40, 2)]).repeat_last(true),
            ),
            seen: seen.clone(),
        })
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .child(ChildEntry::agent("helper", helper).context(policy))
        .redactor(SecretRedactor::new(["canary-7"]))
        .build()
        .unwrap();
    Family { sup, seen }
}

/// A root that is told a secret in its first run, then spawns `helper` with `args` in its
/// second (alongside a second call, still pending when the spawn runs).
fn root(f: &Family, args: serde_json::Value) -> Agent {
    let spawn = ScriptedTurn {
        tool_calls: vec![arbor_model::ScriptedToolCall {
            id: Some("spawn-1".to_owned()),
            name: "spawn_agent".to_owned(),
            arguments: args,
        }],
        ..ScriptedTurn::default()
    }
    .with_usage(10, 3);
    Agent::builder("lead")
        .provider(ScriptedProvider::new(Script::new([
            ScriptedTurn::text("noted").with_usage(5, 1),
            spawn,
            ScriptedTurn::text("done").with_usage(20, 1),
        ])))
        .dyn_tool(Arc::new(SpawnAgentTool::new(f.sup.delegator())))
        .build()
        .unwrap()
}

async fn run_two(f: &Family, lead: &Agent) -> arbor_core::Session {
    let mut session = f.sup.root_session(lead, |b| b).await.unwrap();
    let r = session
        .run("the code word is canary-7", RunOptions::default())
        .await
        .unwrap();
    assert_eq!(r.status, RunStatus::Succeeded);
    let r = session
        .run("now hand it over", RunOptions::default())
        .await
        .unwrap();
    assert_eq!(r.status, RunStatus::Succeeded, "{:?}", r.error);
    session
}

fn texts(messages: &[Message]) -> Vec<String> {
    messages
        .iter()
        .map(|m| match m {
            Message::User { content } => format!("user: {content}"),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                format!(
                    "assistant: {content}{}",
                    if tool_calls.is_empty() {
                        ""
                    } else {
                        " [calls]"
                    }
                )
            }
            Message::Tool(t) => format!("tool: {}", t.content),
            Message::System { content } => format!("system: {content}"),
        })
        .collect()
}

#[tokio::test]
async fn a_child_is_isolated_unless_its_spawn_forks() {
    let f = family(ContextPolicy::Allowed);
    let lead = root(&f, json!({"child_id": "helper", "input": "help"}));
    run_two(&f, &lead).await;
    let seen = f.seen.lock().unwrap().clone();
    assert_eq!(texts(&seen[0]), ["user: help"]);
}

#[tokio::test]
async fn a_forked_childs_first_request_carries_the_parents_conversation_once() {
    let f = family(ContextPolicy::Allowed);
    let lead = root(
        &f,
        json!({"child_id": "helper", "input": "help", "context": "all"}),
    );
    let session = run_two(&f, &lead).await;
    let seen = f.seen.lock().unwrap().clone();
    // The parent's conversation to the spawn (its pending call left out), redacted, then
    // the child's task.
    assert_eq!(
        texts(&seen[0]),
        [
            "user: the code word is [REDACTED]",
            "assistant: noted",
            "user: now hand it over",
            "user: help"
        ]
    );
    // Recorded once, as forked, not entry by entry.
    let store = f.sup.store().clone();
    let child = store
        .list_sessions(SessionQuery::Children(session.id()))
        .await
        .unwrap()
        .remove(0);
    let entries = store.transcript(child.id, 0, None).await.unwrap();
    let forked: Vec<_> = entries
        .iter()
        .filter_map(|e| match &e.kind {
            EntryKind::Forked { from, messages, .. } => Some((*from, *messages)),
            _ => None,
        })
        .collect();
    assert_eq!(forked, [(session.id(), 3)]);
    assert!(matches!(entries[0].kind, EntryKind::Forked { .. }));
    let copied = entries
        .iter()
        .filter(|e| matches!(&e.kind, EntryKind::Message { message: Message::Assistant { content, .. } } if content == "noted"))
        .count();
    assert_eq!(
        copied, 0,
        "the prefix is not copied into the child's transcript"
    );
    // The child's prompt tokens are its own; the parent's aggregate holds them once.
    let child = store.session(child.id).await.unwrap().unwrap();
    assert_eq!(child.own_usage.total_tokens, 42);
    let parent = store.session(session.id()).await.unwrap().unwrap();
    assert_eq!(parent.own_usage.total_tokens, 6 + 13 + 21);
    assert_eq!(parent.attributed_usage.total_tokens, 42);
    // Reopened (a follow-up, a restart): its model sees the same conversation, and the
    // fork is not recorded again.
    let agent = Agent::builder("helper")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            "x",
        )])))
        .redactor(SecretRedactor::new(["canary-7"]))
        .build()
        .unwrap();
    let reopened = agent.open_session(store.clone(), child.id).await.unwrap();
    assert_eq!(
        texts(reopened.messages()),
        [
            "user: the code word is [REDACTED]",
            "assistant: noted",
            "user: now hand it over",
            "user: help",
            "assistant: helped"
        ]
    );
}

#[tokio::test]
async fn last_turns_keeps_the_parents_latest_turns() {
    let f = family(ContextPolicy::Allowed);
    let spawn = ScriptedTurn {
        tool_calls: vec![arbor_model::ScriptedToolCall {
            id: None,
            name: "spawn_agent".to_owned(),
            arguments: json!({"child_id": "helper", "input": "help", "context": {"last_turns": 1}}),
        }],
        ..ScriptedTurn::default()
    };
    let lead = Agent::builder("lead")
        .provider(ScriptedProvider::new(Script::new([
            ScriptedTurn::text("noted"),
            ScriptedTurn::text("again"),
            spawn,
            ScriptedTurn::text("done"),
        ])))
        .dyn_tool(Arc::new(SpawnAgentTool::new(f.sup.delegator())))
        .build()
        .unwrap();
    let mut session = f.sup.root_session(&lead, |b| b).await.unwrap();
    for input in ["first", "second", "third"] {
        let r = session.run(input, RunOptions::default()).await.unwrap();
        assert_eq!(r.status, RunStatus::Succeeded, "{:?}", r.error);
    }
    let seen = f.seen.lock().unwrap().clone();
    assert_eq!(
        texts(&seen[0]),
        [
            "user: second",
            "assistant: again",
            "user: third",
            "user: help"
        ],
        "the last turn before the spawn, from the user message before it"
    );
}

#[tokio::test]
async fn a_catalog_entry_forbids_or_requires_a_fork() {
    // Forbidden: a spawn that asks is refused naming `context`, before anything is written.
    let f = family(ContextPolicy::Forbidden);
    let session = f
        .sup
        .root_session(&root(&f, json!({})), |b| b)
        .await
        .unwrap();
    let e = f
        .sup
        .delegate(
            DelegationRequest::new("helper", "help")
                .parent(session.as_ref())
                .context(ForkContext::All),
        )
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind(), e.field()),
        (CoreErrorKind::Validation, Some("context"))
    );
    assert_eq!(
        e.to_string(),
        "context: the catalog entry of helper forbids forking the parent's conversation"
    );
    assert!(
        f.sup
            .store()
            .list_sessions(SessionQuery::Children(session.id()))
            .await
            .unwrap()
            .is_empty()
    );
    // Required: a spawn that names none forks; one that asks for none is refused.
    let f = family(ContextPolicy::Required(ForkContext::All));
    let mut session = f
        .sup
        .root_session(&root(&f, json!({})), |b| b)
        .await
        .unwrap();
    session
        .run("the code word is canary-7", RunOptions::default())
        .await
        .unwrap();
    let e = f
        .sup
        .delegate(
            DelegationRequest::new("helper", "help")
                .parent(session.as_ref())
                .context(ForkContext::None),
        )
        .await
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        "context: the catalog entry of helper requires forking the parent's conversation"
    );
    f.sup
        .delegate(DelegationRequest::new("helper", "help").parent(session.as_ref()))
        .await
        .unwrap();
    let seen = f.seen.lock().unwrap().clone();
    assert_eq!(
        texts(&seen[0]),
        [
            "user: the code word is [REDACTED]",
            "assistant: noted",
            "user: help"
        ]
    );
}

/// A child forked from a forked child sees what its parent's model saw: the root's
/// conversation its parent was forked with, then the parent's own, to the spawn.
#[tokio::test]
async fn a_fork_of_a_forked_child_carries_both_conversations() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sub = Agent::builder("sub")
        .provider(Recording {
            inner: ScriptedProvider::new(
                Script::new([ScriptedTurn::text("sub done")]).repeat_last(true),
            ),
            seen: seen.clone(),
        })
        .build()
        .unwrap();
    let mid_script = Script::new([
        ScriptedTurn {
            tool_calls: vec![arbor_model::ScriptedToolCall {
                id: None,
                name: "spawn_agent".to_owned(),
                arguments: json!({"child_id": "sub", "input": "go deeper", "context": "all"}),
            }],
            ..ScriptedTurn::default()
        },
        ScriptedTurn::text("mid done"),
    ]);
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .child(ChildEntry::agent("sub", sub))
        .child(ChildEntry::new(
            "mid",
            arbor_core::supervisor::factory_fn(move |ctx| {
                let script = mid_script.clone();
                async move {
                    Agent::builder("mid")
                        .provider(ScriptedProvider::new(script))
                        .dyn_tool(Arc::new(SpawnAgentTool::new(ctx.delegator.clone())))
                        .build()
                }
            }),
        ))
        .build()
        .unwrap();
    let lead = Agent::builder("lead")
        .provider(ScriptedProvider::new(Script::new([
            ScriptedTurn {
                tool_calls: vec![arbor_model::ScriptedToolCall {
                    id: None,
                    name: "spawn_agent".to_owned(),
                    arguments: json!({"child_id": "mid", "input": "plan", "context": "all"}),
                }],
                ..ScriptedTurn::default()
            },
            ScriptedTurn::text("lead done"),
        ])))
        .dyn_tool(Arc::new(SpawnAgentTool::new(sup.delegator())))
        .build()
        .unwrap();
    let mut session = sup.root_session(&lead, |b| b).await.unwrap();
    let r = session
        .run("the root's own task", RunOptions::default())
        .await
        .unwrap();
    assert_eq!(r.status, RunStatus::Succeeded, "{:?}", r.error);
    let seen = seen.lock().unwrap().clone();
    assert!(!seen.is_empty(), "sub never ran");
    assert_eq!(
        texts(&seen[0]),
        ["user: the root's own task", "user: plan", "user: go deeper"],
        "the root's conversation, then mid's (to its spawn), then sub's task"
    );
}
