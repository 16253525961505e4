//! A turn that stops the run (a call failed it, or a policy halted it) while others of its
//! calls would wait: nothing of it waits. A question is not asked, a call waiting for
//! approval is not run, a child suspended under it is closed (nothing will resume it); each
//! gets an error result saying so, and the run ends with the stop.

use arbor_protocol::ToolCall;

use crate::approval::{CallState, RunCheckpoint};
use crate::error::CoreResult;
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
                result: call_result(&slot.call, not_run(&slot.call, &stop), true),
            };
        }
        self.complete_turn(state, checkpoint, Some(stop)).await
    }
}
