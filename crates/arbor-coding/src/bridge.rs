//! The lifecycle bridge: supervisor events as a host timeline's `subagent_started` and
//! `subagent_stopped`, with opt-in failure details and recovery counters.
//!
//! [`LifecycleBridge`] is the pure mapping; [`observe`] runs it over a supervisor's
//! subscription and hands each event to a callback until stopped.

use std::collections::VecDeque;

use arbor_core::supervisor::{ChildSummary, Supervisor};
use arbor_protocol::{RunStatus, StopReason, SupervisorEvent};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

/// Failures kept waiting for their delegation's end.
pub const MAX_PENDING_FAILURES: usize = 64;
/// UTF-8 bytes of a failure reason kept.
pub const MAX_REASON_BYTES: usize = 1024;

/// How a child stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopStatus {
    /// It answered.
    Succeeded,
    /// It died on an error or a limit.
    Failed,
    /// A policy or the `before` hook refused it.
    Denied,
    /// It was cancelled.
    Aborted,
}

/// Why a child failed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Failure {
    /// The reason, at most 1 KiB (cut on a character boundary).
    pub reason: String,
    /// The run limit that fired, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
    /// The run's stop reason, when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
}

/// One timeline event.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LifecycleEvent {
    /// A delegation started.
    SubagentStarted {
        /// The catalog entry (redacted).
        child_id: String,
        /// The delegation (redacted).
        delegation_id: String,
        /// Its depth.
        depth: u32,
    },
    /// A delegation ended.
    SubagentStopped {
        /// The catalog entry (redacted).
        child_id: String,
        /// The delegation (redacted).
        delegation_id: String,
        /// Its depth.
        depth: u32,
        /// How it ended.
        status: StopStatus,
        /// Why it failed (with `include_failure`, on a `failed` stop).
        #[serde(skip_serializing_if = "Option::is_none")]
        failure: Option<Failure>,
        /// The child's recovery counters (with `include_recovery`).
        #[serde(skip_serializing_if = "Option::is_none")]
        recovery: Option<ChildSummary>,
    },
}

/// What the bridge adds to stops.
#[derive(Debug, Clone, Copy, Default)]
pub struct BridgeOptions {
    /// Attach the failure (reason, limit, stop reason) to `failed` stops.
    pub include_failure: bool,
    /// Attach the child's `summary()` row to every stop.
    pub include_recovery: bool,
}

/// `s` cut to at most `max` UTF-8 bytes on a character boundary.
pub fn truncate_utf8(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    &s[..cut]
}

/// The mapping from supervisor events to timeline events.
#[derive(Debug, Default)]
pub struct LifecycleBridge {
    options: BridgeOptions,
    failures: VecDeque<(String, Failure)>,
}

impl LifecycleBridge {
    /// A bridge with `options`.
    pub fn new(options: BridgeOptions) -> Self {
        Self {
            options,
            failures: VecDeque::new(),
        }
    }

    /// How many failures wait for their delegation's end.
    pub fn pending_failures(&self) -> usize {
        self.failures.len()
    }

    fn take_failure(&mut self, delegation_id: &str) -> Option<Failure> {
        let i = self
            .failures
            .iter()
            .position(|(id, _)| id == delegation_id)?;
        self.failures.remove(i).map(|(_, f)| f)
    }

