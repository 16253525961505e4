//! The run loop: one input driven through model turns and tool calls to a terminal status.
//!
//! Each turn: check the step limit, stream one provider call (text deltas are published as
//! they arrive), record its usage, check the token limit, then run the tool calls the model
//! asked for (after checking the tool-call limit for the whole turn, before any side effect).
//! The wall-time limit and the cancellation token cover everything, including a provider call
//! or tool in flight: its future is dropped and the run ends at once.

use arbor_protocol::{
    AgentEvent, EntryKind, LimitKind, Message, Reasoning, RunId, RunLimitBreach, RunLimits,
    SessionStatus, ToolCall, Usage,
};
use arbor_store::SessionUpdate;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::approval::Sticky;
use crate::error::{CoreError, CoreResult};
use crate::outcome::{RunResult, Suspension};
use crate::process::telemetry;
use crate::session::Session;
use crate::session::resumer::{NestedResumer, Turns};

/// Options of one run.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Cancels the run; it ends `aborted`.
    pub cancel: Option<CancellationToken>,
    /// Narrows the agent's limits for this run (each field takes the lower value).
    pub limits: Option<RunLimits>,
    /// Suspend before executing any tool call, until a decision allows it (the agent's own
    /// setting also applies).
    pub interrupt_before_tool: bool,
    /// Resumes the suspended runs of children this run's tools delegated to (a supervisor).
    pub nested: Option<std::sync::Arc<dyn NestedResumer>>,
}

impl RunOptions {
    /// Options with this cancellation token.
    pub fn with_cancel(mut self, cancel: CancellationToken) -> Self {
        self.cancel = Some(cancel);
        self
    }

    /// Options narrowing the limits.
    pub fn with_limits(mut self, limits: RunLimits) -> Self {
        self.limits = Some(limits);
        self
    }

    /// Options that gate every tool call on a decision.
    pub fn with_approvals(mut self) -> Self {
        self.interrupt_before_tool = true;
        self
    }

    /// Options resuming delegated runs through `nested`.
    pub fn with_nested(mut self, nested: std::sync::Arc<dyn NestedResumer>) -> Self {
        self.nested = Some(nested);
        self
    }
}

/// Why the loop stopped.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// The model answered; `truncated` when the provider cut the answer off at its output cap.
    Completed {
        truncated: bool,
    },
    Breach(RunLimitBreach),
    Cancelled,
    ProviderError(String),
    ToolFatal(String),
    Denied(String),
    Suspended(Suspension),
    /// A budget pool could not cover the next call: it was not made.
    BudgetExhausted(crate::budget::Refusal),
    /// The answer did not match the session's output schema, corrections spent.
    InvalidOutput(crate::output::Mismatch),
}

/// The status change that starts (or resumes) a run: refused when the session was deleted.
pub(crate) fn running_update() -> SessionUpdate {
    SessionUpdate {
        live_only: true,
        ..SessionUpdate::status(SessionStatus::Running)
    }
}

/// A run's state while it is driven. Passed boxed down the drive (`Box<RunState>`): it is
/// over 600 bytes, and each layer of the run's future kept a copy of its own, which every
/// boxed or spawned drive then copied.
#[derive(Debug)]
pub(crate) struct RunState {
    pub(crate) run_id: RunId,
    pub(crate) limits: RunLimits,
    pub(crate) turns: u32,
    pub(crate) tool_calls: u32,
    pub(crate) usage: Usage,
    pub(crate) text: String,
    /// Every tool call waits for a decision.
    pub(crate) gated: bool,
    /// Run-wide decisions so far.
    pub(crate) sticky: Vec<Sticky>,
    pub(crate) nested: Option<std::sync::Arc<dyn NestedResumer>>,
    pub(crate) started_ms: u64,
    /// How many decisions it may wait on and keep.
    pub(crate) caps: crate::approval::ApprovalCaps,
    /// A checkpoint of this run is stored (it suspended, or is being resumed): a run that
    /// ends without suspending closes it.
    pub(crate) checkpointed: bool,
    /// What a limit death's attribution needs.
    pub(crate) trace: crate::session::attribution::Trace,
    /// The run's last turn, written with its end in one store write (see [`Deferred`]).
    pub(crate) deferred: Option<Deferred>,
    /// The run begins a new tool loop (it closes no earlier run's calls): its first turn
    /// sends no earlier loop's reasoning.
    pub(crate) new_loop: bool,
    /// The run is on fresh input from its host (not an inbox, a resume or a continuation):
    /// only its first turn may force a tool call (`Controls::after_call` for the rest).
    pub(crate) forced: bool,
    /// What its provider turns cost so far, in micro-units.
    pub(crate) cost: u64,
    /// Answers sent back for not matching the session's output schema.
    pub(crate) corrections: u32,
}

