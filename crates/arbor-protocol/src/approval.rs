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
    /// The session whose run made the call (where its decision is written down); absent in
    /// records from before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<crate::SessionId>,
    /// The run that made the call; absent in records from before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<crate::RunId>,
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

    /// The wire name (`allow_once`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AllowOnce => "allow_once",
            Self::AllowForRun => "allow_for_run",
            Self::RejectOnce => "reject_once",
            Self::RejectForRun => "reject_for_run",
        }
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
    /// Who took it and when: set when it is recorded (the decider names who, the record
    /// names when); what a conflicting later decision is told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<DecidedBy>,
}

impl ApprovalDecision {
    /// A decision without a reason.
    pub fn new(id: impl Into<String>, verdict: Verdict) -> Self {
        Self {
            id: id.into(),
            verdict,
            reason: None,
            decided_by: None,
        }
    }

    /// With a reason.
    pub fn with_reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }
}

/// Who decided a call, and when. The tenant is the one the deciding surface serves (the
/// service's tenant of the bearer token, the CLI's local one); `by` names the person or
/// program as that surface knows it (the request's `by`, the OS user, `mcp`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DecidedBy {
    /// The tenant it was decided under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
    /// Who decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// When (ms since the epoch; 0 until recorded).
    #[serde(default)]
    pub at: crate::Timestamp,
}

impl DecidedBy {
    /// Someone of `tenant`.
    pub fn new(tenant: Option<String>, by: Option<String>) -> Self {
        Self {
            tenant,
            by,
            at: crate::Timestamp(0),
        }
    }

    /// "alice (tenant acme)", "tenant acme", "someone".
    pub fn who(&self) -> String {
        match (&self.by, &self.tenant) {
            (Some(by), Some(t)) => format!("{by} (tenant {t})"),
            (Some(by), None) => by.clone(),
            (None, Some(t)) => format!("tenant {t}"),
            (None, None) => "someone".to_owned(),
        }
    }
}
