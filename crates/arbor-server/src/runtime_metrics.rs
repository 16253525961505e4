//! Runtime metrics: [`RuntimeMetrics`] is a `tracing` layer that counts what this process's
//! runs did — from arbor-core's GenAI spans ([`arbor_core::process::telemetry`]) and its metric
//! events — into a Prometheus registry, which `/metrics` renders beside the store's gauges.
//! `tracing` stays the source: a host that embeds the crates installs the layer in its own
//! subscriber ([`RuntimeMetrics::layer`]) and hands the same value to the server
//! ([`ServerBuilder::runtime_metrics`](crate::ServerBuilder::runtime_metrics)).
//!
//! | Metric | Type | Labels | Counts |
//! |---|---|---|---|
//! | `arbor_agent_runs_total` | counter | `role` (root, child), `status` | run attempts that ended |
//! | `arbor_tokens_total` | counter | `kind` (input, output, cache_read, cache_write), `scope` (own, attributed) | tokens of provider turns; `attributed` is what children used, counted again into their ancestors' aggregates |
//! | `arbor_cost_micros_total` | counter | `model` (the model that served the turn: the provider's name for it, else the requested one) | what provider turns cost, in micro-units of the price table's currency (with prices only) |
//! | `arbor_tool_calls_total` | counter | `status` (ok, error) | tool calls executed |
//! | `arbor_admission_refusals_total` | counter | `limit`, `kind` | delegations refused before anything was counted |
//! | `arbor_provider_request_duration_seconds` | histogram | `provider`, `status` (ok, error) | provider turns, start to last event |
//! | `arbor_provider_retries_total` | counter | `provider`, `reason` | provider attempts retried |
//! | `arbor_store_commit_duration_seconds` | histogram | — | a run's store writes |

use std::sync::Arc;
use std::time::Instant;

use arbor_core::process::telemetry::{METRICS_TARGET, TARGET, attr};
use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// Buckets of provider turns (seconds): 10 ms to 2 min.
const PROVIDER_BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
];
/// Buckets of store writes (seconds): 100 µs to 5 s.
const COMMIT_BUCKETS: &[f64] = &[
    0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 5.0,
];

/// Where the counts also go (an OpenTelemetry meter, say): each method is one observation,
/// with the same labels as the Prometheus metric of the module docs.
pub trait MetricSink: Send + Sync + 'static {
    /// A run attempt ended (`role`: root or child).
    fn run_ended(&self, role: &str, status: &str);
    /// Tokens of a run attempt (`scope`: own or attributed).
    fn tokens(&self, kind: &str, scope: &str, n: u64);
    /// A provider turn cost `micros` (micro-units of the price table's currency) on `model`.
    /// The default ignores it.
    fn cost(&self, model: &str, micros: u64) {
        let _ = (model, micros);
    }
    /// A tool call ended.
    fn tool_call(&self, status: &str);
    /// A delegation was refused at admission.
    fn admission_refused(&self, limit: &str, kind: &str);
    /// A provider turn took `seconds`.
    fn provider_turn(&self, provider: &str, status: &str, seconds: f64);
    /// A provider attempt was retried.
    fn provider_retry(&self, provider: &str, reason: &str);
    /// A store write took `seconds`.
    fn store_commit(&self, seconds: f64);
}

/// See the module docs. Cheap to clone: clones count into the same registry.
#[derive(Clone)]
pub struct RuntimeMetrics {
    inner: Arc<Families>,
    sinks: Arc<[Arc<dyn MetricSink>]>,
}

impl std::fmt::Debug for RuntimeMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RuntimeMetrics")
    }
}

struct Families {
    registry: Registry,
    runs: IntCounterVec,
    tokens: IntCounterVec,
    cost: IntCounterVec,
    tool_calls: IntCounterVec,
    refusals: IntCounterVec,
    provider: HistogramVec,
    retries: IntCounterVec,
    commits: Histogram,
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let c = IntCounterVec::new(Opts::new(name, help), labels)
        .unwrap_or_else(|_| unreachable_metric(name));
    let _ = registry.register(Box::new(c.clone()));
    c
}

/// The names and labels here are constants that `prometheus` accepts; a change that broke
/// one would fail every test that renders `/metrics`.
#[allow(clippy::panic)]
fn unreachable_metric(name: &str) -> ! {
    panic!("metric {name} is malformed")
}