/// A run's last provider turn (no tool calls, or a failed call: the run ends right after
/// it), kept to be written in the same store write as the run's end instead of a write of
/// its own. Nothing else happens in between, so a crash loses the same either way: a turn
/// whose write had not landed. Its events are published after that write, so an event
/// still means its entries are stored.
#[derive(Debug, Default)]
pub(crate) struct Deferred {
    pub(crate) entries: Vec<EntryKind>,
    pub(crate) update: Option<SessionUpdate>,
    pub(crate) attributed: Option<(Usage, u64)>,
    pub(crate) events: Vec<AgentEvent>,
}

impl Session {
    /// Runs `input` to a terminal status.
    ///
    /// Model, tool and limit failures end the run with a status in the [`RunResult`]; an
    /// `Err` means the store failed. Cancel safe in the sense that dropping the future stops
    /// the run, but the session is then left `running` in the store (a later process marks it
    /// `interrupted`); prefer the cancellation token.
    pub async fn run(
        &mut self,
        input: impl Into<String>,
        options: RunOptions,
    ) -> CoreResult<RunResult> {
        self.run_from(Some(input.into()), options).await
    }

    /// Runs on what is pending in the session's inbox (a reply, a follow-up, a notice): the
    /// messages become the input, read by the first turn. Fails with `Validation` when the
    /// inbox is empty.
    pub async fn run_inbox(&mut self, options: RunOptions) -> CoreResult<RunResult> {
        if self.inbox.is_empty() {
            return Err(CoreError::validation(
                "the session's inbox is empty: nothing to run on",
            ));
        }
        self.run_from(None, options).await
    }

    async fn run_from(
        &mut self,
        input: Option<String>,
        options: RunOptions,
    ) -> CoreResult<RunResult> {
        self.start_run(input, Vec::new(), Turns::Next, options, None)
            .await
    }

