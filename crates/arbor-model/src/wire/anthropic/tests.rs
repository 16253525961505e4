//! The Messages wire: decoding recorded streams, building request bodies.
use super::*;
use crate::provider::ToolSpec;

fn decode(bytes: &[u8], split: usize) -> Result<Vec<ModelEvent>, ModelError> {
    crate::wire::decode_split(EventDecoder::new(), bytes, split)
}

#[test]
fn text_tool_use_and_usage_with_cache_tokens() {
    let bytes = include_bytes!("../../../tests/fixtures/anthropic/tools.sse");
    let whole = decode(bytes, 0).unwrap();
    for split in 1..bytes.len() {
        assert_eq!(decode(bytes, split).unwrap(), whole, "split at {split}");
    }
    assert_eq!(
        whole,
        [
            ModelEvent::TextDelta("Checking ".into()),
            ModelEvent::TextDelta("Paris.".into()),
            ModelEvent::ToolCall(ToolCall {
                id: "toolu_01KFbKqPYSuAKujiL6mTfzYA".into(),
                name: "get_weather".into(),
                arguments: json!({"city": "Paris"}),
            }),
            ModelEvent::Usage(Usage {
                input_tokens: 6145,
                output_tokens: 47,
                total_tokens: 6192,
                cache_read_tokens: 4096,
                cache_write_tokens: 1200
            }),
            ModelEvent::ResponseModel("claude-haiku-4-5-20251001".into()),
            ModelEvent::Finished(FinishReason::ToolCalls),
        ]
    );
}

#[test]
fn a_real_llama_cpp_messages_stream_decodes() {
    let events = decode(
        include_bytes!("../../../tests/fixtures/llamacpp/anthropic_text.sse"),
        0,
    )
    .unwrap();
    assert!(matches!(events.first(), Some(ModelEvent::TextDelta(_))));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, ModelEvent::Usage(u) if u.output_tokens > 0))
    );
    assert!(matches!(events.last(), Some(ModelEvent::Finished(_))));
}

#[test]
fn a_turn_past_its_cap_fails_as_too_large() {
    let bytes = include_bytes!("../../../tests/fixtures/anthropic/tools.sse");
    // Two blocks (64 bytes each), the text (15), the tool's id (30), name (11) and
    // arguments (17).
    let need = 2 * 64 + 15 + 30 + 11 + 17;
    let events = crate::wire::decode_split(EventDecoder::with_limit(need), bytes, 0).unwrap();
    assert_eq!(events.len(), 6);
    let e = crate::wire::decode_split(EventDecoder::with_limit(need - 1), bytes, 0).unwrap_err();
    assert_eq!(
        e,
        ModelError::TooLarge {
            limit: 200,
            message: "the arguments of tool call `get_weather` took the turn past 200 bytes \
                      of text and tool calls"
                .into()
        }
    );
    let e = crate::wire::decode_split(EventDecoder::with_limit(70), bytes, 0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "answer too large: text took the turn past 70 bytes of text and tool calls"
    );
}

#[test]
fn token_counts_near_u64_max_saturate_instead_of_overflowing() {
    // Found by the anthropic_stream fuzz target: input, cache reads and cache writes are
    // added up for the whole prompt, and the sum overflowed (a panic in debug builds, a
    // wrapped count in release).
    let s = "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":18446744073709551615,\"cache_read_input_tokens\":7,\"cache_creation_input_tokens\":1}}}\n\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":3}}\n\n";
    let events = decode(s.as_bytes(), 0).unwrap();
    assert_eq!(
        events,
        [
            ModelEvent::Usage(Usage {
                input_tokens: u64::MAX,
                output_tokens: 3,
                total_tokens: u64::MAX,
                cache_read_tokens: 7,
                cache_write_tokens: 1,
            }),
            ModelEvent::Finished(FinishReason::Stop),
        ]
    );
}