impl Default for RuntimeMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl RuntimeMetrics {
    /// Empty counters.
    pub fn new() -> Self {
        let registry = Registry::new();
        let runs = counter(
            &registry,
            "arbor_agent_runs_total",
            "Run attempts that ended, by role and status.",
            &["role", "status"],
        );
        let tokens = counter(
            &registry,
            "arbor_tokens_total",
            "Tokens of provider turns, by kind; scope attributed counts children's tokens again, as their ancestors' aggregates do.",
            &["kind", "scope"],
        );
        let cost = counter(
            &registry,
            "arbor_cost_micros_total",
            "What provider turns cost, in micro-units (millionths) of the price table's currency, by the model that served each.",
            &["model"],
        );
        let tool_calls = counter(
            &registry,
            "arbor_tool_calls_total",
            "Tool calls executed, by outcome.",
            &["status"],
        );
        let refusals = counter(
            &registry,
            "arbor_admission_refusals_total",
            "Delegations refused at admission, by the limit that refused them.",
            &["limit", "kind"],
        );
        let retries = counter(
            &registry,
            "arbor_provider_retries_total",
            "Provider attempts retried, by provider and reason.",
            &["provider", "reason"],
        );
        let provider = HistogramVec::new(
            HistogramOpts::new(
                "arbor_provider_request_duration_seconds",
                "Provider turns, from the request to the last event, by provider and outcome.",
            )
            .buckets(PROVIDER_BUCKETS.to_vec()),
            &["provider", "status"],
        )
        .unwrap_or_else(|_| unreachable_metric("arbor_provider_request_duration_seconds"));
        let _ = registry.register(Box::new(provider.clone()));
        let commits = Histogram::with_opts(
            HistogramOpts::new(
                "arbor_store_commit_duration_seconds",
                "Store writes of runs (one transcript append with its record update).",
            )
            .buckets(COMMIT_BUCKETS.to_vec()),
        )
        .unwrap_or_else(|_| unreachable_metric("arbor_store_commit_duration_seconds"));
        let _ = registry.register(Box::new(commits.clone()));
        Self {
            inner: Arc::new(Families {
                registry,
                runs,
                tokens,
                cost,
                tool_calls,
                refusals,
                provider,
                retries,
                commits,
            }),
            sinks: Arc::from(Vec::new()),
        }
    }

    /// The same metrics, also counted into `sink`.
    pub fn with_sink(self, sink: impl MetricSink) -> Self {
        let mut sinks: Vec<Arc<dyn MetricSink>> = self.sinks.to_vec();
        sinks.push(Arc::new(sink));
        Self {
            inner: self.inner,
            sinks: Arc::from(sinks),
        }
    }

    /// The layer that counts into these metrics: add it to the process's subscriber. It
    /// looks only at arbor's span and metric targets.
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        let mut sinks: Vec<Arc<dyn MetricSink>> = vec![self.inner.clone()];
        sinks.extend(self.sinks.iter().cloned());
        Counting { sinks }.with_filter(
            Targets::new()
                .with_target(TARGET, tracing::Level::INFO)
                .with_target(METRICS_TARGET, tracing::Level::INFO),
        )
    }

    /// The metrics in Prometheus' text format (0.0.4).
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        if TextEncoder::new()
            .encode(&self.inner.registry.gather(), &mut out)
            .is_err()
        {
            return String::new();
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

/// What a span's fields said, as far as the counters care.
#[derive(Debug, Default)]
struct Seen {
    started: Option<Instant>,
    operation: Option<String>,
    status: Option<String>,
    provider: Option<String>,
    model: Option<String>,
    cost: u64,
    failed: bool,
    depth: u64,
    input: u64,
    output: u64,
    cache_read: u64,
    cache_write: u64,
}

impl Visit for Seen {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            attr::OPERATION => self.operation = Some(value.to_owned()),
            attr::RUN_STATUS => self.status = Some(value.to_owned()),
            attr::PROVIDER => self.provider = Some(value.to_owned()),
            // The response's model replaces the request's once it is known.
            attr::REQUEST_MODEL if self.model.is_none() => self.model = Some(value.to_owned()),
            attr::RESPONSE_MODEL => self.model = Some(value.to_owned()),
            attr::ERROR_TYPE => self.failed = true,
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            attr::DEPTH => self.depth = value,
            attr::INPUT_TOKENS => self.input = value,
            attr::OUTPUT_TOKENS => self.output = value,
            attr::CACHE_READ_TOKENS => self.cache_read = value,
            attr::CACHE_CREATION_TOKENS => self.cache_write = value,
            attr::COST_MICROS => self.cost = value,
            _ => {}
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.record_u64(field, u64::try_from(value).unwrap_or(0));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record_str(field, format!("{value:?}").trim_matches('"'));
    }
}

