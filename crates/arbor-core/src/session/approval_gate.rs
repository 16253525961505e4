//! The approval gate of the run loop: what a turn's tool calls do when they must wait for a
//! decision, or when a call's child suspended; and [`Session::resume`], which runs what was
//! decided and goes on. See [`crate::approval`] for the checkpoint and the decisions.

use std::sync::Arc;

use arbor_protocol::{
    AgentEvent, ApprovalDecision, EntryKind, Message, RunId, SessionStatus, Timestamp, ToolCall,
    ToolResult,
};
use arbor_store::SessionUpdate;
use tokio_util::sync::CancellationToken;

use crate::approval::{self, CallSlot, CallState, RunCheckpoint};
use crate::error::{CoreError, CoreResult};
use crate::outcome::{RunResult, Suspension};
use crate::session::Session;
use crate::session::dispatch::{CallStop, call_result};
use crate::session::resumer::{NestedOutcome, NestedResumer, Turns};
use crate::session::run::{Outcome, RunOptions, RunState};

fn rejected(call: &ToolCall, reason: Option<&str>) -> ToolResult {
    ToolResult {
        call_id: call.id.clone(),
        name: call.name.clone(),
        content: match reason {
            Some(r) => format!("rejected by a reviewer: {r}"),
            None => "rejected by a reviewer".to_owned(),
        },
        is_error: true,
    }
}

impl Session {
    /// A turn's calls: dispatched at once, or (gated) held for decisions. `Some` ends the
    /// loop with that outcome.
    pub(crate) async fn tool_turn(
        &mut self,
        state: &mut RunState,
        turn: u32,
        calls: Vec<ToolCall>,
        token: &CancellationToken,
    ) -> CoreResult<Option<Outcome>> {
        let mut checkpoint = RunCheckpoint {
            session_id: self.id(),
            run_id: state.run_id,
            turn,
            turns: state.turns,
            tool_calls: state.tool_calls,
            usage: state.usage,
            text: state.text.clone(),
            limits: state.limits,
            started_ms: state.started_ms,
            calls: Vec::with_capacity(calls.len()),
            sticky: state.sticky.clone(),
            claimed_at_ms: None,
            claimed_by: None,
            caps: state.caps,
            trace: None,
        };
        if state.gated {
            // Boxed: a held turn's future (its settling, its children resumed) stays off the
            // stack of every turn that holds nothing.
            return Box::pin(self.hold_turn(state, checkpoint, calls, token)).await;
        }
        // The calls of a tool that always asks wait for a person, as a question does; the
        // others run now, as in any turn.
        let asks_of = |c: &ToolCall| {
            self.agent
                .tools()
                .get(&c.name)
                .is_some_and(|t| t.requires_approval())
        };
        let asking = calls.iter().any(asks_of);
        // Which calls ask (built only when one does: a turn that holds nothing allocates
        // nothing more).
        let asks: Vec<bool> = if asking {
            calls.iter().map(asks_of).collect()
        } else {
            Vec::new()
        };
        let mut outcomes = if asking {
            let run: Vec<ToolCall> = calls
                .iter()
                .zip(&asks)
                .filter(|(_, a)| !**a)
                .map(|(c, _)| c.clone())
                .collect();
            self.dispatch(state.run_id, turn, &run, token).await
        } else {
            self.dispatch(state.run_id, turn, &calls, token).await
        }
        .into_iter();
        let mut stop = None;
        for (i, call) in calls.into_iter().enumerate() {
            let asks = asks.get(i).copied().unwrap_or(false);
            let outcome = if asks { None } else { outcomes.next() };
            let slot_state = match outcome {
                None => CallState::Pending,
                Some(outcome) => match outcome.stop {
                    // A question waits for the person at the root.
                    Some(CallStop::Ask) => CallState::Pending,
                    Some(CallStop::Suspended(nested)) => CallState::Nested {
                        run_id: nested.run_id,
                        session_id: nested.session_id,
                        pending: nested.pending,
                        decisions: Vec::new(),
                    },
                    other => {
                        if stop.is_none() {
                            stop = other;
                        }
                        CallState::Done {
                            result: outcome.result,
                        }
                    }
                },
            };
            checkpoint.calls.push(CallSlot {
                // Named only if the turn suspends (hashing every call's id costs).
                approval_id: String::new(),
                call,
                state: slot_state,
            });
        }
        if checkpoint.settled() {
            return self.complete_turn(state, checkpoint, stop).await;
        }
        // A call that failed the run or halted it ends it: nothing of the turn waits.
        if let Some(stop) = stop {
            return self.stop_turn(state, checkpoint, stop).await;
        }
        for slot in &mut checkpoint.calls {
            slot.approval_id = approval::own_id(state.run_id, &slot.call.id);
        }
        if asking {
            // Rules may decide what asks; the rest waits, with what the person is shown.
            return Box::pin(self.gate(state, checkpoint, token)).await;
        }
        self.suspend(state, checkpoint, 0).await.map(Some)
    }