#[test]
fn errors_and_truncation_are_classified() {
    let e = decode(b"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3}}}\n\nevent: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", 0).unwrap_err();
    assert_eq!(
        e,
        ModelError::Provider {
            message: "overloaded_error: Overloaded".into()
        }
    );
    let text = include_str!("../../../tests/fixtures/anthropic/tools.sse");
    let cut = &text[..text.find("event: content_block_stop").unwrap()];
    let e = decode(cut.as_bytes(), 0).unwrap_err();
    assert_eq!(
        e.to_string(),
        "provider stream failed: the stream ended before message_stop"
    );
    // A tool_use with no argument text: an empty object.
    let s = "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"now\",\"input\":{}}}\n\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"},\"usage\":{\"output_tokens\":4}}\n\n";
    let events = decode(s.as_bytes(), 0).unwrap();
    assert_eq!(
        events[0],
        ModelEvent::ToolCall(ToolCall {
            id: "t".into(),
            name: "now".into(),
            arguments: json!({})
        })
    );
    assert_eq!(
        events.last(),
        Some(&ModelEvent::Finished(FinishReason::ToolCalls))
    );
}

#[test]
fn request_bodies_group_tool_results_before_the_inbox_text() {
    let messages = vec![
        Message::user("Weather?"),
        Message::Assistant {
            content: "Checking.".into(),
            tool_calls: vec![
                ToolCall {
                    id: "t1".into(),
                    name: "w".into(),
                    arguments: json!({"city": "Paris"}),
                },
                ToolCall {
                    id: "t2".into(),
                    name: "w".into(),
                    arguments: Value::String("{bad".into()),
                },
            ],
        },
        Message::Tool(arbor_protocol::ToolResult {
            call_id: "t1".into(),
            name: "w".into(),
            content: "18C".into(),
            is_error: false,
        }),
        Message::user("[from child:x] hi"),
        Message::Tool(arbor_protocol::ToolResult {
            call_id: "t2".into(),
            name: "w".into(),
            content: "bad args".into(),
            is_error: true,
        }),
        Message::System {
            content: "be brief".into(),
        },
    ];
    let tools = vec![ToolSpec {
        name: "w".into(),
        description: "d".into(),
        parameters: json!({"type": "object"}),
    }];
    let body = request_body(
        &ModelRequest {
            model: "claude",
            system: Some("root"),
            messages: &messages,
            tools: &tools,
            thinking: None,
            controls: None,
            reasoning: None,
            output_schema: None,
            session: None,
        },
        4096,
    );
    assert_eq!(body["system"], "root");
    assert_eq!(body["max_tokens"], 4096);
    assert_eq!(body["tools"][0]["input_schema"], json!({"type": "object"}));
    let m = body["messages"].as_array().unwrap();
    assert_eq!(m.len(), 3);
    assert_eq!(
        m[1]["content"][2],
        json!({"type": "tool_use", "id": "t2", "name": "w", "input": {}})
    );
    let kinds: Vec<&str> = m[2]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["tool_result", "tool_result", "text", "text"]);
    assert_eq!(m[2]["content"][1]["is_error"], true);
    assert_eq!(m[2]["content"][3]["text"], "[system] be brief");
}

#[test]
fn thinking_is_a_budget_outside_tool_loops() {
    use crate::ThinkingLevel;
    let asked = vec![Message::user("plan it")];
    let body_for = |messages: &[Message], thinking| {
        request_body(
            &ModelRequest {
                model: "claude",
                system: None,
                messages,
                tools: &[],
                thinking,
                controls: None,
                reasoning: None,
                output_schema: None,
                session: None,
            },
            4096,
        )
    };
    let body = body_for(&asked, Some(ThinkingLevel::High));
    assert_eq!(
        body["thinking"],
        json!({"type": "enabled", "budget_tokens": 16384})
    );
    assert_eq!(body["max_tokens"], 4096 + 16384);
    let body = body_for(&asked, Some(ThinkingLevel::Minimal));
    assert_eq!(body["thinking"]["budget_tokens"], 1024);
    for t in [None, Some(ThinkingLevel::Off)] {
        let body = body_for(&asked, t);
        assert!(body.get("thinking").is_none(), "{body}");
        assert_eq!(body["max_tokens"], 4096);
    }
    // Continuing a tool loop: the unsigned assistant turn cannot carry thinking.
    let looping = vec![
        Message::user("plan it"),
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "t1".into(),
                name: "w".into(),
                arguments: json!({}),
            }],
        },
        Message::Tool(arbor_protocol::ToolResult {
            call_id: "t1".into(),
            name: "w".into(),
            content: "ok".into(),
            is_error: false,
        }),
    ];
    let body = body_for(&looping, Some(ThinkingLevel::High));
    assert!(body.get("thinking").is_none(), "{body}");
    assert_eq!(body["max_tokens"], 4096);
    // A new user turn after an answer thinks again.
    let mut next = looping.clone();
    next.push(Message::assistant("done"));
    next.push(Message::user("again"));
    let body = body_for(&next, Some(ThinkingLevel::Low));
    assert_eq!(body["thinking"]["budget_tokens"], 2048);
}

