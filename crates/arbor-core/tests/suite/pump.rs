use std::sync::{Arc, Mutex};
use std::time::Duration;

use arbor_core::Agent;
use arbor_core::SecretRedactor;
use arbor_core::supervisor::{
    ChildEntry, ChildEventSink, DelegationRequest, LimitsInput, Ownership, PolicyInput, Report,
    Supervisor,
};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{AgentEvent, SupervisorEnvelope, SupervisorEvent};
use serde_json::json;

fn child(name: &str, turns: Vec<ScriptedTurn>) -> Agent {
    Agent::builder(name)
        .provider(ScriptedProvider::new(Script::new(turns)))
        .tool(arbor_core::builtin::Echo)
        .limits(arbor_protocol::RunLimits::HARD)
        .build()
        .unwrap()
}

fn stream() -> PolicyInput {
    PolicyInput {
        report: Some(Report::Stream),
        ..PolicyInput::default()
    }
}

fn events(sub: &mut arbor_core::Subscription<SupervisorEnvelope>) -> Vec<SupervisorEvent> {
    let mut out = Vec::new();
    while let Some(e) = sub.try_recv() {
        out.push(e.event.clone());
    }
    out
}

fn types(events: &[SupervisorEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            SupervisorEvent::DelegationChildEvent { child_event, .. } => {
                format!("child:{}", child_event.event.type_name())
            }
            SupervisorEvent::DelegationChildEventsCoalesced { dropped, .. } => {
                format!("coalesced:{dropped}")
            }
            SupervisorEvent::ChildMilestone { turn, .. } => format!("milestone:{turn}"),
            other => other.type_name().to_owned(),
        })
        .collect()
}

fn limits(per_second: u32, per_delegation: u32) -> LimitsInput {
    LimitsInput {
        max_child_events_per_second: Some(per_second),
        max_child_events_per_delegation: Some(per_delegation),
        ..LimitsInput::default()
    }
}

#[tokio::test(start_paused = true)]
async fn the_rate_window_coalesces_and_announces_every_drop() {
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .child(
            ChildEntry::agent("burst", child("burst", vec![ScriptedTurn::text("x")]))
                .policy(stream()),
        )
        .child(
            ChildEntry::agent(
                "spread",
                child(
                    "spread",
                    vec![ScriptedTurn::text("x").with_delay(Duration::from_millis(1500))],
                ),
            )
            .policy(stream()),
        )
        .limits(limits(3, 256))
        .build()
        .unwrap();
    let mut sub = sup.subscribe();
    sup.delegate(DelegationRequest::new("burst", "go"))
        .await
        .unwrap();
    assert_eq!(
        types(&events(&mut sub)),
        vec![
            "delegation_admitted",
            "delegation_started",
            "child:run_started",
            "child:turn_started",
            "child:provider_turn_started",
            "coalesced:3",
            "delegation_finished",
        ]
    );
    // The same six events spread over two windows all pass.
    sup.delegate(DelegationRequest::new("spread", "go"))
        .await
        .unwrap();
    assert_eq!(
        types(&events(&mut sub)),
        vec![
            "delegation_admitted",
            "delegation_started",
            "child:run_started",
            "child:turn_started",
            "child:provider_turn_started",
            "child:provider_turn_finished",
            "child:turn_finished",
            "child:run_finished",
            "delegation_finished",
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_drop_is_announced_before_the_next_admitted_event() {
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .child(
            ChildEntry::agent(
                "c",
                child(
                    "c",
                    vec![
                        ScriptedTurn::tool_call("echo", json!({"text": "a"})),
                        ScriptedTurn::text("done").with_delay(Duration::from_millis(1200)),
                    ],
                ),
            )
            .policy(stream()),
        )
        .limits(limits(2, 256))
        .build()
        .unwrap();
    let mut sub = sup.subscribe();
    sup.delegate(DelegationRequest::new("c", "go"))
        .await
        .unwrap();
    let t = types(&events(&mut sub));
    // Window 1 (t=0): turn 1's seven events and turn 2's turn_started and
    // provider_turn_started (the delay is inside the provider call): 2 pass, 7 drop.
    // Window 2 (t=1.2s): the marker for those 7 comes first, then 2 of the last 3 pass and
    // the drop of the third is announced when the pump stops.
    assert_eq!(
        t,
        vec![
            "delegation_admitted",
            "delegation_started",
            "child:run_started",
            "child:turn_started",
            "coalesced:7",
            "child:provider_turn_finished",
            "child:turn_finished",
            "coalesced:1",
            "delegation_finished",
        ]
    );
}

#[tokio::test]
async fn the_count_cap_publishes_one_marker_and_drops_the_rest() {
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .child(ChildEntry::agent("c", child("c", vec![ScriptedTurn::text("x")])).policy(stream()))
        .limits(limits(1000, 2))
        .build()
        .unwrap();
    let mut sub = sup.subscribe();
    sup.delegate(DelegationRequest::new("c", "go"))
        .await
        .unwrap();
    assert_eq!(
        types(&events(&mut sub)),
        vec![
            "delegation_admitted",
            "delegation_started",
            "child:run_started",
            "child:turn_started",
            "delegation_child_events_capped",
            "delegation_finished",
        ]
    );
    // Caps restart per delegation.
    sup.delegate(DelegationRequest::new("c", "again"))
        .await
        .unwrap();
    let t = types(&events(&mut sub));
    assert_eq!(t.iter().filter(|t| t.starts_with("child:")).count(), 2);
}

#[tokio::test]
async fn the_byte_cap_counts_utf8_bytes_of_the_serialized_event() {
    // A model name of 40 "é": 80 bytes in UTF-8, 40 units in UTF-16.
    let heavy = || {
        Agent::builder("c")
            .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
                "x",
            )])))
            .model("é".repeat(40))
            .build()
            .unwrap()
    };
    let run = |cap: u64| {
        let sup = Supervisor::builder(Ownership::user("t", "u"))
            .child(ChildEntry::agent("c", heavy()).policy(stream()))
            .limits(LimitsInput {
                max_child_event_bytes: Some(cap),
                ..LimitsInput::default()
            })
            .build()
            .unwrap();
        async move {
            let mut sub = sup.subscribe();
            sup.delegate(DelegationRequest::new("c", "go"))
                .await
                .unwrap();
            events(&mut sub)
        }
    };
    let open = run(64 * 1024).await;
    let first = open
        .iter()
        .find_map(|e| match e {
            SupervisorEvent::DelegationChildEvent { child_event, .. } => Some(child_event.clone()),
            _ => None,
        })
        .unwrap();
    assert!(matches!(first.event, AgentEvent::RunStarted { .. }));
    let json = serde_json::to_string(&first).unwrap();
    let utf8 = json.len() as u64;
    let utf16 = json.encode_utf16().count() as u64;
    assert_eq!(utf8 - utf16, 40);
    // One byte under the UTF-8 size: capped at once, though the UTF-16 length would fit.
    let capped = types(&run(utf8 - 1).await);
    assert_eq!(
        capped,
        vec![
            "delegation_admitted",
            "delegation_started",
            "delegation_child_events_capped",
            "delegation_finished"
        ]
    );
    let fits = types(&run(utf8).await);
    assert_eq!(fits[2], "child:run_started");
}

