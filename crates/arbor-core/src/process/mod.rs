//! What arbor's own processes use beyond a host's path: the `arbor` CLI, `arbor serve`,
//! `arbor worker` and the benchmark program. A host embedding arbor needs none of it (its path
//! is [`Supervisor::builder`], [`Delegator::tools`](crate::supervisor::Delegator::tools),
//! [`Supervisor::root_session`] and [`Session::run`](crate::Session::run); see the crate's
//! example); this module may change without notice.
//!
//! - [`lease`]: which process holds a run's claim, so a dead holder's is taken over at once.
//! - [`telemetry`]: the spans and metric events arbor emits, for exporters and metric sinks.
//! - [`usage`]: the reconciliation of a tree's two token totals.
//! - A child whose run another process claimed ([`ClaimedRun`], run by
//!   [`SupervisorProcess::run_claimed`]); children waiting for approval that nobody awaits
//!   ([`detached_suspensions`], [`close_dead_suspensions`], and [`abandon_dead_suspensions`]
//!   with the [`AbandonedCalls`] a deleted child left to its providers); the resume of a delegated run ([`NestedResumer`]); the
//!   projection of a child's events ([`ChildEventProjector`]).
//! - [`SupervisorProcess`]: a supervisor's verbs for those processes (a worker's claimed
//!   runs and mail, bookkeeping counters a long-lived process watches), kept off
//!   [`Supervisor`]'s own methods so a host's list of them is its own.

pub mod lease;
pub mod telemetry;
pub mod usage;

use std::future::Future;

use arbor_protocol::SessionId;

pub use crate::session::resumer::{NestedOutcome, NestedResumer};
pub use crate::supervisor::delegation::abandoned::{AbandonedCalls, calls_left_by_delete};
pub use crate::supervisor::delegation::detached::{
    abandon_dead_suspensions, close_dead_suspensions, detached_suspensions,
};
pub use crate::supervisor::delegation::pump::ChildEventProjector;
pub use crate::supervisor::delegation::remote::ClaimedRun;

use crate::error::CoreResult;
use crate::outcome::RunResult;
use crate::supervisor::Supervisor;

/// A supervisor's verbs for arbor's own processes (see the [module](self)): bring this trait
/// into scope to call them on a [`Supervisor`].
pub trait SupervisorProcess {
    /// Runs a child whose run this process claimed from the queue (a worker), as the process
    /// that admitted it would have, reporting its events and outcome back through the claim.
    fn run_claimed(
        &self,
        claimed: ClaimedRun,
    ) -> impl Future<Output = CoreResult<RunResult>> + Send + '_;

    /// Abandons every run of this supervisor: a worker that lost its lease stops its runs
    /// without writing anything more (another process owns them now).
    fn abandon_runs(&self);

    /// Takes into `session`'s inbox the messages other processes stored for it since
    /// transcript position `after` (which moves on); returns how many. A worker calls it
    /// while it runs a claimed child.
    fn collect_mail<'a>(
        &'a self,
        session: SessionId,
        after: &'a mut u64,
    ) -> impl Future<Output = CoreResult<usize>> + Send + 'a;

    /// Retries the teardowns whose tombstone could not be written; returns how many are still
    /// unfinished (it also runs after every run that ends).
    fn retry_cleanups(&self) -> impl Future<Output = usize> + Send + '_;

    /// How many sessions this process tracks live: running, with messages pending, attached
    /// by the host, or whose start failed (bounded by what is live, not by how many ran).
    fn tracked_sessions(&self) -> usize;

    /// Async delegations still running.
    fn running_handles(&self) -> usize;

    /// Lets go of what this process remembers of closed trees nothing runs in any more;
    /// returns how many.
    fn release_dropped(&self) -> usize;

    /// How many closed sessions this process remembers (to refuse starting anything under
    /// them).
    fn closed_sessions(&self) -> usize;

    /// The most sessions this supervisor's limits permit at once (root included).
    fn worst_case_sessions(&self) -> u64;
}

impl SupervisorProcess for Supervisor {
    fn run_claimed(
        &self,
        claimed: ClaimedRun,
    ) -> impl Future<Output = CoreResult<RunResult>> + Send + '_ {
        Supervisor::run_claimed(self, claimed)
    }

    fn abandon_runs(&self) {
        Supervisor::abandon_runs(self);
    }

    fn collect_mail<'a>(
        &'a self,
        session: SessionId,
        after: &'a mut u64,
    ) -> impl Future<Output = CoreResult<usize>> + Send + 'a {
        Supervisor::collect_mail(self, session, after)
    }

    fn retry_cleanups(&self) -> impl Future<Output = usize> + Send + '_ {
        Supervisor::retry_cleanups(self)
    }

    fn tracked_sessions(&self) -> usize {
        Supervisor::tracked_sessions(self)
    }

    fn running_handles(&self) -> usize {
        Supervisor::running_handles(self)
    }

    fn release_dropped(&self) -> usize {
        Supervisor::release_dropped(self)
    }

    fn closed_sessions(&self) -> usize {
        Supervisor::closed_sessions(self)
    }

    fn worst_case_sessions(&self) -> u64 {
        Supervisor::worst_case_sessions(self)
    }
}
