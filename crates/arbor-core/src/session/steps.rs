//! A run's counted steps: each turn against `max_steps` (and announced), each turn's tool
//! calls against `max_tool_calls`.

use arbor_protocol::{AgentEvent, LimitKind, RunLimitBreach};

use crate::session::Session;
use crate::session::run::RunState;

impl Session {
    /// Counts the next turn against `max_steps` (the breach when it would pass it) and
    /// announces it.
    pub(crate) fn begin_turn(&mut self, state: &mut RunState) -> Result<u32, RunLimitBreach> {
        let turn = state.turns + 1;
        if turn > state.limits.max_steps {
            return Err(RunLimitBreach {
                limit: LimitKind::MaxSteps,
                maximum: u64::from(state.limits.max_steps),
                observed: u64::from(turn),
            });
        }
        state.turns = turn;
        if turn == 1 && state.new_loop {
            // A run's first turn begins a new tool loop: earlier loops' thinking is not
            // sent again.
            self.reasoning.clear();
        }
        self.bus
            .publish(state.run_id, AgentEvent::TurnStarted { turn });
        Ok(turn)
    }

    /// Counts a turn's `calls` against `max_tool_calls`: the breach when they would pass it.
    pub(crate) fn take_tool_calls(
        &self,
        state: &mut RunState,
        calls: u32,
    ) -> Option<RunLimitBreach> {
        let wanted = state.tool_calls.saturating_add(calls);
        if wanted > state.limits.max_tool_calls {
            return Some(RunLimitBreach {
                limit: LimitKind::MaxToolCalls,
                maximum: u64::from(state.limits.max_tool_calls),
                observed: u64::from(wanted),
            });
        }
        state.tool_calls = wanted;
        None
    }
}
