//! Child policies: lifetime, report, milestone cadence and budget share.
//!
//! A child's catalog entry carries the host's ceilings and defaults; a request may only
//! narrow them: report is clamped to the ceiling, `every_turns` can only be raised, the budget
//! share takes the lower value, and session lifetime is refused unless the host enabled it.

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{CoreError, CoreResult};

/// Most turns between milestones (`milestone.every_turns`).
pub(crate) const HARD_MILESTONE_EVERY_TURNS: u32 = 64;

/// How long a child may live.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Lifetime {
    /// Linked to the caller: cancelling the caller cancels the child.
    #[default]
    Task,
    /// Detached from the caller; lives until it ends, is cancelled, or the supervisor's
    /// session ends. Only through `delegate_async`.
    Session,
}

impl Lifetime {
    /// Parses `task` or `session`.
    pub fn parse(s: &str) -> CoreResult<Self> {
        match s {
            "task" => Ok(Self::Task),
            "session" => Ok(Self::Session),
            _ => Err(CoreError::validation("lifetime must be task or session")),
        }
    }

    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Task => "task",
            Self::Session => "session",
        }
    }
}

/// How much of a child's activity is projected onto the supervisor's stream.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Report {
    /// Nothing per turn.
    #[default]
    OnComplete,
    /// `child_milestone` events.
    Milestones,
    /// Every per-turn event as `delegation_child_event`.
    Stream,
}

impl Report {
    /// Parses `on-complete`, `milestones` or `stream`.
    pub fn parse(s: &str) -> CoreResult<Self> {
        match s {
            "on-complete" => Ok(Self::OnComplete),
            "milestones" => Ok(Self::Milestones),
            "stream" => Ok(Self::Stream),
            _ => Err(CoreError::validation(
                "report must be on-complete, milestones, or stream",
            )),
        }
    }

    /// The wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::OnComplete => "on-complete",
            Self::Milestones => "milestones",
            Self::Stream => "stream",
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy as a host (catalog entry) or a request states it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyInput {
    /// Requested lifetime; on a catalog entry, `session` enables session lifetime.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifetime: Option<Lifetime>,
    /// Requested report level; on a catalog entry, the ceiling (and default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<Report>,
    /// Milestone every N turns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub every_turns: Option<u32>,
    /// Fraction in (0, 1] of the inherited run limits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget_share: Option<f64>,
}

/// The policy a delegation runs with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct EffectivePolicy {
    /// Lifetime.
    pub lifetime: Lifetime,
    /// Report level.
    pub report: Report,
    /// Milestone cadence, if any.
    pub every_turns: Option<u32>,
    /// Budget share, if any.
    pub budget_share: Option<f64>,
}

fn check_every_turns(v: Option<u32>) -> CoreResult<()> {
    match v {
        Some(n) if n == 0 || n > HARD_MILESTONE_EVERY_TURNS => Err(CoreError::validation(format!(
            "milestone.every_turns must be a positive integer at most {HARD_MILESTONE_EVERY_TURNS}"
        ))),
        _ => Ok(()),
    }
}

fn check_share(v: Option<f64>) -> CoreResult<()> {
    match v {
        Some(s) if !(s > 0.0 && s <= 1.0) => Err(CoreError::validation(
            "budget_share must be a number greater than 0 and at most 1",
        )),
        _ => Ok(()),
    }
}

impl PolicyInput {
    /// Checks the values a host gave on a catalog entry.
    pub fn validate(&self) -> CoreResult<()> {
        check_every_turns(self.every_turns)?;
        check_share(self.budget_share)
    }

    /// Narrows this (host) policy by a request. `stream_by_default` is the supervisor-wide
    /// `child_events` switch: the report ceiling of children without their own.
    pub fn narrow(
        &self,
        request: &PolicyInput,
        stream_by_default: bool,
    ) -> CoreResult<EffectivePolicy> {
        self.validate()?;
        check_every_turns(request.every_turns)?;
        check_share(request.budget_share)?;
        let fallback = if stream_by_default {
            Report::Stream
        } else {
            Report::OnComplete
        };
        let ceiling = self.report.unwrap_or(fallback);
        let requested = request.report.unwrap_or(ceiling);
        let lifetime = request.lifetime.unwrap_or(Lifetime::Task);
        if lifetime == Lifetime::Session && self.lifetime != Some(Lifetime::Session) {
            return Err(CoreError::denied(
                crate::error::DenyReason::Policy,
                "Child does not allow session lifetime".to_owned(),
            ));
        }
        let every_turns = match (self.every_turns, request.every_turns) {
            (Some(h), Some(r)) => Some(h.max(r)),
            (h, r) => h.or(r),
        };
        let budget_share = match (self.budget_share, request.budget_share) {
            (Some(h), Some(r)) => Some(h.min(r)),
            (h, r) => h.or(r),
        };
        Ok(EffectivePolicy {
            lifetime,
            report: requested.min(ceiling),
            every_turns,
            budget_share,
        })
    }
}

