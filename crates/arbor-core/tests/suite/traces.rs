//! The GenAI spans of a tree, read back by a `tracing` layer as an OpenTelemetry bridge would
//! see them: the shape (each child's `invoke_agent` under its parent's `execute_tool
//! spawn_agent`), the attributes, and own usage summing to the root's aggregate.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use arbor_core::process::telemetry::{TARGET, attr};
use arbor_model::ScriptedTurn;
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

use super::nested_support::{opts, root, tree};

#[derive(Debug, Clone, Default)]
struct SpanRec {
    parent: Option<usize>,
    fields: BTreeMap<String, String>,
}

impl SpanRec {
    fn name(&self) -> &str {
        self.fields.get("otel.name").map_or("", String::as_str)
    }
    fn get(&self, key: &str) -> Option<&str> {
        self.fields.get(key).map(String::as_str)
    }
    fn tokens(&self, key: &str) -> u64 {
        self.get(key).map_or(0, |v| v.parse().unwrap())
    }
}

/// Every span of [`TARGET`], indexed in creation order (span ids are reused; indexes not).
#[derive(Debug, Clone, Default)]
struct Spans(Arc<Mutex<Vec<SpanRec>>>);

struct Index(usize);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_owned(), value.to_string());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(
            field.name().to_owned(),
            format!("{value:?}").trim_matches('"').to_owned(),
        );
    }
}

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if attrs.metadata().target() != TARGET {
            return;
        }
        let span = ctx.span(id).unwrap();
        let parent = span
            .parent()
            .and_then(|p| p.extensions().get::<Index>().map(|i| i.0));
        let mut rec = SpanRec {
            parent,
            fields: BTreeMap::new(),
        };
        attrs.record(&mut Fields(&mut rec.fields));
        let mut all = self.0.lock().unwrap();
        span.extensions_mut().insert(Index(all.len()));
        all.push(rec);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(i) = ctx
            .span(id)
            .and_then(|s| s.extensions().get::<Index>().map(|i| i.0))
        else {
            return;
        };
        values.record(&mut Fields(&mut self.0.lock().unwrap()[i].fields));
    }
}

fn spawn(child: &str, mode: &str) -> ScriptedTurn {
    ScriptedTurn::tool_call(
        "spawn_agent",
        json!({"child_id": child, "name": child, "input": "go", "mode": mode}),
    )
}

