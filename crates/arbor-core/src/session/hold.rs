//! Holding a turn's calls for decisions: every call of a gated run, or only the calls of
//! tools that always ask ([`DynTool::requires_approval`]); standing and run-wide decisions
//! applied, the cap on waiting calls checked, and each waiting call's review kept for the
//! person ([`crate::approval::review`]).
//!
//! [`DynTool::requires_approval`]: crate::tool::DynTool::requires_approval

use arbor_protocol::{RunId, ToolCall};
use tokio_util::sync::CancellationToken;

use crate::approval::{self, CallSlot, CallState, RunCheckpoint};
use crate::error::CoreResult;
use crate::session::Session;
use crate::session::run::{Outcome, RunState};

impl Session {
    /// A turn held for decisions: every call (a gated run), or only those whose tool always
    /// asks (the others are let through and run now); standing and run-wide decisions
    /// apply; what is decided runs, the rest waits.
    pub(super) async fn hold_turn(
        &mut self,
        state: &mut RunState,
        mut checkpoint: RunCheckpoint,
        calls: Vec<ToolCall>,
        token: &CancellationToken,
    ) -> CoreResult<Option<Outcome>> {
        let turn = checkpoint.turn;
        let whole = state.gated;
        let asking = |call: &ToolCall| {
            self.agent
                .tools()
                .get(&call.name)
                .is_some_and(|t| t.requires_approval())
        };
        let mut halted = None;
        for call in calls {
            // A question that may not wait (refused, malformed) is answered now; a policy
            // that halts on it stops the run.
            let state_now = match self.check_question(state.run_id, turn, &call) {
                Some(refused) => {
                    halted = halted.or(refused.stop);
                    CallState::Done {
                        result: refused.result,
                    }
                }
                None if whole || asking(&call) || self.is_question(&call) => CallState::Pending,
                // Let through: it runs now, as in a turn that holds nothing.
                None => CallState::Decided {
                    verdict: arbor_protocol::Verdict::AllowOnce,
                    reason: None,
                    decided_by: None,
                },
            };
            checkpoint.calls.push(CallSlot {
                approval_id: approval::own_id(state.run_id, &call.id),
                call,
                state: state_now,
            });
        }
        if let Some(stop) = halted {
            return self.stop_turn(state, checkpoint, stop).await;
        }
        checkpoint.apply_sticky();
        // What the host decided once and for all runs (or is rejected) without asking.
        let standing = crate::approval::standing::Standing::of_meta(&self.record.meta);
        let written = checkpoint.apply_standing(&standing);
        let max = state.caps.max_pending;
        let waiting = checkpoint
            .calls
            .iter()
            .filter(|s| s.state == CallState::Pending)
            .count();
        if waiting > max {
            // More than a person can review at once: the run fails, nothing ran.
            return Ok(Some(Outcome::ToolFatal(format!(
                "a turn may wait on at most {max} approvals (it asked for {waiting})"
            ))));
        }
        if !written.is_empty() {
            self.commit(state.run_id, &written, None).await?;
        }
        self.record_reviews(state.run_id, turn, &checkpoint, token)
            .await?;
        return self.settle_turn(state, checkpoint, token).await;
    }

    /// Keeps, for each call still waiting whose tool computes one, what the person deciding
    /// it sees beyond its arguments ([`crate::approval::review`]).
    async fn record_reviews(
        &self,
        run_id: RunId,
        turn: u32,
        checkpoint: &RunCheckpoint,
        token: &CancellationToken,
    ) -> CoreResult<()> {
        for slot in &checkpoint.calls {
            if slot.state != CallState::Pending {
                continue;
            }
            let Some(tool) = self.agent.tools().get(&slot.call.name) else {
                continue;
            };
            let ctx = crate::tool::ToolContext::new(
                self.agent.name(),
                self.as_ref(),
                run_id,
                slot.call.id.clone(),
            )
            .turn(turn)
            .cancel(token.child_token())
            .identity(self.agent.shared_identity());
            if let Some(review) = tool.review(&slot.call.arguments, &ctx).await {
                approval::review::record(self.store.as_ref(), &slot.approval_id, &review).await?;
            }
        }
        Ok(())
    }
}
