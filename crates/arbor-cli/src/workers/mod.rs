//! Children that run on worker processes, over a shared PostgreSQL store.
//!
//! - `arbor run --workers` and `arbor serve --workers` hand each child's run to the store's
//!   work queue ([`runner::QueueRunner`]) instead of running it in this process: the parent
//!   keeps admission, the record, the counters, the events it publishes and the terminal
//!   report, and waits for the worker's outcome (woken by `NOTIFY`, polling besides).
//! - `arbor worker` ([`worker::work`]) claims queued children, builds each from the spec its
//!   tree was started from (found by fingerprint among `--specs`), runs it under a lease it
//!   renews by heartbeat, and reports its outcome. A run whose worker died is taken over
//!   once its lease runs out, and goes on from its transcript.
//!
//! Which processes hand their children over is this process's choice, made once at start
//! ([`enable`]); every tree built afterwards ([`crate::tree::build`]) hands its children
//! over, its grandchildren included (a worker's own trees too).

pub(crate) mod runner;
#[cfg(test)]
mod tests;
pub(crate) mod worker;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arbor_store_postgres::{PostgresStore, WorkQueue};

use crate::fail::Fail;
use crate::store::StoreChoice;

/// How long a claim holds without a heartbeat, by default.
pub(crate) const DEFAULT_LEASE: Duration = Duration::from_secs(10);

/// The queue this process hands children to, once [`enable`]d.
static QUEUE: OnceLock<Arc<runner::Waiters>> = OnceLock::new();

/// Hands the children of every tree this process builds from now on to `store`'s queue.
pub(crate) fn enable(store: &PostgresStore, lease: Duration) {
    let queue = WorkQueue::new(store, owner_name(), lease);
    let _ = QUEUE.set(Arc::new(runner::Waiters::new(queue)));
}

/// The runner for a tree of the spec `fingerprint`, when children go to workers.
pub(crate) fn runner_for(fingerprint: &str) -> Option<runner::QueueRunner> {
    QUEUE
        .get()
        .map(|w| runner::QueueRunner::new(w.clone(), fingerprint.to_owned()))
}

/// The PostgreSQL store `choice` names, for the queue (`flag` says which option asked).
pub(crate) async fn queue_store(choice: &StoreChoice, flag: &str) -> Result<PostgresStore, Fail> {
    choice.open_postgres().await?.ok_or_else(|| {
        Fail::usage(format!(
            "{flag} needs a PostgreSQL store: --store postgres://… or ARBOR_STORE_URL (store \
             {} cannot be shared by processes on several machines)",
            choice.name()
        ))
    })
}

/// The store `choice` names; with `workers`, a PostgreSQL one whose queue this process
/// hands its children to from now on (`flag` names the option, for the error otherwise).
pub(crate) async fn open_store(
    choice: &StoreChoice,
    workers: bool,
    flag: &str,
) -> Result<Arc<dyn arbor_store::Store>, Fail> {
    if !workers {
        return choice.open().await;
    }
    let pg = queue_store(choice, flag).await?;
    enable(&pg, DEFAULT_LEASE);
    Ok(Arc::new(pg))
}

/// Who this process is, for claims: `host:pid:start` (the process's start time where the
/// platform tells, else 0), the identity the CLI's owner leases use too.
pub(crate) fn owner_name() -> String {
    let me = arbor_core::process::lease::ProcessId::current();
    format!("{}:{}:{}", me.host, me.pid, me.start.unwrap_or(0))
}
