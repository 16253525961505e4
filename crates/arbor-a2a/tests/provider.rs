//! The provider against an A2A agent on loopback whose answers each test scripts: what a
//! turn makes of a task's stream, and the faults of a remote agent (oversized, silent,
//! wrong content types, cut off, unreachable) refused by name. The official SDK's server is
//! driven in `tests/interop/a2a_client_test.py`.

#![cfg(feature = "client")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arbor_a2a::{A2aClient, A2aConfig, A2aProvider};
use arbor_model::http::ApiKey;
use arbor_model::{
    FinishReason, ModelError, ModelErrorKind, ModelEvent, ModelProvider, ModelRequest, ToolSpec,
};
use arbor_protocol::{Message, SessionId, ToolResult, Usage};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures::StreamExt;
use serde_json::{Value, json};

/// One scripted answer to a `SendStreamingMessage`.
enum Answer {
    /// These SSE `data:` items, then the stream closes (or hangs open).
    Sse(Vec<Value>, bool),
    /// This body with this content type.
    Raw(&'static str, String),
}

/// A request seen: its method, params, `A2A-Version` and `Authorization`.
type Seen = (String, Value, Option<String>, Option<String>);

#[derive(Default)]
struct Agent {
    answers: Mutex<VecDeque<Answer>>,
    /// Every request: its method, params, and the headers that matter.
    seen: Mutex<Vec<Seen>>,
    /// What GetTask answers.
    state: Mutex<String>,
    streaming: bool,
}

async fn card(State(agent): State<Arc<Agent>>, headers: HeaderMap) -> Response {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    axum::Json(json!({
        "name": "Fake Agent", "description": "scripted", "version": "1",
        "supportedInterfaces": [
            {"url": format!("http://{host}/rest"), "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
            {"url": format!("http://{host}/rpc"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        ],
        "capabilities": {"streaming": agent.streaming},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "s", "name": "s", "description": "s", "tags": []}],
    }))
    .into_response()
}

fn rpc(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

async fn rpc_handler(
    State(agent): State<Arc<Agent>>,
    headers: HeaderMap,
    body: axum::Json<Value>,
) -> Response {
    let h = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let method = body["method"].as_str().unwrap_or("").to_owned();
    let id = body["id"].clone();
    agent.seen.lock().unwrap().push((
        method.clone(),
        body["params"].clone(),
        h("a2a-version"),
        h("authorization"),
    ));
    match method.as_str() {
        "CancelTask" | "GetTask" => {
            let state = if method == "CancelTask" {
                "TASK_STATE_CANCELED".to_owned()
            } else {
                agent.state.lock().unwrap().clone()
            };
            axum::Json(rpc(
                &id,
                json!({"id": body["params"]["id"], "contextId": "c", "status": {"state": state}}),
            ))
            .into_response()
        }
        "SendMessage" => {
            let Some(Answer::Sse(items, _)) = agent.answers.lock().unwrap().pop_front() else {
                panic!("no answer scripted");
            };
            axum::Json(rpc(&id, items.last().cloned().unwrap())).into_response()
        }
        _ => match agent.answers.lock().unwrap().pop_front() {
            Some(Answer::Raw(kind, body)) => ([(header::CONTENT_TYPE, kind)], body).into_response(),
            Some(Answer::Sse(items, hang)) => {
                let chunks: Vec<Result<String, std::io::Error>> = items
                    .iter()
                    .map(|i| Ok(format!("data: {}\r\n\r\n", rpc(&id, i.clone()))))
                    .collect();
                let stream = futures::stream::iter(chunks);
                let body = if hang {
                    Body::from_stream(stream.chain(futures::stream::pending()))
                } else {
                    Body::from_stream(stream)
                };
                ([(header::CONTENT_TYPE, "text/event-stream")], body).into_response()
            }
            None => panic!("no answer scripted"),
        },
    }
}

async fn serve(agent: Arc<Agent>) -> String {
    let app = axum::Router::new()
        .route("/.well-known/agent-card.json", get(card))
        .route("/rpc", post(rpc_handler))
        .with_state(agent);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

fn agent(answers: Vec<Answer>) -> Arc<Agent> {
    Arc::new(Agent {
        answers: Mutex::new(answers.into()),
        state: Mutex::new("TASK_STATE_WORKING".to_owned()),
        streaming: true,
        ..Agent::default()
    })
}

fn provider(base: &str, config: impl FnOnce(A2aConfig) -> A2aConfig) -> A2aProvider {
    let c = config(A2aConfig::new(base).token(Some(ApiKey::new("sekret"))));
    A2aProvider::new("travel", A2aClient::new(c).unwrap())
}

fn task(id: &str, state: &str) -> Value {
    json!({"task": {"id": id, "contextId": "c", "status": {"state": state}}})
}

fn status(id: &str, state: &str, text: Option<&str>) -> Value {
    let mut s = json!({"state": state});
    if let Some(t) = text {
        s["message"] = json!({"messageId": "x", "role": "ROLE_AGENT", "parts": [{"text": t}]});
    }
    json!({"statusUpdate": {"taskId": id, "contextId": "c", "status": s}})
}

fn artifact(id: &str, artifact: &str, text: &str, append: bool) -> Value {
    json!({"artifactUpdate": {"taskId": id, "contextId": "c", "append": append,
        "artifact": {"artifactId": artifact, "parts": [{"text": text}]}}})
}

async fn turn(
    p: &A2aProvider,
    messages: &[Message],
    tools: &[ToolSpec],
) -> Vec<Result<ModelEvent, ModelError>> {
    let session = SessionId::new();
    let request = ModelRequest::new("remote", messages)
        .tools(tools)
        .session(Some(session));
    match p.stream(request).await {
        Ok(s) => s.collect().await,
        Err(e) => vec![Err(e)],
    }
}

fn ask_human() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "ask_human".into(),
        description: String::new(),
        parameters: json!({}),
    }]
}

async fn cancels(agent: &Agent) -> Vec<Value> {
    // A dropped turn cancels in the background: wait for it, briefly.
    for _ in 0..100 {
        let c: Vec<Value> = agent
            .seen
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.0 == "CancelTask")
            .map(|s| s.1.clone())
            .collect();
        if !c.is_empty() {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Vec::new()
}

#[tokio::test]
async fn a_task_streams_its_status_and_answer_and_reports_its_usage() {
    let mut done = status("t1", "TASK_STATE_COMPLETED", None);
    done["statusUpdate"]["metadata"] = json!({"usage": {"inputTokens": 7, "outputTokens": 3}});
    let a = agent(vec![Answer::Sse(
        vec![
            task("t1", "TASK_STATE_SUBMITTED"),
            status("t1", "TASK_STATE_WORKING", Some("looking")),
            artifact("t1", "a", "hello", false),
            artifact("t1", "a", " world", true),
            artifact("t1", "b", "second", false),
            done,
        ],
        false,
    )]);
    let p = provider(&serve(a.clone()).await, |c| c);
    let events: Vec<ModelEvent> = turn(&p, &[Message::user("go")], &[])
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        events,
        [
            ModelEvent::Status {
                state: "TASK_STATE_SUBMITTED".into(),
                message: None
            },
            ModelEvent::Status {
                state: "TASK_STATE_WORKING".into(),
                message: Some("looking".into())
            },
            ModelEvent::TextDelta("hello".into()),
            ModelEvent::TextDelta(" world".into()),
            ModelEvent::TextDelta("\n".into()),
            ModelEvent::TextDelta("second".into()),
            ModelEvent::Usage(Usage::new(7, 3)),
            ModelEvent::Finished(FinishReason::Stop),
        ]
    );
    let seen = a.seen.lock().unwrap();
    let (method, params, version, auth) = &seen[0];
    assert_eq!(method, "SendStreamingMessage");
    assert_eq!(version.as_deref(), Some("1.0"));
    assert_eq!(auth.as_deref(), Some("Bearer sekret"));
    assert_eq!(params["message"]["role"], "ROLE_USER");
    assert_eq!(params["message"]["parts"], json!([{"text": "go"}]));
    // The remote conversation is the session's.
    assert_eq!(params["message"]["contextId"].as_str().unwrap().len(), 36);
    assert!(params["message"].get("taskId").is_none());
}

#[tokio::test]
async fn a_question_becomes_an_ask_human_call_and_its_answer_goes_back_to_the_task() {
    let a = agent(vec![
        Answer::Sse(
            vec![
                task("t2", "TASK_STATE_WORKING"),
                status("t2", "TASK_STATE_INPUT_REQUIRED", Some("Which city?")),
            ],
            false,
        ),
        Answer::Sse(
            vec![
                status("t2", "TASK_STATE_WORKING", None),
                artifact("t2", "a", "Booked Paris", false),
                status("t2", "TASK_STATE_COMPLETED", None),
            ],
            false,
        ),
    ]);
    let p = provider(&serve(a.clone()).await, |c| c);
    let first = turn(&p, &[Message::user("book")], &ask_human()).await;
    let call = first
        .iter()
        .find_map(|e| match e {
            Ok(ModelEvent::ToolCall(c)) => Some(c.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(call.id, "a2a:0:0:t2");
    assert_eq!(call.name, "ask_human");
    assert_eq!(call.arguments, json!({"question": "Which city?"}));
    assert_eq!(
        first.last().unwrap().as_ref().unwrap(),
        &ModelEvent::Finished(FinishReason::ToolCalls)
    );
    let answered = [
        Message::user("book"),
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![call.clone()],
        },
        Message::Tool(ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: "Paris".into(),
            is_error: false,
        }),
    ];
    let second: Vec<ModelEvent> = turn(&p, &answered, &ask_human())
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert!(second.contains(&ModelEvent::TextDelta("Booked Paris".into())));
    let seen = a.seen.lock().unwrap();
    assert_eq!(seen[1].1["message"]["taskId"], "t2");
    assert_eq!(
        seen[1].1["message"]["contextId"].as_str().unwrap().len(),
        36
    );
    assert_eq!(seen[1].1["message"]["parts"], json!([{"text": "Paris"}]));
    // Nothing was cancelled: the task asked, and went on.
    assert!(!seen.iter().any(|s| s.0 == "CancelTask"));
}

#[tokio::test]
async fn a_question_a_child_cannot_ask_fails_by_name_and_cancels_the_task() {
    let a = agent(vec![Answer::Sse(
        vec![
            task("t3", "TASK_STATE_WORKING"),
            status("t3", "TASK_STATE_INPUT_REQUIRED", Some("Which city?")),
        ],
        false,
    )]);
    let p = provider(&serve(a.clone()).await, |c| c);
    let events = turn(&p, &[Message::user("book")], &[]).await;
    let e = events.last().unwrap().as_ref().unwrap_err();
    assert_eq!(e.kind(), ModelErrorKind::Provider);
    let text = e.to_string();
    assert!(text.contains("TASK_STATE_INPUT_REQUIRED"), "{text}");
    assert!(
        text.contains("ask_human") && text.contains("Which city?"),
        "{text}"
    );
    assert_eq!(cancels(&a).await, [json!({"id": "t3"})]);
}

#[tokio::test]
async fn a_declined_question_cancels_the_task_and_fails_the_turn() {
    let a = agent(vec![]);
    let p = provider(&serve(a.clone()).await, |c| c);
    let declined = [
        Message::user("book"),
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![arbor_protocol::ToolCall {
                id: "a2a:0:0:t4".into(),
                name: "ask_human".into(),
                arguments: json!({"question": "?"}),
            }],
        },
        Message::Tool(ToolResult {
            call_id: "a2a:0:0:t4".into(),
            name: "ask_human".into(),
            content: "declined: not now".into(),
            is_error: true,
        }),
    ];
    let events = turn(&p, &declined, &ask_human()).await;
    let text = events[0].as_ref().unwrap_err().to_string();
    assert!(
        text.contains("not answered") && text.contains("t4"),
        "{text}"
    );
    assert_eq!(cancels(&a).await, [json!({"id": "t4"})]);
}

#[tokio::test]
async fn failed_rejected_and_canceled_tasks_fail_the_turn_naming_the_state() {
    for state in [
        "TASK_STATE_FAILED",
        "TASK_STATE_REJECTED",
        "TASK_STATE_CANCELED",
        "TASK_STATE_AUTH_REQUIRED",
    ] {
        let a = agent(vec![Answer::Sse(
            vec![
                task("t5", "TASK_STATE_WORKING"),
                status("t5", state, Some("no luck")),
            ],
            false,
        )]);
        let p = provider(&serve(a.clone()).await, |c| c);
        let events = turn(&p, &[Message::user("x")], &ask_human()).await;
        let text = events.last().unwrap().as_ref().unwrap_err().to_string();
        assert!(text.contains(state) && text.contains("no luck"), "{text}");
    }
}

#[tokio::test]
async fn an_oversized_stream_is_cut_at_its_cap() {
    let big: Vec<Value> = (0..64)
        .map(|i| artifact("t6", "a", &"x".repeat(4096), i > 0))
        .collect();
    let a = agent(vec![Answer::Sse(big, false)]);
    let p = provider(&serve(a.clone()).await, |c| c.max_stream_bytes(64 * 1024));
    let events = turn(&p, &[Message::user("x")], &[]).await;
    let e = events.last().unwrap().as_ref().unwrap_err();
    assert_eq!(e.kind(), ModelErrorKind::TooLarge);
    assert!(e.to_string().contains("65536 bytes"), "{e}");
    // The task it named is cancelled.
    assert_eq!(cancels(&a).await, [json!({"id": "t6"})]);
}

#[tokio::test]
async fn a_silent_stream_times_out_and_its_task_is_cancelled() {
    let a = agent(vec![Answer::Sse(
        vec![task("t7", "TASK_STATE_WORKING")],
        true,
    )]);
    let p = provider(&serve(a.clone()).await, |c| {
        c.timeouts(Duration::from_secs(5), Duration::from_millis(300))
    });
    let events = turn(&p, &[Message::user("x")], &[]).await;
    let e = events.last().unwrap().as_ref().unwrap_err();
    assert_eq!(e.kind(), ModelErrorKind::Timeout);
    assert!(e.to_string().contains("silent"), "{e}");
    assert_eq!(cancels(&a).await, [json!({"id": "t7"})]);
}

#[tokio::test]
async fn a_dropped_turn_cancels_its_remote_task() {
    let a = agent(vec![Answer::Sse(
        vec![task("t8", "TASK_STATE_WORKING")],
        true,
    )]);
    let p = provider(&serve(a.clone()).await, |c| c);
    let messages = [Message::user("x")];
    let mut stream = p
        .stream(ModelRequest::new("remote", &messages))
        .await
        .unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert!(matches!(first, ModelEvent::Status { .. }));
    drop(stream);
    assert_eq!(cancels(&a).await, [json!({"id": "t8"})]);
}

#[tokio::test]
async fn wrong_content_types_are_refused_by_name() {
    let a = agent(vec![Answer::Raw("text/html", "<html>hi</html>".into())]);
    let p = provider(&serve(a.clone()).await, |c| c);
    let events = turn(&p, &[Message::user("x")], &[]).await;
    let e = events[0].as_ref().unwrap_err();
    assert_eq!(e.kind(), ModelErrorKind::Stream);
    assert!(e.to_string().contains("text/html"), "{e}");
    // An error before any stream, as JSON, is the agent's error.
    let a = agent(vec![Answer::Raw(
        "application/json",
        json!({"jsonrpc": "2.0", "id": 1, "error": {"code": -32004, "message": "nope"}})
            .to_string(),
    )]);
    let p = provider(&serve(a).await, |c| c);
    let events = turn(&p, &[Message::user("x")], &[]).await;
    let e = events[0].as_ref().unwrap_err().to_string();
    assert!(e.contains("-32004") && e.contains("nope"), "{e}");
}

#[tokio::test]
async fn a_stream_cut_off_mid_task_reads_the_task_once_and_names_its_state() {
    let a = agent(vec![
        Answer::Sse(vec![task("t9", "TASK_STATE_WORKING")], false),
        Answer::Sse(vec![task("t10", "TASK_STATE_WORKING")], false),
    ]);
    let p = provider(&serve(a.clone()).await, |c| c);
    let events = turn(&p, &[Message::user("x")], &[]).await;
    let e = events.last().unwrap().as_ref().unwrap_err();
    assert_eq!(e.kind(), ModelErrorKind::Connection);
    assert!(e.to_string().contains("t9 was TASK_STATE_WORKING"), "{e}");
    // The task had ended by the time it was read: its end is the turn's.
    *a.state.lock().unwrap() = "TASK_STATE_COMPLETED".into();
    let events = turn(&p, &[Message::user("x")], &[]).await;
    assert_eq!(
        events.last().unwrap().as_ref().unwrap(),
        &ModelEvent::Finished(FinishReason::Stop)
    );
}

#[tokio::test]
async fn an_unreachable_agent_and_a_card_without_jsonrpc_fail_by_name() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let p = provider(&format!("http://{addr}"), |c| c);
    let e = p.preflight("remote").await.unwrap_err();
    assert_eq!(e.kind(), ModelErrorKind::Connection);
    assert!(e.to_string().contains("cannot reach"), "{e}");

