//! Approvals: tool calls a run waits on, and the decisions a human makes about them.
//!
//! A run that gates its tool calls suspends before executing them and lists them as
//! [`PendingDecision`]s. A decision names one by id with a [`Verdict`]. A child's pending
//! decisions surface at its parent with ids `sub_<hex sha256("<child run>:<child id>")>` and
//! an attribution `path` of child ids, root first.

use serde::{Deserialize, Serialize};

/// One tool call waiting for a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingDecision {
    /// What a decision names (`apr_…` for the run's own calls, `sub_…` for a child's).
    pub id: String,
    /// The tool.
    pub tool: String,
    /// Its arguments, as the model wrote them.
    pub arguments: serde_json::Value,
    /// The call's id in the run that made it.
    pub call_id: String,
    /// Child ids from the top down to the run that made the call (empty: this run's own).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path: Vec<String>,
}

/// What a decision does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Run this call.
    AllowOnce,
    /// Run this call and every later call of the same tool on the same path in this run.
    AllowForRun,
    /// Do not run it; the model reads the rejection.
    RejectOnce,
    /// Reject it and every later call of the same tool on the same path in this run.
    RejectForRun,
}

impl Verdict {
    /// Whether the call runs.
    pub fn allows(self) -> bool {
        matches!(self, Self::AllowOnce | Self::AllowForRun)
    }

    /// Whether it sticks for the rest of the run.
    pub fn for_run(self) -> bool {
        matches!(self, Self::AllowForRun | Self::RejectForRun)
    }

    /// Parses the wire name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "allow_once" => Self::AllowOnce,
            "allow_for_run" => Self::AllowForRun,
            "reject_once" => Self::RejectOnce,
            "reject_for_run" => Self::RejectForRun,
            _ => return None,
        })
    }
}

/// A decision about one pending call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalDecision {
    /// The pending decision's id.
    pub id: String,
    /// What to do.
    pub verdict: Verdict,
    /// Why (shown to the model for a rejection), at most 2 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl ApprovalDecision {
    /// A decision without a reason.
    pub fn new(id: impl Into<String>, verdict: Verdict) -> Self {
        Self {
            id: id.into(),
            verdict,
            reason: None,
        }
    }
}
