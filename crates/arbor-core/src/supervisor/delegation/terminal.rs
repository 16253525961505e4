//! The terminal report of a delegation: counters settled, terminal events published and the
//! `after` hook run, exactly once per delegation, whichever way it ended.

use arbor_protocol::{ChildOrigin, RunStatus, SessionStatus, SupervisorEvent};
use arbor_store::SessionUpdate;
use futures::FutureExt;
use std::panic::AssertUnwindSafe;

use crate::error::{CoreError, CoreResult, LimitError, LimitInfo};
use crate::outcome::RunResult;
use crate::session::dispatch::panic_message;
use crate::supervisor::config::hooks::{Completion, CompletionStatus};
use crate::supervisor::delegation::admitted::{Admitted, Worked};
use crate::supervisor::delegation::register::session_of;
use crate::supervisor::request::DelegationResult;
use crate::supervisor::runtime::Supervisor;
use crate::supervisor::tree::summary::Outcome;

fn limit_label(limit: arbor_protocol::LimitKind) -> &'static str {
    match limit {
        arbor_protocol::LimitKind::MaxTokens => "token",
        arbor_protocol::LimitKind::MaxToolCalls => "tool-call",
        arbor_protocol::LimitKind::TimeoutMs => "timeout",
        arbor_protocol::LimitKind::MaxSteps => "run",
        _ => "run",
    }
}

/// The error of a delegation past its timeout.
fn timeout_error(a: &Admitted) -> CoreError {
    CoreError::limit_error(
        "Delegation timeout exceeded",
        Some(LimitInfo {
            limit: arbor_protocol::LimitKind::TimeoutMs,
            maximum: a.terms.limits.timeout_ms,
            observed: a.terms.limits.timeout_ms,
        }),
    )
}

impl Supervisor {
    /// Settles the counters, publishes the terminal events and runs the `after` hook, exactly
    /// once per delegation.
    pub(crate) async fn terminal(
        &self,
        a: &Admitted,
        origin: &ChildOrigin,
        worked: Worked,
        timed_out: bool,
        host_aborted: bool,
    ) -> CoreResult<DelegationResult> {
        if let Some(waiting) = self
            .still_suspended(a, &worked, timed_out, host_aborted)
            .await
        {
            return Err(waiting);
        }
        self.settle_idle_status(a, &worked, host_aborted).await;
        match worked {
            Worked::Rejected(reason) => {
                self.publish(SupervisorEvent::DelegationRejected {
                    origin: origin.clone(),
                    reason: reason.clone(),
                });
                // The hook learns why (redacted already).
                self.after(
                    a,
                    CompletionStatus::Rejected,
                    String::new(),
                    None,
                    Some(reason.clone()),
                    origin,
                )
                .await;
                self.state()
                    .summary
                    .settle(&a.terms.delegation_id, Outcome::Rejected, false);
                Err(CoreError::denied(crate::error::DenyReason::Hook, reason))
            }
            Worked::Ran {
                session_id,
                name,
                result,
            } if matches!(result.status, RunStatus::Succeeded | RunStatus::Denied) => {
                let (outcome, status) = if result.status == RunStatus::Succeeded {
                    (Outcome::Succeeded, CompletionStatus::Succeeded)
                } else {
                    (Outcome::Denied, CompletionStatus::Denied)
                };
                self.state()
                    .summary
                    .settle(&a.terms.delegation_id, outcome, false);
                self.publish(SupervisorEvent::DelegationFinished {
                    origin: origin.clone(),
                    status: result.status,
                    total_tokens: result.usage.total_tokens,
                });
                let error = result.error.as_deref().map(|e| self.redact(e));
                self.after(
                    a,
                    status,
                    self.redact(&result.text),
                    Some(result.usage),
                    error,
                    origin,
                )
                .await;
                let output = a
                    .record
                    .as_ref()
                    .and_then(|r| crate::output::value_of(&r.meta, &result));
                Ok(DelegationResult {
                    delegation_id: a.terms.delegation_id.clone(),
                    child_id: a.terms.child_id.clone(),
                    session_id,
                    name,
                    output,
                    result: *result,
                })
            }
            Worked::Ran { result, .. } => {
                let result = *result;
                let error = self.run_error(a, &result, timed_out, host_aborted);
                let failure = !host_aborted && result.status != RunStatus::Aborted || timed_out;
                self.fail(a, origin, error, failure, Some(&result)).await
            }
            Worked::Error(e) => {
                let e = if timed_out { timeout_error(a) } else { e };
                let failure = !host_aborted && !matches!(e, CoreError::Denied { .. }) || timed_out;
                self.fail(a, origin, e, failure, None).await
            }
        }
    }