    /// Starts a new run: its start (and `input` as a user message, and `closing`, tool results
    /// that close an earlier run's calls) written in one commit with the status change, then
    /// the loop from `from`.
    pub(crate) async fn start_run(
        &mut self,
        input: Option<String>,
        closing: Vec<Message>,
        from: Turns,
        options: RunOptions,
        before: Option<String>,
    ) -> CoreResult<RunResult> {
        let limits = match options.limits {
            Some(l) => self.agent.limits().narrow(&l),
            None => self.agent.limits(),
        };
        let token = options.cancel.unwrap_or_default().child_token();
        let state = Box::new(RunState {
            run_id: RunId::new(),
            limits,
            turns: 0,
            tool_calls: 0,
            usage: Usage::default(),
            text: String::new(),
            gated: options.interrupt_before_tool || self.agent.interrupt_before_tool(),
            sticky: Vec::new(),
            nested: options.nested.clone(),
            started_ms: arbor_protocol::Timestamp::now().0,
            caps: self.agent.approval_caps(),
            checkpointed: false,
            trace: crate::session::attribution::Trace::default(),
            deferred: None,
            new_loop: closing.is_empty() && !matches!(from, Turns::Rejoined { .. }),
            forced: input.is_some() && closing.is_empty(),
            cost: 0,
            corrections: std::mem::take(&mut self.carried_corrections),
        });
        let run_id = state.run_id;
        // The run's span comes first: its start entry keeps its trace context, which a run
        // continuing this one after a crash joins (as this one joins `before`'s).
        let span = telemetry::attempt_span(
            self.who(),
            run_id,
            &limits,
            before.is_some(),
            before.as_deref(),
        );
        let user = input.map(Message::user);
        // A forked session's first run records its fork first.
        let mut entries: Vec<EntryKind> = self.fork_entry.iter().cloned().collect();
        entries.push(EntryKind::RunStarted {
            agent: self.agent.name().to_owned(),
            model: self.agent.model().to_owned(),
            trace: telemetry::traceparent_of(&span),
        });
        for message in &closing {
            entries.push(EntryKind::Message {
                message: message.clone(),
            });
        }
        if let Some(user) = &user {
            entries.push(EntryKind::Message {
                message: user.clone(),
            });
        }
        // The tombstone is checked atomically with the start: a deleted session never runs.
        self.commit(run_id, &entries, Some(running_update()))
            .await?;
        self.fork_entry = None;
        self.messages.extend(closing);
        self.messages.extend(user);
        self.bus.publish(
            run_id,
            AgentEvent::RunStarted {
                agent: self.agent.name().to_owned(),
                model: self.agent.model().to_owned(),
            },
        );
        tracing::debug!(session = %self.id(), run = %run_id, "run started");

        let mut state = state;
        if matches!(from, Turns::Answered) {
            state.text = self.last_answer().unwrap_or_default();
        }
        self.drive_in(span, state, &token, from).await
    }

    /// Drives a resumed run's loop from `from` under the run's cancellation and timeout
    /// (counted from now: a resumed run gets its whole timeout again), then writes the end;
    /// its attempt's span joins the trace of the attempt that suspended.
    pub(crate) async fn drive(
        &mut self,
        state: Box<RunState>,
        token: &CancellationToken,
        from: Turns,
    ) -> CoreResult<RunResult> {
        let before = match &from {
            Turns::Resume(checkpoint) => checkpoint.trace.as_deref(),
            _ => None,
        };
        let span = telemetry::attempt_span(self.who(), state.run_id, &state.limits, true, before);
        self.drive_in(span, state, token, from).await
    }

    /// [`drive`](Self::drive) inside the attempt's `span`, which records how it ended.
    async fn drive_in(
        &mut self,
        span: tracing::Span,
        state: Box<RunState>,
        token: &CancellationToken,
        from: Turns,
    ) -> CoreResult<RunResult> {
        let carried = (state.usage, state.cost);
        let result = self
            .drive_attempt(state, token, from)
            .instrument(span.clone())
            .await;
        if let Ok(r) = &result
            && !span.is_disabled()
        {
            let subtree = self.record.own_usage + self.record.attributed_usage;
            telemetry::record_run(
                &span,
                r,
                (
                    &telemetry::attempt_usage(&r.usage, &carried.0),
                    r.cost_micros.saturating_sub(carried.1),
                ),
                (&subtree, self.record.aggregate_cost()),
            );
        }
        result
    }

    async fn drive_attempt(
        &mut self,
        mut state: Box<RunState>,
        token: &CancellationToken,
        from: Turns,
    ) -> CoreResult<RunResult> {
        let limits = state.limits;
        let started = tokio::time::Instant::now();
        let deadline = started + limits.timeout();
        let outcome = tokio::select! {
            biased;
            _ = token.cancelled() => Outcome::Cancelled,
            _ = tokio::time::sleep_until(deadline) => Outcome::Breach(RunLimitBreach {
                limit: LimitKind::TimeoutMs,
                maximum: limits.timeout_ms,
                observed: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            }),
            outcome = self.turns(&mut state, token, from) => match outcome {
                Ok(outcome) => outcome,
                Err(e) => {
                    // The store failed: a reservation held goes now, not at the lapse.
                    self.settle_call(false).await;
                    return Err(e);
                }
            },
        };
        // Whatever is still running under this run stops now.
        token.cancel();
        self.finish(state, outcome).await
    }