/// A host's milestone predicate (see [`ChildEntry::milestone_fn`](crate::supervisor::ChildEntry::milestone_fn)).
#[derive(Clone)]
pub struct MilestoneFn(pub(crate) Arc<dyn Fn(&MilestoneContext<'_>) -> bool + Send + Sync>);

impl fmt::Debug for MilestoneFn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MilestoneFn")
    }
}

/// What a milestone predicate sees: one event of a child's run.
#[derive(Debug, Clone, Copy)]
pub struct MilestoneContext<'a> {
    /// The catalog entry.
    pub child_id: &'a str,
    /// The delegation.
    pub delegation_id: &'a str,
    /// The child's current turn (0 before its first).
    pub turn: u32,
    /// The event.
    pub event: &'a arbor_protocol::AgentEvent,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_only_narrow() {
        let host = PolicyInput {
            lifetime: Some(Lifetime::Session),
            report: Some(Report::Milestones),
            every_turns: Some(2),
            budget_share: Some(0.5),
        };
        let req = PolicyInput {
            lifetime: Some(Lifetime::Session),
            report: Some(Report::Stream),
            every_turns: Some(1),
            budget_share: Some(0.8),
        };
        let p = host.narrow(&req, false).unwrap();
        assert_eq!(p.report, Report::Milestones, "clamped to the ceiling");
        assert_eq!(p.every_turns, Some(2), "can only be raised");
        assert_eq!(p.budget_share, Some(0.5), "lower value");
        assert_eq!(p.lifetime, Lifetime::Session);
        let p = host.narrow(&PolicyInput::default(), false).unwrap();
        assert_eq!(
            p.lifetime,
            Lifetime::Task,
            "the host flag is a capability, not a default"
        );
        assert_eq!(p.report, Report::Milestones);
    }

    #[test]
    fn defaults_and_fallback() {
        let none = PolicyInput::default();
        let p = none.narrow(&none, false).unwrap();
        assert_eq!(p, EffectivePolicy::default());
        let p = none.narrow(&none, true).unwrap();
        assert_eq!(p.report, Report::Stream);
        let p = none
            .narrow(
                &PolicyInput {
                    report: Some(Report::OnComplete),
                    ..PolicyInput::default()
                },
                true,
            )
            .unwrap();
        assert_eq!(p.report, Report::OnComplete, "a request can lower it");
    }

    #[test]
    fn bad_values_have_the_contract_messages() {
        let none = PolicyInput::default();
        let err = none
            .narrow(
                &PolicyInput {
                    lifetime: Some(Lifetime::Session),
                    ..none
                },
                false,
            )
            .unwrap_err();
        assert_eq!(err.to_string(), "Child does not allow session lifetime");
        assert_eq!(err.kind(), crate::CoreErrorKind::Denied);
        let err = none
            .narrow(
                &PolicyInput {
                    every_turns: Some(65),
                    ..none
                },
                false,
            )
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "milestone.every_turns must be a positive integer at most 64"
        );
        for bad in [0.0, -0.1, 1.01, f64::NAN] {
            let err = none
                .narrow(
                    &PolicyInput {
                        budget_share: Some(bad),
                        ..none
                    },
                    false,
                )
                .unwrap_err();
            assert_eq!(
                err.to_string(),
                "budget_share must be a number greater than 0 and at most 1"
            );
        }
        assert_eq!(
            Report::parse("loud").unwrap_err().to_string(),
            "report must be on-complete, milestones, or stream"
        );
        assert_eq!(
            Lifetime::parse("forever").unwrap_err().to_string(),
            "lifetime must be task or session"
        );
    }
}
