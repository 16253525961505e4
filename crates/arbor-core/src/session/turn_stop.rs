//! A turn that stops the run (a call failed it, or a policy halted it) while others of its
//! calls would wait: nothing of it waits. A question is not asked, a call waiting for
//! approval is not run, a child suspended under it is closed (nothing will resume it); each
//! gets an error result saying so, and the run ends with the stop. Also where a settled
//! turn's checkpoint is dropped.

use arbor_protocol::ToolCall;

use crate::approval::{CallState, RunCheckpoint};
use crate::error::{CoreError, CoreResult};
use crate::session::Session;
use crate::session::dispatch::{CallStop, call_result};
use crate::session::run::{Outcome, RunState};

/// What a call that would have waited reads when the run stopped first.
fn not_run(call: &ToolCall, stop: &CallStop) -> String {
    let why = match stop {
        CallStop::Fatal(m) | CallStop::Halt(m) => m.as_str(),
        CallStop::Suspended(_) | CallStop::Ask => "",
    };
    format!(
        "not run: the run stopped before `{}` could wait ({why})",
        call.name
    )
}

impl Session {
    /// Ends the turn with `stop` (a `Fatal` or `Halt`): what would wait is closed first.
    pub(crate) async fn stop_turn(
        &mut self,
        state: &mut RunState,
        mut checkpoint: RunCheckpoint,
        stop: CallStop,
    ) -> CoreResult<Option<Outcome>> {
        self.close_waiting(state, &mut checkpoint, &stop).await;
        self.complete_turn(state, checkpoint, Some(stop)).await
    }

    /// Closes what of the turn would wait, since the run stops with `stop`: each such call
    /// gets its error result (a child suspended under one is closed).
    pub(crate) async fn close_waiting(
        &self,
        state: &RunState,
        checkpoint: &mut RunCheckpoint,
        stop: &CallStop,
    ) {
        for slot in &mut checkpoint.calls {
            match &slot.state {
                CallState::Pending => {}
                CallState::Nested {
                    run_id, session_id, ..
                } => {
                    if let Some(nested) = &state.nested {
                        nested.abandon_nested(*run_id, *session_id).await;
                    }
                }
                _ => continue,
            }
            slot.state = CallState::Done {
                result: call_result(&slot.call, not_run(&slot.call, stop), true),
            };
        }
    }

    /// Deletes the settled turn's checkpoint (stored at `expected`): nothing of it waits.
    pub(crate) async fn drop_checkpoint(
        &self,
        state: &mut RunState,
        expected: u64,
    ) -> CoreResult<()> {
        self.store
            .delete_checkpoint(
                crate::approval::RUN_NAMESPACE,
                &state.run_id.to_string(),
                expected,
            )
            .await
            .map_err(|e| match e {
                arbor_store::StoreError::Conflict { .. } => {
                    CoreError::Conflict("the run's approvals changed while it resumed".to_owned())
                }
                other => CoreError::Store(other),
            })?;
        state.checkpointed = false;
        Ok(())
    }
}