    /// Runs what was decided (and resumes children that have decisions), then completes the
    /// turn, or suspends with what still waits.
    ///
    /// Each call is stored in flight before it starts and with its outcome before the next
    /// one starts: a resume cut off anywhere (crash, cancel, timeout) leaves a checkpoint
    /// from which no approved call runs twice.
    pub(crate) async fn settle_turn(
        &mut self,
        state: &mut RunState,
        mut checkpoint: RunCheckpoint,
        token: &CancellationToken,
    ) -> CoreResult<Option<Outcome>> {
        let mut expected = match approval::load(self.store.as_ref(), state.run_id).await? {
            Some((v, _)) => v,
            None => 0,
        };
        let mut stop = None;
        let turn = checkpoint.turn;
        for i in 0..checkpoint.calls.len() {
            let slot = checkpoint.calls[i].clone();
            let next = match slot.state {
                // A question answered or declined: nothing runs, the answer is the result.
                CallState::Decided {
                    verdict,
                    ref reason,
                    ..
                } if self.is_question(&slot.call) => {
                    self.question_result(state.run_id, turn, &slot.call, verdict, reason.as_deref())
                }
                CallState::Decided { verdict, .. } if verdict.allows() => {
                    expected = self
                        .mark_in_flight(state, &mut checkpoint, i, expected)
                        .await?;
                    // The agent's own permission runs again here: an approval never widens it.
                    let outcome = self.execute(state.run_id, turn, &slot.call, token).await;
                    let next = if let Some(CallStop::Suspended(nested)) = outcome.stop {
                        CallState::Nested {
                            run_id: nested.run_id,
                            session_id: nested.session_id,
                            pending: nested.pending,
                            decisions: Vec::new(),
                        }
                    } else {
                        if stop.is_none() {
                            stop = outcome.stop;
                        }
                        CallState::Done {
                            result: outcome.result,
                        }
                    };
                    checkpoint.calls[i].state = next;
                    // Its outcome is stored before the next call starts.
                    expected = approval::save(self.store.as_ref(), &checkpoint, expected).await?;
                    continue;
                }
                CallState::InFlight { child, .. } => {
                    self.interrupted_call(state, &slot.call, child).await
                }
                CallState::Decided { reason, .. } => {
                    self.bus.publish(
                        state.run_id,
                        AgentEvent::ToolExecutionBlocked {
                            turn,
                            call_id: slot.call.id.clone(),
                            name: slot.call.name.clone(),
                            reason: reason.clone().unwrap_or_else(|| "rejected".to_owned()),
                        },
                    );
                    CallState::Done {
                        result: rejected(&slot.call, reason.as_deref()),
                    }
                }
                CallState::Nested { ref decisions, .. } if !decisions.is_empty() => {
                    expected = self
                        .resume_child_call(state, &mut checkpoint, i, expected)
                        .await?;
                    continue;
                }
                CallState::Nested {
                    run_id, session_id, ..
                } if state.nested.is_some() => {
                    // Nothing decided for the child: it waits, unless it is gone (deleted),
                    // in which case the call fails and the run goes on.
                    let gone = match &state.nested {
                        Some(nested) => nested.nested_gone(run_id, session_id).await?,
                        None => None,
                    };
                    match gone {
                        Some(why) => CallState::Done {
                            result: call_result(&slot.call, why, true),
                        },
                        None => slot.state,
                    }
                }
                other => other,
            };
            checkpoint.calls[i].state = next;
        }
        state.sticky = checkpoint.sticky.clone();
        // A call that failed or halted the run ends it: nothing of the turn waits.
        if let Some(stop) = &stop {
            self.close_waiting(state, &mut checkpoint, stop).await;
        }
        if checkpoint.settled() {
            if expected > 0 {
                self.drop_checkpoint(state, expected).await?;
            }
            return self.complete_turn(state, checkpoint, stop).await;
        }
        self.suspend(state, checkpoint, expected).await.map(Some)
    }