    /// The error of a delegation that is not terminal: its child suspended (no counter
    /// settles, no event, no hook; the caller learns what it waits on), or it could not be
    /// rebuilt for its resume (its factory failed, say) and stays suspended, its decisions
    /// kept for a later resume. `None` for a terminal delegation.
    async fn still_suspended(
        &self,
        a: &Admitted,
        worked: &Worked,
        timed_out: bool,
        host_aborted: bool,
    ) -> Option<CoreError> {
        if let Worked::Ran {
            session_id, result, ..
        } = worked
            && result.status == RunStatus::Suspended
        {
            let pending = result
                .suspension
                .as_ref()
                .map(|s| s.pending.clone())
                .unwrap_or_default();
            self.state().summary.suspend(&a.terms.delegation_id);
            return Some(self.suspended(a, result.run_id, *session_id, pending).await);
        }
        if a.control.start.resumed_run().is_some()
            && !timed_out
            && !host_aborted
            && let Worked::Error(e) = worked
        {
            self.state().summary.suspend(&a.terms.delegation_id);
            if let Some(id) = session_of(a) {
                let back = SessionUpdate::status(SessionStatus::Suspended);
                if let Err(e) = self.live().store().update_session(id, &back).await {
                    tracing::warn!(session = %id, error = %e, "could not mark the child suspended again");
                }
            }
            return Some(self.redact_error(e.clone()));
        }
        None
    }

    /// A delegation that ended before its child's run began leaves the record idle: give it
    /// the terminal status the registry shows (a run writes its own).
    async fn settle_idle_status(&self, a: &Admitted, worked: &Worked, host_aborted: bool) {
        let status = match worked {
            Worked::Rejected(_) => SessionStatus::Denied,
            Worked::Error(_) if host_aborted => SessionStatus::Aborted,
            Worked::Error(_) => SessionStatus::Failed,
            Worked::Ran { .. } => return,
        };
        if let Some(id) = session_of(a) {
            let settle = SessionUpdate::status(status);
            if let Err(e) = self.live().store().update_session(id, &settle).await {
                tracing::warn!(session = %id, error = %e, "could not record the delegation's status");
            }
        }
    }

    /// The error of a child's run that ended neither succeeded nor denied: timed out,
    /// cancelled, past a limit, or failed.
    fn run_error(
        &self,
        a: &Admitted,
        result: &RunResult,
        timed_out: bool,
        host_aborted: bool,
    ) -> CoreError {
        if timed_out {
            attach(timeout_error(a), result)
        } else if host_aborted || result.status == RunStatus::Aborted {
            CoreError::Run {
                message: self.cancel_message(a),
                result: Box::new(result.clone()),
            }
        } else if let Some(breach) = result.breach {
            CoreError::Limit(Box::new(LimitError {
                message: format!("Delegation {} limit exceeded", limit_label(breach.limit)),
                info: Some(LimitInfo {
                    limit: breach.limit,
                    maximum: breach.maximum,
                    observed: breach.observed,
                }),
                result: Some(Box::new(result.clone())),
            }))
        } else {
            CoreError::Run {
                message: result
                    .error
                    .clone()
                    .unwrap_or_else(|| "Agent run failed".into()),
                result: Box::new(result.clone()),
            }
        }
    }

    /// The error of a host-aborted delegation: `Closed` for the session's end (no other
    /// reason given), else `Cancelled`, with [`cancel_message`](Self::cancel_message).
    pub(crate) fn cancel_error(&self, a: &Admitted) -> CoreError {
        let message = self.cancel_message(a);
        if a.control.reason.get().is_none() && self.live().session_token().is_cancelled() {
            CoreError::Closed(message)
        } else {
            CoreError::Cancelled(message)
        }
    }

    /// Why a host-aborted delegation ended: an explicit reason, else the session's end, else
    /// a cancelled caller or ancestor.
    pub(crate) fn cancel_message(&self, a: &Admitted) -> String {
        let reason =
            a.control
                .reason
                .get()
                .unwrap_or(if self.live().session_token().is_cancelled() {
                    "Supervisor session has ended"
                } else {
                    "Delegation cancelled"
                });
        match a.control.reason.detail() {
            Some(detail) => self.redact(&format!("{reason}: {detail}")),
            None => reason.to_owned(),
        }
    }

