//! OpenTelemetry export (feature `otel`): the GenAI spans arbor-core emits as `tracing` spans
//! ([`arbor_core::process::telemetry`]) bridged by `tracing-opentelemetry` and sent over OTLP/HTTP
//! (protobuf) by a batch processor on the async runtime (`traces.rs`); and the runtime
//! metrics ([`arbor_server::RuntimeMetrics`]) as OpenTelemetry metrics (`metrics.rs`), read
//! every `OTEL_METRIC_EXPORT_INTERVAL` ms and at exit, and sent the same way.
//!
//! Configured by the standard variables: trace export is on when `OTEL_EXPORTER_OTLP_ENDPOINT`
//! or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set or `OTEL_TRACES_EXPORTER=otlp`, and off with
//! `OTEL_TRACES_EXPORTER=none`; metrics likewise with `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`
//! and `OTEL_METRICS_EXPORTER`; both are off with `OTEL_SDK_DISABLED=true`.
//! `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_BSP_*` and
//! `OTEL_RESOURCE_ATTRIBUTES` are read by the SDK; `OTEL_SERVICE_NAME` names the service
//! (`arbor` by default); `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` captures
//! content: tool arguments and results, model input and output (redacted).
//!
//! A collector that is down or slow never slows or fails a run: spans wait in a bounded
//! queue (spans past it are dropped), each export is bounded by its timeout and retried once,
//! a failed export is counted and logged once, and the flush at exit waits at most
//! [`FLUSH_BOUND`] (not at all when every export so far failed).

mod metrics;
mod traces;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkError;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;

pub(crate) use metrics::OtelMetrics;
use traces::{Bounded, Counted, Queue, W3c};

/// The longest the process waits at exit for the last spans and metrics to reach the
/// collector (none when every export so far failed: the collector is down).
pub(crate) const FLUSH_BOUND: Duration = Duration::from_secs(1);

/// The exporters' end: flushes at exit.
#[derive(Debug)]
pub(crate) struct Otel {
    traces: Option<SdkTracerProvider>,
    meters: Option<SdkMeterProvider>,
    failed: Arc<AtomicU64>,
    sent: Arc<AtomicU64>,
    queue: Option<Arc<Queue>>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether the variables ask for the export of `signal` (`TRACES` or `METRICS`).
pub(crate) fn wanted(signal: &str) -> bool {
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return false;
    }
    match env(&format!("OTEL_{signal}_EXPORTER")) {
        Some(v) if v.eq_ignore_ascii_case("none") => false,
        Some(v) if v.eq_ignore_ascii_case("otlp") => true,
        _ => {
            env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
                || env(&format!("OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")).is_some()
        }
    }
}

fn retry() -> opentelemetry_otlp::RetryPolicy {
    // One quick retry: a batch is not worth holding a process's exit for.
    opentelemetry_otlp::RetryPolicy::default()
        .with_max_retries(1)
        .with_initial_delay(Duration::from_millis(20))
        .with_max_delay(Duration::from_millis(20))
        .with_max_jitter(Duration::ZERO)
}

fn resource() -> opentelemetry_sdk::Resource {
    let mut resource = opentelemetry_sdk::Resource::builder();
    if env("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("arbor");
    }
    resource.build()
}

/// What [`start`] built: the trace layer (when traces are exported), the metric sink (when
/// metrics are), and their end.
pub(crate) struct Started<L> {
    pub(crate) layer: Option<L>,
    pub(crate) sink: Option<OtelMetrics>,
    pub(crate) otel: Otel,
}

