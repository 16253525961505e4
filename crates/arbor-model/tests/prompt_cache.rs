//! Anthropic prompt caching against a local server: with `cache = auto` (the default) the
//! request carries `cache_control: {"type": "ephemeral"}` on the last tool, on the system
//! prompt (sent as one text block) and on the last block of the last message, and nowhere
//! else; with `cache = off` none. The body is checked byte for byte against the documented
//! format (<https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching>), and the
//! cache reads and writes the server reports come back in the usage.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use arbor_model::http::{AnthropicConfig, AnthropicProvider};
use arbor_model::testing::{Canned, ReplayServer};
use arbor_model::{Cache, ModelEvent, ModelProvider, ModelRequest, ToolSpec};
use arbor_protocol::{Message, ToolCall, ToolResult, Usage};
use futures::StreamExt;
use serde_json::json;

const STREAM: &[u8] = include_bytes!("fixtures/anthropic/tools.sse");

fn tool(name: &str) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: format!("{name} things"),
        parameters: json!({"type": "object", "properties": {}}),
    }
}

/// The body the provider sent for a second turn of a tool loop, and the usage it read.
async fn sent(cache: Cache) -> (String, Usage) {
    let server = ReplayServer::start(vec![Canned::sse(STREAM)])
        .await
        .unwrap();
    let mut c = AnthropicConfig::new(&server.url);
    c.cache = cache;
    let p = AnthropicProvider::new(c).unwrap();
    let messages = vec![
        Message::user("Weather in Paris?"),
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "toolu_1".into(),
                name: "get_weather".into(),
                arguments: json!({"city": "Paris"}),
            }],
        },
        Message::Tool(ToolResult {
            call_id: "toolu_1".into(),
            name: "get_weather".into(),
            content: "18C".into(),
            is_error: false,
        }),
    ];
    let tools = [tool("get_weather"), tool("get_time")];
    let request = ModelRequest::new("claude-haiku-4-5", &messages)
        .system(Some("You are brief."))
        .tools(&tools);
    let mut stream = p.stream(request).await.unwrap();
    let mut usage = None;
    while let Some(e) = stream.next().await {
        if let ModelEvent::Usage(u) = e.unwrap() {
            usage = Some(u);
        }
    }
    (server.requests()[0].body.clone(), usage.unwrap())
}

#[tokio::test]
async fn auto_sets_three_breakpoints_in_the_documented_places() {
    let (body, usage) = sent(Cache::Auto).await;
    let expected = json!({
        "max_tokens": 4096,
        "messages": [
            {"content": [{"text": "Weather in Paris?", "type": "text"}], "role": "user"},
            {"content": [{"id": "toolu_1", "input": {"city": "Paris"}, "name": "get_weather",
                          "type": "tool_use"}], "role": "assistant"},
            {"content": [{"cache_control": {"type": "ephemeral"}, "content": "18C",
                          "tool_use_id": "toolu_1", "type": "tool_result"}], "role": "user"}
        ],
        "model": "claude-haiku-4-5",
        "stream": true,
        "system": [{"cache_control": {"type": "ephemeral"}, "text": "You are brief.",
                    "type": "text"}],
        "tools": [
            {"description": "get_weather things", "input_schema": {"properties": {},
             "type": "object"}, "name": "get_weather"},
            {"cache_control": {"type": "ephemeral"}, "description": "get_time things",
             "input_schema": {"properties": {}, "type": "object"}, "name": "get_time"}
        ]
    });
    assert_eq!(body, serde_json::to_string(&expected).unwrap());
    assert_eq!(body.matches("\"cache_control\"").count(), 3);
    // What the cache read and wrote, as the server reported it.
    assert_eq!(
        (
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.input_tokens
        ),
        (4096, 1200, 849 + 4096 + 1200)
    );
}

#[tokio::test]
async fn off_sets_none_and_sends_the_system_prompt_as_text() {
    let (body, _) = sent(Cache::Off).await;
    assert!(!body.contains("cache_control"), "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(body["system"], "You are brief.");
}