    /// The timeline event for `event`, if any. `redact` cleans ids; `summary` finds a
    /// child's recovery row (asked only with `include_recovery`).
    pub fn map(
        &mut self,
        event: &SupervisorEvent,
        redact: impl Fn(&str) -> String,
        summary: impl FnOnce(&str) -> Option<ChildSummary>,
    ) -> Option<LifecycleEvent> {
        let stop = |origin: &arbor_protocol::ChildOrigin, status| {
            (
                redact(&origin.child_id),
                redact(&origin.delegation_id),
                origin.depth,
                status,
            )
        };
        let (child_id, delegation_id, depth, status, raw_delegation, raw_child) = match event {
            SupervisorEvent::DelegationStarted { origin, .. } => {
                return Some(LifecycleEvent::SubagentStarted {
                    child_id: redact(&origin.child_id),
                    delegation_id: redact(&origin.delegation_id),
                    depth: origin.depth,
                });
            }
            SupervisorEvent::ChildFailed {
                origin,
                reason,
                limit,
                stop_reason,
                ..
            } => {
                if self.options.include_failure {
                    // One per delegation: a newer failure replaces an older one.
                    self.failures.retain(|(id, _)| id != &origin.delegation_id);
                    if self.failures.len() == MAX_PENDING_FAILURES {
                        self.failures.pop_front();
                    }
                    self.failures.push_back((
                        origin.delegation_id.clone(),
                        Failure {
                            reason: truncate_utf8(reason, MAX_REASON_BYTES).to_owned(),
                            limit: limit.as_ref().map(|b| b.limit.as_str().to_owned()),
                            stop_reason: *stop_reason,
                        },
                    ));
                }
                return None;
            }
            SupervisorEvent::DelegationFinished { origin, status, .. } => {
                let status = match status {
                    RunStatus::Succeeded => StopStatus::Succeeded,
                    RunStatus::Denied => StopStatus::Denied,
                    RunStatus::Aborted => StopStatus::Aborted,
                    _ => StopStatus::Failed,
                };
                let (c, d, depth, s) = stop(origin, status);
                (c, d, depth, s, &origin.delegation_id, &origin.child_id)
            }
            SupervisorEvent::DelegationRejected { origin, .. } => {
                let (c, d, depth, s) = stop(origin, StopStatus::Denied);
                (c, d, depth, s, &origin.delegation_id, &origin.child_id)
            }
            SupervisorEvent::DelegationError { origin, .. } => {
                let (c, d, depth, s) = stop(origin, StopStatus::Failed);
                (c, d, depth, s, &origin.delegation_id, &origin.child_id)
            }
            _ => return None,
        };
        // The buffered failure is attached only to the stop a `delegation_error` produces;
        // any other end of that delegation drops it.
        let buffered = self.take_failure(raw_delegation);
        let failure = match event {
            SupervisorEvent::DelegationError { .. } => buffered,
            _ => None,
        };
        let recovery = if self.options.include_recovery {
            summary(raw_child)
        } else {
            None
        };
        Some(LifecycleEvent::SubagentStopped {
            child_id,
            delegation_id,
            depth,
            status,
            failure,
            recovery,
        })
    }
}

