//! Children that run in another process: the [`ChildRunner`] a host plugs into a supervisor
//! (`SupervisorBuilder::runner`) to hand a child's run elsewhere (a worker that claims it
//! from a shared store), and the [`RemoteOutcome`] both sides agree on.
//!
//! The supervisor keeps everything but the run itself: admission, the record, the counters,
//! the events, the `before` and `after` hooks, the timeout and exactly one terminal report
//! all stay with the parent. The runner only runs the registered child and says how its run
//! ended. What is handed over:
//! - first runs of sync and joined children whose parent is a session, and (durable
//!   approvals) their suspended runs resumed with decisions (a follow-up or a continued run,
//!   and a message-mode child, run where their supervisor is);
//! - never a child a `before` hook gave a narrower permission: a permission cannot travel,
//!   so such a child runs here rather than elsewhere with more than it was given.
//!
//! On the other side,
//! [`Supervisor::run_claimed`](crate::process::SupervisorProcess::run_claimed) runs the child from
//! its record under the terms its spawn narrowed to, and a takeover (the first worker died)
//! continues it from its transcript.

use std::fmt;
use std::sync::Arc;

use arbor_protocol::{
    PendingDecision, RunId, RunLimitBreach, RunStatus, SessionId, StopReason, Usage,
};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::error::{CoreError, CoreResult};
use crate::outcome::RunResult;
use crate::supervisor::config::limits::LimitsInput;

/// A registered child whose run is handed to another process.
#[derive(Debug, Clone)]
pub struct RemoteChild {
    /// The child's session (its record exists).
    pub session: SessionId,
    /// Its parent's session.
    pub parent: SessionId,
    /// The tree's root.
    pub root: SessionId,
    /// The catalog entry it was admitted from.
    pub child_id: String,
    /// Its input, after the `before` hook.
    pub input: String,
    /// Its limits, after the `before` hook (the worker narrows its record's terms by them).
    pub limits: LimitsInput,
    /// The most children its supervisor runs at once.
    pub max_active: u32,
    /// Cancelled when the delegation is (its caller, its timeout, a delete, the session's
    /// end): the runner stops the remote run and still waits for its report, briefly.
    pub cancel: CancellationToken,
    /// A suspended run of the child to resume with its recorded decisions (durable
    /// approvals), instead of a first run.
    pub resume_run: Option<RunId>,
    /// With durable approvals: the delegation mapping the worker stores beside the child's
    /// suspension if it stops on a call, so that this supervisor (or a later process of the
    /// host) rebuilds the delegation when a decision comes.
    pub mapping: Option<serde_json::Value>,
    /// When the parent streams the child's events (its report policy): where the runner
    /// publishes the events the remote run relays ([`ClaimedRun::relay`]); this
    /// supervisor's pump projects them as it does a local child's.
    ///
    /// [`ClaimedRun::relay`]: crate::process::ClaimedRun::relay
    pub events: Option<Arc<crate::session::events::EventBus>>,
}

/// Runs registered children elsewhere. One method; an `Arc<R>` is a runner too.
#[async_trait]
pub trait ChildRunner: fmt::Debug + Send + Sync {
    /// Runs `child` to its end and says how it ended. An `Err` is a delegation that failed
    /// without a run result (the worker could not build it, the queue failed).
    async fn run(&self, child: RemoteChild) -> CoreResult<RunResult>;

    /// Waits for the run of `session` that an earlier process handed over (its parent's run
    /// was cut off and goes on now): how it ended, or `None` when it was never handed over.
    /// Stops waiting when `cancel` is cancelled. The default knows of no run.
    async fn rejoin(
        &self,
        session: SessionId,
        cancel: CancellationToken,
    ) -> Option<CoreResult<RunResult>> {
        let _ = (session, cancel);
        None
    }
}

#[async_trait]
impl<R: ChildRunner + ?Sized> ChildRunner for Arc<R> {
    async fn run(&self, child: RemoteChild) -> CoreResult<RunResult> {
        (**self).run(child).await
    }

    async fn rejoin(
        &self,
        session: SessionId,
        cancel: CancellationToken,
    ) -> Option<CoreResult<RunResult>> {
        (**self).rejoin(session, cancel).await
    }
}

/// What a suspended remote run waits on: its checkpoint's version and the calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Waiting {
    /// The checkpoint version a decision names.
    pub version: u64,
    /// The calls waiting for a decision, in call order.
    pub pending: Vec<PendingDecision>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How a remote run ended, as JSON both sides read: the run's result, or the error that
/// ended the delegation without one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RemoteOutcome {
    /// The run ended with a result.
    Ran {
        /// The run.
        run_id: RunId,
        /// Its terminal status.
        status: RunStatus,
        /// Why it stopped.
        stop_reason: StopReason,
        /// The model's last text.
        text: String,
        /// The tokens its turns used.
        usage: Usage,
        /// What they cost, in micro-units.
        #[serde(default, skip_serializing_if = "is_zero")]
        cost_micros: u64,
        /// The limit that fired.
        breach: Option<RunLimitBreach>,
        /// What went wrong.
        error: Option<String>,
        /// Model turns taken.
        turns: u32,
        /// Tool calls executed or attempted.
        tool_calls: u32,
        /// For a suspended run (durable approvals): what it waits on.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        waiting: Option<Waiting>,
    },
    /// The delegation failed without a run result.
    Failed {
        /// The error's kind (`CoreError::kind`), for the record.
        kind: String,
        /// Its message.
        message: String,
    },
}

impl RemoteOutcome {
    /// The outcome of a run (or of its failure).
    pub fn of(result: &CoreResult<RunResult>) -> Self {
        match result {
            Ok(r) => Self::Ran {
                run_id: r.run_id,
                status: r.status,
                stop_reason: r.stop_reason,
                text: r.text.clone(),
                usage: r.usage,
                cost_micros: r.cost_micros,
                breach: r.breach,
                error: r.error.clone(),
                turns: r.turns,
                tool_calls: r.tool_calls,
                waiting: r.suspension.as_ref().map(|s| Waiting {
                    version: s.version,
                    pending: s.pending.clone(),
                }),
            },
            Err(e) => Self::Failed {
                kind: format!("{:?}", e.kind()),
                message: e.to_string(),
            },
        }
    }

    /// Whether the run succeeded.
    pub fn succeeded(&self) -> bool {
        matches!(
            self,
            Self::Ran {
                status: RunStatus::Succeeded,
                ..
            }
        )
    }

    /// The run result of `session` this outcome describes, or the delegation's error. A
    /// failure keeps its message; its kind becomes a supervisor error.
    pub fn into_result(self, session: SessionId) -> CoreResult<RunResult> {
        match self {
            Self::Ran {
                run_id,
                status,
                stop_reason,
                text,
                usage,
                cost_micros,
                breach,
                error,
                turns,
                tool_calls,
                waiting,
            } => Ok(RunResult {
                session_id: session,
                run_id,
                status,
                stop_reason,
                text,
                usage,
                cost_micros,
                breach,
                error,
                turns,
                tool_calls,
                suspension: waiting.map(|w| crate::outcome::Suspension {
                    run_id,
                    session_id: session,
                    version: w.version,
                    pending: w.pending,
                }),
                attribution: None,
            }),
            Self::Failed { message, .. } => Err(CoreError::Supervisor(message)),
        }
    }
}
