//! Durable approvals: the checkpoint of a suspended run, and the decisions on it.
//!
//! A run that gates its tool calls (`interrupt_before_tool`) stops before executing a turn's
//! calls and writes a [`RunCheckpoint`] (store namespace [`RUN_NAMESPACE`], key = run id):
//! where the run stood, and every call of the turn with its state (pending, decided, done,
//! or waiting on a child's own suspended run). Decisions are written to the checkpoint
//! compare-and-swap ([`decide`]): a batch applies whole or not at all, against the version the
//! decider saw; deciding some calls leaves the rest pending. [`Session::resume`] then runs
//! what was decided and either goes on or suspends again with what is left. A process that
//! did not run the session can list ([`suspension`]) and decide; resuming needs the agent.
//!
//! Ids: `apr_<hex sha256("<run>:<call>")>` for the run's own calls;
//! `sub_<hex sha256("<child run>:<child decision id>")>` for a child's, which also carry the
//! child path (root first, at most [`MAX_PATH`] deep). An unknown, foreign or forged id gets
//! one error that does not echo it.
//!
//! [`Session::resume`]: crate::Session::resume

pub use crate::outcome::Suspension;

pub mod question;
pub mod review;
pub mod standing;
mod stored;

use std::collections::HashSet;
pub(crate) use stored::put;
pub use stored::{checkpoints_of, decide, load, save, suspension, suspensions};

use arbor_protocol::{
    ApprovalDecision, DecidedBy, PendingDecision, RunId, RunLimits, SessionId, ToolCall,
    ToolResult, Usage, Verdict,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{CoreError, CoreResult, LimitInfo};

/// The store namespace of run checkpoints.
pub const RUN_NAMESPACE: &str = "run";
/// Calls pending in one suspension, by default.
pub const MAX_PENDING: usize = 32;
/// Run-wide (`*_for_run`) decisions kept in one run, by default.
pub const MAX_STICKY: usize = 64;
/// The most pending calls an agent may be configured to allow.
pub const HARD_MAX_PENDING: usize = 128;
/// The most run-wide decisions an agent may be configured to keep.
pub const HARD_MAX_STICKY: usize = 256;

/// How many decisions a run may wait on at once (its own calls and its children's, as the
/// root sees them) and how many run-wide decisions it keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalCaps {
    /// Pending decisions in one suspension (default 32, at most 128).
    pub max_pending: usize,
    /// Run-wide decisions kept (default 64, at most 256).
    pub max_sticky: usize,
}

impl ApprovalCaps {
    /// 32 pending, 64 run-wide.
    pub const DEFAULT: ApprovalCaps = ApprovalCaps {
        max_pending: MAX_PENDING,
        max_sticky: MAX_STICKY,
    };
    /// 128 pending, 256 run-wide: the most a configuration may ask for.
    pub const HARD: ApprovalCaps = ApprovalCaps {
        max_pending: HARD_MAX_PENDING,
        max_sticky: HARD_MAX_STICKY,
    };

    /// Checks each cap is at least 1 and at most its hard cap.
    pub fn validate(&self) -> CoreResult<()> {
        for (name, value, hard) in [
            ("max_pending_approvals", self.max_pending, HARD_MAX_PENDING),
            ("max_sticky_decisions", self.max_sticky, HARD_MAX_STICKY),
        ] {
            if value < 1 || value > hard {
                return Err(CoreError::validation(format!(
                    "{name} must be a positive integer at most {hard}"
                )));
            }
        }
        Ok(())
    }
}

impl Default for ApprovalCaps {
    fn default() -> Self {
        Self::DEFAULT
    }
}
/// Bytes of a decision's reason.
pub const MAX_REASON_BYTES: usize = 2048;
/// Depth of an attribution path.
pub const MAX_PATH: usize = 8;

/// The state of one call of the suspended turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum CallState {
    /// Waiting for a decision.
    Pending,
    /// Decided, not run yet.
    Decided {
        /// The decision.
        verdict: Verdict,
        /// Its reason.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// Who decided, and when (absent for a run-wide decision applied by itself, and in
        /// records from before it was kept).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decided_by: Option<DecidedBy>,
    },
    /// Running (or resuming a child) as this state was stored: a resume that finds it here
    /// was cut off mid-call (a crash, a cancel, a timeout) and never runs it again; the
    /// model is told it was interrupted. Stored before the call starts, so an approved call
    /// runs at most once whatever happens to the resume.
    InFlight {
        /// When it started (ms since the epoch).
        since_ms: u64,
        /// For a call resuming its suspended child: that child's run and session, so an
        /// interrupted resume can close the child's suspension too.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        child: Option<(RunId, SessionId)>,
    },
    /// Finished: its result goes into the transcript when the turn completes.
    Done {
        /// The result.
        result: ToolResult,
    },
    /// It delegated, and the child's run suspended: the child's pending decisions surface
    /// here, and decisions on them resume the child.
    Nested {
        /// The child's run.
        run_id: RunId,
        /// The child's session.
        session_id: SessionId,
        /// The child's pending decisions, with their ids in the child's run.
        pending: Vec<PendingDecision>,
        /// Decisions taken on them, not yet passed to the child.
        #[serde(default)]
        decisions: Vec<ApprovalDecision>,
    },
}

