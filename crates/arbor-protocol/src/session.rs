//! Session status as the store and reports show it.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::run::RunStatus;

/// Where a session stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub enum SessionStatus {
    /// Created, no run yet.
    Idle,
    /// A run is live.
    Running,
    /// The last run succeeded.
    Succeeded,
    /// The last run failed.
    Failed,
    /// The last run was cancelled.
    Aborted,
    /// The last run waits for decisions.
    Suspended,
    /// A policy halted the last run.
    Denied,
    /// The process that ran it stopped while the run was live.
    Interrupted,
    /// Admitted and registered, waiting for a free slot (`max_active_children` was reached
    /// and its spawn asked to queue): it starts, in the order it came, when one frees.
    Queued,
}

impl SessionStatus {
    /// The status as its wire string.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Idle => "idle",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Aborted => "aborted",
            Self::Suspended => "suspended",
            Self::Denied => "denied",
            Self::Interrupted => "interrupted",
            Self::Queued => "queued",
        }
    }

    /// Parses a wire string.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "idle" => Self::Idle,
            "running" => Self::Running,
            "succeeded" => Self::Succeeded,
            "failed" => Self::Failed,
            "aborted" => Self::Aborted,
            "suspended" => Self::Suspended,
            "denied" => Self::Denied,
            "interrupted" => Self::Interrupted,
            "queued" => Self::Queued,
            _ => return None,
        })
    }

    /// True while a run is live.
    pub fn is_live(&self) -> bool {
        matches!(self, Self::Running)
    }
}

impl From<RunStatus> for SessionStatus {
    fn from(status: RunStatus) -> Self {
        match status {
            RunStatus::Succeeded => Self::Succeeded,
            RunStatus::Failed => Self::Failed,
            RunStatus::Aborted => Self::Aborted,
            RunStatus::Suspended => Self::Suspended,
            RunStatus::Denied => Self::Denied,
        }
    }
}

impl fmt::Display for SessionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_round_trips() {
        for s in [
            SessionStatus::Idle,
            SessionStatus::Running,
            SessionStatus::Succeeded,
            SessionStatus::Failed,
            SessionStatus::Aborted,
            SessionStatus::Suspended,
            SessionStatus::Denied,
            SessionStatus::Interrupted,
            SessionStatus::Queued,
        ] {
            assert_eq!(SessionStatus::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        assert_eq!(SessionStatus::parse("bogus"), None);
    }
}
