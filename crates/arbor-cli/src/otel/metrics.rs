//! The runtime metrics ([`arbor_server::RuntimeMetrics`]) as OpenTelemetry instruments: the
//! Prometheus names with dots, the same labels, durations in seconds.

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, MeterProvider as _};
use opentelemetry_sdk::metrics::SdkMeterProvider;

/// See the module docs.
pub(crate) struct OtelMetrics {
    runs: Counter<u64>,
    tokens: Counter<u64>,
    cost: Counter<u64>,
    tool_calls: Counter<u64>,
    refusals: Counter<u64>,
    provider: Histogram<f64>,
    retries: Counter<u64>,
    commits: Histogram<f64>,
}

impl OtelMetrics {
    pub(crate) fn new(provider: &SdkMeterProvider) -> Self {
        let meter = provider.meter("arbor");
        let counter = |name: &'static str, help: &'static str| {
            meter.u64_counter(name).with_description(help).build()
        };
        let seconds = |name: &'static str, help: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(help)
                .build()
        };
        Self {
            runs: counter(
                "arbor.agent.runs",
                "Run attempts that ended, by role and status.",
            ),
            tokens: counter(
                "arbor.tokens",
                "Tokens of provider turns, by kind and scope.",
            ),
            cost: counter(
                "arbor.cost.micros",
                "What provider turns cost, in micro-units of the price table's currency, by model.",
            ),
            tool_calls: counter("arbor.tool.calls", "Tool calls executed, by outcome."),
            refusals: counter(
                "arbor.admission.refusals",
                "Delegations refused at admission, by limit.",
            ),
            retries: counter(
                "arbor.provider.retries",
                "Provider attempts retried, by provider and reason.",
            ),
            provider: seconds(
                "arbor.provider.request.duration",
                "Provider turns, by provider and outcome.",
            ),
            commits: seconds("arbor.store.commit.duration", "Store writes of runs."),
        }
    }
}

fn kv(pairs: &[(&'static str, &str)]) -> Vec<KeyValue> {
    pairs
        .iter()
        .map(|(k, v)| KeyValue::new(*k, (*v).to_owned()))
        .collect()
}

impl arbor_server::MetricSink for OtelMetrics {
    fn run_ended(&self, role: &str, status: &str) {
        self.runs.add(1, &kv(&[("role", role), ("status", status)]));
    }
    fn tokens(&self, kind: &str, scope: &str, n: u64) {
        self.tokens.add(n, &kv(&[("kind", kind), ("scope", scope)]));
    }
    fn cost(&self, model: &str, micros: u64) {
        self.cost.add(micros, &kv(&[("model", model)]));
    }
    fn tool_call(&self, status: &str) {
        self.tool_calls.add(1, &kv(&[("status", status)]));
    }
    fn admission_refused(&self, limit: &str, kind: &str) {
        self.refusals
            .add(1, &kv(&[("limit", limit), ("kind", kind)]));
    }
    fn provider_turn(&self, provider: &str, status: &str, seconds: f64) {
        self.provider
            .record(seconds, &kv(&[("provider", provider), ("status", status)]));
    }
    fn provider_retry(&self, provider: &str, reason: &str) {
        self.retries
            .add(1, &kv(&[("provider", provider), ("reason", reason)]));
    }
    fn store_commit(&self, seconds: f64) {
        self.commits.record(seconds, &[]);
    }
}