    let app = axum::Router::new().route(
        "/.well-known/agent-card.json",
        get(|| async { axum::Json(json!({"name": "old", "url": "http://x/rpc"})) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let p = provider(&format!("http://{addr}"), |c| c);
    let e = p.preflight("remote").await.unwrap_err();
    assert_eq!(e.kind(), ModelErrorKind::Config);
    assert!(e.to_string().contains("supportedInterfaces"), "{e}");
}

#[tokio::test]
async fn an_agent_without_streaming_is_sent_one_message() {
    let a = Arc::new(Agent {
        answers: Mutex::new(
            vec![Answer::Sse(
                vec![json!({"task": {"id": "t11", "contextId": "c",
                    "status": {"state": "TASK_STATE_COMPLETED"},
                    "artifacts": [{"artifactId": "a", "parts": [{"text": "done"}]}]}})],
                false,
            )]
            .into(),
        ),
        streaming: false,
        ..Agent::default()
    });
    let p = provider(&serve(a.clone()).await, |c| c);
    let events: Vec<ModelEvent> = turn(&p, &[Message::user("x")], &[])
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        events,
        [
            ModelEvent::TextDelta("done".into()),
            ModelEvent::Finished(FinishReason::Stop)
        ]
    );
    assert_eq!(a.seen.lock().unwrap()[0].0, "SendMessage");
}

#[tokio::test]
async fn a_continued_task_counts_only_what_it_adds_and_carries_the_inbox_with_the_answer() {
    let mut asking = status("t12", "TASK_STATE_INPUT_REQUIRED", Some("Which city?"));
    asking["statusUpdate"]["metadata"] = json!({"usage": {"inputTokens": 10, "outputTokens": 5}});
    let mut done = status("t12", "TASK_STATE_COMPLETED", None);
    done["statusUpdate"]["metadata"] = json!({"usage": {"inputTokens": 25, "outputTokens": 12}});
    let a = agent(vec![
        Answer::Sse(vec![task("t12", "TASK_STATE_WORKING"), asking], false),
        Answer::Sse(vec![artifact("t12", "a", "Booked", false), done], false),
    ]);
    let p = provider(&serve(a.clone()).await, |c| c);
    let first = turn(&p, &[Message::user("book")], &ask_human()).await;
    assert!(
        first.contains(&Ok(ModelEvent::Usage(Usage::new(10, 5)))),
        "{first:?}"
    );
    let call = first
        .iter()
        .find_map(|e| match e {
            Ok(ModelEvent::ToolCall(c)) => Some(c.clone()),
            _ => None,
        })
        .unwrap();
    // The id carries what the task had reported when it asked.
    assert_eq!(call.id, "a2a:10:5:t12");
    // The answer, then a message the inbox added meanwhile: both go to the task, which
    // still asks.
    *a.state.lock().unwrap() = "TASK_STATE_INPUT_REQUIRED".into();
    let answered = [
        Message::user("book"),
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![call.clone()],
        },
        Message::Tool(ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: "Paris".into(),
            is_error: false,
        }),
        Message::user("A window seat, please."),
    ];
    let second = turn(&p, &answered, &ask_human()).await;
    assert!(
        second.contains(&Ok(ModelEvent::Usage(Usage::new(15, 7)))),
        "the second turn counts only what the task added: {second:?}"
    );
    let seen = a.seen.lock().unwrap();
    let sent: Vec<&Value> = seen
        .iter()
        .filter(|s| s.0 == "SendStreamingMessage")
        .map(|s| &s.1)
        .collect();
    assert_eq!(sent[1]["message"]["taskId"], "t12");
    assert_eq!(
        sent[1]["message"]["parts"],
        json!([{"text": "Paris\n\nA window seat, please."}])
    );
}

