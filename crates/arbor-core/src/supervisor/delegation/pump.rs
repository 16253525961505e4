//! The child-event pump: projects a child's run events onto the supervisor's stream.
//!
//! Each projected event is redacted, checked against the delegation's count and byte caps
//! (bytes of the serialized event, UTF-8), rate-limited in fixed one-second windows, tagged
//! with its origin, published, and handed to the child-event sink. A cap publishes one
//! `delegation_child_events_capped` and drops the rest; rate drops are announced by
//! `delegation_child_events_coalesced` before the next admitted event or when the pump stops,
//! so gaps are never silent. Per-token deltas are never projected.

use std::time::Duration;

use arbor_protocol::{AgentEvent, ChildOrigin, EventEnvelope, SupervisorEvent};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::redact::redact_serde_sized;
use crate::session::events::Subscription;
use crate::supervisor::config::catalog::MilestoneContext;
use crate::supervisor::config::limits::SupervisorLimits;
use crate::supervisor::config::policy::{EffectivePolicy, Report};
use crate::supervisor::runtime::Supervisor;

/// Events of the milestone subset.
fn is_milestone(event: &AgentEvent) -> bool {
    matches!(
        event,
        AgentEvent::RunStarted { .. }
            | AgentEvent::RunFinished { .. }
            | AgentEvent::RunSuspended { .. }
            | AgentEvent::RunDenied { .. }
            | AgentEvent::ToolExecutionStarted { .. }
            | AgentEvent::ToolExecutionFinished { .. }
            | AgentEvent::ToolExecutionError { .. }
            | AgentEvent::ToolExecutionBlocked { .. }
            // The child's own lag markers pass on: a gap is never silent.
            | AgentEvent::EventsLagged { .. }
    )
}

/// Events `stream` projects: the milestone subset plus turn and provider-turn boundaries.
fn is_streamed(event: &AgentEvent) -> bool {
    is_milestone(event)
        || matches!(
            event,
            AgentEvent::TurnStarted { .. }
                | AgentEvent::TurnFinished { .. }
                | AgentEvent::ProviderTurnStarted { .. }
                | AgentEvent::ProviderStatus { .. }
                | AgentEvent::ProviderTurnFinished { .. }
        )
}

/// The pump's synchronous core: projects one child's events, one at a time, onto the
/// supervisor's stream under the delegation's policy and caps.
///
/// Every delegation runs one internally. It is public so that a host relaying a child's
/// events from elsewhere (another process, a replay) applies the same redaction, caps and
/// coalescing, and so that the projection's cost can be measured on its own. Its counters
/// are its own: a new projector starts with the full caps.
#[derive(Debug)]
pub struct ChildEventProjector {
    supervisor: Supervisor,
    origin: ChildOrigin,
    policy: EffectivePolicy,
    limits: SupervisorLimits,
    emitted: u32,
    capped: bool,
    window_start: Option<Instant>,
    in_window: u32,
    dropped: u64,
    turn: u32,
}

impl ChildEventProjector {
    /// A projector for the child `origin` running with `policy`, under the supervisor's
    /// limits.
    pub fn new(supervisor: &Supervisor, origin: ChildOrigin, policy: EffectivePolicy) -> Self {
        Self::with_limits(supervisor, origin, policy, *supervisor.limits())
    }

    fn with_limits(
        supervisor: &Supervisor,
        origin: ChildOrigin,
        policy: EffectivePolicy,
        limits: SupervisorLimits,
    ) -> Self {
        Self {
            supervisor: supervisor.clone(),
            origin,
            policy,
            limits,
            emitted: 0,
            capped: false,
            window_start: None,
            in_window: 0,
            dropped: 0,
            turn: 0,
        }
    }

    /// How many events it has published as child events or milestones.
    pub fn emitted(&self) -> u32 {
        self.emitted
    }

    fn publish(&self, event: SupervisorEvent) {
        if let Some(envelope) = self.supervisor.publish(event)
            && let Some(sink) = &self.supervisor.settings().sink()
        {
            sink.send(&envelope);
        }
    }

