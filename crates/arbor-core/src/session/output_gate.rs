//! A run's answer against its session's output schema ([`crate::output`]): checked when the
//! model answers without tool calls; a mismatch is sent back as a user message (written to
//! the transcript like any other) while corrections are left, and ends the run
//! `invalid_output` once they are spent.

use arbor_protocol::{EntryKind, Message, RunId};
use serde_json::Value;

use crate::error::CoreResult;
use crate::output::{Mismatch, OutputSchema, correction};
use crate::session::Session;
use crate::session::run::{Outcome, RunState};

/// An answer checked against the output schema: the value or why not (`None`: no schema).
pub(crate) type Checked = Option<Result<Value, Mismatch>>;

impl Session {
    /// `text`, the turn's answer when `answer` (no tool calls, no failure), checked; and
    /// whether a mismatch is sent back (corrections are left).
    pub(crate) fn check_answer(
        &self,
        state: &RunState,
        text: &str,
        answer: bool,
    ) -> (Checked, bool) {
        match answer.then(|| self.check_output(text)).flatten() {
            Some((checked, retries)) => {
                let correct = checked.is_err() && state.corrections < retries;
                (Some(checked), correct)
            }
            None => (None, false),
        }
    }

    /// The run's last answer (a crash left it, or a resumed run had it) checked as a fresh
    /// one: `None` when a mismatch was sent back and the loop goes on.
    pub(crate) async fn recheck_answer(
        &mut self,
        state: &mut RunState,
    ) -> CoreResult<Option<Outcome>> {
        let text = state.text.clone();
        let (checked, correct) = self.check_answer(state, &text, true);
        self.answered(state, checked, correct, false).await
    }

    /// What the run does after its answer was `checked`: sends a mismatch back (`None`: the
    /// loop goes on), ends `invalid_output`, or completes with the value's JSON as its text.
    pub(crate) async fn answered(
        &mut self,
        state: &mut RunState,
        checked: Checked,
        correct: bool,
        truncated: bool,
    ) -> CoreResult<Option<Outcome>> {
        match checked {
            Some(Err(mismatch)) if correct => {
                state.corrections += 1;
                self.send_back(state.run_id, &mismatch).await?;
                Ok(None)
            }
            Some(Err(mismatch)) => Ok(Some(Outcome::InvalidOutput(mismatch))),
            Some(Ok(value)) => {
                state.text = value.to_string();
                Ok(Some(Outcome::Completed { truncated }))
            }
            None => Ok(Some(Outcome::Completed { truncated })),
        }
    }

    /// `text` checked against the session's output schema, with how many corrections the
    /// schema allows; `None` when the session has none. A stored schema that no longer
    /// reads is a mismatch no correction can fix.
    pub(crate) fn check_output(&self, text: &str) -> Option<(Result<Value, Mismatch>, u32)> {
        let unusable = |e: crate::CoreError| Some((Err(Mismatch(vec![format!("/: {e}")])), 0));
        match OutputSchema::of_record(&self.record.meta) {
            Ok(None) => None,
            Ok(Some(schema)) => match schema.checker() {
                Ok(checker) => Some((checker.check(text), checker.retries)),
                Err(e) => unusable(e),
            },
            Err(e) => unusable(e),
        }
    }

    /// The corrections sent back since the conversation's last task (the last user message
    /// that is not one): what a run continuing one a crash cut off counts on from.
    pub(crate) fn corrections_since_task(&self) -> u32 {
        if !matches!(OutputSchema::of_record(&self.record.meta), Ok(Some(_))) {
            return 0;
        }
        let mut sent = 0u32;
        for m in self.messages().iter().rev() {
            match m {
                Message::User { content }
                    if content.starts_with(crate::output::CORRECTION_PREFIX) =>
                {
                    sent = sent.saturating_add(1);
                }
                Message::User { .. } => break,
                _ => {}
            }
        }
        sent
    }

    /// The corrections run `run_id` sent back already (its transcript's correction
    /// messages): a resumed run counts on from them rather than from none.
    pub(crate) async fn run_corrections(&self, run_id: RunId) -> CoreResult<u32> {
        if !matches!(OutputSchema::of_record(&self.record.meta), Ok(Some(_))) {
            return Ok(0);
        }
        let entries = self.store.transcript(self.id(), 0, None).await?;
        let sent = entries
            .iter()
            .filter(|e| e.run_id == run_id)
            .filter(|e| {
                matches!(&e.kind, EntryKind::Message { message: Message::User { content } }
                    if content.starts_with(crate::output::CORRECTION_PREFIX))
            })
            .count();
        Ok(u32::try_from(sent).unwrap_or(u32::MAX))
    }

    /// Sends `mismatch` back to the model: a user message, written before the next turn.
    pub(crate) async fn send_back(&mut self, run_id: RunId, mismatch: &Mismatch) -> CoreResult<()> {
        let errors = mismatch.to_string();
        let errors = match self.agent.redactor() {
            Some(r) => r.redact(&errors).into_owned(),
            None => errors,
        };
        tracing::info!(session = %self.id(), run = %run_id, %errors, "the answer did not match the output schema; sent back");
        let message = Message::user(correction(mismatch));
        self.commit(
            run_id,
            &[EntryKind::Message {
                message: message.clone(),
            }],
            None,
        )
        .await?;
        self.messages.push(message);
        Ok(())
    }
}
