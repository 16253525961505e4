//! Chat Completions: the request body and the streamed chunks.

use arbor_protocol::{Message, ToolCall, Usage};
use serde_json::{Value, json};

use crate::error::ModelError;
use crate::provider::{FinishReason, ModelEvent, ModelRequest};

/// The streaming request body for `request`. `include_usage` asks for the final usage chunk
/// (`stream_options`; some servers refuse it); `max_tokens` bounds the answer. A thinking
/// level other than `off` is sent as `reasoning_effort` (the level's name).
pub fn request_body(
    request: &ModelRequest<'_>,
    include_usage: bool,
    max_tokens: Option<u32>,
) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if let Some(system) = request.system {
        messages.push(json!({"role": "system", "content": system}));
    }
    // After an assistant's tool calls, the API wants their results next: anything else
    // (an inbox message read meanwhile) waits until every call is answered.
    let mut awaiting: Vec<&str> = Vec::new();
    let mut held: Vec<Value> = Vec::new();
    for m in request.messages {
        if let Message::Tool(r) = m {
            awaiting.retain(|id| *id != r.call_id);
        }
        let value = match m {
            Message::System { content } => json!({"role": "system", "content": content}),
            Message::User { content } => json!({"role": "user", "content": content}),
            Message::Assistant {
                content,
                tool_calls,
            } => {
                // Null content only beside tool calls: an empty answer is "".
                let content = if content.is_empty() && !tool_calls.is_empty() {
                    Value::Null
                } else {
                    Value::from(content.as_str())
                };
                let mut v = json!({"role": "assistant", "content": content});
                // Its kept reasoning text, for servers that want it back in a tool loop
                // (the provider passes none unless configured to).
                let thought: Vec<&str> = tool_calls
                    .first()
                    .and_then(|c| request.reasoning.and_then(|r| r.get(&c.id)))
                    .into_iter()
                    .flatten()
                    .filter_map(|b| match b {
                        arbor_protocol::Reasoning::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect();
                if !thought.is_empty() {
                    v["reasoning_content"] = Value::from(thought.join("\n"));
                }
                if !tool_calls.is_empty() {
                    v["tool_calls"] = tool_calls
                        .iter()
                        .map(|c| {
                            json!({
                                "id": c.id,
                                "type": "function",
                                "function": {"name": c.name, "arguments": arguments_text(&c.arguments)},
                            })
                        })
                        .collect();
                }
                v
            }
            Message::Tool(r) => {
                json!({"role": "tool", "tool_call_id": r.call_id, "content": r.content})
            }
        };
        match m {
            Message::Tool(_) => messages.push(value),
            _ if !awaiting.is_empty() => held.push(value),
            Message::Assistant { tool_calls, .. } => {
                messages.append(&mut held);
                awaiting = tool_calls.iter().map(|c| c.id.as_str()).collect();
                messages.push(value);
            }
            _ => messages.push(value),
        }
        if awaiting.is_empty() {
            messages.append(&mut held);
        }
    }
    messages.append(&mut held);
    let mut body = json!({
        "model": request.model,
        "stream": true,
        "messages": messages,
    });
    if include_usage {
        body["stream_options"] = json!({"include_usage": true});
    }
    if let Some(n) = max_tokens {
        body["max_tokens"] = json!(n);
    }
    if let Some(effort) = request.thinking.and_then(|t| t.reasoning_effort()) {
        body["reasoning_effort"] = json!(effort);
    }
    // The answer constrained to the schema the runtime checks it against (not strict: a
    // strict schema must close every object and require every property).
    // A boolean schema (`true`) constrains nothing and is no object the API takes.
    if let Some(schema) = request.output_schema.filter(|s| s.is_object()) {
        body["response_format"] = json!({
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema, "strict": false},
        });
    }
    tools_and_controls(&mut body, request);
    body
}

/// The tools on offer and the controls.
fn tools_and_controls(body: &mut Value, request: &ModelRequest<'_>) {
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
                })
            })
            .collect();
        body["tool_choice"] = json!("auto");
    }
    if let Some(c) = request.controls {
        super::controls::openai(body, c, !request.tools.is_empty());
    }
}

