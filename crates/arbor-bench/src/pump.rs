//! Scenario E: child events through the pump's projection (selection, redaction, the count
//! and byte caps, the per-second rate, publication and the sink).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arbor_core::SecretRedactor;
use arbor_core::process::ChildEventProjector;
use arbor_core::supervisor::{
    ChildEntry, ChildEventSink, EffectivePolicy, LimitsInput, Ownership, Report, Supervisor,
    SupervisorLimits,
};
use arbor_protocol::{
    AgentEvent, ChildOrigin, EventEnvelope, RunId, SessionId, SupervisorEnvelope, Timestamp, Usage,
};
use arbor_store::Store;

/// The secret every tool call's name carries, so redaction has work to do.
pub(crate) const SECRET: &str = "sk-bench-0123456789";

/// Counts what reaches the sink.
#[derive(Debug, Default)]
pub(crate) struct Counting(pub(crate) AtomicU64);

impl ChildEventSink for Counting {
    fn send(&self, _event: &SupervisorEnvelope) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// The repeating pattern of one child turn with a tool call, as the run loop emits it.
pub(crate) fn turn_events(turn: u32) -> [AgentEvent; 6] {
    [
        AgentEvent::TurnStarted { turn },
        AgentEvent::ProviderTurnStarted {
            turn,
            model: "scripted".to_owned(),
        },
        AgentEvent::ProviderTurnFinished {
            turn,
            usage: Usage::new(10, 5),
            tool_calls: 1,
        },
        AgentEvent::ToolExecutionStarted {
            turn,
            call_id: format!("call_{turn}"),
            name: format!("lookup {SECRET}"),
        },
        AgentEvent::ToolExecutionFinished {
            turn,
            call_id: format!("call_{turn}"),
            name: format!("lookup {SECRET}"),
            output_bytes: 128,
        },
        AgentEvent::TurnFinished { turn },
    ]
}

/// A supervisor streaming child events at the hard caps, with a redactor and a counting sink.
pub(crate) fn supervisor(
    store: &Arc<dyn Store>,
    sink: Arc<Counting>,
) -> Result<Supervisor, String> {
    let hard = SupervisorLimits::HARD;
    Supervisor::builder(Ownership::user("bench", "bench"))
        .store(store.clone())
        .child(ChildEntry::agent(
            "child",
            crate::trees::leaf("child").map_err(|e| e.to_string())?,
        ))
        .redactor(SecretRedactor::new([SECRET]))
        .child_events(true)
        .child_event_sink(SharedSink(sink))
        .limits(LimitsInput {
            max_child_events_per_delegation: Some(hard.max_child_events_per_delegation),
            max_child_events_per_second: Some(hard.max_child_events_per_second),
            ..LimitsInput::default()
        })
        .build()
        .map_err(|e| e.to_string())
}

#[derive(Debug)]
struct SharedSink(Arc<Counting>);

impl ChildEventSink for SharedSink {
    fn send(&self, event: &SupervisorEnvelope) {
        self.0.send(event);
    }
}

/// Events in one projector's life: what one second's rate admits, so every event offered is
/// published (a new delegation's projector takes the next batch).
fn batch(limits: &SupervisorLimits) -> u64 {
    u64::from(
        limits
            .max_child_events_per_second
            .min(limits.max_child_events_per_delegation),
    )
}

/// Projects `events` child events (prepared before timing) and returns how long it took.
/// Every event must reach the sink, redacted.
pub(crate) fn project_events(store: &Arc<dyn Store>, events: u64) -> Result<Duration, String> {
    let sink = Arc::new(Counting::default());
    let sup = supervisor(store, sink.clone())?;
    let mut sub = sup.subscribe();
    let session_id = SessionId::new();
    let run_id = RunId::new();
    let prepared: Vec<EventEnvelope> = (0..events)
        .map(|i| {
            let turn = (i / 6) as u32 + 1;
            EventEnvelope {
                seq: i + 1,
                at: Timestamp::now(),
                session_id,
                run_id,
                event: turn_events(turn)[(i % 6) as usize].clone(),
            }
        })
        .collect();
    let per_projector = batch(sup.limits()) as usize;
    let policy = EffectivePolicy {
        report: Report::Stream,
        ..EffectivePolicy::default()
    };
    let start = Instant::now();
    for (n, chunk) in prepared.chunks(per_projector).enumerate() {
        let origin = ChildOrigin {
            child_id: "child".to_owned(),
            delegation_id: format!("d{n}"),
            depth: 1,
        };
        let mut projector = ChildEventProjector::new(&sup, origin, policy);
        for e in chunk {
            projector.project(e);
        }
        projector.finish();
    }
    let elapsed = start.elapsed();
    let seen = sink.0.load(Ordering::Relaxed);
    if seen != events {
        return Err(format!("{seen} of {events} child events reached the sink"));
    }
    // The first subscriber's queue holds the latest events: none may carry the secret.
    while let Some(e) = sub.try_recv() {
        let text = serde_json::to_string(&*e).map_err(|e| e.to_string())?;
        if text.contains(SECRET) {
            return Err("a projected event carried the secret".to_owned());
        }
    }
    Ok(elapsed)
}
