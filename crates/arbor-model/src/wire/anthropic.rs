//! The Messages API: the request body and the streamed events.

use arbor_protocol::{Message, ToolCall, Usage};
use serde_json::{Value, json};

use crate::cache::Cache;
use crate::error::ModelError;
use crate::provider::{FinishReason, ModelEvent, ModelRequest};

/// Whether the conversation continues a tool loop: its last assistant message called
/// tools. With thinking enabled the API wants that message to start with its signed
/// thinking block, which the transcript does not keep, so such a request asks for no
/// thinking (the loop's first call thought; its continuations do not).
fn in_tool_loop(messages: &[Message]) -> bool {
    messages.iter().rev().find_map(|m| match m {
        Message::Assistant { tool_calls, .. } => Some(!tool_calls.is_empty()),
        _ => None,
    }) == Some(true)
}

/// The streaming request body for `request`, asking for at most `max_tokens` (required by
/// the API), without cache breakpoints ([`request_body_with`]).
pub fn request_body(request: &ModelRequest<'_>, max_tokens: u32) -> Value {
    request_body_with(request, max_tokens, Cache::Off)
}

/// The breakpoint every cached block carries.
fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// The streaming request body for `request`, asking for at most `max_tokens` (required by
/// the API). A thinking level other than `off` adds `thinking: {type: enabled,
/// budget_tokens}` and raises `max_tokens` by the budget, except while a tool loop goes on
/// (see `in_tool_loop`).
///
/// With [`Cache::Auto`] it sets Anthropic's prompt-cache breakpoints
/// (`cache_control: {type: ephemeral}`, at most three of the four allowed), in the order
/// the cache reads a prompt: on the last tool (the tool list), on the system prompt (sent
/// as one text block) and on the last block of the last message (the conversation so far,
/// which the run's next turn extends).
pub fn request_body_with(request: &ModelRequest<'_>, max_tokens: u32, cache: Cache) -> Value {
    let max_tokens = request
        .controls
        .and_then(|c| c.max_output_tokens)
        .unwrap_or(max_tokens);
    let mut messages: Vec<Value> = Vec::new();
    // Blocks of the user message being built: tool results first, then text.
    let mut user: Vec<Value> = Vec::new();
    let flush = |user: &mut Vec<Value>, messages: &mut Vec<Value>| {
        if !user.is_empty() {
            messages.push(json!({"role": "user", "content": std::mem::take(user)}));
        }
    };
    for m in request.messages {
        match m {
            Message::System { content } if !content.trim().is_empty() => {
                user.push(json!({"type": "text", "text": format!("[system] {content}")}));
            }
            Message::User { content } if !content.trim().is_empty() => {
                user.push(json!({"type": "text", "text": content}));
            }
            Message::Tool(r) => {
                let mut block =
                    json!({"type": "tool_result", "tool_use_id": r.call_id, "content": r.content});
                if r.is_error {
                    block["is_error"] = json!(true);
                }
                // Results answer the assistant message just before: they lead the user turn.
                let at = user
                    .iter()
                    .position(|b| b["type"] != "tool_result")
                    .unwrap_or(user.len());
                user.insert(at, block);
            }
            Message::Assistant {
                content,
                tool_calls,
            } => {
                flush(&mut user, &mut messages);
                let mut blocks = Vec::new();
                if !content.trim().is_empty() {
                    blocks.push(json!({"type": "text", "text": content.trim_end()}));
                }
                for c in tool_calls {
                    let input = if c.arguments.is_object() {
                        c.arguments.clone()
                    } else {
                        json!({})
                    };
                    blocks.push(
                        json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                    );
                }
                if !blocks.is_empty() {
                    messages.push(json!({"role": "assistant", "content": blocks}));
                }
            }
            _ => {}
        }
    }
    flush(&mut user, &mut messages);
    let mut body = json!({
        "model": request.model,
        "max_tokens": max_tokens,
        "stream": true,
        "messages": messages,
    });
    if let Some(system) = request.system {
        body["system"] = json!(system);
    }
    if let Some(budget) = request.thinking.and_then(|t| t.budget_tokens())
        && !in_tool_loop(request.messages)
    {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        // The budget comes out of `max_tokens`: the answer keeps what was configured.
        body["max_tokens"] = json!(max_tokens.saturating_add(budget));
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
    }
    if let Some(c) = request.controls {
        super::controls::anthropic(&mut body, c, !request.tools.is_empty());
    }
    if cache == Cache::Auto {
        breakpoints(&mut body);
    }
    body
}

