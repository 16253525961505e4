//! Tool dispatch: permission, lookup, concurrency and containment of one turn's calls.
//!
//! Every call first passes the agent's AND-composed permission. Calls of one turn run
//! concurrently up to the agent's `tool_concurrency`, or one at a time when any of them is
//! exclusive; results keep the order of the calls. A tool that panics is contained: the call
//! gets an error result and the run ends `failed`.

use std::panic::AssertUnwindSafe;

use arbor_protocol::{AgentEvent, RunId, ToolCall, ToolResult};
use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::outcome::NestedSuspension;
use crate::permission::{Decision, PermissionRequest};
use crate::session::Session;
use crate::tool::effect::{ToolEffect, effect_key};
use crate::tool::{ToolContext, ToolError};

/// A call outcome that ends the run.
#[derive(Debug, Clone)]
pub(crate) enum CallStop {
    /// The run fails with this message.
    Fatal(String),
    /// A policy halted the run.
    Halt(String),
    /// The call's child suspended: the run suspends too.
    Suspended(Box<NestedSuspension>),
    /// The call asks the person at the root (`ask_human`): it waits for the answer, and the
    /// run suspends.
    Ask,
}

#[derive(Debug)]
pub(crate) struct CallOutcome {
    pub(crate) result: ToolResult,
    pub(crate) stop: Option<CallStop>,
}

/// The message of a caught panic.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_owned()
    }
}

impl Session {
    pub(crate) async fn dispatch(
        &self,
        run_id: RunId,
        turn: u32,
        calls: &[ToolCall],
        token: &CancellationToken,
    ) -> Vec<CallOutcome> {
        let tools = self.agent.tools();
        let exclusive = calls
            .iter()
            .any(|c| tools.get(&c.name).is_some_and(|t| t.exclusive()));
        let concurrency = if exclusive {
            1
        } else {
            self.agent.tool_concurrency()
        };
        // The futures are built before the first await: a closure held across an await in
        // the stream would make the run future not `Send` (rust-lang/rust#102211).
        let calls: Vec<_> = calls
            .iter()
            .map(|call| self.execute(run_id, turn, call, token))
            .collect();
        futures::stream::iter(calls)
            .buffered(concurrency)
            .collect()
            .await
    }

    /// The result recorded for `call` of `run_id`, when its tool declares an idempotent
    /// effect and the effect store holds one: a call caught in flight gets it instead of an
    /// interruption.
    pub(crate) async fn recorded_effect(&self, run_id: RunId, call: &ToolCall) -> Option<String> {
        let tool = self.agent.tools().get(&call.name)?;
        if tool.effect() != ToolEffect::Idempotent {
            return None;
        }
        let effects = self.agent.effect_store()?;
        effects
            .done(&effect_key(self.id(), run_id, &call.id))
            .await
            .ok()
            .flatten()
    }

    pub(crate) async fn execute(
        &self,
        run_id: RunId,
        turn: u32,
        call: &ToolCall,
        token: &CancellationToken,
    ) -> CallOutcome {
        let span = crate::process::telemetry::tool_span(self.who(), turn, call);
        let outcome = self
            .execute_call(run_id, turn, call, token)
            .instrument(span.clone())
            .await;
        if !span.is_disabled() {
            let waiting = matches!(outcome.stop, Some(CallStop::Suspended(_)));
            crate::process::telemetry::record_tool(&span, self.who(), &outcome.result, waiting);
        }
        outcome
    }

