//! The scripted provider: plays an agent's turns from a script.
//!
//! A string argument of the exact form `${<call id>.<field>}` is replaced by that field of the
//! JSON result of an earlier tool call in the transcript (for example
//! `${call_1_1.delegation_id}` to wait for a child spawned in turn 1), so scripts can use
//! ids the runtime makes up.
//!
//! Which turn to play is read from the request itself: the number of assistant messages in the
//! transcript so far. The provider therefore keeps no state, two sessions of one agent each
//! play the script from its start, and a session rebuilt from its transcript goes on where it
//! stopped.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::{Message, ToolCall, Usage};
use async_trait::async_trait;
use futures::StreamExt;
use futures::stream;
use serde::{Deserialize, Serialize};

use crate::error::ModelError;
use crate::provider::{FinishReason, ModelEvent, ModelProvider, ModelRequest, ModelStream};
use crate::thinking::ThinkingLevel;

/// A tool call a scripted turn makes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedToolCall {
    /// Call id; defaults to `call_<turn>_<index>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The tool to call.
    pub name: String,
    /// The arguments, passed to the tool as they are (so they may be malformed on purpose).
    #[serde(default = "empty_object")]
    pub arguments: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

/// One scripted model turn.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScriptedTurn {
    /// The text the model answers with.
    pub text: String,
    /// Tool calls the model makes, in order.
    pub tool_calls: Vec<ScriptedToolCall>,
    /// The usage the turn reports. Without it, a deterministic estimate is reported: a token
    /// for every 4 characters of prompt and of output.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Milliseconds to wait before the turn streams.
    pub delay_ms: u64,
    /// Fail the provider call with this message instead of answering.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fail: Option<String>,
    /// Never answer: the call hangs until it is cancelled.
    pub hang: bool,
    /// Finish as a provider that cut the answer off at its output cap does
    /// (`finish_reason: length`).
    pub truncated: bool,
}

impl ScriptedTurn {
    /// A turn that answers `text`.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            ..Self::default()
        }
    }

    /// A turn that calls one tool.
    pub fn tool_call(name: impl Into<String>, arguments: serde_json::Value) -> Self {
        Self {
            tool_calls: vec![ScriptedToolCall {
                id: None,
                name: name.into(),
                arguments,
            }],
            ..Self::default()
        }
    }

    /// The same turn, cut off at the provider's output cap (`finish_reason: length`).
    pub fn cut_off(mut self) -> Self {
        self.truncated = true;
        self
    }

    /// The same turn reporting `input` prompt and `output` completion tokens.
    pub fn with_usage(mut self, input: u64, output: u64) -> Self {
        self.usage = Some(Usage::new(input, output));
        self
    }

    /// The same turn after a delay.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self
    }
}

/// The turns of one agent, played in order. Built with [`Script::new`] and its setters (a
/// field added later is not a breaking change).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct Script {
    /// The turns.
    pub turns: Vec<ScriptedTurn>,
    /// When the turns run out, play the last one again instead of failing.
    pub repeat_last: bool,
    /// The models this script offers: the preflight refuses any other. Empty offers every
    /// model.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// The thinking levels each model supports (by model id). A model not named here
    /// declares none.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub thinking: BTreeMap<String, Vec<ThinkingLevel>>,
}

impl Script {
    /// A script of these turns.
    pub fn new(turns: impl IntoIterator<Item = ScriptedTurn>) -> Self {
        Self {
            turns: turns.into_iter().collect(),
            repeat_last: false,
            models: Vec::new(),
            thinking: BTreeMap::new(),
        }
    }

    /// Plays the last turn again when the turns run out (instead of failing).
    #[must_use]
    pub fn repeat_last(mut self, repeat: bool) -> Self {
        self.repeat_last = repeat;
        self
    }

    /// Offers only these models (the preflight refuses any other).
    #[must_use]
    pub fn models(mut self, models: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.models = models.into_iter().map(Into::into).collect();
        self
    }

    /// Declares the thinking levels `model` supports.
    #[must_use]
    pub fn thinking(
        mut self,
        model: impl Into<String>,
        levels: impl IntoIterator<Item = ThinkingLevel>,
    ) -> Self {
        self.thinking
            .insert(model.into(), levels.into_iter().collect());
        self
    }
}

/// Plays a [`Script`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ScriptedProvider {
    script: Arc<Script>,
}

impl ScriptedProvider {
    /// A provider playing `script`.
    pub fn new(script: Script) -> Self {
        Self {
            script: Arc::new(script),
        }
    }

    /// The script played.
    pub fn script(&self) -> &Script {
        &self.script
    }