/// A running observation; stop it (or drop it) to end it.
#[derive(Debug)]
pub struct Observer {
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Observer {
    /// Ends the observation; harmless to call twice.
    pub fn stop(&self) {
        self.stop.cancel();
    }

    /// Ends it and waits until the callback will not be called again.
    pub async fn finish(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Maps `supervisor`'s events to timeline events and calls `on_event` with each, until the
/// observer is stopped or the supervisor shuts down. A panicking callback is contained (the
/// bridge goes on). Must be called inside a tokio runtime.
pub fn observe(
    supervisor: &Supervisor,
    options: BridgeOptions,
    mut on_event: impl FnMut(LifecycleEvent) + Send + 'static,
) -> Observer {
    let mut sub = supervisor.subscribe();
    let sup = supervisor.clone();
    let stop = CancellationToken::new();
    let token = stop.clone();
    let task = tokio::spawn(async move {
        let mut bridge = LifecycleBridge::new(options);
        loop {
            let next = tokio::select! {
                biased;
                () = token.cancelled() => break,
                e = sub.recv() => e,
            };
            let Some(envelope) = next else { break };
            let mapped = bridge.map(
                &envelope.event,
                |s| sup.redact(s),
                |child| sup.summary().into_iter().find(|r| r.child_id == child),
            );
            if let Some(event) = mapped {
                let call = std::panic::AssertUnwindSafe(|| on_event(event));
                if std::panic::catch_unwind(call).is_err() {
                    tracing::warn!("a lifecycle callback panicked; the bridge goes on");
                }
            }
        }
    });
    Observer {
        stop,
        task: Some(task),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbor_protocol::{ChildOrigin, LimitKind, RunLimitBreach};

    fn origin(d: &str) -> ChildOrigin {
        ChildOrigin {
            child_id: "coder".into(),
            delegation_id: d.into(),
            depth: 1,
        }
    }

    fn failed(d: &str, reason: &str) -> SupervisorEvent {
        SupervisorEvent::ChildFailed {
            origin: origin(d),
            reason: reason.into(),
            status: Some(RunStatus::Failed),
            limit: Some(RunLimitBreach {
                limit: LimitKind::MaxTokens,
                maximum: 10,
                observed: 12,
            }),
            stop_reason: Some(StopReason::TokenLimit),
            usage: None,
            consumed: None,
            closest_other_axes: None,
            recent_tool_calls: None,
        }
    }

    fn error(d: &str) -> SupervisorEvent {
        SupervisorEvent::DelegationError {
            origin: origin(d),
            error: "boom".into(),
        }
    }

    fn map(b: &mut LifecycleBridge, e: &SupervisorEvent) -> Option<LifecycleEvent> {
        b.map(e, |s| s.replace("secret", "[REDACTED]"), |_| None)
    }

    fn status(e: Option<LifecycleEvent>) -> Option<StopStatus> {
        match e {
            Some(LifecycleEvent::SubagentStopped { status, .. }) => Some(status),
            _ => None,
        }
    }

    #[test]
    fn events_map_to_starts_and_stops_with_their_statuses() {
        let mut b = LifecycleBridge::new(BridgeOptions::default());
        let started = SupervisorEvent::DelegationStarted {
            origin: origin("d-secret"),
            resource_id: "r".into(),
            thread_id: "t".into(),
        };
        assert_eq!(
            map(&mut b, &started),
            Some(LifecycleEvent::SubagentStarted {
                child_id: "coder".into(),
                delegation_id: "d-[REDACTED]".into(),
                depth: 1
            })
        );
        for (run, want) in [
            (RunStatus::Succeeded, StopStatus::Succeeded),
            (RunStatus::Failed, StopStatus::Failed),
            (RunStatus::Denied, StopStatus::Denied),
            (RunStatus::Aborted, StopStatus::Aborted),
        ] {
            let e = SupervisorEvent::DelegationFinished {
                origin: origin("d"),
                status: run,
                total_tokens: 1,
            };
            assert_eq!(status(map(&mut b, &e)), Some(want));
        }
        let rejected = SupervisorEvent::DelegationRejected {
            origin: origin("d"),
            reason: "no".into(),
        };
        assert_eq!(status(map(&mut b, &rejected)), Some(StopStatus::Denied));
        assert_eq!(status(map(&mut b, &error("d"))), Some(StopStatus::Failed));
        assert_eq!(
            map(&mut b, &SupervisorEvent::EventsLagged { missed: 3 }),
            None
        );
        // Without include_failure nothing is buffered.
        assert_eq!(map(&mut b, &failed("d", "x")), None);
        assert_eq!(b.pending_failures(), 0);
    }

    #[test]
    fn a_failure_is_attached_to_the_error_stop_cut_to_one_kib() {
        let mut b = LifecycleBridge::new(BridgeOptions {
            include_failure: true,
            include_recovery: false,
        });
        // 'é' is two bytes: 1024 falls inside the 513th.
        let long = format!("x{}", "é".repeat(600));
        assert_eq!(map(&mut b, &failed("d1", &long)), None);
        match map(&mut b, &error("d1")) {
            Some(LifecycleEvent::SubagentStopped {
                status: StopStatus::Failed,
                failure: Some(f),
                ..
            }) => {
                assert_eq!(f.reason.len(), 1023);
                assert!(long.starts_with(&f.reason));
                assert_eq!(f.limit.as_deref(), Some("max_tokens"));
                assert_eq!(f.stop_reason, Some(StopReason::TokenLimit));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(b.pending_failures(), 0);
        // A finish drops the buffered failure without attaching it.
        map(&mut b, &failed("d2", "x"));
        let finished = SupervisorEvent::DelegationFinished {
            origin: origin("d2"),
            status: RunStatus::Failed,
            total_tokens: 0,
        };
        match map(&mut b, &finished) {
            Some(LifecycleEvent::SubagentStopped { failure, .. }) => assert!(failure.is_none()),
            other => panic!("{other:?}"),
        }
        assert_eq!(b.pending_failures(), 0);
    }

    #[test]
    fn at_most_64_failures_wait_and_the_oldest_goes_first() {
        let mut b = LifecycleBridge::new(BridgeOptions {
            include_failure: true,
            include_recovery: false,
        });
        for i in 0..65 {
            map(&mut b, &failed(&format!("d{i}"), "x"));
        }
        assert_eq!(b.pending_failures(), MAX_PENDING_FAILURES);
        let failure = |e| match e {
            Some(LifecycleEvent::SubagentStopped { failure, .. }) => failure,
            other => panic!("{other:?}"),
        };
        assert!(
            failure(map(&mut b, &error("d0"))).is_none(),
            "d0 was dropped"
        );
        assert!(failure(map(&mut b, &error("d64"))).is_some());
    }

    #[test]
    fn recovery_rows_are_attached_when_asked() {
        let mut b = LifecycleBridge::new(BridgeOptions {
            include_failure: false,
            include_recovery: true,
        });
        let row = ChildSummary {
            child_id: "coder".into(),
            attempts: 3,
            retries: 1,
            failures: 2,
            failure_radius: 0,
            outcome: arbor_core::supervisor::Outcome::Succeeded,
        };
        let e = map_with(&mut b, &error("d"), Some(row.clone()));
        match e {
            Some(LifecycleEvent::SubagentStopped { recovery, .. }) => {
                assert_eq!(recovery, Some(row));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(truncate_utf8("héllo", 2), "h");
        assert_eq!(truncate_utf8("héllo", 3), "hé");
    }

    fn map_with(
        b: &mut LifecycleBridge,
        e: &SupervisorEvent,
        row: Option<ChildSummary>,
    ) -> Option<LifecycleEvent> {
        b.map(e, str::to_owned, move |_| row)
    }
}
