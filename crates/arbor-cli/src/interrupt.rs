//! Termination signals: SIGINT (Ctrl-C), SIGTERM (`kill`, `timeout`, systemd, containers, CI)
//! and SIGHUP (a closed terminal) all take the same graceful path. The first cancels the run
//! (it ends `aborted`, the report is printed, and the process exits with 128 + the signal's
//! number: 130, 143 or 129); a second one, or any after the run has ended, exits at once with
//! its code.
//!
//! The signals are watched on a thread of their own with its own small runtime, registered
//! before [`Watch::start`] returns: a signal that arrives as soon as the run starts still
//! cancels it, and a second signal is honoured even while every worker of the main runtime
//! is blocked (a store waiting on a lock held by another process, say).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;

use crate::render::output;

/// A signal that stops a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// SIGINT: Ctrl-C.
    Interrupt,
    /// SIGTERM: `kill`, `timeout`, service managers.
    Terminate,
    /// SIGHUP: the terminal went away.
    Hangup,
}

impl Stop {
    /// The signal's name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Interrupt => "SIGINT",
            Self::Terminate => "SIGTERM",
            Self::Hangup => "SIGHUP",
        }
    }

    /// The exit code of a process it stopped: 128 + its number, as shells report it.
    pub(crate) fn exit_code(self) -> u8 {
        match self {
            Self::Interrupt => 130,
            Self::Terminate => 143,
            Self::Hangup => 129,
        }
    }
}

/// The newest watch: a process may run a tree more than once (`arbor run` resumes it after
/// an inline approval), and only the newest run's watch acts on a signal; older ones
/// (their threads still listening) ignore it.
static NEWEST: AtomicU64 = AtomicU64::new(0);

#[derive(Debug, Default)]
struct State {
    /// Which watch this is (see [`NEWEST`]).
    generation: u64,
    /// The first signal received.
    received: OnceLock<Stop>,
    /// The run is over: nothing is left to cancel.
    finished: AtomicBool,
}

/// Watches the termination signals for one run.
#[derive(Debug, Clone)]
pub(crate) struct Watch {
    state: Arc<State>,
}

impl Watch {
    /// Starts watching: the first signal cancels `token` (with a line on stderr unless
    /// `quiet`), a second exits at once. The signals are registered when this returns.
    pub(crate) fn start(token: CancellationToken, quiet: bool) -> Self {
        let state = Arc::new(State {
            generation: NEWEST.fetch_add(1, Ordering::SeqCst) + 1,
            ..State::default()
        });
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let shared = state.clone();
        let spawned = std::thread::Builder::new()
            .name("arbor-signals".into())
            .spawn(move || {
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        tracing::warn!("cannot watch termination signals: {e}");
                        let _ = ready_tx.send(());
                        return;
                    }
                };
                runtime.block_on(async move {
                    let mut signals = Signals::listen();
                    let _ = ready_tx.send(());
                    watch(&mut signals, &shared, &token, quiet).await;
                });
            });
        match spawned {
            // Wait until the handlers are in place (or the thread gave up).
            Ok(_) => {
                let _ = ready_rx.recv();
            }
            Err(e) => tracing::warn!("cannot watch termination signals: {e}"),
        }
        Self { state }
    }

    /// The first signal received, if any.
    pub(crate) fn received(&self) -> Option<Stop> {
        self.state.received.get().copied()
    }

    /// The run is over: from now on a signal exits at once.
    pub(crate) fn finish(&self) {
        self.state.finished.store(true, Ordering::SeqCst);
    }

    /// The exit code of a run that ended `aborted`: the signal's when one stopped it.
    pub(crate) fn aborted_code(&self, otherwise: u8) -> u8 {
        self.received().map_or(otherwise, Stop::exit_code)
    }
}

/// The next signal this watch acts on: one received while it is the newest.
async fn next_for(signals: &mut Signals, state: &State) -> Option<Stop> {
    loop {
        let stop = signals.next().await?;
        if NEWEST.load(Ordering::SeqCst) == state.generation {
            return Some(stop);
        }
    }
}

async fn watch(signals: &mut Signals, state: &State, token: &CancellationToken, quiet: bool) {
    let Some(first) = next_for(signals, state).await else {
        return;
    };
    if state.finished.load(Ordering::SeqCst) {
        std::process::exit(i32::from(first.exit_code()));
    }
    let _ = state.received.set(first);
    if !quiet {
        output::err(&match first {
            Stop::Interrupt => {
                "arbor: interrupted, cancelling the run (Ctrl-C again to exit at once)".to_owned()
            }
            other => format!(
                "arbor: {} received, cancelling the run (send it again to exit at once)",
                other.name()
            ),
        });
    }
    token.cancel();
    if let Some(second) = next_for(signals, state).await {
        std::process::exit(i32::from(second.exit_code()));
    }
}

/// The signal listeners, registered when created.
struct Signals {
    #[cfg(unix)]
    listeners: Vec<(Stop, tokio::signal::unix::Signal)>,
}

impl Signals {
    fn listen() -> Self {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            let listeners = [
                (Stop::Interrupt, SignalKind::interrupt()),
                (Stop::Terminate, SignalKind::terminate()),
                (Stop::Hangup, SignalKind::hangup()),
            ]
            .into_iter()
            .filter_map(|(stop, kind)| match signal(kind) {
                Ok(s) => Some((stop, s)),
                Err(e) => {
                    tracing::warn!("cannot watch {}: {e}", stop.name());
                    None
                }
            })
            .collect();
            Self { listeners }
        }
        #[cfg(not(unix))]
        {
            Self {}
        }
    }

    /// The next signal; `None` when none can be received.
    async fn next(&mut self) -> Option<Stop> {
        #[cfg(unix)]
        {
            if self.listeners.is_empty() {
                return None;
            }
            let waits = self.listeners.iter_mut().map(|(stop, s)| {
                let stop = *stop;
                Box::pin(async move { s.recv().await.map(|()| stop) })
            });
            first_of(waits).await
        }
        #[cfg(not(unix))]
        {
            tokio::signal::ctrl_c().await.ok().map(|()| Stop::Interrupt)
        }
    }
}

/// The first of `futures` to finish.
#[cfg(unix)]
async fn first_of<F>(futures: impl Iterator<Item = F>) -> Option<Stop>
where
    F: std::future::Future<Output = Option<Stop>> + Unpin,
{
    let mut futures: Vec<F> = futures.collect();
    std::future::poll_fn(move |cx| {
        for f in &mut futures {
            if let std::task::Poll::Ready(out) = std::pin::Pin::new(f).poll(cx) {
                return std::task::Poll::Ready(out);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// Ctrl-C or SIGTERM, for a process that stops cleanly on either (`serve`, `mcp`)
/// rather than watching a run.
pub(crate) async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_are_128_plus_the_signal_number() {
        assert_eq!(Stop::Interrupt.exit_code(), 128 + 2);
        assert_eq!(Stop::Hangup.exit_code(), 128 + 1);
        assert_eq!(Stop::Terminate.exit_code(), 128 + 15);
        assert_eq!(Stop::Terminate.name(), "SIGTERM");
    }
}
