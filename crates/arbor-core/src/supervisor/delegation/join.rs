//! Async delegations: launch, `wait` and `cancel`.

use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::error::{CoreError, CoreResult, LimitInfo};
use crate::supervisor::delegation::delegate::boxed_in_place;
use crate::supervisor::delegation::pipeline::Registered;
use crate::supervisor::request::{AsyncHandle, DelegationResult};
use crate::supervisor::runtime::Supervisor;
use crate::supervisor::tree::handles::{Entry, Reach};

/// Options of [`Supervisor::wait`].
#[derive(Debug, Clone, Default)]
pub struct WaitOptions {
    /// How long to wait; capped at the supervisor's `timeout_ms` (the default).
    pub timeout: Option<Duration>,
    /// Stops waiting (the child goes on).
    pub cancel: Option<CancellationToken>,
}

/// What `wait` found.
#[derive(Debug, Clone, PartialEq)]
pub enum WaitOutcome {
    /// The child finished.
    Finished(Box<DelegationResult>),
    /// The handle was cancelled.
    Cancelled {
        /// The delegation.
        delegation_id: String,
    },
}

impl Supervisor {
    /// Starts an admitted delegation in the background and registers its handle.
    pub(crate) fn launch(&self, registered: Registered) -> CoreResult<AsyncHandle> {
        let admitted = registered.admitted();
        let Some(record) = &admitted.record else {
            return Err(CoreError::Supervisor(
                "an async delegation must be registered before it is launched".to_owned(),
            ));
        };
        let handle = AsyncHandle {
            delegation_id: admitted.terms.delegation_id.clone(),
            child_id: admitted.terms.child_id.clone(),
            session_id: record.id,
            name: record.name.clone(),
            model: admitted.terms.model.clone(),
        };
        let (tx, rx) = watch::channel(None);
        self.state().handles.insert(
            handle.delegation_id.clone(),
            Entry {
                child_id: handle.child_id.clone(),
                session: record.id,
                root: admitted.terms.parent.map(|p| p.root_id),
                token: admitted.control.token.clone(),
                reason: admitted.control.reason.clone(),
                cancelled: false,
                terminal: false,
                rx,
            },
        );
        registered.begin();
        let this = self.clone();
        let id = handle.delegation_id.clone();
        // Boxed: the drive's state is large, and a task moves its future several times.
        self.live().spawn(boxed_in_place(|| {
            async move {
                // Marks the handle finished even if the drive panics, so it is never left
                // "running" (its waiters then get an error rather than hanging).
                let _finish = FinishOnDrop {
                    supervisor: this.clone(),
                    id,
                };
                let outcome = registered.drive().await;
                let _ = tx.send(Some(Arc::new(outcome)));
            }
            .in_current_span()
        }));
        Ok(handle)
    }

    /// Waits for an async delegation. Idempotent while the finished handle is retained;
    /// unknown, foreign and evicted ids share one error. A cancelled handle reports
    /// [`WaitOutcome::Cancelled`].
    pub async fn wait(&self, delegation_id: &str, options: WaitOptions) -> CoreResult<WaitOutcome> {
        self.wait_from(Reach::Host, delegation_id, options).await
    }

    /// [`wait`](Self::wait) as `reach` sees the handles.
    pub(crate) async fn wait_from(
        &self,
        reach: Reach,
        delegation_id: &str,
        options: WaitOptions,
    ) -> CoreResult<WaitOutcome> {
        let mut rx = self.state().handles.get(delegation_id, reach)?.rx.clone();
        let cap = Duration::from_millis(self.settings().limits().timeout_ms);
        let timeout = options.timeout.map_or(cap, |t| t.min(cap));
        let cancel = options.cancel.unwrap_or_default();
        let outcome = tokio::select! {
            r = rx.wait_for(Option::is_some) => match r {
                Ok(v) => v.clone(),
                Err(_) => None,
            },
            _ = tokio::time::sleep(timeout) => {
                return Err(CoreError::limit_error(
                    "Async delegation wait timeout exceeded",
                    Some(LimitInfo {
                        limit: arbor_protocol::LimitKind::TimeoutMs,
                        maximum: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                        observed: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                    }),
                ));
            }
            _ = cancel.cancelled() => return Err(CoreError::Supervisor("Wait cancelled".to_owned())),
        };
        let cancelled = self
            .state()
            .handles
            .get(delegation_id, reach)
            .map(|e| e.cancelled)
            .unwrap_or(false);
        let Some(outcome) = outcome else {
            return Err(CoreError::Supervisor(
                "Async delegation ended without a result".to_owned(),
            ));
        };
        match (&*outcome, cancelled) {
            // A result that arrived wins over a cancel that raced it.
            (Ok(result), _) => Ok(WaitOutcome::Finished(Box::new(result.clone()))),
            (Err(_), true) => Ok(WaitOutcome::Cancelled {
                delegation_id: delegation_id.to_owned(),
            }),
            (Err(e), false) => Err(e.clone()),
        }
    }

