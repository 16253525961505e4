//! Scenario P: many roots at once, as a service runs them. [`IN_FLIGHT`] root runs go on at
//! any moment (a new one starts as one ends), each delegating once (sync) to a child, all
//! through one supervisor on one store, on tokio's multi-thread runtime (a worker per
//! core). It measures the throughput and the latency of each root run (p50, p99): whether
//! the runtime scales with cores, and whether the store's writer serializes everything.

use std::sync::Arc;
use std::time::{Duration, Instant};

use arbor_protocol::SessionId;
use arbor_store::Store;
use tokio::task::JoinSet;

use crate::trees::{self, run_root};

/// Root runs going on at once.
pub(crate) const IN_FLIGHT: u32 = 32;

/// What one run of P measured.
pub(crate) struct Parallel {
    pub(crate) elapsed: Duration,
    /// Each root run's latency.
    pub(crate) samples: Vec<Duration>,
    pub(crate) roots: Vec<SessionId>,
}

/// Runs `ops` roots, [`IN_FLIGHT`] at a time.
pub(crate) async fn run(store: &Arc<dyn Store>, ops: u64) -> Result<Parallel, String> {
    let (root, _sup) = trees::one_child_with(store, IN_FLIGHT).map_err(|e| e.to_string())?;
    let root = Arc::new(root);
    let mut running = JoinSet::new();
    let mut samples = Vec::with_capacity(usize::try_from(ops).unwrap_or(0));
    let mut roots = Vec::with_capacity(samples.capacity());
    let start = Instant::now();
    let mut started = 0;
    while started < ops || !running.is_empty() {
        while started < ops && running.len() < IN_FLIGHT as usize {
            started += 1;
            let (root, store) = (root.clone(), store.clone());
            running.spawn(async move {
                let t = Instant::now();
                let id = run_root(&root, &store).await?;
                Ok::<_, String>((id, t.elapsed()))
            });
        }
        match running.join_next().await {
            Some(joined) => {
                let (id, took) = joined.map_err(|e| format!("a root run panicked: {e}"))??;
                roots.push(id);
                samples.push(took);
            }
            None => break,
        }
    }
    Ok(Parallel {
        elapsed: start.elapsed(),
        samples,
        roots,
    })
}
