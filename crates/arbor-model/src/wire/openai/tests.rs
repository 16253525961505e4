//! Tests of the Chat Completions wire format: recorded streams at every split, server
//! quirks, limits and request bodies.

use super::*;
use crate::provider::ToolSpec;

fn decode(bytes: &[u8], split: usize) -> Result<Vec<ModelEvent>, ModelError> {
    crate::wire::decode_split(ChunkDecoder::new(), bytes, split)
}

fn every_split(bytes: &[u8]) -> Vec<ModelEvent> {
    let whole = decode(bytes, 0).unwrap();
    for split in 1..bytes.len() {
        assert_eq!(decode(bytes, split).unwrap(), whole, "split at {split}");
    }
    whole
}

#[test]
fn text_and_usage_with_cached_tokens() {
    let events = every_split(include_bytes!("../../../tests/fixtures/openai/text.sse"));
    assert_eq!(
        events,
        [
            ModelEvent::TextDelta("Hello".into()),
            ModelEvent::TextDelta(" there — ünïcode!".into()),
            ModelEvent::Usage(Usage {
                input_tokens: 1117,
                output_tokens: 6,
                total_tokens: 1123,
                cache_read_tokens: 1024,
                cache_write_tokens: 0
            }),
            ModelEvent::ResponseModel("gpt-4o-mini-2024-07-18".into()),
            ModelEvent::Finished(FinishReason::Stop),
        ]
    );
}

#[test]
fn parallel_tool_calls_are_assembled_in_order() {
    let events = every_split(include_bytes!(
        "../../../tests/fixtures/openai/parallel_tools.sse"
    ));
    assert_eq!(events.len(), 5);
    assert_eq!(
        events[0],
        ModelEvent::ToolCall(ToolCall {
            id: "call_aWb1NmJ2Sx4q7yqQ5zqYvQ9h".into(),
            name: "get_weather".into(),
            arguments: json!({"city": "Paris"}),
        })
    );
    assert_eq!(
        events[1],
        ModelEvent::ToolCall(ToolCall {
            id: "call_Hn3kq0nY0mQ2Bf8VvF0d6m7E".into(),
            name: "get_weather".into(),
            arguments: json!({"city": "Tōkyō"}),
        })
    );
    assert_eq!(events[2], ModelEvent::Usage(Usage::new(82, 48)));
    assert_eq!(
        events[3],
        ModelEvent::ResponseModel("gpt-4o-mini-2024-07-18".into())
    );
    assert_eq!(events[4], ModelEvent::Finished(FinishReason::ToolCalls));
}

#[test]
fn a_real_llama_cpp_stream_decodes() {
    let events = every_split(include_bytes!(
        "../../../tests/fixtures/llamacpp/openai_text_usage.sse"
    ));
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            ModelEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Hello! I'm here to");
    assert!(events.contains(&ModelEvent::Usage(Usage::new(20, 6))));
    assert_eq!(
        events.last(),
        Some(&ModelEvent::Finished(FinishReason::Length))
    );
    // Without the usage chunk: no usage is invented.
    let events = decode(
        include_bytes!("../../../tests/fixtures/llamacpp/openai_text_no_usage.sse"),
        0,
    )
    .unwrap();
    assert!(!events.iter().any(|e| matches!(e, ModelEvent::Usage(_))));
}