/// A metric event's fields.
#[derive(Debug, Default)]
struct Event {
    metric: String,
    labels: Vec<(String, String)>,
    seconds: Option<f64>,
}

impl Event {
    fn label(&self, name: &str) -> &str {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    }
}

impl Visit for Event {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "metric" {
            self.metric = value.to_owned();
        } else {
            self.labels
                .push((field.name().to_owned(), value.to_owned()));
        }
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        if field.name() == "seconds" {
            self.seconds = Some(value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record_str(field, format!("{value:?}").trim_matches('"'));
    }
}

struct Counting {
    sinks: Vec<Arc<dyn MetricSink>>,
}

impl MetricSink for Families {
    fn run_ended(&self, role: &str, status: &str) {
        self.runs.with_label_values(&[role, status]).inc();
    }
    fn tokens(&self, kind: &str, scope: &str, n: u64) {
        self.tokens.with_label_values(&[kind, scope]).inc_by(n);
    }
    fn cost(&self, model: &str, micros: u64) {
        self.cost.with_label_values(&[model]).inc_by(micros);
    }
    fn tool_call(&self, status: &str) {
        self.tool_calls.with_label_values(&[status]).inc();
    }
    fn admission_refused(&self, limit: &str, kind: &str) {
        self.refusals.with_label_values(&[limit, kind]).inc();
    }
    fn provider_turn(&self, provider: &str, status: &str, seconds: f64) {
        self.provider
            .with_label_values(&[provider, status])
            .observe(seconds);
    }
    fn provider_retry(&self, provider: &str, reason: &str) {
        self.retries.with_label_values(&[provider, reason]).inc();
    }
    fn store_commit(&self, seconds: f64) {
        self.commits.observe(seconds);
    }
}

impl Counting {
    fn each(&self, f: impl Fn(&dyn MetricSink)) {
        for sink in &self.sinks {
            f(sink.as_ref());
        }
    }
}

impl<S> Layer<S> for Counting
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let mut seen = Seen {
            started: Some(Instant::now()),
            ..Seen::default()
        };
        attrs.record(&mut seen);
        span.extensions_mut().insert(seen);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(seen) = span.extensions_mut().get_mut::<Seen>()
        {
            values.record(seen);
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        if event.metadata().target() != METRICS_TARGET {
            return;
        }
        let mut e = Event::default();
        event.record(&mut e);
        match e.metric.as_str() {
            "admission_refused" => {
                self.each(|s| s.admission_refused(e.label("limit"), e.label("kind")));
            }
            "provider_retry" => {
                self.each(|s| s.provider_retry(e.label("provider"), e.label("reason")));
            }
            "store_commit" => {
                if let Some(seconds) = e.seconds {
                    self.each(|s| s.store_commit(seconds));
                }
            }
            _ => {}
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let extensions = span.extensions();
        let Some(seen) = extensions.get::<Seen>() else {
            return;
        };
        let outcome = if seen.failed { "error" } else { "ok" };
        match seen.operation.as_deref() {
            Some("invoke_agent") => {
                let role = if seen.depth == 0 { "root" } else { "child" };
                let status = seen.status.as_deref().unwrap_or("unknown");
                self.each(|s| s.run_ended(role, status));
                let scopes: &[&str] = if seen.depth == 0 {
                    &["own"]
                } else {
                    &["own", "attributed"]
                };
                for scope in scopes {
                    for (kind, n) in [
                        ("input", seen.input),
                        ("output", seen.output),
                        ("cache_read", seen.cache_read),
                        ("cache_write", seen.cache_write),
                    ] {
                        self.each(|s| s.tokens(kind, scope, n));
                    }
                }
            }
            Some("chat") => {
                if let Some(started) = seen.started {
                    let provider = seen.provider.as_deref().unwrap_or("unknown");
                    let seconds = started.elapsed().as_secs_f64();
                    self.each(|s| s.provider_turn(provider, outcome, seconds));
                }
                if seen.cost > 0 {
                    let model = seen.model.as_deref().unwrap_or("unknown");
                    self.each(|s| s.cost(model, seen.cost));
                }
            }
            Some("execute_tool") => self.each(|s| s.tool_call(outcome)),
            _ => {}
        }
    }
}