/// Arguments as the string the API wants. Text that was not JSON goes back as `{}` (servers
/// that parse the history refuse it; the tool's result already told the model why).
fn arguments_text(v: &Value) -> String {
    match v {
        Value::String(raw) if serde_json::from_str::<Value>(raw).is_ok() => raw.clone(),
        Value::String(_) => "{}".to_owned(),
        other => other.to_string(),
    }
}

/// A tool call being assembled from deltas.
#[derive(Debug, Default)]
struct Partial {
    index: Option<u64>,
    id: Option<String>,
    name: String,
    args: String,
    object: Option<Value>,
}

/// Decodes the `data:` payloads of one streamed turn.
#[derive(Debug)]
pub struct ChunkDecoder {
    calls: Vec<Partial>,
    model: Option<String>,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
    /// The `reasoning_content` (or `reasoning`) streamed so far.
    reasoning: String,
    done: bool,
    size: super::TurnSize,
}

impl Default for ChunkDecoder {
    fn default() -> Self {
        Self::with_limit(super::DEFAULT_MAX_TURN_BYTES)
    }
}

use super::stream_error;

fn u64_of(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// The usage an OpenAI-style `usage` object reports: `prompt_tokens` already includes
/// cached tokens.
fn usage_of(u: &Value) -> Usage {
    let input = u64_of(&u["prompt_tokens"]);
    let output = u64_of(&u["completion_tokens"]);
    let cache_read = u["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .or_else(|| u["prompt_cache_hit_tokens"].as_u64())
        .unwrap_or(0);
    let cache_write = u["cache_write_tokens"]
        .as_u64()
        .or_else(|| u["cache_creation_tokens"].as_u64())
        .unwrap_or(0);
    Usage {
        input_tokens: input,
        output_tokens: output,
        total_tokens: u["total_tokens"]
            .as_u64()
            .unwrap_or(input.saturating_add(output)),
        cache_read_tokens: cache_read,
        cache_write_tokens: cache_write,
    }
    .normalized()
}

impl ChunkDecoder {
    /// A decoder for one turn, which may assemble [`DEFAULT_MAX_TURN_BYTES`](super::DEFAULT_MAX_TURN_BYTES).
    pub fn new() -> Self {
        Self::default()
    }

    /// A decoder for one turn that may assemble at most `max_turn_bytes` of text and tool
    /// calls; past it, the turn fails with [`ModelError::TooLarge`].
    pub fn with_limit(max_turn_bytes: usize) -> Self {
        Self {
            calls: Vec::new(),
            model: None,
            finish: None,
            usage: None,
            reasoning: String::new(),
            done: false,
            size: super::TurnSize::new(max_turn_bytes),
        }
    }

    /// The position of the call a delta continues, opened if new.
    fn slot(&mut self, index: Option<u64>, id: Option<&str>) -> usize {
        let pos = match (id, index) {
            // A new id opens a new call, whatever the index says (Ollama sends index 0 for
            // every parallel call).
            (Some(id), _) => self.calls.iter().position(|c| c.id.as_deref() == Some(id)),
            (None, Some(i)) => self.calls.iter().rposition(|c| c.index == Some(i)),
            (None, None) => self.calls.len().checked_sub(1),
        };
        match pos {
            Some(p) => p,
            None => {
                self.calls.push(Partial {
                    index,
                    id: id.map(str::to_owned),
                    ..Partial::default()
                });
                self.calls.len() - 1
            }
        }
    }

    /// Adds one tool-call delta to its call, counting what it adds against the cap.
    fn tool_delta(&mut self, c: &Value) -> Result<(), ModelError> {
        let id = c["id"].as_str();
        let opened = self.calls.len();
        let pos = self.slot(c["index"].as_u64(), id);
        if self.calls.len() > opened {
            let cost = super::PART_BYTES + id.map_or(0, str::len);
            self.size.add(cost, || "a new tool call".to_owned())?;
        }
        let name = c["function"]["name"]
            .as_str()
            .filter(|_| self.calls[pos].name.is_empty());
        let args = &c["function"]["arguments"];
        let cost = name.map_or(0, str::len)
            + match args {
                Value::String(s) => s.len(),
                Value::Object(_) => args.to_string().len(),
                _ => 0,
            };
        let calls = &self.calls;
        self.size.add(cost, || {
            let name = name.unwrap_or(calls[pos].name.as_str());
            format!("the arguments of tool call `{name}`")
        })?;
        let slot = &mut self.calls[pos];
        if let Some(name) = name {
            slot.name = name.to_owned();
        }
        match args {
            Value::String(s) => slot.args.push_str(s),
            Value::Object(_) => slot.object = Some(args.clone()),
            _ => {}
        }
        Ok(())
    }

    /// The tool calls, the usage and the finish, once the turn is complete.
    fn end(&mut self) -> Result<Vec<ModelEvent>, ModelError> {
        let Some(finish) = self.finish.take() else {
            return Err(stream_error("the stream ended before the final chunk"));
        };
        let reasoning = std::mem::take(&mut self.reasoning);
        let mut out: Vec<ModelEvent> = (!reasoning.trim().is_empty())
            .then_some(ModelEvent::Reasoning(arbor_protocol::Reasoning::Text {
                text: reasoning,
            }))
            .into_iter()
            .collect();
        out.extend(
            std::mem::take(&mut self.calls)
                .into_iter()
                .enumerate()
                .map(|(i, p)| {
                    ModelEvent::ToolCall(ToolCall {
                        // A server that names no id gets one unique in the run: a call id
                        // a later turn repeated would share its effect record and review.
                        id: p.id.unwrap_or_else(|| {
                            format!(
                                "call_{}_{}",
                                i + 1,
                                arbor_protocol::RunId::new().as_uuid().simple()
                            )
                        }),
                        name: p.name,
                        arguments: p.object.unwrap_or_else(|| super::arguments(&p.args)),
                    })
                }),
        );
        if let Some(u) = self.usage.take() {
            out.push(ModelEvent::Usage(u));
        }
        if let Some(m) = self.model.take() {
            out.push(ModelEvent::ResponseModel(m));
        }
        out.push(ModelEvent::Finished(finish));
        Ok(out)
    }
}

impl super::Decoder for ChunkDecoder {
    /// Decodes one `data:` payload.
    fn push(&mut self, data: &str) -> Result<Vec<ModelEvent>, ModelError> {
        if self.done {
            return Ok(Vec::new());
        }
        if data.trim() == "[DONE]" {
            self.done = true;
            return self.end();
        }
        let v: Value = serde_json::from_str(data)
            .map_err(|e| stream_error(format!("invalid chunk JSON: {e}")))?;
        if !v["error"].is_null() {
            let (message, _) = super::error_message(data.as_bytes());
            return Err(ModelError::Provider { message });
        }
        let mut out = Vec::new();
        if v["usage"].is_object() {
            self.usage = Some(usage_of(&v["usage"]));
        }
        if self.model.is_none() {
            self.model = super::model_name(&v["model"]);
        }
        let Some(choice) = v["choices"].as_array().and_then(|c| c.first()) else {
            return Ok(out);
        };
        let delta = &choice["delta"];
        // Reasoning models' thoughts: `reasoning_content` (DeepSeek, llama.cpp, vLLM) or
        // `reasoning` (OpenRouter, Ollama), kept whole until the turn ends.
        if let Some(part) = delta["reasoning_content"]
            .as_str()
            .filter(|p| !p.is_empty())
            .or_else(|| delta["reasoning"].as_str())
            && !part.is_empty()
        {
            self.size.add(part.len(), || "reasoning".to_owned())?;
            self.reasoning.push_str(part);
        }
        if let Some(text) = delta["content"].as_str()
            && !text.is_empty()
        {
            self.size.add(text.len(), || "text".to_owned())?;
            out.push(ModelEvent::TextDelta(text.to_owned()));
        }
        if let Some(calls) = delta["tool_calls"].as_array() {
            for c in calls {
                self.tool_delta(c)?;
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str()
            && !reason.is_empty()
        {
            self.finish = Some(match reason {
                "stop" if !self.calls.is_empty() => FinishReason::ToolCalls,
                "stop" => FinishReason::Stop,
                "tool_calls" | "function_call" => FinishReason::ToolCalls,
                "length" => FinishReason::Length,
                "content_filter" => FinishReason::Refusal,
                other => FinishReason::Other(other.to_owned()),
            });
        }
        Ok(out)
    }

    /// The stream closed: a turn that saw its finish reason ends (servers that send no
    /// `[DONE]`); one that did not is truncated.
    fn finish(&mut self) -> Result<Vec<ModelEvent>, ModelError> {
        if self.done {
            return Ok(Vec::new());
        }
        self.done = true;
        self.end()
    }
}

#[cfg(test)]
mod tests;
