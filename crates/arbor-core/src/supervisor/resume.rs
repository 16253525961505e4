//! Follow-up runs: a retained child (finished, not deleted) that receives a message runs a
//! new turn on it, in the same session, rebuilt from its transcript when this process does
//! not hold it (after a restart, or from another process such as `arbor send`).
//!
//! The run is a delegation like any other (a slot, the factory, the child's permission and
//! limits, events, counters, a terminal report) but without admission: the child was
//! admitted when it was spawned. Its identity is the one it was given then (the scopes are
//! kept in its record), never re-derived wider.

use std::sync::Arc;

use arbor_protocol::SessionId;

use crate::error::{CoreError, CoreResult};
use crate::supervisor::core::Supervisor;
use arbor_protocol::Notice;

use crate::supervisor::delegate::{
    Admitted, CancelReason, DelegationResult, Ended, Mode, child_identity,
};
use crate::supervisor::messages::preview;
use crate::supervisor::policy::PolicyInput;

impl Supervisor {
    /// Starts a follow-up run of `id` in the background if it is idle, retained and has
    /// pending messages. Harmless when it is running (its next turn reads them) or is the
    /// host's.
    pub(crate) fn wake(&self, id: SessionId) {
        if self.inner.session_token.is_cancelled() || !self.inner.hub.claim_idle(id) {
            return;
        }
        let this = self.clone();
        // Boxed: a follow-up run's state is large, and a task moves its future several times.
        self.inner.tracker.spawn(Box::pin(async move {
            match this.resume(id).await {
                Ok(true) => {}
                Ok(false) => {
                    // Not one of this supervisor's children (a root its host runs): its
                    // messages wait for the host.
                    this.inner.hub.end_run(id);
                }
                Err(e) => {
                    this.inner.hub.end_run(id);
                    this.inner.hub.defer(id);
                    tracing::warn!(session = %id, error = %e, "a follow-up run did not start");
                }
            }
        }));
    }

    /// Wakes every idle child with mail whose follow-up could not start before (after a
    /// slot was freed).
    pub(crate) fn wake_waiting(&self) {
        for id in self.inner.hub.take_deferred() {
            self.wake(id);
        }
    }

    /// Runs `id` on its pending messages; `Ok(false)` when it is not a child of this
    /// supervisor.
    async fn resume(&self, id: SessionId) -> CoreResult<bool> {
        let inner = &self.inner;
        let record = inner
            .store
            .session(id)
            .await?
            .filter(|r| r.tombstone.is_none())
            .ok_or_else(|| CoreError::Denied("Unknown or deleted session".to_owned()))?;
        let child_id = record.meta["child_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let (Some(&entry_index), true) = (
            inner.index.get(&child_id),
            record.meta["supervisor_id"] == inner.id.as_str(),
        ) else {
            return Ok(false);
        };
        let entry = &inner.entries[entry_index];
        let mode = match record.meta["mode"].as_str() {
            Some("sync") => Mode::Sync,
            Some("async") => Mode::Join,
            _ => Mode::Message,
        };
        let policy = entry
            .policy
            .narrow(&PolicyInput::default(), inner.child_events)?;
        let limits = inner.limits.narrow(&entry.limits)?;
        let scopes: Option<Vec<String>> = record.meta["scopes"].as_array().map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        });
        let identity = child_identity(
            inner.identity.clone(),
            scopes.map(|s| s.into_iter().collect()).as_ref(),
        )?;
        let path: Vec<String> = record.meta["path"].as_array().map_or_else(
            || vec![child_id.clone()],
            |a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            },
        );
        // A follow-up waits for no one: without a slot it stays pending, and is retried
        // when a delegation ends.
        let slot = inner.slots.reserve(limits.max_active_children)?;
        let parent = match record.parent_id {
            Some(p) => inner.store.session(p).await?.map(|r| (&r).into()),
            None => None,
        };
        let admitted = Admitted {
            entry: entry_index,
            child_id,
            delegation_id: format!(
                "{}-{}",
                inner.id,
                arbor_protocol::RunId::new().as_uuid().simple()
            ),
            depth: record.depth.max(1),
            path: Arc::from(path),
            parents: Arc::from(Vec::new()),
            input: String::new(),
            limits,
            policy,
            thread: "default".to_owned(),
            name: record.name.clone(),
            requested_name: None,
            model: (!record.model.is_empty()).then(|| record.model.clone()),
            mode,
            replies_at_start: record.replies,
            record: Some(record),
            parent,
            spawned_by: None,
            identity,
            token: inner.session_token.child_token(),
            reason: CancelReason::default(),
            caller: None,
            slot,
            resume: true,
            resume_run: None,
        };
        self.begin(&admitted);
        // Drive inline: this is already the background task.
        let _ = self.drive(admitted).await;
        Ok(true)
    }

    /// After a registered child's run: the parent's lifecycle notice (message mode), then
    /// the session is idle again, and whatever waits is woken: the child itself if mail
    /// arrived during its last turn, and any child that waited for the slot just freed.
    pub(crate) async fn after_run(
        &self,
        record: &arbor_store::SessionRecord,
        outcome: &CoreResult<DelegationResult>,
        ended: Ended,
    ) {
        if ended.mode == Mode::Message && !self.inner.session_token.is_cancelled() {
            let current = self.inner.store.session(record.id).await.ok().flatten();
            let deleted = current.as_ref().is_none_or(|r| r.tombstone.is_some());
            let replies = current.as_ref().map_or(0, |r| r.replies);
            let notice = match outcome {
                Ok(r) if r.result.status == arbor_protocol::RunStatus::Succeeded => (!ended.resume
                    && replies == ended.replies_at_start)
                    .then(|| Notice::CompletedWithoutReply {
                        preview: preview(&self.redact(&r.result.text)),
                    }),
                Ok(r) => Some(Notice::Failed {
                    error: self.redact(r.result.error.as_deref().unwrap_or("run denied")),
                }),
                Err(e) if ended.host_aborted => Some(Notice::Cancelled {
                    reason: Some(e.to_string()),
                }),
                Err(e) => Some(Notice::Failed {
                    error: e.to_string(),
                }),
            };
            if let (Some(notice), false) = (notice, deleted) {
                self.notify_parent(record, notice).await;
            }
        }
        if self.inner.hub.end_run(record.id) {
            self.wake(record.id);
        }
        self.wake_waiting();
    }
}