    fn turn_for(&self, request: &ModelRequest<'_>) -> Result<(usize, &ScriptedTurn), ModelError> {
        let index = request
            .messages
            .iter()
            .filter(|m| matches!(m, Message::Assistant { .. }))
            .count();
        let turns = &self.script.turns;
        let turn = match turns.get(index) {
            Some(turn) => turn,
            None if self.script.repeat_last && !turns.is_empty() => &turns[turns.len() - 1],
            None => {
                return Err(ModelError::ScriptExhausted {
                    turn: index + 1,
                    available: turns.len(),
                });
            }
        };
        Ok((index, turn))
    }
}

fn estimate_tokens(chars: usize) -> u64 {
    (chars as u64).div_ceil(4)
}

fn prompt_chars(request: &ModelRequest<'_>) -> usize {
    let system = request.system.map_or(0, str::len);
    let messages: usize = request
        .messages
        .iter()
        .map(|m| match m {
            Message::Assistant {
                content,
                tool_calls,
            } => {
                content.len()
                    + tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.to_string().len())
                        .sum::<usize>()
            }
            other => other.text().len(),
        })
        .sum();
    system + messages
}

/// Resolves `${<call id>.<field>}` references against earlier tool results.
fn resolve(value: &serde_json::Value, messages: &[Message]) -> serde_json::Value {
    match value {
        serde_json::Value::String(s) => {
            let reference = s
                .strip_prefix("${")
                .and_then(|r| r.strip_suffix('}'))
                .and_then(|r| r.split_once('.'));
            let Some((call_id, field)) = reference else {
                return value.clone();
            };
            messages
                .iter()
                .rev()
                .find_map(|m| match m {
                    Message::Tool(r) if r.call_id == call_id => {
                        serde_json::from_str::<serde_json::Value>(&r.content)
                            .ok()
                            .and_then(|v| v.get(field).cloned())
                    }
                    _ => None,
                })
                .unwrap_or_else(|| value.clone())
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.iter().map(|v| resolve(v, messages)).collect())
        }
        serde_json::Value::Object(map) => serde_json::Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), resolve(v, messages)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Splits text into word-sized deltas, keeping every character.
fn deltas(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, c) in text.char_indices() {
        if c == ' ' && i > start {
            out.push(text[start..i].to_owned());
            start = i;
        }
    }
    if start < text.len() {
        out.push(text[start..].to_owned());
    }
    out
}