#[tokio::test]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
async fn a_tree_is_one_trace_with_each_child_under_its_spawn_call_and_own_usage_summing_up() {
    let spans = Spans::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    let failing = ScriptedTurn {
        fail: Some("model unavailable".into()),
        ..ScriptedTurn::default()
    };
    let t = tree(
        vec![
            (
                "worker",
                vec![ScriptedTurn::text("worked").with_usage(10, 1)],
            ),
            (
                "bg",
                vec![ScriptedTurn::text("in the background").with_usage(20, 2)],
            ),
            ("bad", vec![failing]),
        ],
        None,
    );
    let mut root = root(
        &t,
        vec![
            spawn("worker", "sync").with_usage(100, 1),
            spawn("bg", "async").with_usage(200, 2),
            spawn("bad", "sync").with_usage(300, 3),
            // A model takes a while: the background child runs meanwhile (sync children run
            // inside the root's run, so with instant turns nothing else would).
            ScriptedTurn::text("done")
                .with_usage(400, 4)
                .with_delay(std::time::Duration::from_millis(50)),
        ],
    )
    .await;
    t.sup.attach(&mut root);
    let r = root.run("go", opts(&t)).await.unwrap();
    assert_eq!(r.text, "done");
    t.sup.shutdown().await;

    let all = spans.0.lock().unwrap().clone();
    let find = |name: &str| -> (usize, &SpanRec) {
        let found: Vec<_> = all
            .iter()
            .enumerate()
            .filter(|(_, s)| s.name() == name)
            .collect();
        assert_eq!(found.len(), 1, "one {name:?} in {all:#?}");
        found[0]
    };
    let (root_i, root_span) = find("invoke_agent root");
    assert_eq!(root_span.parent, None, "the root's run is the trace's root");
    let conversation = root.id().to_string();
    for s in &all {
        assert_eq!(
            s.get(attr::CONVERSATION),
            Some(conversation.as_str()),
            "{s:?}"
        );
    }
    assert_eq!(root_span.get(attr::OPERATION), Some("invoke_agent"));
    assert_eq!(root_span.get(attr::PROVIDER), Some("scripted"));
    assert_eq!(root_span.get(attr::AGENT_ID), Some(conversation.as_str()));
    assert_eq!(root_span.get(attr::RUN_STATUS), Some("succeeded"));
    assert_eq!(root_span.get(attr::DEPTH), Some("0"));
    assert_eq!(root_span.get("otel.kind"), Some("internal"));
    // Four provider turns, each a `chat` span under the root's run with its usage.
    let chats: Vec<_> = all
        .iter()
        .filter(|s| s.parent == Some(root_i) && s.get(attr::OPERATION) == Some("chat"))
        .collect();
    assert_eq!(chats.len(), 4, "{all:#?}");
    assert_eq!(chats[0].get("otel.kind"), Some("client"));
    assert_eq!(chats[0].get(attr::FINISH_REASONS), Some("tool_calls"));
    assert_eq!(chats[3].get(attr::FINISH_REASONS), Some("stop"));
    assert_eq!(chats[2].tokens(attr::INPUT_TOKENS), 300);

    for (child, mode) in [
        ("worker", "return_to_caller"),
        ("bg", "pass_control"),
        ("bad", "return_to_caller"),
    ] {
        let (tool_i, tool) = find(&format!("execute_tool spawn_agent {child}"));
        assert_eq!(tool.parent, Some(root_i), "{child}");
        assert_eq!(tool.get(attr::TOOL_NAME), Some("spawn_agent"));
        assert_eq!(tool.get(attr::TRANSFER_TARGET), Some(child));
        assert_eq!(tool.get(attr::TRANSFER_MODE), Some(mode));
        assert_eq!(tool.get(attr::AGENT_NAME), Some("root"), "the source agent");
        let (child_i, run) = find(&format!("invoke_agent {child}"));
        assert_eq!(
            run.parent,
            Some(tool_i),
            "{child}'s run is under its spawn call"
        );
        assert_eq!(run.get(attr::DEPTH), Some("1"));
        assert_eq!(run.get(attr::PARENT_ID), Some(conversation.as_str()));
        assert!(
            all.iter()
                .any(|s| s.parent == Some(child_i) && s.name() == "chat scripted")
        );
    }
    let (_, bad) = find("invoke_agent bad");
    assert_eq!(bad.get(attr::RUN_STATUS), Some("failed"));
    assert_eq!(bad.get(attr::ERROR_TYPE), Some("provider_error"));
    assert_eq!(bad.get("otel.status_code"), Some("error"));
    let (_, bad_call) = find("execute_tool spawn_agent bad");
    assert_eq!(bad_call.get(attr::ERROR_TYPE), Some("tool_error"));
    let (_, worker_call) = find("execute_tool spawn_agent worker");
    assert_eq!(worker_call.get(attr::ERROR_TYPE), None);

    // Own usage on the agent spans, and the chat spans, each sum to the root's aggregate.
    let stored = t.store.session(root.id()).await.unwrap().unwrap();
    let aggregate = stored.own_usage + stored.attributed_usage;
    let sum = |op: &str, key: &str| -> u64 {
        all.iter()
            .filter(|s| s.get(attr::OPERATION) == Some(op))
            .map(|s| s.tokens(key))
            .sum()
    };
    assert_eq!(aggregate.input_tokens, 1030);
    for op in ["invoke_agent", "chat"] {
        assert_eq!(sum(op, attr::INPUT_TOKENS), aggregate.input_tokens, "{op}");
        assert_eq!(
            sum(op, attr::OUTPUT_TOKENS),
            aggregate.output_tokens,
            "{op}"
        );
    }
    assert_eq!(root_span.tokens(attr::INPUT_TOKENS), 1000, "the root's own");
    assert!(
        root_span.tokens(attr::SUBTREE_INPUT_TOKENS) >= 1010,
        "{root_span:?}"
    );
}

