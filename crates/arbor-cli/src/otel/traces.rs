//! The trace side of the export: the exporter wrapper that counts failures, and the W3C
//! `traceparent` reading and continuing that lets a resumed run join its trace.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter, SpanProcessor};

/// How many spans wait to be exported, and how many were dropped because too many did: the
/// batcher's queue, counted from outside so a drop is counted and logged once (the SDK's own
/// count is not reported without its internal logs, which log every failed export).
#[derive(Debug, Default)]
pub(crate) struct Queue {
    pub(crate) max: u64,
    ended: AtomicU64,
    pub(crate) sent: Arc<AtomicU64>,
    pub(crate) failed: Arc<AtomicU64>,
    pub(crate) dropped: AtomicU64,
}

impl Queue {
    pub(crate) fn new(max: u64, sent: Arc<AtomicU64>, failed: Arc<AtomicU64>) -> Self {
        Self {
            max,
            sent,
            failed,
            ..Self::default()
        }
    }

    /// Whether one more span may wait (else it is dropped: counted, logged the first time).
    fn take(&self) -> bool {
        let done = self.sent.load(Ordering::Relaxed) + self.failed.load(Ordering::Relaxed);
        let waiting = self.ended.load(Ordering::Relaxed).saturating_sub(done);
        if waiting >= self.max {
            if self.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                tracing::warn!(
                    max = self.max,
                    "the trace queue is full: spans are dropped (later drops are counted, not logged)"
                );
            }
            return false;
        }
        self.ended.fetch_add(1, Ordering::Relaxed);
        true
    }
}

/// A span processor that lets at most [`Queue::max`] spans wait for `inner` (a batcher whose
/// queue is as large, so it never drops one itself).
#[derive(Debug)]
pub(crate) struct Bounded<P> {
    pub(crate) inner: P,
    pub(crate) queue: Arc<Queue>,
}

impl<P: SpanProcessor> SpanProcessor for Bounded<P> {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &opentelemetry::Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        if self.queue.take() {
            self.inner.on_end(span);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

/// Counts failed exports and logs the first one (a collector that is down fails every
/// export: one line says so, not one per batch).
#[derive(Debug)]
pub(crate) struct Counted<E> {
    pub(crate) inner: E,
    pub(crate) failed: Arc<AtomicU64>,
    pub(crate) sent: Arc<AtomicU64>,
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

/// Reads and continues span contexts as W3C `traceparent` strings (what a suspended run
/// stores, for the attempt that resumes it in a later process).
#[derive(Debug)]
pub(crate) struct W3c;

impl arbor_core::process::telemetry::TraceContext for W3c {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::{Queue, parse_traceparent};

    #[test]
    fn a_full_queue_drops_and_counts_and_frees_as_batches_return() {
        let (sent, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let q = Queue::new(3, sent.clone(), failed.clone());
        let taken: Vec<bool> = (0..5).map(|_| q.take()).collect();
        assert_eq!(taken, [true, true, true, false, false]);
        assert_eq!(q.dropped.load(Ordering::Relaxed), 2);
        // A batch of two came back (one sent, one failed): two more may wait.
        sent.fetch_add(1, Ordering::Relaxed);
        failed.fetch_add(1, Ordering::Relaxed);
        let taken: Vec<bool> = (0..3).map(|_| q.take()).collect();
        assert_eq!(taken, [true, true, false]);
        assert_eq!(q.dropped.load(Ordering::Relaxed), 3);
    }

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