    fn selected(&mut self, event: &AgentEvent) -> bool {
        if let AgentEvent::TurnStarted { turn } = event {
            self.turn = *turn;
        }
        match self.policy.report {
            Report::OnComplete => false,
            Report::Stream => is_streamed(event),
            Report::Milestones => {
                let predicate = self
                    .supervisor
                    .catalog()
                    .get(&self.origin.child_id)
                    .and_then(|(_, entry)| entry.milestone.clone());
                match (predicate, self.policy.every_turns) {
                    (Some(p), every) => {
                        let offered = every.is_none_or(|n| self.turn.is_multiple_of(n));
                        let ctx = MilestoneContext {
                            child_id: &self.origin.child_id,
                            delegation_id: &self.origin.delegation_id,
                            turn: self.turn,
                            event,
                        };
                        offered
                            && std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                                (p.0)(&ctx)
                            }))
                            .unwrap_or(false)
                    }
                    (None, Some(n)) => {
                        matches!(event, AgentEvent::TurnStarted { turn } if turn % n == 0)
                    }
                    (None, None) => is_milestone(event),
                }
            }
        }
    }

    /// The event with its strings redacted, and its serialized size in UTF-8 bytes. `None`
    /// when it cannot be serialized or redacted safely (it is then dropped, not leaked).
    fn redacted(&self, envelope: &EventEnvelope) -> Option<(EventEnvelope, u64)> {
        let (event, bytes) = match &self.supervisor.settings().redactor() {
            None => (envelope.clone(), serde_json::to_vec(envelope).ok()?.len()),
            // The size is measured while redacting.
            Some(r) => match redact_serde_sized(r.as_ref(), envelope) {
                Ok((Some(clean), bytes)) => (clean, bytes),
                Ok((None, bytes)) => (envelope.clone(), bytes),
                Err(_) => return None,
            },
        };
        Some((event, bytes as u64))
    }

    /// Announces events dropped by the rate limit since the last published one. Call it
    /// when the child's stream ends, so a gap is never silent.
    pub fn finish(&mut self) {
        self.flush_drops();
    }

    fn flush_drops(&mut self) {
        if self.dropped > 0 && !self.capped {
            self.publish(SupervisorEvent::DelegationChildEventsCoalesced {
                origin: self.origin.clone(),
                dropped: self.dropped,
                max_child_events_per_second: self.limits.max_child_events_per_second,
            });
        }
        self.dropped = 0;
    }

    /// Projects one child event: selects it by the report level, redacts it, checks the
    /// count and byte caps and the per-second rate, and publishes it (or a marker).
    pub fn project(&mut self, envelope: &EventEnvelope) {
        if self.capped || !self.selected(&envelope.event) {
            return;
        }
        let Some((event, bytes)) = self.redacted(envelope) else {
            self.dropped += 1;
            return;
        };
        if self.emitted >= self.limits.max_child_events_per_delegation
            || bytes > self.limits.max_child_event_bytes
        {
            self.capped = true;
            self.publish(SupervisorEvent::DelegationChildEventsCapped {
                origin: self.origin.clone(),
                max_child_events: self.limits.max_child_events_per_delegation,
            });
            return;
        }
        let now = Instant::now();
        let fresh = self
            .window_start
            .is_none_or(|start| now.duration_since(start) >= Duration::from_secs(1));
        if fresh {
            self.window_start = Some(now);
            self.in_window = 0;
        }
        if self.in_window >= self.limits.max_child_events_per_second {
            self.dropped += 1;
            return;
        }
        self.flush_drops();
        self.in_window += 1;
        self.emitted += 1;
        let projected = match self.policy.report {
            Report::Milestones => SupervisorEvent::ChildMilestone {
                child: self.origin.clone(),
                turn: self.turn,
                child_event: event,
            },
            _ => SupervisorEvent::DelegationChildEvent {
                child: self.origin.clone(),
                child_event: event,
            },
        };
        self.publish(projected);
    }
}

/// Projects events from `sub` until `stop` fires, then drains what is queued. Counters are
/// fresh for every pump, so each attempt gets the full caps.
pub(crate) async fn run_pump(
    supervisor: &Supervisor,
    origin: ChildOrigin,
    policy: EffectivePolicy,
    limits: SupervisorLimits,
    mut sub: Subscription<EventEnvelope>,
    stop: CancellationToken,
) {
    let mut pump = ChildEventProjector::with_limits(supervisor, origin, policy, limits);
    loop {
        tokio::select! {
            biased;
            e = sub.recv() => match e {
                Some(e) => pump.project(&e),
                None => break,
            },
            _ = stop.cancelled() => {
                while let Some(e) = sub.try_recv() {
                    pump.project(&e);
                }
                break;
            }
        }
    }
    pump.finish();
}