fn chunk(delta: Value, finish: Option<&str>) -> String {
    format!(
        "data: {}\n\n",
        json!({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    )
}

#[test]
fn server_quirks_are_tolerated() {
    // Ollama: index 0 for both calls, told apart by id; arguments as an object; no usage
    // chunk; "stop" although it called tools; `choices: null` in a usage chunk (vLLM).
    let stream = [
        chunk(json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": {"x": 1}}}]}), None),
        chunk(json!({"tool_calls": [{"index": 0, "id": "b", "function": {"name": "g", "arguments": "{\"y\":2}"}}]}), None),
        chunk(json!({}), Some("stop")),
        "data: {\"choices\":null,\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2}}\n\n".to_owned(),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let events = decode(stream.as_bytes(), 0).unwrap();
    assert_eq!(
        events,
        [
            ModelEvent::ToolCall(ToolCall {
                id: "a".into(),
                name: "f".into(),
                arguments: json!({"x": 1})
            }),
            ModelEvent::ToolCall(ToolCall {
                id: "b".into(),
                name: "g".into(),
                arguments: json!({"y": 2})
            }),
            ModelEvent::Usage(Usage::new(5, 2)),
            ModelEvent::Finished(FinishReason::ToolCalls),
        ]
    );
    // No index at all, and an empty finish_reason meaning "not yet".
    let stream = [
        chunk(
            json!({"tool_calls": [{"id": "c", "function": {"name": "h", "arguments": "{\"z\":"}}]}),
            Some(""),
        ),
        chunk(
            json!({"tool_calls": [{"function": {"arguments": "3}"}}]}),
            None,
        ),
        chunk(json!({}), Some("tool_calls")),
    ]
    .concat();
    let events = decode(stream.as_bytes(), 0).unwrap();
    assert_eq!(
        events[0],
        ModelEvent::ToolCall(ToolCall {
            id: "c".into(),
            name: "h".into(),
            arguments: json!({"z": 3})
        })
    );
}

#[test]
fn bad_streams_are_classified_errors() {
    // Invalid JSON in the arguments: the call carries the raw text, the tool says why.
    let stream = [
        chunk(json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": "{\"city\": \"Par"}}]}), None),
        chunk(json!({}), Some("tool_calls")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let events = decode(stream.as_bytes(), 0).unwrap();
    assert_eq!(
        events[0],
        ModelEvent::ToolCall(ToolCall {
            id: "a".into(),
            name: "f".into(),
            arguments: Value::String("{\"city\": \"Par".into())
        })
    );
    // Truncated: the text fixture cut before its finish.
    let text = include_str!("../../../tests/fixtures/openai/text.sse");
    let cut: String = text
        .split("\n\n")
        .take(3)
        .map(|e| format!("{e}\n\n"))
        .collect();
    let e = decode(cut.as_bytes(), 0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "provider stream failed: the stream ended before the final chunk"
    );
    // A mid-stream error event.
    let e = decode(b"data: {\"error\":{\"message\":\"upstream overloaded\",\"type\":\"server_error\",\"code\":null}}\n\n", 0).unwrap_err();
    assert_eq!(
        e,
        ModelError::Provider {
            message: "upstream overloaded".into()
        }
    );
    // Garbage.
    let e = decode(b"data: {\"id\":\n\n", 0).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("provider stream failed: invalid chunk JSON"),
        "{e}"
    );
}

#[test]
fn messages_read_between_tool_results_wait_for_the_last_result() {
    let messages = vec![
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![
                ToolCall {
                    id: "a".into(),
                    name: "f".into(),
                    arguments: json!({}),
                },
                ToolCall {
                    id: "b".into(),
                    name: "f".into(),
                    arguments: json!({}),
                },
            ],
        },
        Message::Tool(arbor_protocol::ToolResult {
            call_id: "a".into(),
            name: "f".into(),
            content: "1".into(),
            is_error: false,
        }),
        Message::user("[from child:x] hi"),
        Message::Tool(arbor_protocol::ToolResult {
            call_id: "b".into(),
            name: "f".into(),
            content: "2".into(),
            is_error: false,
        }),
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![],
        },
    ];
    let body = request_body(
        &ModelRequest {
            model: "m",
            system: None,
            messages: &messages,
            tools: &[],
            thinking: None,
            controls: None,
            reasoning: None,
            output_schema: None,
            session: None,
        },
        false,
        None,
    );
    let roles: Vec<&str> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["assistant", "tool", "tool", "user", "assistant"]);
    assert_eq!(
        body["messages"][4]["content"], "",
        "an empty answer is an empty string"
    );
}