    async fn execute_call(
        &self,
        run_id: RunId,
        turn: u32,
        call: &ToolCall,
        token: &CancellationToken,
    ) -> CallOutcome {
        if let Some(refused) = self.check_permission(run_id, turn, call) {
            return refused;
        }
        let Some(tool) = self.agent.tools().get(&call.name) else {
            return self.unknown_tool(run_id, turn, call);
        };
        if tool.asks_human() {
            return self.hold_question(run_id, turn, call);
        }
        let key = (tool.effect() == ToolEffect::Idempotent)
            .then(|| effect_key(self.id(), run_id, &call.id));
        let effects = self.agent.effect_store().cloned();
        if let (Some(key), Some(effects)) = (&key, &effects) {
            // Recorded done: never executed again; the model gets the recorded result.
            match effects.done(key).await {
                Ok(Some(content)) => {
                    return CallOutcome {
                        result: call_result(call, content, false),
                        stop: None,
                    };
                }
                Ok(None) => {}
                Err(e) => {
                    // Unknown whether it ran: it does not run now.
                    return CallOutcome {
                        result: call_result(
                            call,
                            format!("not run: its effect record could not be read ({e})"),
                            true,
                        ),
                        stop: None,
                    };
                }
            }
        }
        self.bus.publish(
            run_id,
            AgentEvent::ToolExecutionStarted {
                turn,
                call_id: call.id.clone(),
                name: call.name.clone(),
            },
        );
        let ctx = ToolContext {
            agent: self.agent.name().to_owned(),
            session: self.as_ref(),
            run_id,
            call_id: call.id.clone(),
            turn,
            cancel: token.child_token(),
            identity: self.agent.shared_identity(),
            idempotency_key: key.clone(),
            effects: effects.clone(),
        };
        let outcome = AssertUnwindSafe(tool.call_json(call.arguments.clone(), ctx))
            .catch_unwind()
            .await;
        let (error, stop) = match outcome {
            Ok(Ok(content)) => {
                if let (Some(key), Some(effects)) = (&key, &effects)
                    && let Err(e) = effects.record(key, &content).await
                {
                    tracing::warn!(tool = %call.name, error = %e, "an effect's result could not be recorded");
                }
                self.bus.publish(
                    run_id,
                    AgentEvent::ToolExecutionFinished {
                        turn,
                        call_id: call.id.clone(),
                        name: call.name.clone(),
                        output_bytes: content.len() as u64,
                    },
                );
                return CallOutcome {
                    result: call_result(call, content, false),
                    stop: None,
                };
            }
            Ok(Err(e)) => tool_failure(call, e),
            Err(payload) => {
                let text = format!(
                    "tool `{}` panicked: {}",
                    call.name,
                    panic_message(&*payload)
                );
                tracing::warn!(tool = %call.name, "{text}");
                (text.clone(), Some(CallStop::Fatal(text)))
            }
        };
        self.failed(run_id, turn, call, error, stop)
    }

    /// A question (`ask_human`): checked, then held for the person at the root; a bad one is
    /// an error result naming the field, and nobody is asked.
    fn hold_question(&self, run_id: RunId, turn: u32, call: &ToolCall) -> CallOutcome {
        match crate::approval::question::Question::parse(&call.arguments) {
            Ok(_) => CallOutcome {
                result: call_result(call, "waiting for a person's answer".to_owned(), false),
                stop: Some(CallStop::Ask),
            },
            Err(e) => self.failed(
                run_id,
                turn,
                call,
                format!("invalid arguments for ask_human: {e}"),
                None,
            ),
        }
    }

    /// What becomes of a question in a gated turn, before it waits: `None` when the call is
    /// not a question, or is one that may wait (permitted, well formed); else its error.
    pub(crate) fn check_question(
        &self,
        run_id: RunId,
        turn: u32,
        call: &ToolCall,
    ) -> Option<CallOutcome> {
        let tool = self.agent.tools().get(&call.name)?;
        if !tool.asks_human() {
            return None;
        }
        if let Some(refused) = self.check_permission(run_id, turn, call) {
            return Some(refused);
        }
        let held = self.hold_question(run_id, turn, call);
        (!matches!(held.stop, Some(CallStop::Ask))).then_some(held)
    }

    /// Whether `call` is a question (`ask_human`) of this agent's.
    pub(crate) fn is_question(&self, call: &ToolCall) -> bool {
        self.agent
            .tools()
            .get(&call.name)
            .is_some_and(|t| t.asks_human())
    }

