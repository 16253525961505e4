//! Events a run publishes to its subscribers.
//!
//! Every event travels in an [`EventEnvelope`] that says which session and run it belongs to
//! and where it stands in the session's sequence. A subscriber that fell behind receives
//! [`AgentEvent::EventsLagged`] with the number of events it missed: gaps are never silent.

use serde::{Deserialize, Serialize};

use crate::ids::{RunId, SessionId, Timestamp};
use crate::run::{RunLimitBreach, RunStatus, StopReason};
use crate::usage::Usage;

/// How a tool call ended, whichever event said so ([`AgentEvent::tool_outcome`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolOutcome {
    /// The tool returned output.
    Ok,
    /// The tool returned an error the model will read.
    Error,
    /// A permission policy blocked the call.
    Blocked,
}

/// One event of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum AgentEvent {
    /// The run accepted its input.
    RunStarted {
        /// The agent's name.
        agent: String,
        /// The model the run uses.
        model: String,
    },
    /// A turn of the loop began: one provider call and the tool calls it asked for.
    TurnStarted {
        /// 1-based turn number within the run.
        turn: u32,
    },
    /// The provider call of a turn began.
    ProviderTurnStarted {
        /// Turn number.
        turn: u32,
        /// The model asked.
        model: String,
    },
    /// Text the model is producing, as it streams.
    MessageDelta {
        /// Turn number.
        turn: u32,
        /// The new text.
        delta: String,
    },
    /// Where the provider's work stands, as it said while the turn ran (a remote A2A
    /// agent's task status). Not part of the answer.
    ProviderStatus {
        /// Turn number.
        turn: u32,
        /// The state, as the provider names it (`TASK_STATE_WORKING`).
        state: String,
        /// What the provider said about it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// The provider call of a turn ended.
    ProviderTurnFinished {
        /// Turn number.
        turn: u32,
        /// Tokens this provider call reported.
        usage: Usage,
        /// How many tool calls the model asked for.
        tool_calls: u32,
    },
    /// A budget pool this session spends from passed its low mark (its subtree has spent
    /// 80 % of its limit, or the pool's own `low_percent`): told once per pool and limit, by
    /// the first call that reserves after it.
    BudgetLow {
        /// The session whose pool it is.
        pool: crate::SessionId,
        /// `max_tree_tokens` or `max_tree_cost` (micro-units).
        limit_name: String,
        /// The limit.
        limit: u64,
        /// What its subtree has spent.
        used: u64,
    },
    /// A tool call passed its permission check and began.
    ToolExecutionStarted {
        /// Turn number.
        turn: u32,
        /// The call id.
        call_id: String,
        /// The tool.
        name: String,
    },
    /// A tool call ended with output.
    ToolExecutionFinished {
        /// Turn number.
        turn: u32,
        /// The call id.
        call_id: String,
        /// The tool.
        name: String,
        /// Output size in bytes.
        output_bytes: u64,
    },
    /// A tool call ended with an error the model will read (bad arguments, tool failure).
    ToolExecutionError {
        /// Turn number.
        turn: u32,
        /// The call id.
        call_id: String,
        /// The tool.
        name: String,
        /// The error text.
        error: String,
    },
    /// A permission policy blocked a tool call before it ran.
    ToolExecutionBlocked {
        /// Turn number.
        turn: u32,
        /// The call id.
        call_id: String,
        /// The tool.
        name: String,
        /// The policy's reason.
        reason: String,
    },
    /// A turn ended.
    TurnFinished {
        /// Turn number.
        turn: u32,
    },
    /// A run limit fired; the run ends `failed` next.
    RunLimitExceeded {
        /// Which limit, its maximum and what was observed.
        breach: RunLimitBreach,
    },
    /// A permission policy halted the run; it ends `denied` next.
    RunDenied {
        /// The policy's reason.
        reason: String,
    },
    /// The run waits for decisions; it ends `suspended` next.
    RunSuspended {
        /// Ids of the pending decisions.
        pending: Vec<String>,
    },
    /// The run ended. Always the last event of a run.
    RunFinished {
        /// Terminal status.
        status: RunStatus,
        /// Why it stopped.
        stop_reason: StopReason,
        /// The run's own usage.
        usage: Usage,
        /// The limit that fired, if one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        breach: Option<RunLimitBreach>,
        /// The error text of a failed run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The subscriber fell behind and missed `missed` events before this one.
    EventsLagged {
        /// How many events it missed.
        missed: u64,
    },
}

impl AgentEvent {
    /// The event's `type` tag.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::RunStarted { .. } => "run_started",
            Self::TurnStarted { .. } => "turn_started",
            Self::ProviderTurnStarted { .. } => "provider_turn_started",
            Self::MessageDelta { .. } => "message_delta",
            Self::ProviderStatus { .. } => "provider_status",
            Self::ProviderTurnFinished { .. } => "provider_turn_finished",
            Self::BudgetLow { .. } => "budget_low",
            Self::ToolExecutionStarted { .. } => "tool_execution_started",
            Self::ToolExecutionFinished { .. } => "tool_execution_finished",
            Self::ToolExecutionError { .. } => "tool_execution_error",
            Self::ToolExecutionBlocked { .. } => "tool_execution_blocked",
            Self::TurnFinished { .. } => "turn_finished",
            Self::RunLimitExceeded { .. } => "run_limit_exceeded",
            Self::RunDenied { .. } => "run_denied",
            Self::RunSuspended { .. } => "run_suspended",
            Self::RunFinished { .. } => "run_finished",
            Self::EventsLagged { .. } => "events_lagged",
        }
    }

    /// True for the event that ends a run.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::RunFinished { .. })
    }

    /// For an event that ends a tool call: its call id and how it ended (output, an error
    /// the model reads, or blocked by a policy). `None` for every other event.
    pub fn tool_outcome(&self) -> Option<(&str, ToolOutcome)> {
        match self {
            Self::ToolExecutionFinished { call_id, .. } => Some((call_id, ToolOutcome::Ok)),
            Self::ToolExecutionError { call_id, .. } => Some((call_id, ToolOutcome::Error)),
            Self::ToolExecutionBlocked { call_id, .. } => Some((call_id, ToolOutcome::Blocked)),
            _ => None,
        }
    }
}

