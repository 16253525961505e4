//! Logging: `tracing` output on stderr, filtered by `ARBOR_LOG` (default `warn`), without
//! colours unless stderr is a terminal; `arbor serve` also counts its runs for `/metrics`
//! ([`arbor_server::RuntimeMetrics`]); with the `otel` feature, the GenAI spans are also
//! exported over OTLP when the standard variables ask for it (see `otel.rs`).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// What the subscriber holds until the process ends.
#[derive(Debug, Default)]
pub(crate) struct Telemetry {
    /// What `arbor serve` counts for `/metrics`.
    pub(crate) runtime: Option<arbor_server::RuntimeMetrics>,
    #[cfg(feature = "otel")]
    otel: Option<crate::otel::Otel>,
}

impl Telemetry {
    /// Flushes what an exporter still holds (bounded).
    pub(crate) fn shutdown(self) {
        #[cfg(feature = "otel")]
        if let Some(otel) = self.otel {
            otel.shutdown();
        }
    }
}

/// Installs the subscriber (inside the runtime: an exporter's batches run on it); with
/// `serving`, the runtime metrics' layer too. An invalid `ARBOR_LOG` falls back to `warn`.
pub(crate) fn init(serving: bool) -> Telemetry {
    let filter = EnvFilter::try_from_env("ARBOR_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(|| crate::render::output::LogWriter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_filter(filter);
    #[cfg(feature = "otel")]
    match crate::otel::start() {
        Ok(Some(started)) => {
            // Metrics exported over OTLP are counted by the same layer `/metrics` reads.
            let runtime = match (serving, started.sink) {
                (_, Some(sink)) => Some(arbor_server::RuntimeMetrics::new().with_sink(sink)),
                (true, None) => Some(arbor_server::RuntimeMetrics::new()),
                (false, None) => None,
            };
            let counting = runtime.as_ref().map(|r| r.layer());
            let _ = tracing_subscriber::registry()
                .with(fmt)
                .with(counting)
                .with(started.layer)
                .try_init();
            return Telemetry {
                runtime,
                otel: Some(started.otel),
            };
        }
        Ok(None) => {}
        Err(e) => crate::render::output::err(&format!("warning: telemetry is not exported: {e}")),
    }
    let runtime = serving.then(arbor_server::RuntimeMetrics::new);
    let counting = runtime.as_ref().map(|r| r.layer());
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(counting)
        .try_init();
    Telemetry {
        runtime,
        #[cfg(feature = "otel")]
        otel: None,
    }
}
