//! One provider turn of a run: the request built from the session's conversation, the
//! stream read into text, tool calls and usage (bounded by the agent's `max_answer_bytes`),
//! its events published as they come, and the provider's finish reason (a cut-off answer is
//! told apart from a complete one), inside its telemetry span.

use arbor_model::{ModelEvent, ModelRequest};
use arbor_protocol::{AgentEvent, Reasoning, RunId, ToolCall, Usage};
use futures::StreamExt;
use tracing::Instrument;

use crate::process::telemetry;
use crate::session::Session;

/// What one provider call answered.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) text: String,
    pub(crate) calls: Vec<ToolCall>,
    /// The usage reported, if any.
    pub(crate) usage: Option<Usage>,
    /// The error that ended it, if any.
    pub(crate) failure: Option<String>,
    /// The provider's finish reason, if it gave one.
    pub(crate) finish: Option<arbor_model::FinishReason>,
    /// The model's reasoning blocks, in order.
    pub(crate) reasoning: Vec<Reasoning>,
    /// With the usage: the model the turn is priced as and its cost, in micro-units (0
    /// without prices; see [`crate::session::cost`]).
    pub(crate) priced: (String, u64),
}

impl Session {
    /// Streams one provider call.
    /// `after_call`: the model has called tools in this run already, or the run is not on
    /// fresh input, so a forced `tool_choice` gives way (`Controls::after_call`).
    pub(crate) async fn provider_turn(&self, run_id: RunId, turn: u32, after_call: bool) -> Answer {
        let span = telemetry::chat_span(self.who(), turn);
        telemetry::record_chat_input(
            &span,
            self.who(),
            self.agent.system().unwrap_or_default(),
            &self.messages,
        );
        let mut finish = None;
        let mut answered_by = None;
        let mut reasoning = Vec::new();
        let out = self
            .stream_turn(
                run_id,
                (turn, after_call),
                &mut finish,
                &mut answered_by,
                &mut reasoning,
            )
            .instrument(span.clone())
            .await;
        let priced = out.2.as_ref().map_or((String::new(), 0), |u| {
            crate::session::cost::of_turn(&self.agent, answered_by.clone(), u)
        });
        if !span.is_disabled() {
            if priced.1 > 0 {
                span.record(telemetry::attr::COST_MICROS, priced.1);
            }
            if let Some(model) = &answered_by {
                span.record(telemetry::attr::RESPONSE_MODEL, model.as_str());
            }
            let reason = finish.as_ref().map(telemetry::finish_reason);
            telemetry::record_chat(&span, out.2.as_ref(), reason, out.3.as_deref());
            telemetry::record_chat_output(&span, self.who(), &out.0, &out.1);
        }
        Answer {
            text: out.0,
            calls: out.1,
            usage: out.2,
            failure: out.3,
            finish,
            reasoning,
            priced,
        }
    }

    async fn stream_turn(
        &self,
        run_id: RunId,
        (turn, after_call): (u32, bool),
        finish: &mut Option<arbor_model::FinishReason>,
        answered_by: &mut Option<String>,
        reasoning: &mut Vec<Reasoning>,
    ) -> (String, Vec<ToolCall>, Option<Usage>, Option<String>) {
        self.bus.publish(
            run_id,
            AgentEvent::ProviderTurnStarted {
                turn,
                model: self.agent.model().to_owned(),
            },
        );
        // A turn after the model's calls (or of a run not on fresh input): a forced
        // tool_choice gives way (Controls::after_call).
        let after_call = after_call
            .then(|| {
                self.agent
                    .controls()
                    .and_then(arbor_model::Controls::after_call)
            })
            .flatten();
        // The schema the answer is checked against, for a wire that can constrain it (as
        // stored: nothing is compiled on a turn).
        let output = crate::output::OutputSchema::field_of(&self.record.meta);
        let schema = crate::output::OutputSchema::raw_in(output.as_deref());
        let request = ModelRequest::new(self.agent.model(), &self.messages)
            .system(self.agent.system())
            .tools(self.agent.tools().specs())
            .thinking(self.agent.thinking())
            .controls(after_call.as_ref().or(self.agent.controls()))
            .reasoning((!self.reasoning.is_empty()).then_some(&self.reasoning))
            .output_schema(schema)
            .session(Some(self.record.id));
        let mut text = String::new();
        let mut calls = Vec::new();
        let mut usage = None;
        let mut stream = match self.agent.provider().stream(request).await {
            Ok(stream) => stream,
            Err(e) => return (text, calls, usage, Some(e.to_string())),
        };
        let cap = self.agent.max_answer_bytes();
        let mut size = 0usize;
        let too_large = || {
            format!(
                "answer too large: the model's answer passed {cap} bytes of text and tool \
                 calls (max_answer_bytes)"
            )
        };
        while let Some(item) = stream.next().await {
            match item {
                Ok(ModelEvent::TextDelta(delta)) => {
                    size = size.saturating_add(delta.len());
                    if size > cap {
                        return (text, Vec::new(), usage, Some(too_large()));
                    }
                    text.push_str(&delta);
                    self.bus
                        .publish(run_id, AgentEvent::MessageDelta { turn, delta });
                }
                Ok(ModelEvent::ToolCall(call)) => {
                    let bytes = call.name.len()
                        + call.id.len()
                        + crate::session::attribution::serialized_len(&call.arguments);
                    size = size.saturating_add(bytes);
                    if size > cap {
                        return (text, Vec::new(), usage, Some(too_large()));
                    }
                    calls.push(call)
                }
                Ok(ModelEvent::Reasoning(r)) => {
                    size = size.saturating_add(r.text().len());
                    if size > cap {
                        return (text, Vec::new(), usage, Some(too_large()));
                    }
                    reasoning.push(r);
                }
                Ok(ModelEvent::Usage(u)) => usage = Some(u.normalized()),
                Ok(ModelEvent::Status { state, message }) => {
                    self.bus.publish(
                        run_id,
                        AgentEvent::ProviderStatus {
                            turn,
                            state,
                            message,
                        },
                    );
                }
                Ok(ModelEvent::ResponseModel(m)) => *answered_by = Some(m),
                Ok(ModelEvent::Finished(reason)) => {
                    *finish = Some(reason);
                    break;
                }
                Err(e) => return (text, calls, usage, Some(e.to_string())),
            }
        }
        (text, calls, usage, None)
    }
}