#[tokio::test]
async fn milestones_every_n_turns() {
    let mut turns: Vec<_> = (0..4)
        .map(|_| ScriptedTurn::tool_call("echo", json!({"text": "x"})))
        .collect();
    turns.push(ScriptedTurn::text("done"));
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .child(
            ChildEntry::agent("c", child("c", turns)).policy(PolicyInput {
                report: Some(Report::Milestones),
                every_turns: Some(2),
                ..PolicyInput::default()
            }),
        )
        .build()
        .unwrap();
    let mut sub = sup.subscribe();
    sup.delegate(DelegationRequest::new("c", "go"))
        .await
        .unwrap();
    let t = types(&events(&mut sub));
    assert_eq!(
        t,
        vec![
            "delegation_admitted",
            "delegation_started",
            "milestone:2",
            "milestone:4",
            "delegation_finished"
        ]
    );
    // A request can lower the report to nothing, never raise it.
    let mut req = DelegationRequest::new("c", "quiet");
    req.policy.report = Some(Report::OnComplete);
    sup.delegate(req).await.unwrap();
    assert_eq!(events(&mut sub).len(), 3);
}

#[tokio::test]
async fn a_host_predicate_decides_which_events_are_milestones() {
    let mut turns: Vec<_> = (0..4)
        .map(|_| ScriptedTurn::tool_call("echo", json!({"text": "x"})))
        .collect();
    turns.push(ScriptedTurn::text("done"));
    // Only the tool calls finished in odd turns are milestones.
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .child(
            ChildEntry::agent("c", child("c", turns))
                .policy(PolicyInput {
                    report: Some(Report::Milestones),
                    ..PolicyInput::default()
                })
                .milestone_fn(|m| {
                    assert_eq!(m.child_id, "c");
                    matches!(m.event, AgentEvent::ToolExecutionFinished { .. }) && m.turn % 2 == 1
                }),
        )
        .build()
        .unwrap();
    let mut sub = sup.subscribe();
    sup.delegate(DelegationRequest::new("c", "go"))
        .await
        .unwrap();
    let turns: Vec<u32> = events(&mut sub)
        .iter()
        .filter_map(|e| match e {
            SupervisorEvent::ChildMilestone {
                turn, child_event, ..
            } => {
                assert_eq!(child_event.event.type_name(), "tool_execution_finished");
                Some(*turn)
            }
            _ => None,
        })
        .collect();
    assert_eq!(turns, [1, 3]);
}