#[tokio::test]
async fn new_input_after_an_answer_whose_task_ended_starts_a_new_task() {
    // The answer was sent by a turn that then failed; the task ended; the child is sent more.
    let a = agent(vec![Answer::Sse(
        vec![
            task("t16", "TASK_STATE_WORKING"),
            status("t16", "TASK_STATE_COMPLETED", None),
        ],
        false,
    )]);
    *a.state.lock().unwrap() = "TASK_STATE_COMPLETED".into();
    let p = provider(&serve(a.clone()).await, |c| c);
    let call = arbor_protocol::ToolCall {
        id: "a2a:3:2:t9".into(),
        name: "ask_human".into(),
        arguments: json!({"question": "?"}),
    };
    let messages = [
        Message::user("book"),
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![call.clone()],
        },
        Message::Tool(ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: "Paris".into(),
            is_error: false,
        }),
        Message::user("Now a hotel."),
    ];
    turn(&p, &messages, &ask_human()).await;
    {
        let seen = a.seen.lock().unwrap();
        let sent = seen.iter().find(|s| s.0 == "SendStreamingMessage").unwrap();
        assert!(sent.1["message"].get("taskId").is_none(), "{:?}", sent.1);
        assert_eq!(
            sent.1["message"]["parts"],
            json!([{"text": "Now a hotel."}])
        );
    }
    // A declined question followed by new input: the old task is cancelled, a new one starts.
    let declined = [
        messages[0].clone(),
        messages[1].clone(),
        Message::Tool(ToolResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            content: "declined".into(),
            is_error: true,
        }),
        Message::user("Now a hotel."),
    ];
    let a2 = agent(vec![Answer::Sse(
        vec![
            task("t17", "TASK_STATE_WORKING"),
            status("t17", "TASK_STATE_COMPLETED", None),
        ],
        false,
    )]);
    let p2 = provider(&serve(a2.clone()).await, |c| c);
    let events = turn(&p2, &declined, &ask_human()).await;
    assert_eq!(
        events.last().unwrap().as_ref().unwrap(),
        &ModelEvent::Finished(FinishReason::Stop)
    );
    assert_eq!(cancels(&a2).await, [json!({"id": "t9"})]);
}

