//! The HTTP providers against a local server replaying recorded streams: text, parallel
//! tool calls and usage; errors classified; retries bounded and honouring retry-after;
//! truncated and hung streams; preflights; and the key never shown.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use arbor_model::http::{
    AnthropicConfig, AnthropicProvider, ApiKey, OpenAiConfig, OpenAiProvider, RetryPolicy, Timeouts,
};
use arbor_model::testing::{Canned, ReplayServer};
use arbor_model::{
    FinishReason, ModelError, ModelErrorKind, ModelEvent, ModelProvider, ModelRequest,
};
use arbor_protocol::{Message, Usage};
use futures::StreamExt;

async fn serve(answers: Vec<Canned>) -> ReplayServer {
    ReplayServer::start(answers).await.unwrap()
}

const KEY: &str = "sk-arbor-SECRET-7f3a";

fn openai(url: &str, retry: RetryPolicy) -> OpenAiProvider {
    let mut c = OpenAiConfig::new(format!("{url}/v1"));
    c.api_key = Some(ApiKey::new(KEY));
    c.retry = retry;
    c.timeouts = Timeouts {
        idle: Duration::from_millis(300),
        ..Timeouts::default()
    };
    OpenAiProvider::new(c).unwrap()
}

fn fast_retry(n: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries: n,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(50),
        max_total: Duration::from_secs(5),
    }
}

async fn collect(p: &dyn ModelProvider) -> Result<Vec<ModelEvent>, ModelError> {
    let messages = vec![Message::user("hi")];
    let req = ModelRequest::new("gpt-4o-mini", &messages).system(Some("be brief"));
    let mut stream = p.stream(req).await?;
    let mut out = Vec::new();
    while let Some(e) = stream.next().await {
        out.push(e?);
    }
    Ok(out)
}

const TEXT: &[u8] = include_bytes!("fixtures/openai/text.sse");
const TOOLS: &[u8] = include_bytes!("fixtures/openai/parallel_tools.sse");

