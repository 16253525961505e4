//! How a run ends: [`Session::finish`] writes its terminal status, usage and result entries
//! (a suspended run keeps its checkpoint; any other closes a checkpoint it resumed, so
//! nothing of it can run again), and tool calls left without a result are closed so the
//! conversation stays valid for the next run.

use arbor_protocol::{
    AgentEvent, EntryKind, LimitKind, Message, RunLimitBreach, RunStatus, SessionStatus,
    StopReason, ToolResult,
};
use arbor_store::SessionUpdate;

use crate::error::CoreResult;
use crate::outcome::RunResult;
use crate::session::Session;
use crate::session::run::{Outcome, RunState};

/// How a run ended, as its terminal entry and event say it.
struct Terminal {
    status: RunStatus,
    stop_reason: StopReason,
    breach: Option<arbor_protocol::RunLimitBreach>,
    error: Option<String>,
    suspended: Option<crate::outcome::Suspension>,
}

impl Session {
    /// Writes the end of the run and builds its result.
    pub(crate) async fn finish(
        &mut self,
        mut state: Box<RunState>,
        outcome: Outcome,
    ) -> CoreResult<RunResult> {
        let run_id = state.run_id;
        let deferred = state.deferred.take().unwrap_or_default();
        // A call cut off by a cancel or the timeout may have been billed: its reservation is
        // charged, not released.
        let cut = matches!(
            &outcome,
            Outcome::Cancelled
                | Outcome::Breach(RunLimitBreach {
                    limit: LimitKind::TimeoutMs,
                    ..
                })
        );
        let Terminal {
            status,
            stop_reason,
            breach,
            error,
            suspended,
        } = self.terminal(outcome);
        // A suspended run's calls are not dangling: they wait for their decisions. A run that
        // ends otherwise closes its checkpoint: what its calls did is written, a call caught
        // in flight is reported interrupted, and nothing of it can be resumed again.
        let mut entries = deferred.entries;
        if suspended.is_none() {
            if state.checkpointed {
                let closed = self.close_checkpoint(&state).await;
                entries.extend(closed);
            }
            entries.extend(self.close_dangling_calls(stop_reason));
        }
        entries.push(EntryKind::RunFinished {
            status,
            stop_reason,
            usage: state.usage,
            breach,
            error: error.clone(),
        });
        // The last turn (if kept) and the run's end: one write.
        let update = SessionUpdate {
            status: Some(SessionStatus::from(status)),
            ..deferred.update.unwrap_or_default()
        };
        self.commit_usage(run_id, &entries, Some(update), deferred.attributed)
            .await?;
        self.settle_call(cut).await;
        for event in deferred.events {
            self.bus.publish(run_id, event);
        }
        self.publish_stops(run_id, suspended.as_ref(), breach, status, error.as_deref());
        // Descendants attribute into the stored record while this run goes on: refresh it, so
        // the session's view of its attributed usage is current at every terminal.
        if let Some(stored) = self.store.session(self.record.id).await? {
            self.record = stored;
        }
        self.bus.publish(
            run_id,
            AgentEvent::RunFinished {
                status,
                stop_reason,
                usage: state.usage,
                breach,
                error: error.clone(),
            },
        );
        tracing::debug!(session = %self.id(), run = %run_id, %status, %stop_reason, "run finished");
        let attribution = breach.as_ref().map(|b| {
            let used = crate::session::attribution::Used {
                turns: state.turns,
                tool_calls: state.tool_calls,
                usage: state.usage,
                elapsed_ms: arbor_protocol::Timestamp::now()
                    .0
                    .saturating_sub(state.started_ms),
            };
            state
                .trace
                .attribution(b, &state.limits, used, &self.messages)
        });
        Ok(RunResult {
            attribution,
            session_id: self.id(),
            run_id,
            status,
            stop_reason,
            text: state.text,
            usage: state.usage,
            cost_micros: state.cost,
            breach,
            error,
            turns: state.turns,
            tool_calls: state.tool_calls,
            suspension: suspended,
        })
    }

    /// The run's terminal status, stop reason, breach and error for `outcome`.
    fn terminal(&self, outcome: Outcome) -> Terminal {
        let mut suspended = None;
        let (status, stop_reason, breach, error) = match outcome {
            Outcome::Completed { truncated: false } => {
                (RunStatus::Succeeded, StopReason::Completed, None, None)
            }
            Outcome::Completed { truncated: true } if self.agent.fail_on_truncation() => (
                RunStatus::Failed,
                StopReason::CompletedTruncated,
                None,
                Some(
                    "the model's answer was cut off at the provider's output cap \
                     (finish_reason: length), and the agent fails on truncation"
                        .to_owned(),
                ),
            ),
            Outcome::Completed { truncated: true } => (
                RunStatus::Succeeded,
                StopReason::CompletedTruncated,
                None,
                None,
            ),
            Outcome::Breach(b) => (
                RunStatus::Failed,
                // A breach is always of a run limit (the run loop checks only those).
                StopReason::for_limit(b.limit).unwrap_or(StopReason::TurnLimit),
                Some(b),
                Some(b.to_string()),
            ),
            Outcome::Cancelled => (
                RunStatus::Aborted,
                StopReason::Cancelled,
                None,
                Some("run cancelled".to_owned()),
            ),
            Outcome::ProviderError(e) => {
                (RunStatus::Failed, StopReason::ProviderError, None, Some(e))
            }
            Outcome::ToolFatal(e) => (RunStatus::Failed, StopReason::ToolError, None, Some(e)),
            Outcome::InvalidOutput(m) => (
                RunStatus::Failed,
                StopReason::InvalidOutput,
                None,
                Some(format!("invalid_output: {m}")),
            ),
            Outcome::BudgetExhausted(r) => (
                RunStatus::Failed,
                StopReason::BudgetExhausted,
                None,
                Some(r.message()),
            ),
            Outcome::Denied(reason) => (
                RunStatus::Denied,
                StopReason::HostPolicy,
                None,
                Some(reason),
            ),
            Outcome::Suspended(ref s) => {
                suspended = Some(s.clone());
                (
                    RunStatus::Suspended,
                    StopReason::ApprovalRequired,
                    None,
                    None,
                )
            }
        };
        Terminal {
            status,
            stop_reason,
            breach,
            error,
            suspended,
        }
    }

