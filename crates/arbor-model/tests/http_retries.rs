//! Retries of the HTTP providers against a local server: one attempt count and one wait
//! budget per turn, and connections the server closes before answering.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use arbor_model::testing::{Canned, ReplayServer};
use arbor_model::{FinishReason, ModelErrorKind, ModelEvent, ModelProvider, ModelRequest};
use arbor_protocol::Message;
use futures::StreamExt;

mod common;
use common::{anthropic, collect, openai, retry};

const TEXT: &[u8] = include_bytes!("fixtures/openai/text.sse");
const OVERLOADED: &[u8] = b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n";

fn down(retry_after_ms: u64) -> Canned {
    Canned::json(503, r#"{"error":{"message":"busy"}}"#)
        .header("retry-after-ms", &retry_after_ms.to_string())
}

#[tokio::test]
async fn a_turn_has_one_attempt_count_and_one_wait_budget() {
    // 503, 503, then an overload inside the stream, over and over: with two retries the
    // turn sends three requests, whichever way each one failed.
    let mut answers = Vec::new();
    for _ in 0..4 {
        answers.extend([down(1), down(1), Canned::sse(OVERLOADED)]);
    }
    let server = ReplayServer::start(answers).await.unwrap();
    let e = collect(&anthropic(&server.url, retry(2, 5000)))
        .await
        .unwrap_err();
    assert_eq!(server.requests().len(), 3);
    assert_eq!(
        e.to_string(),
        "provider error: overloaded_error: Overloaded"
    );

    // A 100 ms wait asked twice does not fit a 150 ms budget, even with an overload (at
    // most 20 ms of backoff) between: the turn gives up after the second 503.
    let mut answers = Vec::new();
    for _ in 0..6 {
        answers.extend([down(100), Canned::sse(OVERLOADED)]);
    }
    let server = ReplayServer::start(answers).await.unwrap();
    let started = std::time::Instant::now();
    let e = collect(&anthropic(&server.url, retry(10, 150)))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert_eq!(server.requests().len(), 3);
    assert_eq!(
        (e.kind(), e.to_string()),
        (
            ModelErrorKind::Server,
            "anthropic: HTTP 503: busy".to_owned()
        )
    );
    assert!(took < Duration::from_millis(150 + 250), "{took:?}");
}

#[tokio::test]
async fn a_connection_closed_before_the_answer_is_retried_and_named() {
    let server = ReplayServer::start(vec![Canned::closed(), Canned::closed(), Canned::sse(TEXT)])
        .await
        .unwrap();
    let events = collect(&openai(&server.url, retry(2, 5000))).await.unwrap();
    assert_eq!(server.requests().len(), 3);
    assert_eq!(events[0], ModelEvent::TextDelta("Hello".into()));
    assert_eq!(
        events.last(),
        Some(&ModelEvent::Finished(FinishReason::Stop))
    );

    // Closed every time: the retries run out and the error says what happened.
    let server = ReplayServer::start(vec![Canned::closed(); 3])
        .await
        .unwrap();
    let e = collect(&openai(&server.url, retry(2, 5000)))
        .await
        .unwrap_err();
    assert_eq!(server.requests().len(), 3);
    assert_eq!(
        (e.kind(), e.to_string()),
        (
            ModelErrorKind::Connection,
            "openai: connection closed before the response".to_owned()
        )
    );
}

/// An event stream in chunked encoding, cut after `parts` (the connection then closes in
/// the middle of the body).
fn cut_chunked(parts: &[&[u8]]) -> Canned {
    let mut c = Canned::sse(b"").header("transfer-encoding", "chunked");
    c.chunks = parts
        .iter()
        .map(|p| [format!("{:x}\r\n", p.len()).as_bytes(), p, b"\r\n"].concat())
        .chain([b"40\r\ndata: {\"choi".to_vec()])
        .collect();
    c
}

#[tokio::test]
async fn a_connection_lost_during_the_stream_is_retried_only_before_any_event() {
    let hello = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hello\"},\"finish_reason\":null}]}\n\n";
    // Before any event: nothing was shown, so the turn is tried again.
    let server = ReplayServer::start(vec![cut_chunked(&[]), Canned::sse(TEXT)])
        .await
        .unwrap();
    let events = collect(&openai(&server.url, retry(2, 5000))).await.unwrap();
    assert_eq!(server.requests().len(), 2);
    assert_eq!(events[0], ModelEvent::TextDelta("Hello".into()));
    // After one: the text is out, so the break is final.
    let server = ReplayServer::start(vec![cut_chunked(&[hello]), Canned::sse(TEXT)])
        .await
        .unwrap();
    let p = openai(&server.url, retry(2, 5000));
    let messages = vec![Message::user("hi")];
    let req = ModelRequest::new("m", &messages);
    let items: Vec<_> = p.stream(req).await.unwrap().collect().await;
    assert_eq!(server.requests().len(), 1);
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(items[0], Ok(ModelEvent::TextDelta("Hello".into())));
    let e = items[1].clone().unwrap_err();
    assert_eq!(
        (e.kind(), e.to_string()),
        (
            ModelErrorKind::Connection,
            "openai: connection closed during the response".to_owned()
        )
    );
}
