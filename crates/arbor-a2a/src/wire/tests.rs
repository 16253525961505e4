//! The wire types against bytes the official Python SDK (a2a-sdk 1.3.0) sent on loopback.

#![allow(clippy::unwrap_used)]

use super::*;

const CARD: &str = r#"{"name":"Demo Agent","description":"Echoes, asks for approval, then completes.","supportedInterfaces":[{"url":"http://127.0.0.1:41241/a2a/jsonrpc","protocolBinding":"JSONRPC","protocolVersion":"1.0"},{"url":"http://127.0.0.1:41241/a2a/rest","protocolBinding":"HTTP+JSON","protocolVersion":"1.0"}],"version":"1.0.0","capabilities":{"streaming":true,"pushNotifications":false},"securitySchemes":{"bearer":{"httpAuthSecurityScheme":{"scheme":"Bearer","bearerFormat":"opaque"}}},"securityRequirements":[{"schemes":{"bearer":{}}}],"defaultInputModes":["text/plain"],"defaultOutputModes":["text/plain"],"skills":[{"id":"echo","name":"Echo","description":"Echo with approval","tags":["demo"]}]}"#;

const SEND: &str = r#"{"result":{"task":{"id":"b510","contextId":"e71a","status":{"state":"TASK_STATE_INPUT_REQUIRED","message":{"messageId":"8356","contextId":"e71a","taskId":"b510","role":"ROLE_AGENT","parts":[{"text":"Approve? (yes/no)"}]},"timestamp":"2026-12-06T14:57:25.161457Z"},"artifacts":[{"artifactId":"out","name":"answer","parts":[{"text":"echo: hello"}]}],"history":[{"messageId":"m1","contextId":"e71a","taskId":"b510","role":"ROLE_USER","parts":[{"text":"hello"}]}]}},"id":1,"jsonrpc":"2.0"}"#;

const ARTIFACT: &str = r#"{"result": {"artifactUpdate": {"taskId": "0722", "contextId": "bf23", "artifact": {"artifactId": "out", "name": "answer", "parts": [{"text": "echo: yes"}]}, "append": true, "lastChunk": true}}, "id": "s2", "jsonrpc": "2.0"}"#;

const NOT_FOUND: &str = r#"{"error":{"code":-32001,"message":"Task not found","data":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo","reason":"TASK_NOT_FOUND","domain":"a2a-protocol.org","metadata":{}}]},"id":6,"jsonrpc":"2.0"}"#;

#[test]
fn the_sdk_card_reads_and_names_its_jsonrpc_interface() {
    let card: AgentCard = serde_json::from_str(CARD).unwrap();
    assert_eq!(card.name, "Demo Agent");
    assert_eq!(card.capabilities.streaming, Some(true));
    let i = card.jsonrpc_interface().unwrap();
    assert_eq!(i.url, "http://127.0.0.1:41241/a2a/jsonrpc");
    assert_eq!(card.skills[0].tags, ["demo"]);
    // Written back, it reads the same (no field lost or renamed).
    let again: AgentCard = serde_json::from_value(serde_json::to_value(&card).unwrap()).unwrap();
    assert_eq!(again, card);
    // A binding's case matters, as it does to the SDK; a 0.3 interface is not 1.0.
    let mut other = card.clone();
    other.supported_interfaces[0].protocol_binding = "jsonrpc".into();
    assert!(other.jsonrpc_interface().is_none());
    other.supported_interfaces[0].protocol_binding = "JSONRPC".into();
    other.supported_interfaces[0].protocol_version = "0.3".into();
    assert!(other.jsonrpc_interface().is_none());
    other.supported_interfaces[0].protocol_version = String::new();
    assert!(other.jsonrpc_interface().is_some());
}