#[tokio::test]
async fn every_new_message_of_a_turn_reaches_the_agent() {
    let a = agent(vec![Answer::Sse(
        vec![
            task("t13", "TASK_STATE_WORKING"),
            status("t13", "TASK_STATE_COMPLETED", None),
        ],
        false,
    )]);
    let p = provider(&serve(a.clone()).await, |c| c);
    let inbox = [
        Message::user("first"),
        Message::assistant("ok"),
        Message::user("second"),
        Message::user("third"),
    ];
    turn(&p, &inbox, &[]).await;
    let seen = a.seen.lock().unwrap();
    assert_eq!(
        seen[0].1["message"]["parts"],
        json!([{"text": "second\n\nthird"}])
    );
}

fn not_streaming(answers: Vec<Answer>) -> Arc<Agent> {
    Arc::new(Agent {
        answers: Mutex::new(answers.into()),
        state: Mutex::new("TASK_STATE_WORKING".to_owned()),
        streaming: false,
        ..Agent::default()
    })
}

#[tokio::test]
async fn an_agent_without_streaming_names_its_task_at_once_and_is_read_until_it_ends() {
    let a = not_streaming(vec![Answer::Sse(
        vec![task("t14", "TASK_STATE_WORKING")],
        false,
    )]);
    let p = provider(&serve(a.clone()).await, |c| c);
    let agent = a.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        *agent.state.lock().unwrap() = "TASK_STATE_COMPLETED".into();
    });
    let events: Vec<ModelEvent> = turn(&p, &[Message::user("x")], &[])
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    assert_eq!(
        events,
        [
            ModelEvent::Status {
                state: "TASK_STATE_WORKING".into(),
                message: None
            },
            ModelEvent::Finished(FinishReason::Stop)
        ]
    );
    let seen = a.seen.lock().unwrap();
    assert_eq!(seen[0].0, "SendMessage");
    assert_eq!(seen[0].1["configuration"]["returnImmediately"], true);
    assert!(
        seen.iter().skip(1).all(|s| s.0 == "GetTask"),
        "read, never sent again"
    );
}