    async fn fail(
        &self,
        a: &Admitted,
        origin: &ChildOrigin,
        error: CoreError,
        failure: bool,
        result: Option<&RunResult>,
    ) -> CoreResult<DelegationResult> {
        let message = self.redact(&error.to_string());
        let outcome = if failure {
            Outcome::Failed
        } else {
            Outcome::Aborted
        };
        self.state()
            .summary
            .settle(&a.terms.delegation_id, outcome, failure);
        if failure {
            // On a limit death only, as the contract says.
            let attribution = result.and_then(|r| r.attribution.as_ref());
            self.publish(SupervisorEvent::ChildFailed {
                origin: origin.clone(),
                reason: message.clone(),
                status: result.map(|r| r.status),
                limit: result.and_then(|r| r.breach),
                stop_reason: result.map(|r| r.stop_reason),
                usage: result.map(|r| r.usage),
                consumed: attribution.map(|a| a.consumed),
                closest_other_axes: attribution.map(|a| a.closest_other_axes.clone()),
                recent_tool_calls: attribution.map(|a| a.recent_tool_calls.clone()),
            });
        }
        self.publish(SupervisorEvent::DelegationError {
            origin: origin.clone(),
            error: message.clone(),
        });
        let status = if failure {
            CompletionStatus::Failed
        } else if matches!(error, CoreError::Denied { .. }) {
            CompletionStatus::Rejected
        } else {
            CompletionStatus::Aborted
        };
        let text = result.map(|r| self.redact(&r.text)).unwrap_or_default();
        self.after(
            a,
            status,
            text,
            result.map(|r| r.usage),
            Some(message),
            origin,
        )
        .await;
        Err(self.redact_error(error))
    }

    /// The error with its message redacted: errors are logged and passed to parent models,
    /// so a child's secret must not ride out in one. (A child result attached to it keeps
    /// the child's own text, for the host.)
    pub(crate) fn redact_error(&self, error: CoreError) -> CoreError {
        if self.settings().redactor().is_none() {
            return error;
        }
        match error {
            CoreError::Validation(m) => CoreError::Validation(self.redact(&m)),
            CoreError::Denied { reason, message } => CoreError::Denied {
                reason,
                message: self.redact(&message),
            },
            CoreError::Supervisor(m) => CoreError::Supervisor(self.redact(&m)),
            CoreError::Invalid { field, message } => CoreError::Invalid {
                field,
                message: self.redact(&message),
            },
            CoreError::Conflict(m) => CoreError::Conflict(self.redact(&m)),
            CoreError::Cancelled(m) => CoreError::Cancelled(self.redact(&m)),
            CoreError::Closed(m) => CoreError::Closed(self.redact(&m)),
            CoreError::Run { message, result } => CoreError::Run {
                message: self.redact(&message),
                result,
            },
            CoreError::Limit(mut e) => {
                e.message = self.redact(&e.message);
                CoreError::Limit(e)
            }
            other => other,
        }
    }

    async fn after(
        &self,
        a: &Admitted,
        status: CompletionStatus,
        text: String,
        usage: Option<arbor_protocol::Usage>,
        error: Option<String>,
        origin: &ChildOrigin,
    ) {
        let Some(hook) = &self.settings().after() else {
            return;
        };
        let completion = Completion {
            child_id: a.terms.child_id.clone(),
            delegation_id: a.terms.delegation_id.clone(),
            depth: a.terms.depth,
            status,
            text,
            usage,
            error,
        };
        let limit = self.settings().after_timeout();
        let ran = tokio::time::timeout(
            limit,
            AssertUnwindSafe(hook.after(&completion)).catch_unwind(),
        );
        let failed = match ran.await {
            Ok(Ok(Ok(()))) => None,
            Ok(Ok(Err(e))) => Some(e.message),
            Ok(Err(p)) => Some(format!("after hook panicked: {}", panic_message(&*p))),
            Err(_) => Some(format!(
                "after hook timed out after {} ms",
                limit.as_millis()
            )),
        };
        if let Some(message) = failed {
            self.publish(SupervisorEvent::DelegationError {
                origin: origin.clone(),
                error: self.redact(&message),
            });
        }
    }
}

fn attach(error: CoreError, result: &RunResult) -> CoreError {
    match error {
        CoreError::Limit(mut e) => {
            e.result = Some(Box::new(result.clone()));
            CoreError::Limit(e)
        }
        other => other,
    }
}