    /// Cancels a running async delegation (session lifetime included): `true` when it was
    /// running, `false` when it had already finished.
    pub fn cancel(&self, delegation_id: &str) -> CoreResult<bool> {
        self.cancel_from(Reach::Host, delegation_id)
    }

    /// [`cancel`](Self::cancel) with the host's reason, which reaches the child's result
    /// (its error reads `Async delegation cancelled: <reason>`), the terminal event and the
    /// `after` hook (redacted).
    pub fn cancel_with(&self, delegation_id: &str, reason: &str) -> CoreResult<bool> {
        self.cancel_as(Reach::Host, delegation_id, Some(reason), false)
    }

    /// Stops the run of an async delegation and keeps its child: unlike
    /// [`cancel`](Self::cancel), which releases a hosted child (its record tombstoned
    /// `revoked`), the child's session stays, `aborted`, its transcript whole, and a message
    /// to it later starts its next run. `true` when it was running, `false` when it had
    /// already finished; its result's error reads `Async delegation stopped[: <reason>]`.
    pub fn stop(&self, delegation_id: &str, reason: Option<&str>) -> CoreResult<bool> {
        self.cancel_as(Reach::Host, delegation_id, reason, true)
    }

    /// [`cancel`](Self::cancel) as `reach` sees the handles.
    pub(crate) fn cancel_from(&self, reach: Reach, delegation_id: &str) -> CoreResult<bool> {
        self.cancel_as(reach, delegation_id, None, false)
    }

    pub(crate) fn cancel_as(
        &self,
        reach: Reach,
        delegation_id: &str,
        detail: Option<&str>,
        keep: bool,
    ) -> CoreResult<bool> {
        let marked = self.mark_cancelled(reach, delegation_id, detail, keep)?;
        if let Some(token) = &marked {
            token.cancel();
        }
        Ok(marked.is_some())
    }

    /// Marks a running handle cancelled (or stopped, `keep`) with its reason and returns
    /// the token that ends its run, for the caller to cancel; `None` when it had already
    /// finished.
    pub(crate) fn mark_cancelled(
        &self,
        reach: Reach,
        delegation_id: &str,
        detail: Option<&str>,
        keep: bool,
    ) -> CoreResult<Option<CancellationToken>> {
        let mut state = self.state();
        let entry = state.handles.get_mut(delegation_id, reach)?;
        if entry.terminal || entry.rx.borrow().is_some() {
            return Ok(None);
        }
        entry.cancelled = true;
        let reason = if keep {
            crate::supervisor::delegation::admitted::HANDLE_STOPPED
        } else {
            crate::supervisor::delegation::admitted::HANDLE_CANCELLED
        };
        match detail.map(str::trim).filter(|d| !d.is_empty()) {
            Some(d) => entry.reason.set_with(reason, d.to_owned()),
            None => entry.reason.set(reason),
        }
        Ok(Some(entry.token.clone()))
    }

    /// The child id of a handle.
    pub fn handle_child(&self, delegation_id: &str) -> CoreResult<String> {
        Ok(self
            .state()
            .handles
            .get(delegation_id, Reach::Host)?
            .child_id
            .clone())
    }

    /// Async delegations still running.
    pub(crate) fn running_handles(&self) -> usize {
        self.state().handles.running()
    }
}

struct FinishOnDrop {
    supervisor: Supervisor,
    id: String,
}

impl Drop for FinishOnDrop {
    fn drop(&mut self) {
        self.supervisor.state().handles.finish(&self.id);
    }
}