    /// The result of a question the person answered (`allow_once`, the answer its reason)
    /// or declined.
    pub(crate) fn question_result(
        &self,
        run_id: RunId,
        turn: u32,
        call: &ToolCall,
        verdict: arbor_protocol::Verdict,
        reason: Option<&str>,
    ) -> crate::approval::CallState {
        let (answer, why) = if verdict.allows() {
            (reason, None)
        } else {
            (None, reason)
        };
        let (content, is_error) = crate::approval::question::result_text(answer, why);
        let event = if is_error {
            AgentEvent::ToolExecutionBlocked {
                turn,
                call_id: call.id.clone(),
                name: call.name.clone(),
                reason: content.clone(),
            }
        } else {
            AgentEvent::ToolExecutionFinished {
                turn,
                call_id: call.id.clone(),
                name: call.name.clone(),
                output_bytes: content.len() as u64,
            }
        };
        self.bus.publish(run_id, event);
        crate::approval::CallState::Done {
            result: call_result(call, content, is_error),
        }
    }

    /// The agent's permission on `call`: `None` when it may run, else the refusal (blocked,
    /// or a halt of the run).
    fn check_permission(&self, run_id: RunId, turn: u32, call: &ToolCall) -> Option<CallOutcome> {
        let request = PermissionRequest {
            agent: self.agent.name(),
            session_id: self.id(),
            tool: &call.name,
            arguments: &call.arguments,
            identity: self.agent.identity(),
        };
        let (reason, stop) = match self.agent.permission().check(&request) {
            Decision::Allow => return None,
            Decision::Deny { reason } => (reason, None),
            Decision::Halt { reason } => (reason.clone(), Some(CallStop::Halt(reason))),
        };
        self.bus.publish(
            run_id,
            AgentEvent::ToolExecutionBlocked {
                turn,
                call_id: call.id.clone(),
                name: call.name.clone(),
                reason: reason.clone(),
            },
        );
        Some(CallOutcome {
            result: call_result(call, format!("permission denied: {reason}"), true),
            stop,
        })
    }

    /// A call of a tool the agent does not have: an error naming the tools it has.
    fn unknown_tool(&self, run_id: RunId, turn: u32, call: &ToolCall) -> CallOutcome {
        let names: Vec<&str> = self
            .agent
            .tools()
            .specs()
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        let error = if names.is_empty() {
            format!("unknown tool `{}`: this agent has no tools", call.name)
        } else {
            format!(
                "unknown tool `{}`; available: {}",
                call.name,
                names.join(", ")
            )
        };
        self.failed(run_id, turn, call, error, None)
    }

    /// A call that failed with `error`: published, and the model's error result.
    fn failed(
        &self,
        run_id: RunId,
        turn: u32,
        call: &ToolCall,
        error: String,
        stop: Option<CallStop>,
    ) -> CallOutcome {
        self.bus.publish(
            run_id,
            AgentEvent::ToolExecutionError {
                turn,
                call_id: call.id.clone(),
                name: call.name.clone(),
                error: error.clone(),
            },
        );
        CallOutcome {
            result: call_result(call, error, true),
            stop,
        }
    }
}

/// The result of `call` with `content`.
pub(crate) fn call_result(call: &ToolCall, content: String, is_error: bool) -> ToolResult {
    ToolResult {
        call_id: call.id.clone(),
        name: call.name.clone(),
        content,
        is_error,
    }
}

/// A tool's error: the model's text, and whether it stops the run (fatal) or suspends it.
fn tool_failure(call: &ToolCall, error: ToolError) -> (String, Option<CallStop>) {
    match error {
        ToolError::ToModel(message) => (message, None),
        ToolError::Suspended(nested) => {
            let text = format!("{} {}", super::events::SUSPENDED_CALL, nested.run_id);
            (text, Some(CallStop::Suspended(nested)))
        }
        ToolError::Fatal(message) => {
            let text = format!("tool `{}` failed: {message}", call.name);
            (text.clone(), Some(CallStop::Fatal(text)))
        }
    }
}