/// One call of the suspended turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallSlot {
    /// The call.
    pub call: ToolCall,
    /// Its id as a pending decision.
    pub approval_id: String,
    /// Where it stands.
    pub state: CallState,
}

/// A run-wide decision: later calls of `tool` on `path` get the same verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sticky {
    /// The tool.
    pub tool: String,
    /// The attribution path it holds for (empty: the run's own calls).
    pub path: Vec<String>,
    /// Allow (or reject).
    pub allow: bool,
}

/// A suspended run, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunCheckpoint {
    /// The session.
    pub session_id: SessionId,
    /// The run.
    pub run_id: RunId,
    /// The turn whose calls wait.
    pub turn: u32,
    /// Turns taken so far.
    pub turns: u32,
    /// Tool calls counted so far.
    pub tool_calls: u32,
    /// The run's usage so far.
    pub usage: Usage,
    /// The model's last text.
    pub text: String,
    /// The run's limits.
    pub limits: RunLimits,
    /// When the run started (ms since the epoch), for its timeout.
    #[serde(default)]
    pub started_ms: u64,
    /// The turn's calls, in order.
    pub calls: Vec<CallSlot>,
    /// Run-wide decisions so far.
    #[serde(default)]
    pub sticky: Vec<Sticky>,
    /// Set while a resume is running the decided calls (ms since the epoch): another resume
    /// or a decision is refused meanwhile, so a call runs once. A claim older than the run's
    /// timeout is a dead resumer's and is taken over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_at_ms: Option<u64>,
    /// The process holding the claim: a claim whose process is gone (same host) is taken
    /// over at once, not only once it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_by: Option<crate::process::lease::ProcessId>,
    /// The caps the run was configured with.
    #[serde(default)]
    pub caps: ApprovalCaps,
    /// The W3C `traceparent` of the attempt that suspended, when a trace exporter is
    /// installed ([`crate::process::telemetry::set_trace_context`]): the resumed attempt, in whatever
    /// process, joins that trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
}

