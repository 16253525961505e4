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
        let mut closing = Vec::new();
        let cancel = options.cancel.clone().unwrap_or_default();
        // A crash between a suspension's checkpoint and its record's `suspended`: the calls
        // the checkpoint holds done ran (a turn that waited only on a question, say); their
        // results stand.
        let mut done = self.done_in_stale_suspensions().await?;
        for interrupted in self.unanswered_calls() {
            let answer = match done.remove(&interrupted.call_id) {
                Some(result) => Some((result.content, result.is_error)),
                None => {
                    self.rejoin_or_reissue(&interrupted, last_run, last_turn, &options, &cancel)
                        .await?
                }
            };
            // Else, its effect was recorded done: that is its result, nothing is repeated.
            let answer = match (answer, last_run) {
                (Some(answer), _) => Some(answer),
                (None, Some(run)) => {
                    let call = arbor_protocol::ToolCall {
                        id: interrupted.call_id.clone(),
                        name: interrupted.name.clone(),
                        arguments: serde_json::Value::Null,
                    };
                    self.recorded_effect(run, &call)
                        .await
                        .map(|content| (content, false))
                }
                (None, None) => None,
            };
            let Some((content, is_error)) = answer else {
                closing.push(Message::Tool(interrupted));
                continue;
            };
            if let Some(i) = state
                .interrupted_calls
                .iter()
                .position(|n| *n == interrupted.name)
            {
                state.interrupted_calls.remove(i);
            }
            state.rejoined_calls.push(interrupted.name.clone());
            closing.push(Message::Tool(ToolResult {
                content,
                is_error,
                ..interrupted
            }));
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
        let from = if state.already_answered {
            Turns::Answered
        } else {
            Turns::Next
        };
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
    /// started elsewhere (a worker) finished, or it was a spawn cut off before its child was
    /// registered, issued again now.
    async fn rejoin_or_reissue(
        &mut self,
        interrupted: &ToolResult,
        last_run: Option<arbor_protocol::RunId>,
        last_turn: u32,
        options: &RunOptions,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> CoreResult<Option<(String, bool)>> {
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
            .await?;
        match rejoined {
            Some(crate::session::resumer::NestedOutcome::Completed(text)) => {
                return Ok(Some((text, false)));
            }
            Some(crate::session::resumer::NestedOutcome::Failed(text)) => {
                return Ok(Some((text, true)));
            }
            Some(crate::session::resumer::NestedOutcome::Suspended(_)) | None => {}
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
                Ok(Some((outcome.result.content, outcome.result.is_error)))
            }
            // Its child stopped on a call waiting for approval: a continuation cannot wait
            // here, so the child's suspension is closed (nothing of it ran past its gate) and
            // the call is reported interrupted, as before.
            Some(crate::session::dispatch::CallStop::Suspended(child)) => {
                nested.abandon_nested(child.run_id, child.session_id).await;
                Ok(None)
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
            c.meta["spawn_call"] == call_id && c.spawned_by.is_some_and(|s| s.run_id == run)
        });
        Ok((!registered).then_some(call))
    }

    /// The calls of the last assistant message that have no result, each with an
    /// interruption as its result.
    fn unanswered_calls(&self) -> Vec<ToolResult> {
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
            .map(crate::approval::interrupted)
            .collect()
    }

    /// The text of the last message when it is the model's answer.
    pub(crate) fn last_answer(&self) -> Option<String> {
        match self.messages().last() {
            Some(Message::Assistant { content, .. }) => Some(content.clone()),
            _ => None,
        }
    }
}