#[test]
fn a_send_result_and_a_stream_item_read_as_the_one_thing_they_hold() {
    let r: RpcResponse = serde_json::from_str(SEND).unwrap();
    let item: StreamResponse = serde_json::from_value(r.result.unwrap()).unwrap();
    let Some(StreamEvent::Task(task)) = item.into_event() else {
        panic!("a task");
    };
    assert_eq!(task.status.state, TaskState::InputRequired);
    assert!(task.status.state.is_interrupted());
    assert_eq!(
        text_of(&task.status.message.unwrap().parts),
        "Approve? (yes/no)"
    );
    assert_eq!(text_of(&task.artifacts[0].parts), "echo: hello");
    assert_eq!(task.history[0].role, Role::User);

    let r: RpcResponse = serde_json::from_str(ARTIFACT).unwrap();
    let item: StreamResponse = serde_json::from_value(r.result.unwrap()).unwrap();
    let Some(StreamEvent::Artifact(a)) = item.into_event() else {
        panic!("an artifact update");
    };
    assert!(a.append && a.last_chunk);
    // Two members at once is not an item.
    let two = StreamResponse {
        task: Some(Task::default()),
        message: Some(Message::user("x")),
        ..StreamResponse::default()
    };
    assert!(two.into_event().is_none());
}

#[test]
fn states_read_by_name_or_number_and_unknown_ones_read_as_unspecified() {
    for (state, name) in STATES {
        let json = serde_json::to_string(&state).unwrap();
        assert_eq!(json, format!("\"{name}\""));
        assert_eq!(serde_json::from_str::<TaskState>(&json).unwrap(), state);
    }
    assert_eq!(
        serde_json::from_str::<TaskState>("3").unwrap(),
        TaskState::Completed
    );
    assert_eq!(
        serde_json::from_str::<TaskState>("\"completed\"").unwrap(),
        TaskState::Unspecified
    );
    assert_eq!(
        serde_json::from_str::<TaskState>("99").unwrap(),
        TaskState::Unspecified
    );
    assert_eq!(
        serde_json::from_str::<Role>("\"user\"").unwrap(),
        Role::Unspecified
    );
    assert!(TaskState::Rejected.is_terminal() && !TaskState::Working.is_terminal());
}

#[test]
fn errors_carry_the_sdk_details_and_read_back() {
    let r: RpcResponse = serde_json::from_str(NOT_FOUND).unwrap();
    let e = r.error.unwrap();
    assert_eq!(e.code, codes::TASK_NOT_FOUND);
    let ours = RpcError::new(codes::TASK_NOT_FOUND, "Task not found");
    assert_eq!(ours, e);
}

#[test]
fn parts_render_as_text_a_model_reads() {
    let parts = [
        Part::text("hello"),
        Part {
            data: Some(serde_json::json!({"k": 1})),
            ..Part::default()
        },
        Part {
            url: Some("https://x/doc.pdf".into()),
            media_type: Some("application/pdf".into()),
            ..Part::default()
        },
        Part {
            raw: Some("aGVsbG8h".into()),
            filename: Some("a.txt".into()),
            ..Part::default()
        },
        Part::default(),
    ];
    assert_eq!(
        text_of(&parts),
        "hello\n{\"k\":1}\n[file, application/pdf: https://x/doc.pdf]\n[a.txt: 6 bytes inline]"
    );
    let m = Message::user("hi");
    let json = serde_json::to_value(&m).unwrap();
    assert_eq!(json["role"], "ROLE_USER");
    assert_eq!(json["parts"], serde_json::json!([{"text": "hi"}]));
    assert!(json.get("contextId").is_none());
}

#[test]
fn usage_is_read_from_metadata_in_either_spelling() {
    let u = usage_in(Some(
        &serde_json::json!({"usage": {"inputTokens": 12, "outputTokens": 3.0}}),
    ));
    assert_eq!(u, Some(arbor_protocol::Usage::new(12, 3)));
    let u = usage_in(Some(&serde_json::json!({"usage": {"input_tokens": 5}})));
    assert_eq!(u, Some(arbor_protocol::Usage::new(5, 0)));
    assert_eq!(
        usage_in(Some(&serde_json::json!({"usage": {"inputTokens": -1}}))),
        None
    );
    assert_eq!(usage_in(Some(&serde_json::json!({"other": 1}))), None);
    assert_eq!(usage_in(None), None);
}