    async fn turns(
        &mut self,
        state: &mut RunState,
        token: &CancellationToken,
        from: Turns,
    ) -> CoreResult<Outcome> {
        match from {
            Turns::Resume(checkpoint) => {
                if let Some(outcome) = self.settle_turn(state, *checkpoint, token).await? {
                    return Ok(outcome);
                }
            }
            // A continuation whose rejoined child waits: the cut-off turn waits with it.
            Turns::Rejoined { turn, calls } => {
                let checkpoint = self.rejoined_checkpoint(state, turn, calls);
                if let Some(outcome) = self.settle_turn(state, checkpoint, token).await? {
                    return Ok(outcome);
                }
            }
            // The answer a crash left last is checked as a fresh one would be.
            Turns::Answered => {
                if let Some(outcome) = self.recheck_answer(state).await? {
                    return Ok(outcome);
                }
            }
            Turns::Next => {}
        }
        loop {
            // A cancel can land while this task is inside one poll (a tool saw it first and
            // returned, the next provider turn is ready at once): never start a turn after it.
            if token.is_cancelled() {
                return Ok(Outcome::Cancelled);
            }
            self.read_inbox(state.run_id).await?;
            let turn = match self.begin_turn(state) {
                Ok(turn) => turn,
                Err(breach) => return Ok(Outcome::Breach(breach)),
            };
            if self.budgeted()
                && let Err(refusal) = self.reserve_call(state.run_id).await?
            {
                return Ok(Outcome::BudgetExhausted(refusal));
            }
            state
                .trace
                .request(self.agent.system(), self.messages.len());
            let crate::session::provider_turn::Answer {
                text,
                calls,
                usage,
                failure,
                finish,
                reasoning,
                priced,
            } = self
                .provider_turn(state.run_id, turn, turn > 1 || !state.forced)
                .await;
            let truncated = matches!(finish, Some(arbor_model::FinishReason::Length));
            let call_count = u32::try_from(calls.len()).unwrap_or(u32::MAX);
            // An answer checked against the session's output schema; a mismatch with
            // corrections left is sent back, so this turn is not the run's last.
            let (checked, correct) =
                self.check_answer(state, &text, calls.is_empty() && failure.is_none());
            // The run's last turn: written with the run's end.
            let last = (calls.is_empty() && !correct) || failure.is_some();
            self.record_turn(
                state,
                turn,
                (text.clone(), calls.clone(), reasoning),
                usage.map(|u| (u, priced)),
                (failure.is_none(), last, truncated),
            )
            .await?;
            if !last {
                // Its usage is stored: the reservation goes (the last turn's goes once the
                // run's end, which carries its usage, is written).
                self.settle_call(false).await;
            }
            self.publish_turn(
                state,
                AgentEvent::ProviderTurnFinished {
                    turn,
                    usage: usage.unwrap_or_default(),
                    tool_calls: call_count,
                },
            );
            if let Some(message) = failure {
                return Ok(Outcome::ProviderError(message));
            }
            state.text = text;
            if state.usage.total_tokens > state.limits.max_tokens {
                return Ok(Outcome::Breach(RunLimitBreach {
                    limit: LimitKind::MaxTokens,
                    maximum: state.limits.max_tokens,
                    observed: state.usage.total_tokens,
                }));
            }
            if calls.is_empty() {
                self.publish_turn(state, AgentEvent::TurnFinished { turn });
                match self.answered(state, checked, correct, truncated).await? {
                    Some(outcome) => return Ok(outcome),
                    None => continue,
                }
            }
            if let Some(breach) = self.take_tool_calls(state, call_count) {
                return Ok(Outcome::Breach(breach));
            }
            if let Some(outcome) = self.tool_turn(state, turn, calls, token).await? {
                return Ok(outcome);
            }
        }
    }