/// Sets the cache breakpoints of [`Cache::Auto`] on a built body.
fn breakpoints(body: &mut Value) {
    if let Some(last) = body["tools"].as_array_mut().and_then(|t| t.last_mut()) {
        last["cache_control"] = ephemeral();
    }
    if let Some(system) = body["system"].as_str().map(str::to_owned) {
        body["system"] = json!([{"type": "text", "text": system, "cache_control": ephemeral()}]);
    }
    if let Some(last) = body["messages"]
        .as_array_mut()
        .and_then(|m| m.last_mut())
        .and_then(|m| m["content"].as_array_mut())
        .and_then(|c| c.last_mut())
    {
        last["cache_control"] = ephemeral();
    }
}

#[derive(Debug, Default)]
struct Block {
    tool: Option<(String, String)>,
    json: String,
}

/// Decodes the events of one streamed turn.
#[derive(Debug)]
pub struct EventDecoder {
    blocks: Vec<(u64, Block)>,
    model: Option<String>,
    input: u64,
    cache_read: u64,
    cache_write: u64,
    output: u64,
    saw_usage: bool,
    stop: Option<FinishReason>,
    done: bool,
    size: super::TurnSize,
}

impl Default for EventDecoder {
    fn default() -> Self {
        Self::with_limit(super::DEFAULT_MAX_TURN_BYTES)
    }
}

use super::stream_error;

impl EventDecoder {
    /// A decoder for one turn, which may assemble [`DEFAULT_MAX_TURN_BYTES`](super::DEFAULT_MAX_TURN_BYTES).
    pub fn new() -> Self {
        Self::default()
    }

    /// A decoder for one turn that may assemble at most `max_turn_bytes` of text and tool
    /// calls; past it, the turn fails with [`ModelError::TooLarge`].
    pub fn with_limit(max_turn_bytes: usize) -> Self {
        Self {
            blocks: Vec::new(),
            model: None,
            input: 0,
            cache_read: 0,
            cache_write: 0,
            output: 0,
            saw_usage: false,
            stop: None,
            done: false,
            size: super::TurnSize::new(max_turn_bytes),
        }
    }

    fn take_usage(&mut self, u: &Value) {
        if let Some(v) = u["input_tokens"].as_u64() {
            self.input = v;
            self.saw_usage = true;
        }
        if let Some(v) = u["cache_read_input_tokens"].as_u64() {
            self.cache_read = v;
        }
        if let Some(v) = u["cache_creation_input_tokens"].as_u64() {
            self.cache_write = v;
        }
        if let Some(v) = u["output_tokens"].as_u64() {
            self.output = v;
            self.saw_usage = true;
        }
    }

    /// Usage (the whole prompt: Anthropic counts cache reads and writes apart from
    /// `input_tokens`) and the finish.
    fn end(&mut self, mut out: Vec<ModelEvent>) -> Result<Vec<ModelEvent>, ModelError> {
        let Some(stop) = self.stop.take() else {
            return Err(stream_error("the stream ended before message_stop"));
        };
        if self.saw_usage {
            // Counts come from the network: a sum past u64::MAX saturates.
            let input = self
                .input
                .saturating_add(self.cache_read)
                .saturating_add(self.cache_write);
            out.push(ModelEvent::Usage(Usage {
                input_tokens: input,
                output_tokens: self.output,
                total_tokens: input.saturating_add(self.output),
                cache_read_tokens: self.cache_read,
                cache_write_tokens: self.cache_write,
            }));
        }
        if let Some(m) = self.model.take() {
            out.push(ModelEvent::ResponseModel(m));
        }
        out.push(ModelEvent::Finished(stop));
        Ok(out)
    }
}

