//! The seams between a run and what it delegated: where a run's loop starts ([`Turns`]), and
//! the [`NestedResumer`] a supervisor implements so a parent's resume can resume its
//! suspended children ([`NestedOutcome`]). Both the run loop and the approval gate use them.

use std::fmt;

use arbor_protocol::{ApprovalDecision, PendingDecision, RunId, SessionId};
use async_trait::async_trait;

use crate::approval::RunCheckpoint;
use crate::error::CoreResult;

/// Where the loop starts.
#[derive(Debug)]
pub(crate) enum Turns {
    /// With a new provider turn.
    Next,
    /// With the calls of a suspended turn.
    Resume(Box<RunCheckpoint>),
    /// Nowhere: the conversation already ends with the model's answer (an interrupted run
    /// that had finished its last turn but not recorded its end).
    Answered,
    /// With the calls a crash cut off in turn `turn`, settled as a continuation found them
    /// (answered, interrupted, or waiting on a child that suspended when it was rejoined):
    /// the run waits with that child, as its suspended turn would have.
    Rejoined {
        /// The cut-off turn.
        turn: u32,
        /// Its calls that had no result, in order, and where each stands.
        calls: Vec<(arbor_protocol::ToolCall, crate::approval::CallState)>,
    },
}

/// How a child's resumed run ended, for the parent call that waits on it.
#[derive(Debug, Clone, PartialEq)]
pub enum NestedOutcome {
    /// It answered: the parent's call gets this text as its result.
    Completed(String),
    /// It ended without an answer (failed, denied, rejected): the call gets this error.
    Failed(String),
    /// It suspended again on these decisions (ids of its run, paths from the top).
    Suspended(Vec<PendingDecision>),
}

/// Resumes a delegated run with decisions taken at its parent (a supervisor does).
#[async_trait]
pub trait NestedResumer: fmt::Debug + Send + Sync {
    /// Passes `decisions` to the suspended child run `run_id` and resumes it.
    async fn resume_nested(
        &self,
        run_id: RunId,
        session_id: SessionId,
        decisions: Vec<ApprovalDecision>,
    ) -> CoreResult<NestedOutcome>;

    /// Why the suspended child run `run_id` can no longer be resumed (it was deleted), if
    /// so: the parent's call then fails with this text and the parent goes on. The default
    /// knows of no such case.
    async fn nested_gone(
        &self,
        run_id: RunId,
        session_id: SessionId,
    ) -> CoreResult<Option<String>> {
        let _ = (run_id, session_id);
        Ok(None)
    }

    /// A run of `session` is continued after its process died, and its call `call_id` (of
    /// tool `tool`, in run `run`) has no result: if that call started a child that ran (or
    /// runs) elsewhere, wait for it and say how it ended, so the call is answered rather than
    /// reported interrupted. `None` (the default) when there is no such child. A child that
    /// suspended meanwhile (continued here, it asked a question) is
    /// [`CoreError::Suspended`](crate::CoreError::Suspended): the call waits with it.
    async fn rejoin(
        &self,
        session: SessionId,
        run: RunId,
        call_id: &str,
        tool: &str,
        cancel: &tokio_util::sync::CancellationToken,
    ) -> CoreResult<Option<NestedOutcome>> {
        let _ = (session, run, call_id, tool, cancel);
        Ok(None)
    }

    /// The parent's run ended without resuming the suspended child run `run_id` (it was
    /// cancelled, timed out or failed): the child's suspension is closed, never resumed. The
    /// default does nothing.
    async fn abandon_nested(&self, run_id: RunId, session_id: SessionId) {
        let _ = (run_id, session_id);
    }
}