#[derive(Debug, Default, Clone)]
struct Collect(Arc<Mutex<Vec<SupervisorEnvelope>>>);

impl ChildEventSink for Collect {
    fn send(&self, event: &SupervisorEnvelope) {
        self.0.lock().unwrap().push(event.clone());
    }
}

#[tokio::test]
async fn the_sink_gets_exactly_what_the_stream_carries_and_secrets_never_leave() {
    let sink = Collect::default();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .child(ChildEntry::agent(
            "c",
            child("canary-agent", vec![ScriptedTurn::text("x")]),
        ))
        .child_events(true)
        .child_event_sink(sink.clone())
        .redactor(SecretRedactor::new(["canary"]))
        .build()
        .unwrap();
    let mut sub = sup.subscribe();
    sup.delegate(DelegationRequest::new("c", "canary input"))
        .await
        .unwrap();
    let mut streamed = Vec::new();
    while let Some(e) = sub.try_recv() {
        streamed.push((*e).clone());
    }
    let projected: Vec<_> = streamed
        .iter()
        .filter(|e| {
            matches!(
                e.event,
                SupervisorEvent::DelegationChildEvent { .. }
                    | SupervisorEvent::DelegationChildEventsCapped { .. }
                    | SupervisorEvent::DelegationChildEventsCoalesced { .. }
            )
        })
        .cloned()
        .collect();
    assert_eq!(projected.len(), 6);
    assert_eq!(
        *sink.0.lock().unwrap(),
        projected,
        "same payloads, same order"
    );
    let all = serde_json::to_string(&streamed).unwrap();
    assert!(!all.contains("canary"), "{all}");
    match &projected[0].event {
        SupervisorEvent::DelegationChildEvent { child, child_event } => {
            assert_eq!(child.child_id, "c");
            assert_eq!(child.depth, 1);
            assert_eq!(
                child_event.event,
                AgentEvent::RunStarted {
                    agent: "[REDACTED]-agent".into(),
                    model: "scripted".into()
                }
            );
        }
        other => panic!("{other:?}"),
    }
}

/// A provider that says where its work stands before it answers (as a remote A2A agent
/// does with its task's status updates).
#[derive(Debug)]
struct Progressing;

#[async_trait::async_trait]
impl arbor_model::ModelProvider for Progressing {
    fn name(&self) -> &str {
        "progressing"
    }

    async fn stream(
        &self,
        _request: arbor_model::ModelRequest<'_>,
    ) -> Result<arbor_model::ModelStream, arbor_model::ModelError> {
        use arbor_model::{FinishReason, ModelEvent};
        let events = [
            ModelEvent::Status {
                state: "TASK_STATE_WORKING".into(),
                message: Some("looking up flights".into()),
            },
            ModelEvent::TextDelta("booked".into()),
            ModelEvent::Finished(FinishReason::Stop),
        ];
        Ok(Box::pin(futures::stream::iter(events.map(Ok))))
    }
}

#[tokio::test]
async fn a_providers_status_is_a_child_event_the_stream_carries_and_not_its_answer() {
    let agent = Agent::builder("travel")
        .provider(Progressing)
        .limits(arbor_protocol::RunLimits::HARD)
        .build()
        .unwrap();
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .child(ChildEntry::agent("travel", agent).policy(stream()))
        .build()
        .unwrap();
    let mut sub = sup.subscribe();
    let out = sup
        .delegate(DelegationRequest::new("travel", "book"))
        .await
        .unwrap();
    assert_eq!(out.result.text, "booked");
    let all = events(&mut sub);
    let t = types(&all);
    let at = |name: &str| t.iter().position(|x| x == name);
    let status = at("child:provider_status").expect("the status is projected");
    assert!(at("child:provider_turn_started").unwrap() < status);
    assert!(status < at("child:provider_turn_finished").unwrap());
    let projected = all.iter().find_map(|e| match e {
        SupervisorEvent::DelegationChildEvent { child_event, .. } => match &child_event.event {
            AgentEvent::ProviderStatus { state, message, .. } => Some((state, message)),
            _ => None,
        },
        _ => None,
    });
    assert_eq!(
        projected,
        Some((
            &"TASK_STATE_WORKING".to_owned(),
            &Some("looking up flights".to_owned())
        ))
    );
}