#[test]
fn request_bodies_carry_tools_results_and_raw_arguments() {
    let messages = vec![
        Message::user("Weather in Paris?"),
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![
                ToolCall {
                    id: "c1".into(),
                    name: "get_weather".into(),
                    arguments: json!({"city": "Paris"}),
                },
                ToolCall {
                    id: "c2".into(),
                    name: "get_weather".into(),
                    arguments: Value::String("{\"ci".into()),
                },
            ],
        },
        Message::Tool(arbor_protocol::ToolResult {
            call_id: "c1".into(),
            name: "get_weather".into(),
            content: "18C".into(),
            is_error: false,
        }),
        Message::Tool(arbor_protocol::ToolResult {
            call_id: "c2".into(),
            name: "get_weather".into(),
            content: "bad arguments".into(),
            is_error: true,
        }),
    ];
    let tools = vec![ToolSpec {
        name: "get_weather".into(),
        description: "Current weather".into(),
        parameters: json!({"type": "object"}),
    }];
    let req = ModelRequest {
        model: "gpt-4o-mini",
        system: Some("Be brief."),
        messages: &messages,
        tools: &tools,
        thinking: None,
        controls: None,
        reasoning: None,
        output_schema: None,
        session: None,
    };
    let body = request_body(&req, true, Some(64));
    assert_eq!(body["max_tokens"], 64);
    assert_eq!(body["model"], "gpt-4o-mini");
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(
        body["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    assert_eq!(body["messages"][2]["content"], Value::Null);
    assert_eq!(
        body["messages"][2]["tool_calls"][0]["function"]["arguments"],
        "{\"city\":\"Paris\"}"
    );
    assert_eq!(
        body["messages"][2]["tool_calls"][1]["function"]["arguments"], "{}",
        "text that was not JSON goes back as an empty object"
    );
    assert_eq!(
        body["messages"][4],
        json!({"role": "tool", "tool_call_id": "c2", "content": "bad arguments"})
    );
    assert_eq!(body["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(body["tool_choice"], "auto");
    let bare = request_body(
        &ModelRequest {
            model: "m",
            system: None,
            messages: &messages[..1],
            tools: &[],
            thinking: None,
            controls: None,
            reasoning: None,
            output_schema: None,
            session: None,
        },
        false,
        None,
    );
    assert!(bare.get("tools").is_none() && bare.get("stream_options").is_none());
    assert!(bare.get("max_tokens").is_none());
}

#[test]
fn a_turn_past_its_cap_fails_as_too_large() {
    let bytes = include_bytes!("../../../tests/fixtures/openai/parallel_tools.sse");
    // Two calls: 64 bytes each, their ids (29), names (11) and arguments (17 and 19).
    let need = 2 * 64 + 2 * 29 + 2 * 11 + 17 + 19;
    for split in [0, 700, 1400] {
        let dec = ChunkDecoder::with_limit(need);
        assert_eq!(
            crate::wire::decode_split(dec, bytes, split).unwrap().len(),
            5
        );
        let e = crate::wire::decode_split(ChunkDecoder::with_limit(need - 1), bytes, split)
            .unwrap_err();
        assert_eq!(
            e,
            ModelError::TooLarge {
                limit: need as u64 - 1,
                message: "the arguments of tool call `get_weather` took the turn past 243 bytes \
                          of text and tool calls"
                    .into()
            }
        );
        assert_eq!(e.kind(), crate::ModelErrorKind::TooLarge);
    }
    // One call's arguments alone past the cap; text counts too.
    let args = "x".repeat(60);
    let stream = [
        chunk(json!({"tool_calls": [{"index": 0, "id": "a", "function": {"name": "f", "arguments": args}}]}), None),
        chunk(json!({"tool_calls": [{"index": 0, "function": {"arguments": args}}]}), None),
    ]
    .concat();
    let e =
        crate::wire::decode_split(ChunkDecoder::with_limit(150), stream.as_bytes(), 0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "answer too large: the arguments of tool call `f` took the turn past 150 bytes of text \
         and tool calls"
    );
    let text = include_bytes!("../../../tests/fixtures/openai/text.sse");
    let e = crate::wire::decode_split(ChunkDecoder::with_limit(10), text, 0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "answer too large: text took the turn past 10 bytes of text and tool calls"
    );
    // A flood of empty calls is bounded too.
    let flood: String = (0..100)
        .map(|i| {
            chunk(
                json!({"tool_calls": [{"index": i, "id": format!("c{i}")}]}),
                None,
            )
        })
        .collect();
    let e =
        crate::wire::decode_split(ChunkDecoder::with_limit(1000), flood.as_bytes(), 0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "answer too large: a new tool call took the turn past 1000 bytes of text and tool calls"
    );
}

#[test]
fn thinking_is_sent_as_reasoning_effort() {
    use crate::ThinkingLevel;
    let messages = vec![Message::user("hi")];
    let body_for = |thinking| {
        request_body(
            &ModelRequest {
                model: "o4-mini",
                system: None,
                messages: &messages,
                tools: &[],
                thinking,
                controls: None,
                reasoning: None,
                output_schema: None,
                session: None,
            },
            true,
            None,
        )
    };
    assert_eq!(
        body_for(Some(ThinkingLevel::High))["reasoning_effort"],
        "high"
    );
    assert_eq!(
        body_for(Some(ThinkingLevel::Minimal))["reasoning_effort"],
        "minimal"
    );
    assert_eq!(
        body_for(Some(ThinkingLevel::Xhigh))["reasoning_effort"],
        "xhigh"
    );
    // Off and unset send nothing: a model without reasoning would refuse the field.
    for t in [None, Some(ThinkingLevel::Off)] {
        let body = body_for(t);
        assert!(body.get("reasoning_effort").is_none(), "{body}");
    }
}

#[test]
fn token_counts_near_u64_max_saturate_instead_of_overflowing() {
    // Found by the openai_stream fuzz target: a usage with no total and counts whose sum
    // passes u64::MAX overflowed (a panic in debug builds, a wrapped total in release).
    let s = "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":18446744073709551615,\"completion_tokens\":2}}\n\n";
    let events = decode(s.as_bytes(), 0).unwrap();
    assert_eq!(
        events,
        [
            ModelEvent::Usage(Usage {
                input_tokens: u64::MAX,
                output_tokens: 2,
                total_tokens: u64::MAX,
                cache_read_tokens: 0,
                cache_write_tokens: 0,
            }),
            ModelEvent::Finished(FinishReason::Stop),
        ]
    );
}

#[test]
fn the_answering_model_is_named_once_and_an_overlong_name_is_ignored() {
    let chunk = |model: &str, finish: &str| {
        format!(
            "data: {{\"model\":\"{model}\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"x\"}},\"finish_reason\":{finish}}}]}}\n\n"
        )
    };
    let two = format!(
        "{}{}data: [DONE]\n\n",
        chunk("m-1", "null"),
        chunk("m-2", "\"stop\"")
    );
    let events = decode(two.as_bytes(), 0).unwrap();
    let named: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, ModelEvent::ResponseModel(_)))
        .collect();
    assert_eq!(named, [&ModelEvent::ResponseModel("m-1".into())]);
    let long = "m".repeat(300);
    let events = decode(
        format!("{}data: [DONE]\n\n", chunk(&long, "\"stop\"")).as_bytes(),
        0,
    )
    .unwrap();
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, ModelEvent::ResponseModel(_)))
    );
}