#[tokio::test]
async fn text_and_tool_calls_stream_with_usage_and_the_key_as_a_bearer() {
    let server = serve(vec![Canned::sse(TEXT), Canned::sse(TOOLS)]).await;
    let p = openai(&server.url, RetryPolicy::none());
    let events = collect(&p).await.unwrap();
    assert_eq!(events[0], ModelEvent::TextDelta("Hello".into()));
    assert_eq!(
        events.last(),
        Some(&ModelEvent::Finished(FinishReason::Stop))
    );
    // The model the server says answered, once, just before the end.
    assert_eq!(
        events[events.len() - 2],
        ModelEvent::ResponseModel("gpt-4o-mini-2024-07-18".into())
    );
    let events = collect(&p).await.unwrap();
    let calls = events
        .iter()
        .filter(|e| matches!(e, ModelEvent::ToolCall(_)))
        .count();
    assert_eq!(calls, 2);
    assert!(events.contains(&ModelEvent::Usage(Usage::new(82, 48))));
    let r = &server.requests()[0];
    assert_eq!(
        (r.method.as_str(), r.path.as_str()),
        ("POST", "/v1/chat/completions")
    );
    assert_eq!(
        r.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert_eq!(r.header("accept"), Some("text/event-stream"));
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(body["stream"], true);
    assert_eq!(body["messages"][0]["content"], "be brief");
    // The key never shows in what a host prints.
    assert!(!format!("{p:?}").contains(KEY));
}

#[tokio::test]
async fn a_refused_key_fails_at_once_with_the_providers_message() {
    let server = serve(vec![Canned::json(
        401,
        r#"{"error":{"message":"Incorrect API key provided: sk-ar***7f3a.","type":"invalid_request_error","code":"invalid_api_key"}}"#,
    )])
    .await;
    let e = collect(&openai(&server.url, fast_retry(3)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ModelErrorKind::Auth);
    assert_eq!(
        e.to_string(),
        "openai: HTTP 401: Incorrect API key provided: sk-ar***7f3a."
    );
    assert!(!e.to_string().contains(KEY));
    assert_eq!(server.requests().len(), 1, "not retried");
}

#[tokio::test]
async fn rate_limits_are_retried_after_the_wait_asked_and_usage_counts_once() {
    let limited = || {
        Canned::json(429, r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#)
            .header("retry-after-ms", "20")
    };
    let server = serve(vec![limited(), limited(), Canned::sse(TEXT)]).await;
    let started = std::time::Instant::now();
    let events = collect(&openai(&server.url, fast_retry(4))).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(40));
    assert_eq!(server.requests().len(), 3);
    let usages = events
        .iter()
        .filter(|e| matches!(e, ModelEvent::Usage(_)))
        .count();
    assert_eq!(usages, 1);

    // A wait longer than the retry budget fails at once, with the provider's message.
    let server2 = serve(vec![
        Canned::json(
            429,
            r#"{"error":{"message":"Please wait an hour","type":"requests"}}"#,
        )
        .header("retry-after", "3600"),
    ])
    .await;
    let e = collect(&openai(&server2.url, fast_retry(4)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ModelErrorKind::RateLimited);
    assert_eq!(e.to_string(), "openai: rate limited: Please wait an hour");
    assert_eq!(server2.requests().len(), 1);

    // A spent quota is never retried.
    let server = serve(vec![Canned::json(429, r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#)]).await;
    let e = collect(&openai(&server.url, fast_retry(4)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ModelErrorKind::RateLimited);
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn server_errors_are_retried_a_bounded_number_of_times() {
    let down = || Canned::json(503, "<html><body>503 Service Unavailable</body></html>");
    let server = serve(vec![down(), down(), down(), down()]).await;
    let e = collect(&openai(&server.url, fast_retry(2)))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ModelErrorKind::Server);
    assert_eq!(
        e.to_string(),
        "openai: HTTP 503: <html><body>503 Service Unavailable</body></html>"
    );
    assert_eq!(server.requests().len(), 3, "the first try and two retries");
    // A bad request is not retried.
    let server = serve(vec![Canned::json(
        400,
        r#"{"error":{"message":"Invalid parameter: messages","type":"invalid_request_error"}}"#,
    )])
    .await;
    let e = collect(&openai(&server.url, fast_retry(2)))
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind(), server.requests().len()),
        (ModelErrorKind::BadRequest, 1)
    );
}

#[tokio::test]
async fn truncated_and_hung_streams_fail_with_their_reason() {
    let cut: Vec<u8> = TEXT[..TEXT.len() / 2].to_vec();
    let server = serve(vec![Canned::sse(&cut)]).await;
    let e = collect(&openai(&server.url, RetryPolicy::none()))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ModelErrorKind::Stream);

    let mut hung = Canned::sse(&TEXT[..200]);
    hung.hang = true;
    let server = serve(vec![hung]).await;
    let started = std::time::Instant::now();
    let e = collect(&openai(&server.url, RetryPolicy::none()))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ModelErrorKind::Timeout);
    assert_eq!(e.to_string(), "openai: timed out: no data for 0.3 s");
    assert!(started.elapsed() < Duration::from_secs(5));

    // Nothing listening: a clear error, not a hang.
    let nobody = openai("http://127.0.0.1:9", RetryPolicy::none());
    let e = collect(&nobody).await.unwrap_err();
    assert_eq!(e.kind(), ModelErrorKind::Connection);
    assert!(
        e.to_string()
            .starts_with("openai: cannot reach the provider: Connection refused"),
        "{e}"
    );
}

#[tokio::test]
async fn anthropic_streams_tool_use_and_sends_its_headers() {
    let server = serve(vec![Canned::sse(include_bytes!(
        "fixtures/anthropic/tools.sse"
    ))])
    .await;
    let mut c = AnthropicConfig::new(&server.url);
    c.api_key = Some(ApiKey::new(KEY));
    let p = AnthropicProvider::new(c).unwrap();
    let events = collect(&p).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ModelEvent::ToolCall(c) if c.name == "get_weather"))
    );
    assert_eq!(
        events[events.len() - 2],
        ModelEvent::ResponseModel("claude-haiku-4-5-20251001".into())
    );
    assert!(events.contains(&ModelEvent::Usage(Usage {
        input_tokens: 6145,
        output_tokens: 47,
        total_tokens: 6192,
        cache_read_tokens: 4096,
        cache_write_tokens: 1200
    })));
    let r = &server.requests()[0];
    assert_eq!(r.path, "/v1/messages");
    assert_eq!(r.header("x-api-key"), Some(KEY));
    assert_eq!(r.header("anthropic-version"), Some("2023-06-01"));
    let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    // The system prompt goes as a text block with a cache breakpoint (tests/prompt_cache.rs).
    assert_eq!(
        (
            body["system"][0]["text"].as_str(),
            body["max_tokens"].as_u64()
        ),
        (Some("be brief"), Some(4096))
    );
}

