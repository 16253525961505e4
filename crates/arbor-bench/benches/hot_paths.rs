//! Micro-benchmarks of the runtime's hot paths: a delegation's round trip, limit narrowing,
//! the summary's counters and the child-event projection. `cargo bench -p arbor-bench`.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use arbor_core::process::ChildEventProjector;
use arbor_core::supervisor::summary::bench::SummaryCounters;
use arbor_core::supervisor::{
    ChildEntry, DelegationRequest, EffectivePolicy, LimitsInput, Ownership, Report, Supervisor,
    SupervisorLimits, WaitOptions,
};
use arbor_core::{Agent, SecretRedactor};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::{AgentEvent, ChildOrigin, EventEnvelope, RunId, SessionId, Timestamp};
use divan::Bencher;

fn main() {
    divan::main();
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn leaf() -> Agent {
    Agent::builder("child")
        .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text(
            "ok",
        )
        .with_usage(10, 5)])))
        .build()
        .unwrap()
}

/// One async delegation end to end: admission, the child's one-turn run, and the wait. (The
/// benchmark program's scenario A times the admission alone.)
#[divan::bench]
fn delegation_round_trip(b: Bencher) {
    let rt = runtime();
    let sup = Supervisor::builder(Ownership::user("bench", "bench"))
        .child(ChildEntry::agent("child", leaf()))
        .build()
        .unwrap();
    b.bench_local(|| {
        rt.block_on(async {
            let h = sup
                .delegate_async(DelegationRequest::new("child", "go"))
                .await
                .unwrap();
            divan::black_box(&h);
            sup.wait(&h.delegation_id, WaitOptions::default())
                .await
                .unwrap();
        });
    });
}

/// Narrowing the supervisor's limits by a request that lowers three of them.
#[divan::bench]
fn limit_narrowing(b: Bencher) {
    let limits = SupervisorLimits::DEFAULT;
    let request = LimitsInput {
        max_depth: Some(2),
        max_tokens: Some(5_000),
        timeout_ms: Some(10_000),
        ..LimitsInput::default()
    };
    b.bench(|| divan::black_box(&limits).narrow(divan::black_box(&request)));
}

/// One delegation's start and settle in the recovery counters, with 8 siblings live.
#[divan::bench]
fn summary_update(b: Bencher) {
    let ids: Vec<String> = (0..4).map(|i| format!("child-{i}")).collect();
    let mut counters = SummaryCounters::new(&ids);
    let parents: Arc<[String]> = Arc::from(vec!["root-delegation".to_owned()]);
    for i in 0..8 {
        counters.start(i % 4, &format!("live-{i}"), parents.clone());
    }
    b.bench_local(|| {
        counters.start(1, "d", parents.clone());
        counters.settle("d", false);
    });
}

/// One streamed child event through selection, redaction, caps, rate and publication.
#[divan::bench]
fn event_projection(b: Bencher) {
    let secret = "sk-bench-0123456789";
    let sup = Supervisor::builder(Ownership::user("bench", "bench"))
        .child(ChildEntry::agent("child", leaf()))
        .redactor(SecretRedactor::new([secret]))
        .child_events(true)
        .limits(LimitsInput {
            max_child_events_per_second: Some(SupervisorLimits::HARD.max_child_events_per_second),
            ..LimitsInput::default()
        })
        .build()
        .unwrap();
    let policy = EffectivePolicy {
        report: Report::Stream,
        ..EffectivePolicy::default()
    };
    let event = EventEnvelope {
        seq: 1,
        at: Timestamp::now(),
        session_id: SessionId::new(),
        run_id: RunId::new(),
        event: AgentEvent::ToolExecutionStarted {
            turn: 1,
            call_id: "call_1".into(),
            name: format!("lookup {secret}"),
        },
    };
    b.bench_local(|| {
        // A fresh projector each time, so the caps never short-circuit the work.
        let origin = ChildOrigin {
            child_id: "child".into(),
            delegation_id: "d".into(),
            depth: 1,
        };
        let mut p = ChildEventProjector::new(&sup, origin, policy);
        p.project(divan::black_box(&event));
        divan::black_box(p.emitted());
    });
}
