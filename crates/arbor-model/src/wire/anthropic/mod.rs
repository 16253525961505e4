//! The Messages API: the request body and the streamed events.

use arbor_protocol::{Message, Reasoning, ToolCall, Usage};
use serde_json::{Value, json};

use crate::cache::Cache;
use crate::error::ModelError;
use crate::provider::{FinishReason, ModelEvent, ModelRequest};

/// The signed reasoning blocks kept for an assistant message that called `calls`, as
/// Messages content blocks (they lead its content).
fn signed_blocks(request: &ModelRequest<'_>, calls: &[ToolCall]) -> Vec<Value> {
    let Some(kept) = calls
        .first()
        .and_then(|c| request.reasoning.and_then(|r| r.get(&c.id)))
    else {
        return Vec::new();
    };
    kept.iter()
        .filter_map(|b| match b {
            Reasoning::Thinking {
                thinking,
                signature,
            } => Some(json!({"type": "thinking", "thinking": thinking, "signature": signature})),
            Reasoning::RedactedThinking { data } => {
                Some(json!({"type": "redacted_thinking", "data": data}))
            }
            Reasoning::Text { .. } => None,
        })
        .collect()
}

/// Whether the conversation continues a tool loop whose last assistant message has no
/// signed thinking kept. With thinking enabled the API wants that message to start with
/// its signed thinking block, so such a request asks for no thinking (a loop whose
/// blocks were kept, [`ModelRequest::reasoning`], thinks on every turn).
fn loop_without_thinking(request: &ModelRequest<'_>) -> bool {
    request.messages.iter().rev().find_map(|m| match m {
        Message::Assistant { tool_calls, .. } => {
            Some(!tool_calls.is_empty() && signed_blocks(request, tool_calls).is_empty())
        }
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
/// (see `loop_without_thinking`).
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
    let budget = request
        .thinking
        .and_then(|t| t.budget_tokens())
        .filter(|_| !loop_without_thinking(request));
    let thinks = budget.is_some();
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
                // Its thinking first, as the API wants it back in a tool loop (only to a
                // request that thinks).
                let mut blocks = if thinks {
                    signed_blocks(request, tool_calls)
                } else {
                    Vec::new()
                };
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
    // A blank system prompt is left out (an empty text block cannot carry a breakpoint).
    if let Some(system) = request.system.filter(|s| !s.trim().is_empty()) {
        body["system"] = json!(system);
    }
    if let Some(budget) = budget {
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
    /// A thinking block's text and signature, as they stream.
    thinking: Option<(String, String)>,
    /// A redacted thinking block's data.
    redacted: Option<String>,
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

    /// A content block opens: text, a tool call, a thinking or a redacted thinking block.
    fn block_start(&mut self, v: &Value) -> Result<(), ModelError> {
        let index = v["index"].as_u64().unwrap_or(0);
        let b = &v["content_block"];
        let tool = (b["type"] == "tool_use").then(|| {
            (
                b["id"].as_str().unwrap_or_default().to_owned(),
                b["name"].as_str().unwrap_or_default().to_owned(),
            )
        });
        let thinking = (b["type"] == "thinking").then(|| {
            (
                b["thinking"].as_str().unwrap_or_default().to_owned(),
                b["signature"].as_str().unwrap_or_default().to_owned(),
            )
        });
        let redacted = (b["type"] == "redacted_thinking")
            .then(|| b["data"].as_str().unwrap_or_default().to_owned());
        let cost = super::PART_BYTES
            + tool.as_ref().map_or(0, |(i, n)| i.len() + n.len())
            + thinking.as_ref().map_or(0, |(t, s)| t.len() + s.len())
            + redacted.as_ref().map_or(0, String::len);
        self.size.add(cost, || "a new content block".to_owned())?;
        self.blocks.push((
            index,
            Block {
                tool,
                json: String::new(),
                thinking,
                redacted,
            },
        ));
        Ok(())
    }

    /// A delta of an open block.
    fn block_delta(&mut self, v: &Value, out: &mut Vec<ModelEvent>) -> Result<(), ModelError> {
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
            kind @ ("thinking_delta" | "signature_delta") => {
                let field = if kind == "thinking_delta" {
                    "thinking"
                } else {
                    "signature"
                };
                let part = d[field].as_str().unwrap_or_default();
                self.size.add(part.len(), || "thinking".to_owned())?;
                if let Some((_, b)) = self.blocks.iter_mut().rev().find(|(i, _)| *i == index)
                    && let Some((text, signature)) = b.thinking.as_mut()
                {
                    if kind == "thinking_delta" {
                        text.push_str(part);
                    } else {
                        signature.push_str(part);
                    }
                }
            }
            "input_json_delta" => {
                if let Some((_, b)) = self.blocks.iter_mut().rev().find(|(i, _)| *i == index) {
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
        Ok(())
    }

    /// A block closes: a thinking block or a tool call is complete.
    fn block_stop(&mut self, v: &Value, out: &mut Vec<ModelEvent>) {
        let index = v["index"].as_u64().unwrap_or(0);
        if let Some(pos) = self.blocks.iter().rposition(|(i, _)| *i == index) {
            let (_, block) = self.blocks.remove(pos);
            if let Some((thinking, signature)) = block.thinking {
                // A block without a signature (some compatible servers) cannot be sent
                // back: it is kept as text.
                out.push(ModelEvent::Reasoning(if signature.is_empty() {
                    Reasoning::Text { text: thinking }
                } else {
                    Reasoning::Thinking {
                        thinking,
                        signature,
                    }
                }));
            }
            if let Some(data) = block.redacted {
                out.push(ModelEvent::Reasoning(Reasoning::RedactedThinking { data }));
            }
            if let Some((id, name)) = block.tool {
                out.push(ModelEvent::ToolCall(ToolCall {
                    id,
                    name,
                    arguments: super::arguments(&block.json),
                }));
            }
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
            "content_block_start" => self.block_start(&v)?,
            "content_block_delta" => self.block_delta(&v, &mut out)?,
            "content_block_stop" => self.block_stop(&v, &mut out),
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
mod tests;
