//! OpenTelemetry export (feature `otel`): the GenAI spans arbor-core emits as `tracing` spans
//! ([`arbor_core::telemetry`]) bridged by `tracing-opentelemetry` and sent over OTLP/HTTP
//! (protobuf) by a batch processor on the async runtime.
//!
//! Configured by the standard variables: export is on when `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set or `OTEL_TRACES_EXPORTER=otlp`, and off with
//! `OTEL_TRACES_EXPORTER=none` or `OTEL_SDK_DISABLED=true`; `OTEL_EXPORTER_OTLP_HEADERS`,
//! `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_BSP_*` and `OTEL_RESOURCE_ATTRIBUTES` are read by the
//! SDK; `OTEL_SERVICE_NAME` names the service (`arbor` by default);
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true` captures tool arguments and
//! results (redacted).
//!
//! A collector that is down or slow never slows or fails a run: spans wait in a bounded
//! queue (spans past it are dropped), each export is bounded by its timeout, a failed export
//! is counted and logged once, and the flush at exit waits at most [`FLUSH_BOUND`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;

/// The longest the process waits at exit for the last spans to reach the collector (none
/// when every export so far failed: the collector is down).
pub(crate) const FLUSH_BOUND: Duration = Duration::from_secs(1);

/// The exporter's end: flushes at exit.
#[derive(Debug)]
pub(crate) struct Otel {
    provider: SdkTracerProvider,
    failed: Arc<AtomicU64>,
    sent: Arc<AtomicU64>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether the variables ask for trace export.
pub(crate) fn wanted() -> bool {
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return false;
    }
    match env("OTEL_TRACES_EXPORTER") {
        Some(v) if v.eq_ignore_ascii_case("none") => false,
        Some(v) if v.eq_ignore_ascii_case("otlp") => true,
        _ => {
            env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
                || env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
        }
    }
}

/// Counts failed exports and logs the first one (a collector that is down fails every
/// export: one line says so, not one per batch).
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    failed: Arc<AtomicU64>,
    sent: Arc<AtomicU64>,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        let out = self.inner.export(batch).await;
        match &out {
            Ok(()) => {
                self.sent.fetch_add(spans, Ordering::Relaxed);
            }
            Err(e) => {
                if self.failed.fetch_add(spans, Ordering::Relaxed) == 0 {
                    tracing::warn!(error = %e, "traces could not be exported (later failures are counted, not logged)");
                }
            }
        }
        out
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// Builds the exporter and the layer that feeds it (on the current Tokio runtime), or why
/// it cannot.
pub(crate) fn start<S>() -> Result<(impl Layer<S>, Otel), String>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    let client = arbor_model::http::tls_client(Duration::from_secs(5))?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(Protocol::HttpBinary)
        // One quick retry: a batch is not worth holding a process's exit for.
        .with_retry_policy(
            opentelemetry_otlp::RetryPolicy::default()
                .with_max_retries(1)
                .with_initial_delay(Duration::from_millis(20))
                .with_max_delay(Duration::from_millis(20))
                .with_max_jitter(Duration::ZERO),
        )
        .build()
        .map_err(|e| format!("the OTLP exporter cannot be built: {e}"))?;
    let failed = Arc::new(AtomicU64::new(0));
    let sent = Arc::new(AtomicU64::new(0));
    let exporter = Counted {
        inner: exporter,
        failed: failed.clone(),
        sent: sent.clone(),
    };
    let processor =
        opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
            exporter,
            opentelemetry_sdk::runtime::Tokio,
        )
        .build();
    let mut resource = opentelemetry_sdk::Resource::builder();
    if env("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("arbor");
    }
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("arbor");
    if env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
    {
        arbor_core::telemetry::capture_content(true);
    }
    arbor_core::telemetry::set_trace_context(W3c);
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_filter(
            Targets::new().with_target(arbor_core::telemetry::TARGET, tracing::Level::INFO),
        );
    Ok((
        layer,
        Otel {
            provider,
            failed,
            sent,
        },
    ))
}

/// Reads and continues span contexts as W3C `traceparent` strings (what a suspended run
/// stores, for the attempt that resumes it in a later process).
#[derive(Debug)]
struct W3c;

impl arbor_core::telemetry::TraceContext for W3c {
    fn traceparent(&self, span: &tracing::Span) -> Option<String> {
        use opentelemetry::trace::TraceContextExt as _;
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        let cx = span.context();
        let sc = cx.span().span_context().clone();
        sc.is_valid().then(|| {
            format!(
                "00-{}-{}-{:02x}",
                sc.trace_id(),
                sc.span_id(),
                sc.trace_flags().to_u8()
            )
        })
    }

    fn continue_from(&self, span: &tracing::Span, before: &str, adopt: bool) {
        use opentelemetry::trace::TraceContextExt as _;
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        let Some(before) = parse_traceparent(before) else {
            return;
        };
        if adopt {
            let cx = opentelemetry::Context::new().with_remote_span_context(before.clone());
            let _ = span.set_parent(cx);
        }
        span.add_link(before);
    }
}

/// A `traceparent` (`00-{trace}-{span}-{flags}`) as a remote span context.
fn parse_traceparent(text: &str) -> Option<opentelemetry::trace::SpanContext> {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    let mut parts = text.split('-');
    let (Some("00"), Some(trace), Some(span), Some(flags), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let trace = TraceId::from_hex(trace).ok()?;
    let span = SpanId::from_hex(span).ok()?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let sc = SpanContext::new(
        trace,
        span,
        TraceFlags::new(flags),
        true,
        TraceState::default(),
    );
    sc.is_valid().then_some(sc)
}

impl Otel {
    /// Sends what is queued, waiting at most [`FLUSH_BOUND`] (on another thread: the
    /// processor's shutdown blocks until its last export returns), and not at all when the
    /// collector refused every export so far.
    pub(crate) fn shutdown(self) {
        let down =
            self.sent.load(Ordering::Relaxed) == 0 && self.failed.load(Ordering::Relaxed) > 0;
        let (tx, rx) = std::sync::mpsc::channel();
        let provider = self.provider;
        let spawned = std::thread::Builder::new()
            .name("otel-flush".into())
            .spawn(move || {
                let _ = tx.send(provider.shutdown());
            });
        if spawned.is_err() {
            return;
        }
        let bound = if down { Duration::ZERO } else { FLUSH_BOUND };
        let flushed = rx.recv_timeout(bound);
        let failed = self.failed.load(Ordering::Relaxed);
        match flushed {
            Ok(Ok(())) | Ok(Err(OTelSdkError::AlreadyShutdown)) => {}
            // The export's own failure was logged (once) and counted.
            Ok(Err(_)) if failed > 0 => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "traces could not be flushed at exit"),
            Err(_) if down => {}
            Err(_) => tracing::warn!(
                bound_ms = FLUSH_BOUND.as_millis() as u64,
                "the trace collector did not answer in time: the last spans are dropped"
            ),
        }
        if failed > 0 {
            tracing::warn!(
                spans = failed,
                "spans were not exported (the collector failed)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_traceparent;

    #[test]
    fn a_traceparent_parses_and_a_malformed_one_is_refused() {
        let sc =
            parse_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_sampled() && sc.is_remote());
        for bad in [
            "",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-xyz-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad:?}");
        }
    }
}
