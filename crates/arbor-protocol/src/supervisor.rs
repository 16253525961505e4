//! Events of the supervisor: the lifecycle of each delegation and the child activity it
//! projects.

use serde::{Deserialize, Serialize};

use crate::event::EventEnvelope;
use crate::ids::{SessionId, Timestamp};
use crate::run::{RunLimitBreach, RunStatus, StopReason};
use crate::usage::Usage;

/// Where a projected child event comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChildOrigin {
    /// The catalog entry.
    pub child_id: String,
    /// The delegation.
    pub delegation_id: String,
    /// Its depth (1 for a root's children).
    pub depth: u32,
}

/// One supervisor event. Per delegation the order is: `delegation_started`, projected child
/// events and markers, (`child_failed`), then `delegation_finished` or `delegation_error`; a
/// hook refusal publishes only `delegation_rejected`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum SupervisorEvent {
    /// The delegation passed its checks and its hook; the child is being built.
    DelegationStarted {
        /// Where.
        #[serde(flatten)]
        origin: ChildOrigin,
        /// The child's resource id (`<supervisor>/<delegation>/<child>`).
        resource_id: String,
        /// The child's thread id.
        thread_id: String,
    },
    /// The child's session exists (its id is where its transcript lives).
    DelegationAdmitted {
        /// Where.
        #[serde(flatten)]
        origin: ChildOrigin,
        /// The child's session.
        session_id: SessionId,
        /// Its readable name.
        name: String,
        /// The model it runs.
        model: String,
    },
    /// The child returned (succeeded or denied).
    DelegationFinished {
        /// Where.
        #[serde(flatten)]
        origin: ChildOrigin,
        /// Its terminal status.
        status: RunStatus,
        /// Its total tokens.
        total_tokens: u64,
    },
    /// The `before` hook refused the delegation.
    DelegationRejected {
        /// Where.
        #[serde(flatten)]
        origin: ChildOrigin,
        /// The hook's reason.
        reason: String,
    },
    /// The delegation ended with an error or was cancelled.
    DelegationError {
        /// Where.
        #[serde(flatten)]
        origin: ChildOrigin,
        /// What went wrong.
        error: String,
    },
    /// The child died on an error or a limit (never for cancels, denials or hook refusals).
    ChildFailed {
        /// Where.
        #[serde(flatten)]
        origin: ChildOrigin,
        /// Why.
        reason: String,
        /// The child run's terminal status, when it ran.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<RunStatus>,
        /// The run limit that fired, if one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<RunLimitBreach>,
        /// The child run's stop reason, when it ran.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        stop_reason: Option<StopReason>,
        /// The child run's usage, when it ran.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
        /// What the child had consumed, on a limit death.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        consumed: Option<crate::Consumed>,
        /// Its other limit axes, nearest first, on a limit death.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        closest_other_axes: Option<Vec<crate::AxisUse>>,
        /// Its last tool calls (arguments hashed), on a limit death.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        recent_tool_calls: Option<Vec<crate::RecentCall>>,
    },
    /// A projected child event (`report = stream`).
    DelegationChildEvent {
        /// Where it comes from.
        child: ChildOrigin,
        /// The child's event, redacted.
        child_event: EventEnvelope,
    },
    /// A child milestone (`report = milestones`).
    ChildMilestone {
        /// Where it comes from.
        child: ChildOrigin,
        /// The child turn it belongs to (0 before the first).
        turn: u32,
        /// The child's event, redacted.
        child_event: EventEnvelope,
    },
    /// The delegation hit its count or byte cap; later child events are dropped.
    DelegationChildEventsCapped {
        /// Where.
        #[serde(flatten)]
        origin: ChildOrigin,
        /// The count cap.
        max_child_events: u32,
    },
    /// Child events were dropped by the per-second rate.
    DelegationChildEventsCoalesced {
        /// Where.
        #[serde(flatten)]
        origin: ChildOrigin,
        /// How many were dropped.
        dropped: u64,
        /// The rate.
        max_child_events_per_second: u32,
    },
    /// The subscriber fell behind and missed `missed` events before this one.
    EventsLagged {
        /// How many.
        missed: u64,
    },
}

impl SupervisorEvent {
    /// The event's `type` tag.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::DelegationStarted { .. } => "delegation_started",
            Self::DelegationAdmitted { .. } => "delegation_admitted",
            Self::DelegationFinished { .. } => "delegation_finished",
            Self::DelegationRejected { .. } => "delegation_rejected",
            Self::DelegationError { .. } => "delegation_error",
            Self::ChildFailed { .. } => "child_failed",
            Self::DelegationChildEvent { .. } => "delegation_child_event",
            Self::ChildMilestone { .. } => "child_milestone",
            Self::DelegationChildEventsCapped { .. } => "delegation_child_events_capped",
            Self::DelegationChildEventsCoalesced { .. } => "delegation_child_events_coalesced",
            Self::EventsLagged { .. } => "events_lagged",
        }
    }

    /// The delegation it belongs to, if any.
    pub fn origin(&self) -> Option<&ChildOrigin> {
        match self {
            Self::DelegationStarted { origin, .. }
            | Self::DelegationAdmitted { origin, .. }
            | Self::DelegationFinished { origin, .. }
            | Self::DelegationRejected { origin, .. }
            | Self::DelegationError { origin, .. }
            | Self::ChildFailed { origin, .. }
            | Self::DelegationChildEventsCapped { origin, .. }
            | Self::DelegationChildEventsCoalesced { origin, .. } => Some(origin),
            Self::DelegationChildEvent { child, .. } | Self::ChildMilestone { child, .. } => {
                Some(child)
            }
            Self::EventsLagged { .. } => None,
        }
    }
}

/// A supervisor event with its place in the supervisor's sequence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SupervisorEnvelope {
    /// Position in the supervisor's sequence, from 1.
    pub seq: u64,
    /// When it was published.
    pub at: Timestamp,
    /// The event.
    #[serde(flatten)]
    pub event: SupervisorEvent,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origin_fields_are_flat_on_the_wire() {
        let e = SupervisorEnvelope {
            seq: 1,
            at: Timestamp(5),
            event: SupervisorEvent::DelegationRejected {
                origin: ChildOrigin {
                    child_id: "research".into(),
                    delegation_id: "sup-1".into(),
                    depth: 1,
                },
                reason: "no".into(),
            },
        };
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["type"], "delegation_rejected");
        assert_eq!(json["child_id"], "research");
        assert_eq!(json["depth"], 1);
        assert_eq!(
            serde_json::from_value::<SupervisorEnvelope>(json).unwrap(),
            e
        );
    }
}