/// Content is off by default; with the opt-in, tool arguments and results and the model's
/// input and output are on the spans, through the agent's redactor.
#[tokio::test]
async fn content_is_captured_only_on_opt_in_and_always_redacted() {
    let spans = Spans::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    let agent = || {
        arbor_core::Agent::builder("writer")
            .system("the key is s3cret")
            .provider(arbor_model::ScriptedProvider::new(
                arbor_model::Script::new([
                    ScriptedTurn::tool_call("echo", json!({"text": "say s3cret"})),
                    ScriptedTurn::text("said s3cret"),
                ]),
            ))
            .tool(arbor_core::builtin::Echo)
            .redactor(arbor_core::SecretRedactor::new(["s3cret"]))
            .build()
            .unwrap()
    };
    let content = [
        attr::TOOL_ARGUMENTS,
        attr::TOOL_RESULT,
        attr::SYSTEM_INSTRUCTIONS,
        attr::INPUT_MESSAGES,
        attr::OUTPUT_MESSAGES,
    ];
    let mut s = agent().session().create().await.unwrap();
    s.run("go", arbor_core::RunOptions::default())
        .await
        .unwrap();
    {
        let all = spans.0.lock().unwrap();
        assert!(!all.is_empty());
        for span in all.iter() {
            for key in content {
                assert_eq!(span.get(key), None, "off by default: {span:?}");
            }
        }
    }
    spans.0.lock().unwrap().clear();

    arbor_core::process::telemetry::capture_content(true);
    let mut s = agent().session().create().await.unwrap();
    s.run("go", arbor_core::RunOptions::default())
        .await
        .unwrap();
    arbor_core::process::telemetry::capture_content(false);
    let all = spans.0.lock().unwrap().clone();
    let call = all
        .iter()
        .find(|s| s.name() == "execute_tool echo")
        .unwrap();
    assert_eq!(
        call.get(attr::TOOL_ARGUMENTS),
        Some(r#"{"text":"say [REDACTED]"}"#)
    );
    assert_eq!(call.get(attr::TOOL_RESULT), Some("say [REDACTED]"));
    let chats: Vec<_> = all
        .iter()
        .filter(|s| s.get(attr::OPERATION) == Some("chat"))
        .collect();
    assert_eq!(chats.len(), 2);
    assert!(
        chats[0]
            .get(attr::SYSTEM_INSTRUCTIONS)
            .unwrap()
            .contains("the key is [REDACTED]")
    );
    assert!(chats[0].get(attr::INPUT_MESSAGES).unwrap().contains("go"));
    assert!(
        chats[1]
            .get(attr::OUTPUT_MESSAGES)
            .unwrap()
            .contains("said [REDACTED]")
    );
    for span in &all {
        for (k, v) in &span.fields {
            assert!(!v.contains("s3cret"), "{k} leaks the secret: {v}");
        }
    }
}

/// A provider that names the model that answered: the `chat` span says so.
#[derive(Debug)]
struct Named;

#[async_trait::async_trait]
impl arbor_model::ModelProvider for Named {
    fn name(&self) -> &str {
        "named"
    }
    async fn stream(
        &self,
        _request: arbor_model::ModelRequest<'_>,
    ) -> Result<arbor_model::ModelStream, arbor_model::ModelError> {
        use arbor_model::{FinishReason, ModelEvent};
        let events = vec![
            Ok(ModelEvent::TextDelta("hi".into())),
            Ok(ModelEvent::ResponseModel("m-2026-12".into())),
            Ok(ModelEvent::Finished(FinishReason::Stop)),
        ];
        Ok(Box::pin(futures::stream::iter(events)))
    }
}

#[tokio::test]
async fn the_chat_span_names_the_model_that_answered() {
    let spans = Spans::default();
    let _guard =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    let agent = arbor_core::Agent::builder("greeter")
        .model("m")
        .provider(Named)
        .build()
        .unwrap();
    let mut s = agent.session().create().await.unwrap();
    s.run("go", arbor_core::RunOptions::default())
        .await
        .unwrap();
    let all = spans.0.lock().unwrap().clone();
    let chat = all.iter().find(|s| s.name() == "chat m").unwrap();
    assert_eq!(chat.get(attr::REQUEST_MODEL), Some("m"));
    assert_eq!(chat.get(attr::RESPONSE_MODEL), Some("m-2026-12"));
    assert_eq!(chat.get(attr::PROVIDER), Some("named"));
}
