//! Ctrl-C. The listener is registered when it is created (not when first awaited), so an
//! interrupt that arrives as soon as the run starts still cancels it instead of killing the
//! process.

/// Interrupts (SIGINT, Ctrl-C) the process receives from now on.
#[derive(Debug)]
pub(crate) struct Interrupts {
    #[cfg(unix)]
    signal: Option<tokio::signal::unix::Signal>,
}

impl Interrupts {
    /// Starts listening. Must be called inside the runtime.
    pub(crate) fn listen() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Self {
                signal: signal(SignalKind::interrupt()).ok(),
            }
        }
        #[cfg(not(unix))]
        {
            Self {}
        }
    }

    /// The next interrupt; `false` when none can be received.
    pub(crate) async fn next(&mut self) -> bool {
        #[cfg(unix)]
        {
            match &mut self.signal {
                Some(signal) => signal.recv().await.is_some(),
                None => tokio::signal::ctrl_c().await.is_ok(),
            }
        }
        #[cfg(not(unix))]
        {
            tokio::signal::ctrl_c().await.is_ok()
        }
    }
}