#[test]
fn thinking_blocks_decode_with_their_signature_and_redacted_ones_as_they_are() {
    let bytes = include_bytes!("../../../tests/fixtures/anthropic/thinking.sse");
    let whole = decode(bytes, 0).unwrap();
    for split in [1, 7, 64, 300, bytes.len() - 3] {
        assert_eq!(decode(bytes, split).unwrap(), whole, "split at {split}");
    }
    assert_eq!(
        whole[..3],
        [
            ModelEvent::Reasoning(Reasoning::Thinking {
                thinking: "The user wants Paris weather; call get_weather.".into(),
                signature: "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds".into(),
            }),
            ModelEvent::Reasoning(Reasoning::RedactedThinking {
                data: "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP".into(),
            }),
            ModelEvent::ToolCall(ToolCall {
                id: "toolu_01Thk".into(),
                name: "get_weather".into(),
                arguments: json!({"city": "Paris"}),
            }),
        ]
    );
}

#[test]
fn a_tool_loop_sends_its_kept_thinking_back_first_and_thinks_on() {
    use crate::ThinkingLevel;
    let call = ToolCall {
        id: "toolu_01Thk".into(),
        name: "get_weather".into(),
        arguments: json!({"city": "Paris"}),
    };
    let messages = vec![
        Message::user("Weather in Paris?"),
        Message::Assistant {
            content: String::new(),
            tool_calls: vec![call],
        },
        Message::Tool(arbor_protocol::ToolResult {
            call_id: "toolu_01Thk".into(),
            name: "get_weather".into(),
            content: "18C".into(),
            is_error: false,
        }),
    ];
    let mut kept = crate::Reasonings::new();
    kept.insert(
        "toolu_01Thk".into(),
        vec![
            Reasoning::Thinking {
                thinking: "call get_weather".into(),
                signature: "sig".into(),
            },
            Reasoning::RedactedThinking { data: "enc".into() },
            Reasoning::Text {
                text: "never sent".into(),
            },
        ],
    );
    let request = ModelRequest::new("claude", &messages)
        .thinking(Some(ThinkingLevel::Low))
        .reasoning(Some(&kept));
    let body = request_body(&request, 4096);
    assert_eq!(
        body["messages"][1]["content"],
        json!([
            {"type": "thinking", "thinking": "call get_weather", "signature": "sig"},
            {"type": "redacted_thinking", "data": "enc"},
            {"type": "tool_use", "id": "toolu_01Thk", "name": "get_weather",
             "input": {"city": "Paris"}}
        ])
    );
    assert_eq!(body["thinking"]["budget_tokens"], 2048);
    // A request that does not think sends no thinking block back.
    let body = request_body(&request.thinking(None), 4096);
    assert_eq!(body["messages"][1]["content"][0]["type"], "tool_use");
    assert!(body.get("thinking").is_none());
}

#[test]
fn a_blank_system_prompt_is_left_out_and_carries_no_breakpoint() {
    let messages = vec![Message::user("hi")];
    let request = ModelRequest::new("claude", &messages).system(Some("  "));
    let body = request_body_with(&request, 1024, crate::Cache::Auto);
    assert!(body.get("system").is_none(), "{body}");
    assert_eq!(
        body["messages"][0]["content"][0]["cache_control"]["type"],
        "ephemeral"
    );
}