/// An event with the place it belongs to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventEnvelope {
    /// Position in the session's event sequence, from 1. A lag marker carries the sequence
    /// number of the event it precedes.
    pub seq: u64,
    /// When it was published.
    pub at: Timestamp,
    /// The session.
    pub session_id: SessionId,
    /// The run.
    pub run_id: RunId,
    /// The event.
    #[serde(flatten)]
    pub event: AgentEvent,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_flattens_the_event_type() {
        let env = EventEnvelope {
            seq: 3,
            at: Timestamp(1),
            session_id: SessionId::new(),
            run_id: RunId::new(),
            event: AgentEvent::TurnStarted { turn: 2 },
        };
        let json = serde_json::to_value(&env).unwrap();
        assert_eq!(json["type"], "turn_started");
        assert_eq!(json["turn"], 2);
        assert_eq!(json["seq"], 3);
        let back: EventEnvelope = serde_json::from_value(json).unwrap();
        assert_eq!(back, env);
        assert_eq!(env.event.type_name(), "turn_started");
    }

    #[test]
    fn the_three_ends_of_a_tool_call_have_one_typed_outcome() {
        let (turn, name) = (1, "t".to_owned());
        let ended = [
            AgentEvent::ToolExecutionFinished {
                turn,
                call_id: "a".into(),
                name: name.clone(),
                output_bytes: 3,
            },
            AgentEvent::ToolExecutionError {
                turn,
                call_id: "b".into(),
                name: name.clone(),
                error: "bad".into(),
            },
            AgentEvent::ToolExecutionBlocked {
                turn,
                call_id: "c".into(),
                name: name.clone(),
                reason: "policy".into(),
            },
            AgentEvent::ToolExecutionStarted {
                turn,
                call_id: "d".into(),
                name,
            },
        ];
        let outcomes: Vec<_> = ended.iter().map(AgentEvent::tool_outcome).collect();
        assert_eq!(
            outcomes,
            [
                Some(("a", ToolOutcome::Ok)),
                Some(("b", ToolOutcome::Error)),
                Some(("c", ToolOutcome::Blocked)),
                None
            ]
        );
        assert_eq!(
            serde_json::to_value(ToolOutcome::Blocked).unwrap(),
            "blocked"
        );
    }
}
