//! Continuing a run a crash cut off: a session left `interrupted` (its process died mid-run)
//! goes on from its stored transcript in a new run. A turn that was in progress (the model
//! was asked, no answer stored) is asked again; tool calls that were in flight (asked for,
//! no result stored) are never run again: each gets a result saying it was interrupted and
//! may or may not have taken effect, and the model decides what to do; a run that had its
//! answer but not its end just ends.

use arbor_protocol::{Message, SessionStatus, ToolResult};

use crate::error::{CoreError, CoreResult};
use crate::outcome::RunResult;
use crate::session::Session;
use crate::session::resumer::Turns;
use crate::session::run::RunOptions;

/// What a continuation found for a call the crash cut off.
enum Rejoin {
    /// Its result (and whether it is an error).
    Answer(String, bool),
    /// It waits for its child, which suspended.
    Waits(Box<crate::outcome::NestedSuspension>),
}

/// What a continued run closed before it went on.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Continued {
    /// Tool calls that were in flight, reported to the model as interrupted (their names).
    pub interrupted_calls: Vec<String>,
    /// The model's turn was in progress and is asked again.
    pub turn_redone: bool,
    /// The run had its answer already and only its end was written.
    pub already_answered: bool,
    /// Tool calls that were in flight and got their real result instead: a spawn whose
    /// child was waited for again (a worker ran it) or had ended, or an effect recorded
    /// done (their names).
    pub rejoined_calls: Vec<String>,
}

impl Session {
    /// What [`continue_interrupted`](Self::continue_interrupted) would close, without
    /// writing anything.
    pub fn interrupted_state(&self) -> Continued {
        let mut out = Continued::default();
        let Some(last) = self.messages().last() else {
            return out;
        };
        match last {
            Message::Assistant { tool_calls, .. } if tool_calls.is_empty() => {
                out.already_answered = true;
            }
            Message::Assistant { .. } | Message::Tool(_) => {
                out.interrupted_calls = self
                    .unanswered_calls()
                    .into_iter()
                    .map(|r| r.name)
                    .collect();
                out.turn_redone = out.interrupted_calls.is_empty();
            }
            _ => out.turn_redone = true,
        }
        out
    }

    /// Continues this session's interrupted run in a new run (see the module docs). Fails
    /// with `Validation` unless the session is `interrupted`.
    pub async fn continue_interrupted(
        &mut self,
        options: RunOptions,
    ) -> CoreResult<(Continued, RunResult)> {
        if self.record().status != SessionStatus::Interrupted {
            return Err(CoreError::validation(format!(
                "session {} was not interrupted (it is {}): nothing to continue",
                self.id(),
                self.record().status
            )));
        }
        self.continue_from_transcript(options).await
    }