fn hex_sha256(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The id of a run's own call as a pending decision.
pub fn own_id(run: RunId, call_id: &str) -> String {
    format!("apr_{}", hex_sha256(&format!("{run}:{call_id}")))
}

/// The id a child's pending decision has at its parent.
pub fn nested_id(child_run: RunId, child_decision: &str) -> String {
    format!(
        "sub_{}",
        hex_sha256(&format!("{child_run}:{child_decision}"))
    )
}

/// The error for an unknown, foreign, forged or already decided id (it is not echoed).
pub fn unknown_approval() -> CoreError {
    CoreError::denied(
        crate::error::DenyReason::Unknown,
        "Unknown approval".to_owned(),
    )
}

impl RunCheckpoint {
    /// What waits for a decision, in call order; a child's decisions with their ids here.
    pub fn pending(&self) -> Vec<PendingDecision> {
        let mut out = Vec::new();
        for slot in &self.calls {
            match &slot.state {
                CallState::Pending => out.push(PendingDecision {
                    id: slot.approval_id.clone(),
                    tool: slot.call.name.clone(),
                    arguments: slot.call.arguments.clone(),
                    call_id: slot.call.id.clone(),
                    path: Vec::new(),
                    session_id: Some(self.session_id),
                    run_id: Some(self.run_id),
                }),
                CallState::Nested {
                    run_id,
                    session_id,
                    pending,
                    decisions,
                } => {
                    for p in pending
                        .iter()
                        .filter(|p| !decisions.iter().any(|d| d.id == p.id))
                    {
                        out.push(PendingDecision {
                            id: nested_id(*run_id, &p.id),
                            // A record from before the maker was kept: the child's own
                            // calls are the child's.
                            session_id: p
                                .session_id
                                .or_else(|| p.id.starts_with("apr_").then_some(*session_id)),
                            run_id: p
                                .run_id
                                .or_else(|| p.id.starts_with("apr_").then_some(*run_id)),
                            ..p.clone()
                        });
                    }
                }
                CallState::Decided { .. } | CallState::InFlight { .. } | CallState::Done { .. } => {
                }
            }
        }
        out
    }

    /// Whether every call is done.
    pub fn settled(&self) -> bool {
        self.calls
            .iter()
            .all(|s| matches!(s.state, CallState::Done { .. }))
    }

    /// Applies run-wide decisions to what is pending (own calls only: a child's calls carry
    /// their own stickies). Returns whether anything changed.
    pub fn apply_sticky(&mut self) -> bool {
        let mut changed = false;
        for slot in &mut self.calls {
            if slot.state != CallState::Pending {
                continue;
            }
            // A question is answered by a person, never by a rule.
            if slot.call.name == crate::approval::question::ASK_HUMAN {
                continue;
            }
            if let Some(s) = self
                .sticky
                .iter()
                .find(|s| s.path.is_empty() && s.tool == slot.call.name)
            {
                slot.state = CallState::Decided {
                    verdict: if s.allow {
                        Verdict::AllowOnce
                    } else {
                        Verdict::RejectOnce
                    },
                    reason: Some("decided for the whole run".to_owned()),
                    decided_by: None,
                };
                changed = true;
            }
        }
        changed
    }

    /// Whether a live resume holds it at `now_ms`: claimed less than the run's timeout ago
    /// by a process not known to be dead.
    pub fn claimed(&self, now_ms: u64) -> bool {
        let dead = self.claimed_by.as_ref().is_some_and(|p| p.is_dead());
        !dead
            && self
                .claimed_at_ms
                .is_some_and(|at| now_ms.saturating_sub(at) < self.limits.timeout_ms)
    }

    /// Takes the claim for this process at `now_ms`.
    pub(crate) fn claim(&mut self, now_ms: u64) {
        self.claimed_at_ms = Some(now_ms);
        self.claimed_by = Some(crate::process::lease::ProcessId::current());
    }

    /// Lets go of the claim.
    pub(crate) fn release(&mut self) {
        self.claimed_at_ms = None;
        self.claimed_by = None;
    }

    /// Applies a batch of decisions: every check first, then all of it.
    pub fn decide(&mut self, decisions: &[ApprovalDecision]) -> CoreResult<()> {
        if decisions.is_empty() {
            return Err(CoreError::validation("no decisions given"));
        }
        // One decision per call: a call decided already is refused naming its decision,
        // even while a resume runs it.
        let pending = self.pending();
        for d in decisions {
            if !pending.iter().any(|p| p.id == d.id)
                && let Some(first) = self.decided(&d.id)
            {
                return Err(already_decided(&first));
            }
        }
        if self.claimed(arbor_protocol::Timestamp::now().0) {
            return Err(being_resumed());
        }
        check_batch(decisions)?;
        let mut sticky = self.sticky.clone();
        for d in decisions {
            let p = pending
                .iter()
                .find(|p| p.id == d.id)
                .ok_or_else(unknown_approval)?;
            // A question takes an answer (or a decline), once.
            question::check_decision(p, d)?;
            if d.verdict.for_run() {
                let rule = Sticky {
                    tool: p.tool.clone(),
                    path: p.path.clone(),
                    allow: d.verdict.allows(),
                };
                if !sticky.contains(&rule) {
                    sticky.push(rule);
                }
            }
        }
        let max_sticky = self.caps.max_sticky;
        if sticky.len() > max_sticky {
            return Err(CoreError::limit_error(
                format!("a run keeps at most {max_sticky} run-wide decisions"),
                Some(LimitInfo {
                    limit: arbor_protocol::LimitKind::MaxStickyDecisions,
                    maximum: max_sticky as u64,
                    observed: sticky.len() as u64,
                }),
            ));
        }
        // All checked: apply, each stamped with who and when.
        self.sticky = sticky;
        let now = arbor_protocol::Timestamp::now();
        for d in decisions {
            // A decision passed down from an ancestor keeps when it was taken there.
            let by = d.decided_by.clone().unwrap_or_default();
            let d = &ApprovalDecision {
                decided_by: Some(DecidedBy {
                    at: if by.at.0 > 0 { by.at } else { now },
                    ..by
                }),
                ..d.clone()
            };
            for slot in &mut self.calls {
                match &mut slot.state {
                    CallState::Pending if slot.approval_id == d.id => {
                        slot.state = CallState::Decided {
                            verdict: d.verdict,
                            reason: d.reason.clone(),
                            decided_by: d.decided_by.clone(),
                        };
                    }
                    CallState::Nested {
                        run_id,
                        pending,
                        decisions: taken,
                        ..
                    } => {
                        if let Some(p) = pending.iter().find(|p| nested_id(*run_id, &p.id) == d.id)
                        {
                            taken.push(ApprovalDecision {
                                id: p.id.clone(),
                                ..d.clone()
                            });
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

impl RunCheckpoint {
    /// The decision already taken on the call `id` names here (its own call, or a child's
    /// through its `sub_…` id), if one was: what a second decision is refused with.
    pub fn decided(&self, id: &str) -> Option<ApprovalDecision> {
        self.calls.iter().find_map(|slot| match &slot.state {
            CallState::Decided {
                verdict,
                reason,
                decided_by,
            } if slot.approval_id == id => Some(ApprovalDecision {
                id: id.to_owned(),
                verdict: *verdict,
                reason: reason.clone(),
                decided_by: decided_by.clone(),
            }),
            CallState::Nested {
                run_id, decisions, ..
            } => decisions
                .iter()
                .find(|d| nested_id(*run_id, &d.id) == id)
                .map(|d| ApprovalDecision {
                    id: id.to_owned(),
                    ..d.clone()
                }),
            _ => None,
        })
    }
}

/// Each call once in a batch, each reason within [`MAX_REASON_BYTES`].
fn check_batch(decisions: &[ApprovalDecision]) -> CoreResult<()> {
    let mut seen = HashSet::new();
    for d in decisions {
        if !seen.insert(d.id.as_str()) {
            return Err(CoreError::validation("a batch decides one approval twice"));
        }
        if d.reason
            .as_ref()
            .is_some_and(|r| r.len() > MAX_REASON_BYTES)
        {
            return Err(CoreError::limit_error(
                format!("a decision's reason exceeds {MAX_REASON_BYTES} bytes"),
                Some(LimitInfo {
                    limit: arbor_protocol::LimitKind::MaxReasonBytes,
                    maximum: MAX_REASON_BYTES as u64,
                    observed: d.reason.as_ref().map_or(0, |r| r.len() as u64),
                }),
            ));
        }
    }
    Ok(())
}

/// The refusal of a second decision on a call: it names the first (what, who, when, why).
pub fn already_decided(first: &ApprovalDecision) -> CoreError {
    let mut message = format!("This call was already decided: {}", first.verdict.as_str());
    if let Some(by) = &first.decided_by {
        message.push_str(&format!(" by {}", by.who()));
        if by.at.0 > 0 {
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(by.at.0);
            message.push_str(&format!(" on {}", httpdate::fmt_http_date(at)));
        }
    }
    if let Some(reason) = &first.reason {
        message.push_str(&format!(" ({reason})"));
    }
    message.push_str("; a call is decided once");
    CoreError::denied(crate::error::DenyReason::Decided, message)
}

/// Refuses attribution paths deeper than [`MAX_PATH`].
pub(crate) fn check_paths(pending: &[PendingDecision]) -> CoreResult<()> {
    match pending.iter().find(|p| p.path.len() > MAX_PATH) {
        Some(deep) => Err(CoreError::limit_error(
            format!("Attribution path exceeds {MAX_PATH} entries"),
            Some(LimitInfo {
                limit: arbor_protocol::LimitKind::MaxAttributionPath,
                maximum: MAX_PATH as u64,
                observed: deep.path.len() as u64,
            }),
        )),
        None => Ok(()),
    }
}

/// The result a call caught in flight gets: it is never run again.
pub(crate) fn interrupted(call: &ToolCall) -> ToolResult {
    ToolResult {
        call_id: call.id.clone(),
        name: call.name.clone(),
        content: "interrupted: this call was in flight when its run stopped (a crash, a \
                  cancel or a timeout); it was not run again, and it may or may not have \
                  taken effect"
            .to_owned(),
        is_error: true,
    }
}

/// The error while another resume holds the run.
pub fn being_resumed() -> CoreError {
    CoreError::Conflict("the run is being resumed; decide again once it suspends".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(depth: usize) -> PendingDecision {
        PendingDecision {
            id: "sub_x".into(),
            tool: "write".into(),
            arguments: serde_json::json!({}),
            call_id: "c".into(),
            path: (0..depth).map(|i| format!("c{i}")).collect(),
            session_id: None,
            run_id: None,
        }
    }

    #[test]
    fn paths_deeper_than_eight_are_refused() {
        check_paths(&[pending(8)]).unwrap();
        let e = check_paths(&[pending(8), pending(9)]).unwrap_err();
        assert_eq!(e.to_string(), "Attribution path exceeds 8 entries");
        assert_eq!(e.limit().map(|l| (l.maximum, l.observed)), Some((8, 9)));
    }

    #[test]
    fn ids_are_sha256_hex_of_run_and_call() {
        let run: RunId = "01a238b5-0000-7000-8000-000000000001".parse().unwrap();
        let id = own_id(run, "c1");
        assert_eq!(id.len(), 4 + 64);
        assert_eq!(id, own_id(run, "c1"));
        assert_ne!(id, own_id(run, "c2"));
        assert_eq!(
            nested_id(run, "apr_1"),
            format!("sub_{}", hex_sha256(&format!("{run}:apr_1")))
        );
    }
}