#[test]
fn reasoning_content_is_kept_whole_before_the_calls() {
    let chunks = [
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"The user "}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning_content":"wants a haiku."}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"reasoning":" (OpenRouter's name)"}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"content":"Leaves fall."}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        "[DONE]",
    ];
    let sse: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    let events = decode(sse.as_bytes(), 0).unwrap();
    assert_eq!(
        events,
        [
            ModelEvent::TextDelta("Leaves fall.".into()),
            ModelEvent::Reasoning(arbor_protocol::Reasoning::Text {
                text: "The user wants a haiku. (OpenRouter's name)".into()
            }),
            ModelEvent::Finished(FinishReason::Stop),
        ]
    );
}

#[test]
fn kept_reasoning_text_goes_back_on_its_tool_calling_message() {
    let messages = vec![
        Message::user("haiku?"),
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "spawn_agent".into(),
                arguments: json!({}),
            }],
        },
        Message::Tool(arbor_protocol::ToolResult {
            call_id: "c1".into(),
            name: "spawn_agent".into(),
            content: "Leaves fall.".into(),
            is_error: false,
        }),
    ];
    let mut kept = crate::Reasonings::new();
    kept.insert(
        "c1".into(),
        vec![
            arbor_protocol::Reasoning::Text {
                text: "delegate it".into(),
            },
            arbor_protocol::Reasoning::Thinking {
                thinking: "not for this wire".into(),
                signature: "s".into(),
            },
        ],
    );
    let request = ModelRequest::new("m", &messages).reasoning(Some(&kept));
    let body = request_body(&request, true, None);
    assert_eq!(body["messages"][1]["reasoning_content"], "delegate it");
    // Without kept reasoning, no field.
    let body = request_body(&ModelRequest::new("m", &messages), true, None);
    assert!(body["messages"][1].get("reasoning_content").is_none());
}

#[test]
fn an_output_schema_is_sent_as_the_response_format() {
    let messages = [Message::user("who?")];
    let schema = serde_json::json!({"type": "object"});
    let bare = request_body(&ModelRequest::new("m", &messages), true, None);
    assert!(bare.get("response_format").is_none(), "{bare}");
    let typed = request_body(
        &ModelRequest::new("m", &messages).output_schema(Some(&schema)),
        true,
        None,
    );
    assert_eq!(
        typed["response_format"],
        serde_json::json!({"type": "json_schema",
            "json_schema": {"name": "answer", "schema": {"type": "object"}, "strict": false}})
    );
}