impl super::Decoder for EventDecoder {
    /// Decodes one event's `data:` payload.
    fn push(&mut self, data: &str) -> Result<Vec<ModelEvent>, ModelError> {
        if self.done {
            return Ok(Vec::new());
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| stream_error(format!("invalid event JSON: {e}")))?;
        let mut out = Vec::new();
        match v["type"].as_str().unwrap_or_default() {
            "message_start" => {
                self.model = super::model_name(&v["message"]["model"]);
                self.take_usage(&v["message"]["usage"]);
            }
            "content_block_start" => {
                let index = v["index"].as_u64().unwrap_or(0);
                let b = &v["content_block"];
                let tool = (b["type"] == "tool_use").then(|| {
                    (
                        b["id"].as_str().unwrap_or_default().to_owned(),
                        b["name"].as_str().unwrap_or_default().to_owned(),
                    )
                });
                let cost = super::PART_BYTES + tool.as_ref().map_or(0, |(i, n)| i.len() + n.len());
                self.size.add(cost, || "a new content block".to_owned())?;
                self.blocks.push((
                    index,
                    Block {
                        tool,
                        json: String::new(),
                    },
                ));
            }
            "content_block_delta" => {
                let index = v["index"].as_u64().unwrap_or(0);
                let d = &v["delta"];
                match d["type"].as_str().unwrap_or_default() {
                    "text_delta" => {
                        if let Some(t) = d["text"].as_str()
                            && !t.is_empty()
                        {
                            self.size.add(t.len(), || "text".to_owned())?;
                            out.push(ModelEvent::TextDelta(t.to_owned()));
                        }
                    }
                    "input_json_delta" => {
                        if let Some((_, b)) =
                            self.blocks.iter_mut().rev().find(|(i, _)| *i == index)
                        {
                            let part = d["partial_json"].as_str().unwrap_or_default();
                            self.size.add(part.len(), || {
                                let name = b.tool.as_ref().map_or("", |(_, n)| n.as_str());
                                format!("the arguments of tool call `{name}`")
                            })?;
                            b.json.push_str(part);
                        }
                    }
                    _ => {}
                }
            }
            "content_block_stop" => {
                let index = v["index"].as_u64().unwrap_or(0);
                if let Some(pos) = self.blocks.iter().rposition(|(i, _)| *i == index) {
                    let (_, block) = self.blocks.remove(pos);
                    if let Some((id, name)) = block.tool {
                        out.push(ModelEvent::ToolCall(ToolCall {
                            id,
                            name,
                            arguments: super::arguments(&block.json),
                        }));
                    }
                }
            }
            "message_delta" => {
                self.take_usage(&v["usage"]);
                if let Some(r) = v["delta"]["stop_reason"].as_str() {
                    self.stop = Some(match r {
                        "end_turn" | "stop_sequence" => FinishReason::Stop,
                        "tool_use" => FinishReason::ToolCalls,
                        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
                        "refusal" => FinishReason::Refusal,
                        other => FinishReason::Other(other.to_owned()),
                    });
                }
            }
            "message_stop" => {
                self.done = true;
                return self.end(out);
            }
            "error" => {
                let e = &v["error"];
                return Err(ModelError::Provider {
                    message: format!(
                        "{}: {}",
                        e["type"].as_str().unwrap_or("error"),
                        e["message"].as_str().unwrap_or("(no message)")
                    ),
                });
            }
            _ => {}
        }
        Ok(out)
    }

    /// The stream closed: complete once a stop reason came (a missing `message_stop` is
    /// tolerated), truncated otherwise.
    fn finish(&mut self) -> Result<Vec<ModelEvent>, ModelError> {
        if self.done {
            return Ok(Vec::new());
        }
        self.done = true;
        self.end(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolSpec;

    fn decode(bytes: &[u8], split: usize) -> Result<Vec<ModelEvent>, ModelError> {
        crate::wire::decode_split(EventDecoder::new(), bytes, split)
    }

    #[test]
    fn text_tool_use_and_usage_with_cache_tokens() {
        let bytes = include_bytes!("../../tests/fixtures/anthropic/tools.sse");
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
            include_bytes!("../../tests/fixtures/llamacpp/anthropic_text.sse"),
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
        let bytes = include_bytes!("../../tests/fixtures/anthropic/tools.sse");
        // Two blocks (64 bytes each), the text (15), the tool's id (30), name (11) and
        // arguments (17).
        let need = 2 * 64 + 15 + 30 + 11 + 17;
        let events = crate::wire::decode_split(EventDecoder::with_limit(need), bytes, 0).unwrap();
        assert_eq!(events.len(), 6);
        let e =
            crate::wire::decode_split(EventDecoder::with_limit(need - 1), bytes, 0).unwrap_err();
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
        let text = include_str!("../../tests/fixtures/anthropic/tools.sse");
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
}