    /// A call a resume was cut off in: it is not run again. Its recorded effect, if any, is
    /// its result; else it was interrupted. A child it was resuming is closed: nothing will
    /// resume it now.
    async fn interrupted_call(
        &self,
        state: &RunState,
        call: &ToolCall,
        child: Option<(RunId, arbor_protocol::SessionId)>,
    ) -> CallState {
        if let (Some((run, session)), Some(nested)) = (child, &state.nested) {
            nested.abandon_nested(run, session).await;
        }
        let result = match self.recorded_effect(state.run_id, call).await {
            Some(content) => call_result(call, content, false),
            None => approval::interrupted(call),
        };
        CallState::Done { result }
    }

    /// Resumes the child of call `i` with the decisions made for it, and stores what became
    /// of the call (done, failed, or suspended again); returns the checkpoint's new version.
    async fn resume_child_call(
        &mut self,
        state: &mut RunState,
        checkpoint: &mut RunCheckpoint,
        i: usize,
        expected: u64,
    ) -> CoreResult<u64> {
        let slot = checkpoint.calls[i].clone();
        let CallState::Nested {
            run_id,
            session_id,
            decisions,
            pending,
        } = slot.state
        else {
            return Ok(expected);
        };
        let Some(nested) = state.nested.clone() else {
            return Err(CoreError::validation(
                "resuming a delegated run needs a supervisor (RunOptions::with_nested)",
            ));
        };
        let expected = self.mark_in_flight(state, checkpoint, i, expected).await?;
        let resumed = nested
            .resume_nested(run_id, session_id, decisions.clone())
            .await
            .and_then(|resumed| match resumed {
                // Suspended again deeper than a decision's path may reach: the resume fails
                // before anything of it is kept (a reviewer may reject the call that went too
                // deep).
                NestedOutcome::Suspended(again) => {
                    approval::check_paths(&again)?;
                    Ok(NestedOutcome::Suspended(again))
                }
                other => Ok(other),
            });
        let resumed = match resumed {
            Ok(resumed) => resumed,
            Err(e) => {
                // The child could not be resumed (it could not be rebuilt, a path grew too
                // deep): keep what already ran (a call done is never run again) and the
                // child's decisions, and release the run for a later resume.
                checkpoint.calls[i].state = CallState::Nested {
                    run_id,
                    session_id,
                    pending,
                    decisions,
                };
                checkpoint.release();
                if let Err(save) = approval::save(self.store.as_ref(), checkpoint, expected).await {
                    tracing::warn!(run = %state.run_id, error = %save, "could not keep a resume's progress");
                }
                return Err(e);
            }
        };
        checkpoint.calls[i].state = match resumed {
            NestedOutcome::Completed(text) => CallState::Done {
                result: call_result(&slot.call, text, false),
            },
            NestedOutcome::Failed(error) => CallState::Done {
                result: call_result(&slot.call, error, true),
            },
            NestedOutcome::Suspended(again) => CallState::Nested {
                run_id,
                session_id,
                pending: again,
                decisions: Vec::new(),
            },
        };
        approval::save(self.store.as_ref(), checkpoint, expected).await
    }

    /// Stores call `i` in flight (keeping the resume's claim) and returns the new version.
    async fn mark_in_flight(
        &mut self,
        state: &mut RunState,
        checkpoint: &mut RunCheckpoint,
        i: usize,
        expected: u64,
    ) -> CoreResult<u64> {
        let child = match &checkpoint.calls[i].state {
            CallState::Nested {
                run_id, session_id, ..
            } => Some((*run_id, *session_id)),
            _ => None,
        };
        checkpoint.calls[i].state = CallState::InFlight {
            since_ms: Timestamp::now().0,
            child,
        };
        let version = approval::save(self.store.as_ref(), checkpoint, expected).await?;
        state.checkpointed = true;
        Ok(version)
    }