/// Builds the exporters the variables ask for, on the current Tokio runtime (`None` when
/// they ask for none), or says why one cannot be built.
pub(crate) fn start<S>() -> Result<Option<Started<impl Layer<S>>>, String>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let (want_traces, want_metrics) = (wanted("TRACES"), wanted("METRICS"));
    if !want_traces && !want_metrics {
        return Ok(None);
    }
    let client = arbor_model::http::tls_client(Duration::from_secs(5))?;
    let failed = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let (mut layer, mut traces, mut queue) = (None, None, None);
    if want_traces {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client.clone())
            .with_protocol(Protocol::HttpBinary)
            .with_retry_policy(retry())
            .build()
            .map_err(|e| format!("the OTLP span exporter cannot be built: {e}"))?;
        let exporter = Counted {
            inner: exporter,
            failed: failed.clone(),
            sent: sent.clone(),
        };
        // The batcher's queue has the SDK's size (`OTEL_BSP_MAX_QUEUE_SIZE`); the gate in
        // front of it lets no more wait, and counts what it drops.
        let max = env("OTEL_BSP_MAX_QUEUE_SIZE")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|n| *n > 0)
            .unwrap_or(2_048);
        let gate = Arc::new(Queue::new(max, sent.clone(), failed.clone()));
        let processor = Bounded {
            inner:
                opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
                    exporter,
                    opentelemetry_sdk::runtime::Tokio,
                )
                .build(),
            queue: gate.clone(),
        };
        queue = Some(gate);
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(resource())
            .build();
        let tracer = provider.tracer("arbor");
        if env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        {
            arbor_core::process::telemetry::capture_content(true);
        }
        arbor_core::process::telemetry::set_trace_context(W3c);
        layer = Some(
            tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(
                    Targets::new()
                        .with_target(arbor_core::process::telemetry::TARGET, tracing::Level::INFO),
                ),
        );
        traces = Some(provider);
    }
    let (mut sink, mut meters) = (None, None);
    if want_metrics {
        let exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_retry_policy(retry())
            .build()
            .map_err(|e| format!("the OTLP metric exporter cannot be built: {e}"))?;
        let reader =
            opentelemetry_sdk::metrics::periodic_reader_with_async_runtime::PeriodicReader::builder(
                exporter,
                opentelemetry_sdk::runtime::Tokio,
            )
            .build();
        let provider = SdkMeterProvider::builder()
            .with_reader(reader)
            .with_resource(resource())
            .build();
        sink = Some(OtelMetrics::new(&provider));
        meters = Some(provider);
    }
    Ok(Some(Started {
        layer,
        sink,
        otel: Otel {
            traces,
            meters,
            failed,
            sent,
            queue,
        },
    }))
}

impl Otel {
    /// Sends what is queued, waiting at most [`FLUSH_BOUND`] (on another thread: the
    /// providers' shutdown blocks until their last export returns), and not at all when the
    /// collector refused every export so far.
    pub(crate) fn shutdown(self) {
        let down =
            self.sent.load(Ordering::Relaxed) == 0 && self.failed.load(Ordering::Relaxed) > 0;
        let (tx, rx) = std::sync::mpsc::channel();
        let (traces, meters) = (self.traces, self.meters);
        // Spans and metrics are flushed side by side, each on its own thread.
        let metrics_tx = tx.clone();
        let spawned = std::thread::Builder::new()
            .name("otel-flush".into())
            .spawn(move || {
                let _ = tx.send(traces.map_or(Ok(()), |t| t.shutdown()));
            })
            .and_then(|_| {
                std::thread::Builder::new()
                    .name("otel-flush-metrics".into())
                    .spawn(move || {
                        let _ = metrics_tx.send(meters.map_or(Ok(()), |m| m.shutdown()));
                    })
            });
        if spawned.is_err() {
            return;
        }
        let bound = if down { Duration::ZERO } else { FLUSH_BOUND };
        let deadline = std::time::Instant::now() + bound;
        // Both answers within the one bound; the first failure is what is reported.
        let mut flushed = Ok(Ok(()));
        for _ in 0..2 {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    if flushed.as_ref().is_ok_and(|r| r.is_ok()) {
                        flushed = Ok(Err(e));
                    }
                }
                Err(e) => {
                    flushed = Err(e);
                    break;
                }
            }
        }
        let failed = self.failed.load(Ordering::Relaxed);
        match flushed {
            Ok(Ok(())) | Ok(Err(OTelSdkError::AlreadyShutdown)) => {}
            // The export's own failure was logged (once) and counted.
            Ok(Err(_)) if failed > 0 => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "telemetry could not be flushed at exit"),
            Err(_) if down => {}
            Err(_) => tracing::warn!(
                bound_ms = FLUSH_BOUND.as_millis() as u64,
                "the collector did not answer in time: the last spans and metrics are dropped"
            ),
        }
        if failed > 0 {
            tracing::warn!(
                spans = failed,
                "spans were not exported (the collector failed)"
            );
        }
        let dropped = self
            .queue
            .as_ref()
            .map_or(0, |q| q.dropped.load(Ordering::Relaxed));
        if dropped > 0 {
            tracing::warn!(
                spans = dropped,
                "spans were dropped (the trace queue was full)"
            );
        }
    }
}