    /// The events that say why the run stopped, before its `RunFinished`: suspended (with
    /// the calls waiting), a limit exceeded, or denied.
    fn publish_stops(
        &self,
        run_id: arbor_protocol::RunId,
        suspended: Option<&crate::outcome::Suspension>,
        breach: Option<arbor_protocol::RunLimitBreach>,
        status: RunStatus,
        error: Option<&str>,
    ) {
        if let Some(s) = suspended {
            self.bus.publish(
                run_id,
                AgentEvent::RunSuspended {
                    pending: s.pending.iter().map(|p| p.id.clone()).collect(),
                },
            );
        }
        if let Some(b) = breach {
            self.bus
                .publish(run_id, AgentEvent::RunLimitExceeded { breach: b });
        }
        if status == RunStatus::Denied {
            self.bus.publish(
                run_id,
                AgentEvent::RunDenied {
                    reason: error.unwrap_or_default().to_owned(),
                },
            );
        }
    }

    /// Closes the stored checkpoint of a run that ends without suspending: the results its
    /// calls got (and an interruption for a call caught in flight) join the conversation,
    /// children still suspended under it are abandoned, and the checkpoint is deleted, so no
    /// later resume runs anything of it. Best effort: a store failure is logged, and the
    /// in-flight marks keep a later resume from repeating a call.
    async fn close_checkpoint(&mut self, state: &RunState) -> Vec<EntryKind> {
        let run_id = state.run_id;
        let loaded = match crate::approval::load(self.store.as_ref(), run_id).await {
            Ok(Some(found)) => found,
            Ok(None) => return Vec::new(),
            Err(e) => {
                tracing::warn!(run = %run_id, error = %e, "could not read the run's checkpoint to close it");
                return Vec::new();
            }
        };
        let (version, checkpoint) = loaded;
        let answered: Vec<String> = self
            .messages
            .iter()
            .filter_map(|m| match m {
                Message::Tool(r) => Some(r.call_id.clone()),
                _ => None,
            })
            .collect();
        let mut entries = Vec::new();
        for slot in &checkpoint.calls {
            let result = match &slot.state {
                crate::approval::CallState::Done { result } => Some(result.clone()),
                crate::approval::CallState::InFlight { child, .. } => {
                    if let (Some((run, session)), Some(nested)) = (child, &state.nested) {
                        nested.abandon_nested(*run, *session).await;
                    }
                    Some(match self.recorded_effect(run_id, &slot.call).await {
                        Some(content) => ToolResult {
                            call_id: slot.call.id.clone(),
                            name: slot.call.name.clone(),
                            content,
                            is_error: false,
                        },
                        None => crate::approval::interrupted(&slot.call),
                    })
                }
                crate::approval::CallState::Nested {
                    run_id: child_run,
                    session_id,
                    ..
                } => {
                    if let Some(nested) = &state.nested {
                        nested.abandon_nested(*child_run, *session_id).await;
                    }
                    None
                }
                _ => None,
            };
            if let Some(result) = result.filter(|r| !answered.contains(&r.call_id)) {
                let message = Message::Tool(result);
                entries.push(EntryKind::Message {
                    message: message.clone(),
                });
                self.messages.push(message);
            }
        }
        if let Err(e) = self
            .store
            .delete_checkpoint(crate::approval::RUN_NAMESPACE, &run_id.to_string(), version)
            .await
        {
            tracing::warn!(run = %run_id, error = %e, "could not close the run's checkpoint");
        }
        entries
    }

    /// Tool calls of the last assistant message that have no result get one saying they
    /// were not run, so the transcript stays a valid conversation for a later turn.
    fn close_dangling_calls(&mut self, reason: StopReason) -> Vec<EntryKind> {
        let Some(pos) = self
            .messages
            .iter()
            .rposition(|m| matches!(m, Message::Assistant { .. }))
        else {
            return Vec::new();
        };
        let Message::Assistant { tool_calls, .. } = &self.messages[pos] else {
            return Vec::new();
        };
        let answered: Vec<&str> = self.messages[pos + 1..]
            .iter()
            .filter_map(|m| match m {
                Message::Tool(r) => Some(r.call_id.as_str()),
                _ => None,
            })
            .collect();
        let missing: Vec<Message> = tool_calls
            .iter()
            .filter(|c| !answered.contains(&c.id.as_str()))
            .map(|c| {
                Message::Tool(ToolResult {
                    call_id: c.id.clone(),
                    name: c.name.clone(),
                    content: format!("not run: the run stopped ({reason})"),
                    is_error: true,
                })
            })
            .collect();
        let entries = missing
            .iter()
            .map(|m| EntryKind::Message { message: m.clone() })
            .collect();
        self.messages.extend(missing);
        entries
    }
}
