//! Holding a turn's calls for decisions: every call of a gated run, or (in any run) the calls
//! of tools that always ask ([`DynTool::requires_approval`]), the turn's other calls having
//! run; standing and run-wide decisions applied, the cap on waiting calls checked, each
//! waiting call's review kept for the person ([`crate::approval::review`]), and the
//! checkpoint claimed while what is decided runs.
//!
//! [`DynTool::requires_approval`]: crate::tool::DynTool::requires_approval

use arbor_protocol::{RunId, ToolCall};
use tokio_util::sync::CancellationToken;

use crate::approval::{self, CallSlot, CallState, RunCheckpoint};
use crate::error::CoreResult;
use crate::session::Session;
use crate::session::run::{Outcome, RunState};

impl Session {
    /// A gated run's turn: every call waits for a decision (a question that may not wait is
    /// answered now); then [`Session::gate`].
    pub(super) async fn hold_turn(
        &mut self,
        state: &mut RunState,
        mut checkpoint: RunCheckpoint,
        calls: Vec<ToolCall>,
        token: &CancellationToken,
    ) -> CoreResult<Option<Outcome>> {
        let turn = checkpoint.turn;
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
                None => CallState::Pending,
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
        self.gate(state, checkpoint, token).await
    }

    /// The calls of a turn that wait: run-wide and standing decisions decide what they
    /// cover, the cap on waiting calls is checked, the review of each call whose tool shows
    /// one is kept; then what is decided runs (the checkpoint claimed meanwhile, so nobody
    /// decides under it) and the run suspends with the rest.
    pub(super) async fn gate(
        &mut self,
        state: &mut RunState,
        mut checkpoint: RunCheckpoint,
        token: &CancellationToken,
    ) -> CoreResult<Option<Outcome>> {
        let turn = checkpoint.turn;
        // What is decided by a rule of a tool that always asks still has its review kept:
        // what it acts on is what it was called on.
        let asked: Vec<bool> = checkpoint
            .calls
            .iter()
            .map(|s| s.state == CallState::Pending)
            .collect();
        checkpoint.apply_sticky();
        // What the host decided once and for all runs (or is rejected) without asking.
        let standing = crate::approval::standing::Standing::of_record(&self.record.meta);
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
        self.record_reviews(state.run_id, turn, &checkpoint, &asked, token)
            .await?;
        checkpoint.claim(arbor_protocol::Timestamp::now().0);
        self.settle_turn(state, checkpoint, token).await
    }

    /// Keeps, for each call that waited (`asked`) and is still waiting (or was decided by a
    /// rule, for a tool that always asks) whose tool computes one, what the person deciding
    /// it sees beyond its arguments ([`crate::approval::review`]). The newest review of a
    /// call id stands (an id a model repeats in a later turn gets its own).
    async fn record_reviews(
        &self,
        run_id: RunId,
        turn: u32,
        checkpoint: &RunCheckpoint,
        asked: &[bool],
        token: &CancellationToken,
    ) -> CoreResult<()> {
        for (slot, asked) in checkpoint.calls.iter().zip(asked) {
            let Some(tool) = self.agent.tools().get(&slot.call.name) else {
                continue;
            };
            let keep = slot.state == CallState::Pending
                || (*asked
                    && tool.requires_approval()
                    && matches!(slot.state, CallState::Decided { .. }));
            if !keep {
                continue;
            }
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