    /// Writes the turn's results in call order and ends the turn.
    pub(super) async fn complete_turn(
        &mut self,
        state: &mut RunState,
        checkpoint: RunCheckpoint,
        stop: Option<CallStop>,
    ) -> CoreResult<Option<Outcome>> {
        let mut entries = Vec::with_capacity(checkpoint.calls.len());
        let mut artifacts = 0u32;
        for slot in checkpoint.calls {
            if let CallState::Done { result } = slot.state {
                if !result.is_error
                    && self
                        .agent
                        .tools()
                        .get(&result.name)
                        .is_some_and(|t| t.writes_artifact())
                {
                    artifacts += 1;
                }
                let message = Message::Tool(result);
                entries.push(EntryKind::Message {
                    message: message.clone(),
                });
                self.messages.push(message);
            }
        }
        if artifacts > 0 {
            self.sync_record().await?;
        }
        let update = (artifacts > 0).then(|| SessionUpdate {
            artifacts: Some(self.record.artifacts.saturating_add(artifacts)),
            ..SessionUpdate::default()
        });
        self.commit(state.run_id, &entries, update).await?;
        self.bus.publish(
            state.run_id,
            AgentEvent::TurnFinished {
                turn: checkpoint.turn,
            },
        );
        Ok(match stop {
            Some(CallStop::Fatal(message)) => Some(Outcome::ToolFatal(message)),
            Some(CallStop::Halt(reason)) => Some(Outcome::Denied(reason)),
            _ => None,
        })
    }

    /// Stores the checkpoint (over `expected`) and ends the loop suspended.
    async fn suspend(
        &mut self,
        state: &RunState,
        checkpoint: RunCheckpoint,
        expected: u64,
    ) -> CoreResult<Outcome> {
        match self.try_suspend(state, checkpoint, expected).await {
            // A first suspension that breaks a cap (too many decisions, a path too deep)
            // has nothing to resume: the run fails with the reason. A resume that would
            // re-suspend that way fails instead, and the run waits with its decisions (a
            // reviewer may reject the call that went too deep).
            Err(e) if expected == 0 && e.limit().is_some() => Ok(Outcome::ToolFatal(e.to_string())),
            other => other,
        }
    }

    async fn try_suspend(
        &mut self,
        state: &RunState,
        checkpoint: RunCheckpoint,
        expected: u64,
    ) -> CoreResult<Outcome> {
        let pending = checkpoint.pending();
        approval::check_paths(&pending)?;
        // Its own calls and its children's, as the root sees them: the same cap.
        let max = checkpoint.caps.max_pending;
        if pending.len() > max {
            return Err(CoreError::limit_error(
                format!(
                    "a run may wait on at most {max} approvals (its tree asks for {})",
                    pending.len()
                ),
                Some(crate::error::LimitInfo {
                    limit: arbor_protocol::LimitKind::MaxPendingApprovals,
                    maximum: max as u64,
                    observed: pending.len() as u64,
                }),
            ));
        }
        let mut checkpoint = checkpoint;
        checkpoint.release();
        // The attempt that suspended, for the resumed one to join its trace.
        checkpoint.trace = crate::process::telemetry::traceparent().or(checkpoint.trace);
        // What must exist whenever the suspension does goes first: a crash between the two
        // leaves an unused record, never a suspension nothing can rebuild.
        if let Some((namespace, value)) = &self.beside_suspension {
            let key = state.run_id.to_string();
            let current = self
                .store
                .checkpoint(namespace, &key)
                .await?
                .map_or(0, |c| c.version);
            self.store
                .put_checkpoint(namespace, &key, value, current)
                .await?;
        }
        let version = approval::save(self.store.as_ref(), &checkpoint, expected).await?;
        Ok(Outcome::Suspended(Suspension {
            run_id: state.run_id,
            session_id: self.id(),
            version,
            pending,
        }))
    }