    /// Moves what is pending in the inbox into the conversation, before the next provider
    /// turn: each message as a user message (with its sender's envelope), then one
    /// `inbox_read` entry, in one write.
    async fn read_inbox(&mut self, run_id: RunId) -> CoreResult<()> {
        let pending = self.inbox.drain();
        if pending.is_empty() {
            return Ok(());
        }
        let mut entries = Vec::with_capacity(pending.len() + 1);
        let mut messages = Vec::with_capacity(pending.len());
        for m in &pending {
            let message = Message::user(m.envelope());
            entries.push(EntryKind::Message {
                message: message.clone(),
            });
            messages.push(message);
        }
        entries.push(EntryKind::InboxRead {
            ids: pending.iter().map(|m| m.id.clone()).collect(),
        });
        if let Err(e) = self.commit(run_id, &entries, None).await {
            // Not read after all: put them back so the next turn (or run) sees them.
            for m in pending {
                self.inbox.push(m);
            }
            return Err(e);
        }
        self.messages.extend(messages);
        Ok(())
    }

    /// Publishes a turn's event, or keeps it for after the run's end is written when the
    /// turn's entries wait for that write.
    fn publish_turn(&self, state: &mut RunState, event: AgentEvent) {
        match &mut state.deferred {
            Some(deferred) => deferred.events.push(event),
            None => drop(self.bus.publish(state.run_id, event)),
        }
    }

    /// Records a provider turn: its usage (and, with prices, its cost: `usage` comes with
    /// the model it was priced as and its cost) always, its message when the turn `completed`;
    /// written now, or kept for the run's end when it is the `last` turn.
    async fn record_turn(
        &mut self,
        state: &mut RunState,
        turn: u32,
        (text, calls, reasoning): (String, Vec<ToolCall>, Vec<Reasoning>),
        usage: Option<(Usage, (String, u64))>,
        (completed, last, truncated): (bool, bool, bool),
    ) -> CoreResult<()> {
        let mut entries = Vec::with_capacity(4);
        if completed {
            let first_call = calls.first().map(|c| c.id.clone());
            entries.push(EntryKind::Message {
                message: Message::Assistant {
                    content: text,
                    tool_calls: calls,
                },
            });
            if !reasoning.is_empty() {
                entries.push(EntryKind::Reasoning {
                    turn,
                    blocks: crate::session::reasoning::stored(self.agent.redactor(), &reasoning),
                });
                if let Some(id) = first_call {
                    self.reasoning.insert(id, reasoning);
                }
            }
            if truncated {
                tracing::info!(session = %self.id(), turn, "the provider cut the answer off at its output cap");
                entries.push(EntryKind::Truncated {
                    turn,
                    finish_reason: "length".to_owned(),
                });
            }
        }
        let mut update = None;
        let mut attributed = None;
        if let Some((usage, (model, cost))) = usage {
            self.sync_record().await?;
            state.usage += usage;
            let own = self.record.own_usage + usage;
            entries.push(EntryKind::Usage {
                turn,
                usage,
                context_tokens: usage.input_tokens,
            });
            if cost > 0 {
                entries.push(EntryKind::Cost {
                    turn,
                    model,
                    micros: cost,
                });
            }
            state.cost = state.cost.saturating_add(cost);
            update = Some(SessionUpdate {
                own_usage: Some(own),
                own_cost: (cost > 0).then(|| self.record.own_cost.saturating_add(cost)),
                context_tokens: Some(usage.input_tokens),
                ..SessionUpdate::default()
            });
            attributed = Some((usage, cost));
        }
        if last {
            // The entries wait for the run's end; the history gets a copy now.
            if let Some(EntryKind::Message { message }) = entries.first() {
                self.messages.push(message.clone());
            }
            state.deferred = Some(Deferred {
                entries,
                update,
                attributed,
                events: Vec::new(),
            });
        } else if !entries.is_empty() {
            self.commit_usage(state.run_id, &entries, update, attributed)
                .await?;
            // Written: the message itself goes on to the history, not a copy of it.
            if let Some(EntryKind::Message { message }) = entries.into_iter().next() {
                self.messages.push(message);
            }
        }
        Ok(())
    }
}