#[tokio::test]
async fn a_dropped_turn_cancels_the_task_of_an_agent_without_streaming() {
    let a = not_streaming(vec![Answer::Sse(
        vec![task("t15", "TASK_STATE_WORKING")],
        false,
    )]);
    let p = provider(&serve(a.clone()).await, |c| c);
    let messages = [Message::user("x")];
    let mut stream = p
        .stream(ModelRequest::new("remote", &messages))
        .await
        .unwrap();
    assert!(matches!(
        stream.next().await.unwrap().unwrap(),
        ModelEvent::Status { .. }
    ));
    drop(stream);
    assert_eq!(cancels(&a).await, [json!({"id": "t15"})]);
}

/// A question nobody will answer (its child deleted while it waited at the root): the
/// provider is told its call, and cancels the task that asked, once, in the background; ids
/// that are not its own are left alone.
#[tokio::test]
async fn an_abandoned_question_cancels_the_task_that_asked() {
    let a = agent(vec![Answer::Sse(
        vec![
            task("t16", "TASK_STATE_WORKING"),
            status("t16", "TASK_STATE_INPUT_REQUIRED", Some("Which city?")),
        ],
        false,
    )]);
    let p = provider(&serve(a.clone()).await, |c| c);
    let first = turn(&p, &[Message::user("book")], &ask_human()).await;
    let call = first
        .iter()
        .find_map(|e| match e {
            Ok(ModelEvent::ToolCall(c)) => Some(c.clone()),
            _ => None,
        })
        .unwrap();
    // Asking cancelled nothing.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!a.seen.lock().unwrap().iter().any(|s| s.0 == "CancelTask"));
    p.abandon(&[
        "call_1".to_owned(),
        call.id.clone(),
        call.id.clone(),
        "a2a:x:0:t99".to_owned(),
    ])
    .await
    .unwrap();
    assert_eq!(cancels(&a).await, [json!({"id": "t16"})]);
    // The process waits for it before it ends.
    arbor_a2a::settle(Duration::from_secs(5)).await;
    let seen = a.seen.lock().unwrap();
    assert_eq!(seen.iter().filter(|s| s.0 == "CancelTask").count(), 1);
}