#[tokio::test]
async fn preflight_checks_the_model_and_the_key() {
    let server = serve(vec![
        Canned::json(200, r#"{"id":"gpt-4o-mini","object":"model"}"#),
        Canned::json(404, r#"{"error":{"message":"The model `gpt-nope` does not exist","code":"model_not_found"}}"#),
        Canned::json(200, r#"{"object":"list","data":[{"id":"gpt-4o-mini"},{"id":"gpt-4o"}]}"#),
        Canned::json(401, r#"{"error":{"message":"Incorrect API key provided"}}"#),
    ])
    .await;
    let p = openai(&server.url, RetryPolicy::none());
    p.preflight("gpt-4o-mini").await.unwrap();
    // A passed check is remembered: no second request.
    p.preflight("gpt-4o-mini").await.unwrap();
    let e = p.preflight("gpt-nope").await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "model \"gpt-nope\" is unavailable: openai does not offer it (it offers: gpt-4o-mini, gpt-4o)"
    );
    let e = p.preflight("gpt-4o").await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "model \"gpt-4o\" is unavailable: openai refused the key: Incorrect API key provided"
    );
    let paths: Vec<String> = server.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(
        paths,
        [
            "/v1/models/gpt-4o-mini",
            "/v1/models/gpt-nope",
            "/v1/models",
            "/v1/models/gpt-4o"
        ]
    );

    let server = serve(vec![
        Canned::json(
            404,
            r#"{"type":"error","error":{"type":"not_found_error","message":"model: claude-nope"}}"#,
        ),
        Canned::json(
            200,
            r#"{"data":[{"type":"model","id":"claude-a"}],"has_more":false}"#,
        ),
    ])
    .await;
    let p = AnthropicProvider::new(AnthropicConfig::new(&server.url)).unwrap();
    let e = p.preflight("claude-nope").await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "model \"claude-nope\" is unavailable: anthropic does not offer it (it offers: claude-a)"
    );
    let paths: Vec<String> = server.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/v1/models/claude-nope", "/v1/models?limit=1000"]);
}

#[tokio::test]
async fn list_models_reads_the_models_route() {
    let server = serve(vec![
        Canned::json(
            200,
            r#"{"object":"list","data":[{"id":"gpt-4o-mini"},{"id":"o4-mini"}]}"#,
        ),
        Canned::json(404, r#"{"error":{"message":"no such route"}}"#),
        Canned::json(401, r#"{"error":{"message":"Incorrect API key provided"}}"#),
    ])
    .await;
    let p = openai(&server.url, RetryPolicy::none());
    assert_eq!(
        p.list_models().await.unwrap(),
        Some(vec!["gpt-4o-mini".to_owned(), "o4-mini".to_owned()])
    );
    // A server without the route cannot list: not an error, no list.
    assert_eq!(p.list_models().await.unwrap(), None);
    let e = p.list_models().await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "openai: HTTP 401: Incorrect API key provided"
    );
}

#[tokio::test]
async fn dropping_a_call_during_its_retry_wait_sends_nothing_more() {
    let limited =
        Canned::json(429, r#"{"error":{"message":"slow down"}}"#).header("retry-after-ms", "300");
    let server = serve(vec![limited, Canned::sse(TEXT)]).await;
    let p = openai(&server.url, fast_retry(4));
    let call = collect(&p);
    // The first answer comes at once; the call then waits 300 ms to retry. Give up before.
    assert!(
        tokio::time::timeout(Duration::from_millis(150), call)
            .await
            .is_err()
    );
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(server.requests().len(), 1, "the retry never went out");
}

#[tokio::test]
async fn a_success_that_is_not_a_stream_and_an_echoed_key_are_reported_cleanly() {
    let server = serve(vec![
        Canned::json(200, r#"{"error":{"message":"gateway says no"}}"#),
        Canned::json(
            401,
            &format!(r#"{{"error":{{"message":"bad key {KEY}"}}}}"#),
        ),
    ])
    .await;
    let p = openai(&server.url, RetryPolicy::none());
    let e = collect(&p).await.unwrap_err();
    assert_eq!(
        e.to_string(),
        "provider error: openai: expected an event stream, got: gateway says no"
    );
    let e = collect(&p).await.unwrap_err();
    assert_eq!(e.to_string(), "openai: HTTP 401: bad key ***");
}

#[tokio::test]
async fn an_overload_inside_the_stream_before_any_event_is_retried() {
    let overloaded = b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";
    let server = serve(vec![
        Canned::sse(overloaded),
        Canned::sse(include_bytes!("fixtures/anthropic/tools.sse")),
    ])
    .await;
    let mut c = AnthropicConfig::new(&server.url);
    c.retry = fast_retry(2);
    let p = AnthropicProvider::new(c).unwrap();
    let events = collect(&p).await.unwrap();
    assert_eq!(server.requests().len(), 2);
    let usages = events
        .iter()
        .filter(|e| matches!(e, ModelEvent::Usage(_)))
        .count();
    assert_eq!(usages, 1, "the failed attempt's usage is not counted");
    // Out of retries: the overload is the error.
    let server = serve(vec![Canned::sse(overloaded)]).await;
    let mut c = AnthropicConfig::new(&server.url);
    c.retry = RetryPolicy::none();
    let e = collect(&AnthropicProvider::new(c).unwrap())
        .await
        .unwrap_err();
    assert_eq!(
        e,
        ModelError::Provider {
            message: "overloaded_error: Overloaded".into()
        }
    );
}

#[tokio::test]
async fn a_turn_past_its_cap_ends_with_too_large_and_is_not_retried() {
    let server = serve(vec![Canned::sse(TOOLS), Canned::sse(TOOLS)]).await;
    let mut c = OpenAiConfig::new(format!("{}/v1", server.url));
    c.retry = fast_retry(2);
    c.max_turn_bytes = 230;
    let e = collect(&OpenAiProvider::new(c).unwrap()).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.to_string()),
        (
            ModelErrorKind::TooLarge,
            "answer too large: the arguments of tool call `get_weather` took the turn past 230 \
             bytes of text and tool calls"
                .to_owned()
        )
    );
    assert_eq!(server.requests().len(), 1);

    // One server-sent event past 1 MiB is an answer too large as well.
    let huge = format!(
        "data: {}\n\n",
        "x".repeat(arbor_model::sse::MAX_EVENT_BYTES + 1)
    );
    let server = serve(vec![Canned::sse(huge.as_bytes())]).await;
    let e = collect(&openai(&server.url, RetryPolicy::none()))
        .await
        .unwrap_err();
    assert_eq!(
        e,
        ModelError::TooLarge {
            limit: 1024 * 1024,
            message: "an event exceeds 1048576 bytes".into()
        }
    );
}