    /// Resumes the suspended run `run_id` of this session: runs the calls decided since it
    /// suspended (an allowed call once; a rejected one gets the rejection as its result),
    /// resumes children that have decisions, and goes on with the run, or suspends again
    /// with what still waits. Decide first ([`approval::decide`], or [`Session::approve`]).
    pub async fn resume(&mut self, run_id: RunId, options: RunOptions) -> CoreResult<RunResult> {
        let (version, mut checkpoint) = approval::load(self.store.as_ref(), run_id)
            .await?
            .filter(|(_, c)| c.session_id == self.id())
            .ok_or_else(approval::unknown_approval)?;
        // Claim it: of two resumes, one goes on; the other sees the claim (or a stale
        // version) and stops, so a decided call runs once.
        let now = Timestamp::now().0;
        if checkpoint.claimed(now) {
            return Err(approval::being_resumed());
        }
        checkpoint.claim(now);
        approval::save(self.store.as_ref(), &checkpoint, version).await?;
        // The claim stays on what the resume stores while it runs the decided calls; a
        // suspension stores it released.
        let limits = match options.limits {
            Some(l) => checkpoint.limits.narrow(&l),
            None => checkpoint.limits,
        };
        // What the run's turns cost before it suspended: its cost entries (the checkpoint
        // keeps its usage, not its cost).
        let cost = self.run_cost(run_id).await?;
        let corrections = self.run_corrections(run_id).await?;
        let state = Box::new(RunState {
            run_id,
            limits,
            turns: checkpoint.turns,
            tool_calls: checkpoint.tool_calls,
            usage: checkpoint.usage,
            text: checkpoint.text.clone(),
            gated: options.interrupt_before_tool || self.agent.interrupt_before_tool(),
            sticky: checkpoint.sticky.clone(),
            nested: options.nested.clone(),
            started_ms: checkpoint.started_ms,
            caps: checkpoint.caps,
            checkpointed: true,
            trace: crate::session::attribution::Trace::default(),
            deferred: None,
            new_loop: false,
            forced: false,
            cost,
            corrections,
        });
        self.commit(run_id, &[], Some(crate::session::run::running_update()))
            .await?;
        // The resumed attempt announces its own start, so a consumer of the stream can tell
        // where it begins.
        self.bus.publish(
            run_id,
            AgentEvent::RunStarted {
                agent: self.agent.name().to_owned(),
                model: self.agent.model().to_owned(),
            },
        );
        tracing::debug!(session = %self.id(), run = %run_id, at = Timestamp::now().0, "run resumed");
        let token = options.cancel.unwrap_or_default().child_token();
        let result = self
            .drive(state, &token, Turns::Resume(Box::new(checkpoint)))
            .await;
        if result.is_err()
            && let Ok(Some((version, mut waiting))) =
                approval::load(self.store.as_ref(), run_id).await
        {
            // The resume failed before the run moved on (a child could not be rebuilt, a
            // path grew too deep): it still waits, with its decisions kept and this resume's
            // claim released, so the next decision or resume is not refused.
            if waiting.claimed_at_ms == Some(now) {
                waiting.release();
                if let Err(e) = approval::save(self.store.as_ref(), &waiting, version).await {
                    tracing::warn!(session = %self.id(), error = %e, "could not release the resume's claim");
                }
            }
            let back = SessionUpdate::status(SessionStatus::Suspended);
            if let Err(e) = self.commit(run_id, &[], Some(back)).await {
                tracing::warn!(session = %self.id(), error = %e, "could not mark the run suspended again");
            }
        }
        result
    }

    /// Decides on the suspended run `run_id` (against `expected_version`) and resumes it.
    pub async fn approve(
        &mut self,
        run_id: RunId,
        expected_version: u64,
        decisions: &[ApprovalDecision],
        options: RunOptions,
    ) -> CoreResult<RunResult> {
        // Another session's run is as unknown as a forged one: nothing is recorded on it.
        let owned = approval::load(self.store.as_ref(), run_id)
            .await?
            .is_some_and(|(_, c)| c.session_id == self.id());
        if !owned {
            return Err(approval::unknown_approval());
        }
        approval::decide(self.store.as_ref(), run_id, expected_version, decisions).await?;
        self.resume(run_id, options).await
    }
}

const _: fn(Arc<dyn NestedResumer>) = |_| {};
