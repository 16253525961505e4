//! Logging: `tracing` output on stderr, filtered by `ARBOR_LOG` (default `warn`), without
//! colours unless stderr is a terminal.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the subscriber. An invalid `ARBOR_LOG` falls back to `warn`.
pub(crate) fn init() {
    let filter = EnvFilter::try_from_env("ARBOR_LOG").unwrap_or_else(|_| EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