    /// [`continue_interrupted`](Self::continue_interrupted) without the status check (a
    /// supervisor has checked it, then taken the run's lease).
    pub(crate) async fn continue_from_transcript(
        &mut self,
        options: RunOptions,
    ) -> CoreResult<(Continued, RunResult)> {
        let mut state = self.interrupted_state();
        let (last_run, last_turn, before) = self.cut_off_run().await?;
        let cancel = options.cancel.clone().unwrap_or_default();
        // A crash between a suspension's checkpoint and its record's `suspended`: the calls
        // the checkpoint holds done ran (a turn that waited only on a question, say); their
        // results stand.
        let mut done = self.done_in_stale_suspensions().await?;
        let mut slots = Vec::new();
        for call in self.unanswered_tool_calls() {
            let interrupted = crate::approval::interrupted(&call);
            let found = match done.remove(&interrupted.call_id) {
                Some(result) => Some(Rejoin::Answer(result.content, result.is_error)),
                None => {
                    self.rejoin_or_reissue(&interrupted, last_run, last_turn, &options, &cancel)
                        .await?
                }
            };
            // Else, its effect was recorded done: that is its result, nothing is repeated.
            let found = match (found, last_run) {
                (Some(found), _) => Some(found),
                (None, Some(run)) => self
                    .recorded_effect(run, &call)
                    .await
                    .map(|content| Rejoin::Answer(content, false)),
                (None, None) => None,
            };
            let slot = match found {
                None => crate::approval::CallState::Done {
                    result: interrupted,
                },
                Some(found) => {
                    if let Some(i) = state.interrupted_calls.iter().position(|n| *n == call.name) {
                        state.interrupted_calls.remove(i);
                    }
                    state.rejoined_calls.push(call.name.clone());
                    match found {
                        Rejoin::Answer(content, is_error) => crate::approval::CallState::Done {
                            result: ToolResult {
                                content,
                                is_error,
                                ..interrupted
                            },
                        },
                        Rejoin::Waits(child) => crate::approval::CallState::Nested {
                            run_id: child.run_id,
                            session_id: child.session_id,
                            pending: child.pending,
                            decisions: Vec::new(),
                        },
                    }
                }
            };
            slots.push((call, slot));
        }
        // A crash between a suspension's checkpoint and its record's `suspended` leaves the
        // checkpoint of a run that goes on here instead: its calls are answered above (what
        // it held done, else interrupted: never run), so it is closed, and nothing lists it
        // as waiting.
        for stale in crate::approval::suspensions(self.store.as_ref(), self.id()).await? {
            match self
                .store
                .delete_checkpoint(
                    crate::approval::RUN_NAMESPACE,
                    &stale.run_id.to_string(),
                    stale.version,
                )
                .await
            {
                Ok(()) | Err(arbor_store::StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // A rejoined child that suspended (it asked a question, or waits for approval) keeps
        // the cut-off turn waiting with it, as the turn would have before the crash: the run
        // suspends at once, and the child's answer is its call's result on resume. Else the
        // cut-off calls' results close the turn and the run goes on.
        let waits = slots
            .iter()
            .any(|(_, s)| matches!(s, crate::approval::CallState::Nested { .. }));
        let (closing, from) = if waits {
            let turn = last_turn;
            (Vec::new(), Turns::Rejoined { turn, calls: slots })
        } else if state.already_answered {
            (Vec::new(), Turns::Answered)
        } else {
            let closing = slots
                .into_iter()
                .filter_map(|(_, s)| match s {
                    crate::approval::CallState::Done { result } => Some(Message::Tool(result)),
                    _ => None,
                })
                .collect();
            (closing, Turns::Next)
        };
        // The corrections the cut-off run sent back count: its output retries are not
        // granted again.
        self.carried_corrections = self.corrections_since_task();
        let result = self.start_run(None, closing, from, options, before).await?;
        Ok((state, result))
    }

    /// The results of the calls the stale suspensions of this session hold done, by call id.
    async fn done_in_stale_suspensions(
        &self,
    ) -> CoreResult<std::collections::HashMap<String, arbor_protocol::ToolResult>> {
        let mut done = std::collections::HashMap::new();
        for stale in crate::approval::suspensions(self.store.as_ref(), self.id()).await? {
            let Some((_, checkpoint)) =
                crate::approval::load(self.store.as_ref(), stale.run_id).await?
            else {
                continue;
            };
            for slot in checkpoint.calls {
                if let crate::approval::CallState::Done { result } = slot.state {
                    done.insert(slot.call.id, result);
                }
            }
        }
        Ok(done)
    }

    /// The cut-off run (whose calls' idempotency keys name it), the turn its calls in flight
    /// belong to (its last provider turn), and its trace, which the continuing run joins.
    async fn cut_off_run(
        &self,
    ) -> CoreResult<(Option<arbor_protocol::RunId>, u32, Option<String>)> {
        let entries = self.store.transcript(self.id(), 0, None).await?;
        let started = entries
            .iter()
            .rev()
            .find(|e| matches!(e.kind, arbor_protocol::EntryKind::RunStarted { .. }))
            .cloned();
        let last_run = started.as_ref().map(|e| e.run_id);
        let last_turn = entries
            .iter()
            .filter(|e| Some(e.run_id) == last_run)
            .filter_map(|e| match e.kind {
                arbor_protocol::EntryKind::Usage { turn, .. } => Some(turn),
                _ => None,
            })
            .max()
            .unwrap_or(1);
        let trace = started.and_then(|e| match e.kind {
            arbor_protocol::EntryKind::RunStarted { trace, .. } => trace,
            _ => None,
        });
        Ok((last_run, last_turn, trace))
    }

    /// The answer of a call the crash left without one, when it can have one: the child it
    /// started (here or on a worker) finished or was continued, or it was a spawn cut off
    /// before its child was registered, issued again now. A child that suspended meanwhile
    /// is waited with.
    async fn rejoin_or_reissue(
        &mut self,
        interrupted: &ToolResult,
        last_run: Option<arbor_protocol::RunId>,
        last_turn: u32,
        options: &RunOptions,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> CoreResult<Option<Rejoin>> {
        let (Some(run), Some(nested)) = (last_run, &options.nested) else {
            return Ok(None);
        };
        // A call that started a child elsewhere (a worker) waits for it instead.
        let rejoined = nested
            .rejoin(
                self.id(),
                run,
                &interrupted.call_id,
                &interrupted.name,
                cancel,
            )
            .await;
        match rejoined {
            Ok(Some(crate::session::resumer::NestedOutcome::Completed(text))) => {
                return Ok(Some(Rejoin::Answer(text, false)));
            }
            Ok(Some(crate::session::resumer::NestedOutcome::Failed(text))) => {
                return Ok(Some(Rejoin::Answer(text, true)));
            }
            // Continued here, it suspended (a question, an approval): the call waits for it.
            Err(CoreError::Suspended(child)) => return Ok(Some(Rejoin::Waits(child))),
            Err(e) => return Err(e),
            Ok(Some(crate::session::resumer::NestedOutcome::Suspended(_)) | None) => {}
        }
        // A spawn cut off before its child was registered (the crash came between the
        // model's call and the child's record) started nothing: it is issued again, under its
        // call id, rather than reported interrupted, so no child of the tree is lost.
        let Some(call) = self
            .spawn_never_registered(run, &interrupted.call_id)
            .await?
        else {
            return Ok(None);
        };
        let outcome = self.execute(run, last_turn, &call, cancel).await;
        match outcome.stop {
            None => {
                tracing::info!(session = %self.id(), call = %call.id, "a spawn cut off before its child registered was issued again");
                Ok(Some(Rejoin::Answer(
                    outcome.result.content,
                    outcome.result.is_error,
                )))
            }
            // Its child stopped on a call waiting for approval (or a question): the call
            // waits for it.
            Some(crate::session::dispatch::CallStop::Suspended(child)) => {
                Ok(Some(Rejoin::Waits(child)))
            }
            Some(_) => Ok(None),
        }
    }

    /// The `spawn_agent` call `call_id` of the last assistant message, when no child of this
    /// session names it as the call that made it in run `run` (nothing of it was registered).
    async fn spawn_never_registered(
        &self,
        run: arbor_protocol::RunId,
        call_id: &str,
    ) -> CoreResult<Option<arbor_protocol::ToolCall>> {
        let Some(call) = self.messages().iter().rev().find_map(|m| match m {
            Message::Assistant { tool_calls, .. } => tool_calls
                .iter()
                .find(|c| c.id == call_id && c.name == "spawn_agent")
                .cloned(),
            _ => None,
        }) else {
            return Ok(None);
        };
        if self.agent.tools().get(&call.name).is_none() {
            return Ok(None);
        }
        let children = self
            .store
            .list_sessions(arbor_store::SessionQuery::Children(self.id()))
            .await?;
        let registered = children.iter().any(|c| {
            c.meta
                .field("spawn_call")
                .is_some_and(|v| v.as_str() == Some(call_id))
                && c.spawned_by.is_some_and(|s| s.run_id == run)
        });
        Ok((!registered).then_some(call))
    }

    /// The calls of the last assistant message that have no result, each with an
    /// interruption as its result.
    fn unanswered_calls(&self) -> Vec<ToolResult> {
        self.unanswered_tool_calls()
            .iter()
            .map(crate::approval::interrupted)
            .collect()
    }

    /// The calls of the last assistant message that have no result.
    fn unanswered_tool_calls(&self) -> Vec<arbor_protocol::ToolCall> {
        let messages = self.messages();
        let Some(pos) = messages
            .iter()
            .rposition(|m| matches!(m, Message::Assistant { .. }))
        else {
            return Vec::new();
        };
        let Message::Assistant { tool_calls, .. } = &messages[pos] else {
            return Vec::new();
        };
        let answered: Vec<&str> = messages[pos + 1..]
            .iter()
            .filter_map(|m| match m {
                Message::Tool(r) => Some(r.call_id.as_str()),
                _ => None,
            })
            .collect();
        tool_calls
            .iter()
            .filter(|c| !answered.contains(&c.id.as_str()))
            .cloned()
            .collect()
    }

    /// The checkpoint of a continued run whose cut-off turn `turn` waits for a rejoined
    /// child: `calls` as the continuation found them, named as a suspended turn's are.
    pub(crate) fn rejoined_checkpoint(
        &self,
        state: &crate::session::run::RunState,
        turn: u32,
        calls: Vec<(arbor_protocol::ToolCall, crate::approval::CallState)>,
    ) -> crate::approval::RunCheckpoint {
        crate::approval::RunCheckpoint {
            session_id: self.id(),
            run_id: state.run_id,
            turn,
            turns: state.turns,
            tool_calls: state.tool_calls,
            usage: state.usage,
            text: state.text.clone(),
            limits: state.limits,
            started_ms: state.started_ms,
            calls: calls
                .into_iter()
                .map(|(call, state_now)| crate::approval::CallSlot {
                    approval_id: crate::approval::own_id(state.run_id, &call.id),
                    call,
                    state: state_now,
                })
                .collect(),
            sticky: state.sticky.clone(),
            claimed_at_ms: None,
            claimed_by: None,
            caps: state.caps,
            trace: None,
        }
    }

    /// The text of the last message when it is the model's answer.
    pub(crate) fn last_answer(&self) -> Option<String> {
        match self.messages().last() {
            Some(Message::Assistant { content, .. }) => Some(content.clone()),
            _ => None,
        }
    }
}
