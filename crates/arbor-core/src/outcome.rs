//! What runs hand back and what everything carries: a run's [`RunResult`], a suspended run's
//! [`Suspension`], a child's suspended run as a tool reports it ([`NestedSuspension`]), and
//! where a session stands in its tree ([`SessionRef`]). A leaf: it depends on the protocol
//! and store types only, so the error, tool, session and run modules can all name these
//! without importing one another.

use arbor_protocol::{
    PendingDecision, RunId, RunLimitBreach, RunStatus, SessionId, StopReason, Usage,
};
use arbor_store::SessionRecord;

/// Where a session stands in its tree: what a child needs of its parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SessionRef {
    /// The session.
    pub id: SessionId,
    /// Its tree's root.
    pub root_id: SessionId,
    /// Its depth in the tree (0 for a root).
    pub depth: u32,
}

impl From<&SessionRecord> for SessionRef {
    fn from(r: &SessionRecord) -> Self {
        Self {
            id: r.id,
            root_id: r.root_id,
            depth: r.depth,
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct RunResult {
    /// The session.
    pub session_id: SessionId,
    /// The run.
    pub run_id: RunId,
    /// Terminal status.
    pub status: RunStatus,
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// The model's last text (its answer when the run succeeded).
    pub text: String,
    /// Tokens this run's provider turns used.
    pub usage: Usage,
    /// What they cost, in micro-units of the price table's currency (0 without prices).
    pub cost_micros: u64,
    /// The limit that fired, if one did.
    pub breach: Option<RunLimitBreach>,
    /// What went wrong, for runs that did not succeed.
    pub error: Option<String>,
    /// Model turns taken.
    pub turns: u32,
    /// Tool calls executed or attempted.
    pub tool_calls: u32,
    /// For a suspended run: what it waits on, and the version to decide against.
    pub suspension: Option<Suspension>,
    /// For a run that died on a limit: what it consumed, its other limits' use, its last
    /// calls (arguments hashed).
    pub attribution: Option<arbor_protocol::RunAttribution>,
}

/// A child's suspended run, as a tool call reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct NestedSuspension {
    /// The child's run.
    pub run_id: RunId,
    /// The child's session.
    pub session_id: SessionId,
    /// What it waits on (ids of the child's run; paths from the top).
    pub pending: Vec<PendingDecision>,
}

/// What waits: the checkpoint version (a decision names it) and the pending decisions.
#[derive(Debug, Clone, PartialEq)]
pub struct Suspension {
    /// The run.
    pub run_id: RunId,
    /// The session.
    pub session_id: SessionId,
    /// The checkpoint version to decide against.
    pub version: u64,
    /// What waits, in call order.
    pub pending: Vec<PendingDecision>,
}