#[async_trait]
impl ModelProvider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }

    async fn preflight(&self, model: &str) -> Result<(), ModelError> {
        let models = &self.script.models;
        if models.is_empty() || models.iter().any(|m| m == model) {
            return Ok(());
        }
        Err(ModelError::Unavailable {
            model: model.to_owned(),
            reason: format!("the script offers only {}", models.join(", ")),
        })
    }

    /// The script's `models`, when it names any (empty offers every model: no list).
    async fn list_models(&self) -> Result<Option<Vec<String>>, ModelError> {
        let models = &self.script.models;
        Ok((!models.is_empty()).then(|| models.clone()))
    }

    fn thinking_levels(&self, model: &str) -> Option<Vec<ThinkingLevel>> {
        self.script.thinking.get(model).cloned()
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        let (index, turn) = self.turn_for(&request)?;
        let mut items: Vec<Result<ModelEvent, ModelError>> = Vec::new();
        if let Some(message) = &turn.fail {
            items.push(Err(ModelError::Provider {
                message: message.clone(),
            }));
        } else {
            for delta in deltas(&turn.text) {
                items.push(Ok(ModelEvent::TextDelta(delta)));
            }
            let mut output_chars = turn.text.len();
            for (i, call) in turn.tool_calls.iter().enumerate() {
                let id = call
                    .id
                    .clone()
                    .unwrap_or_else(|| format!("call_{}_{}", index + 1, i + 1));
                output_chars += call.name.len() + call.arguments.to_string().len();
                items.push(Ok(ModelEvent::ToolCall(ToolCall {
                    id,
                    name: call.name.clone(),
                    arguments: resolve(&call.arguments, request.messages),
                })));
            }
            let usage = match turn.usage {
                Some(usage) => usage.normalized(),
                None => Usage::new(
                    estimate_tokens(prompt_chars(&request)),
                    estimate_tokens(output_chars),
                ),
            };
            items.push(Ok(ModelEvent::Usage(usage)));
            let finish = if turn.truncated {
                FinishReason::Length
            } else if turn.tool_calls.is_empty() {
                FinishReason::Stop
            } else {
                FinishReason::ToolCalls
            };
            items.push(Ok(ModelEvent::Finished(finish)));
        }
        let hang = turn.hang;
        let delay = Duration::from_millis(turn.delay_ms);
        let body = stream::once(async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if hang {
                stream::pending().left_stream()
            } else {
                stream::iter(items).right_stream()
            }
        })
        .flatten();
        Ok(Box::pin(body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::TryStreamExt;

    fn request<'a>(messages: &'a [Message]) -> ModelRequest<'a> {
        ModelRequest {
            model: "scripted",
            system: None,
            messages,
            tools: &[],
            thinking: None,
            controls: None,
            reasoning: None,
            output_schema: None,
            session: None,
        }
    }

    #[tokio::test]
    async fn plays_turns_by_assistant_count() {
        let provider = ScriptedProvider::new(Script::new([
            ScriptedTurn::tool_call("echo", serde_json::json!({"text": "a"})).with_usage(10, 5),
            ScriptedTurn::text("all done").with_usage(20, 2),
        ]));
        let first = vec![Message::user("go")];
        let events: Vec<_> = provider
            .stream(request(&first))
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(
            events,
            vec![
                ModelEvent::ToolCall(ToolCall {
                    id: "call_1_1".into(),
                    name: "echo".into(),
                    arguments: serde_json::json!({"text": "a"}),
                }),
                ModelEvent::Usage(Usage::new(10, 5)),
                ModelEvent::Finished(FinishReason::ToolCalls),
            ]
        );
        let second = vec![Message::user("go"), Message::assistant("")];
        let events: Vec<_> = provider
            .stream(request(&second))
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert_eq!(
            events,
            vec![
                ModelEvent::TextDelta("all".into()),
                ModelEvent::TextDelta(" done".into()),
                ModelEvent::Usage(Usage::new(20, 2)),
                ModelEvent::Finished(FinishReason::Stop),
            ]
        );
        let third = vec![Message::assistant(""), Message::assistant("")];
        let err = provider.stream(request(&third)).await.err().unwrap();
        assert_eq!(
            err,
            ModelError::ScriptExhausted {
                turn: 3,
                available: 2
            }
        );
        assert_eq!(err.to_string(), "script has no turn 3 (it has 2)");
    }

    #[tokio::test]
    async fn estimates_usage_deterministically() {
        let provider = ScriptedProvider::new(Script::new([ScriptedTurn::text("abcdefgh")]));
        let msgs = vec![Message::user("12345")];
        let events: Vec<_> = provider
            .stream(request(&msgs))
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        assert!(
            events.contains(&ModelEvent::Usage(Usage::new(2, 2))),
            "{events:?}"
        );
    }

    #[tokio::test]
    async fn injected_failure_and_repeat_last() {
        let provider = ScriptedProvider::new(Script {
            turns: vec![ScriptedTurn {
                fail: Some("overloaded".into()),
                ..ScriptedTurn::default()
            }],
            repeat_last: true,
            models: Vec::new(),
            thinking: BTreeMap::new(),
        });
        let msgs = vec![Message::assistant(""), Message::assistant("")];
        let mut s = provider.stream(request(&msgs)).await.unwrap();
        let first = s.next().await.unwrap().unwrap_err();
        assert_eq!(first.to_string(), "provider error: overloaded");
    }

    #[tokio::test(start_paused = true)]
    async fn delay_and_hang_use_tokio_time() {
        let provider = ScriptedProvider::new(Script::new([
            ScriptedTurn::text("x").with_delay(Duration::from_secs(5))
        ]));
        let msgs = vec![Message::user("go")];
        let start = tokio::time::Instant::now();
        let mut s = provider.stream(request(&msgs)).await.unwrap();
        assert!(s.next().await.is_some());
        assert!(start.elapsed() >= Duration::from_secs(5));

        let hang = ScriptedProvider::new(Script::new([ScriptedTurn {
            hang: true,
            ..ScriptedTurn::default()
        }]));
        let mut s = hang.stream(request(&msgs)).await.unwrap();
        let r = tokio::time::timeout(Duration::from_secs(3600), s.next()).await;
        assert!(r.is_err(), "a hanging turn must not yield");
    }

    #[test]
    fn references_resolve_against_earlier_tool_results() {
        let messages = vec![Message::Tool(arbor_protocol::ToolResult {
            call_id: "call_1_1".into(),
            name: "spawn_agent".into(),
            content: r#"{"delegation_id":"sup-42","status":"running"}"#.into(),
            is_error: false,
        })];
        let args = serde_json::json!({
            "delegation_id": "${call_1_1.delegation_id}",
            "other": ["${call_9_9.x}", "plain"],
        });
        assert_eq!(
            resolve(&args, &messages),
            serde_json::json!({"delegation_id": "sup-42", "other": ["${call_9_9.x}", "plain"]})
        );
    }

    #[test]
    fn deltas_keep_every_character() {
        assert_eq!(deltas("a bc  d").concat(), "a bc  d");
        assert!(deltas("").is_empty());
    }

    #[test]
    fn turns_deserialize_strictly() {
        let err = serde_json::from_str::<ScriptedTurn>(r#"{"text":"x","txet":"y"}"#).unwrap_err();
        assert!(err.to_string().contains("txet"));
    }
}
