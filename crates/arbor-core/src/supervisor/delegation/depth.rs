//! Per-session maximum depth: a host may lower, at run time, how deep the tree under one
//! session may grow. The value is kept in the session's record (`meta.max_depth`, an
//! absolute depth: a child of the session at depth `d` is admitted only when `d` is at
//! most it), so it holds in every process. It only narrows: it can never exceed the
//! supervisor's `max_depth`, and a set value can only be lowered. A child copies its
//! parent's value when it is spawned; later changes on either side are independent.

use arbor_protocol::SessionId;
use arbor_store::{SessionRecord, SessionUpdate, StoreError};

use crate::error::{CoreError, CoreResult, LimitInfo};
use crate::supervisor::runtime::Supervisor;

/// The value a record keeps, if any.
pub(crate) fn stored(record: &SessionRecord) -> Option<u32> {
    // A child registered by this process: its typed terms, without building the JSON.
    if let Some(child) = record
        .meta
        .typed_as::<crate::supervisor::config::child_meta::ChildMeta>()
    {
        return child.max_depth;
    }
    // One field, without parsing the rest of a record read from the store.
    record
        .meta
        .field("max_depth")?
        .as_u64()
        .and_then(|d| u32::try_from(d).ok())
}

impl Supervisor {
    /// The deepest a descendant of session `id` may be: its own value if one was set (or
    /// inherited at spawn), else the supervisor's `max_depth`.
    pub async fn session_max_depth(&self, id: SessionId) -> CoreResult<u32> {
        let record = self.depth_target(id).await?;
        Ok(self.effective_max_depth(&record))
    }

    /// Lowers the deepest a descendant of session `id` may be, durably; returns the value
    /// now in force. Fails with `Validation` when `max_depth` is above the current value
    /// (limits only narrow) or below the session's own depth (say so: use its depth to stop
    /// it spawning at all).
    pub async fn set_session_max_depth(&self, id: SessionId, max_depth: u32) -> CoreResult<u32> {
        for _ in 0..16 {
            let record = self.depth_target(id).await?;
            let current = self.effective_max_depth(&record);
            if max_depth > current {
                return Err(CoreError::validation(format!(
                    "max_depth can only be lowered: session {id} allows depth {current}, \
                     {max_depth} was asked"
                )));
            }
            if max_depth < record.depth {
                return Err(CoreError::validation(format!(
                    "max_depth {max_depth} is above session {id} (at depth {}): set {} to stop \
                     it spawning children",
                    record.depth, record.depth
                )));
            }
            let mut meta = record.meta.clone();
            if !meta.is_object() {
                meta = serde_json::json!({}).into();
            }
            meta["max_depth"] = serde_json::Value::from(max_depth);
            let update = SessionUpdate {
                expected_version: Some(record.version),
                meta: Some(meta.into_value()),
                live_only: true,
                ..SessionUpdate::default()
            };
            match self.live().store().update_session(id, &update).await {
                Ok(_) => {
                    tracing::info!(session = %id, max_depth, "session max depth lowered");
                    return Ok(max_depth);
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(StoreError::Deleted { .. }) => return Err(unknown()),
                Err(e) => return Err(e.into()),
            }
        }
        Err(CoreError::Supervisor(format!(
            "could not set the max depth of session {id}: its record kept changing"
        )))
    }

    /// The session's value narrowed by the supervisor's.
    pub(crate) fn effective_max_depth(&self, record: &SessionRecord) -> u32 {
        let base = self.settings().limits().max_depth;
        stored(record).map_or(base, |d| d.min(base))
    }

    async fn depth_target(&self, id: SessionId) -> CoreResult<SessionRecord> {
        self.live()
            .store()
            .session(id)
            .await?
            .filter(|r| r.tombstone.is_none())
            .ok_or_else(unknown)
    }
}

/// Refuses a child at `depth` under a parent whose own maximum is `max_depth`.
pub(crate) fn check(depth: u32, max_depth: u32) -> CoreResult<()> {
    if depth > max_depth {
        return Err(CoreError::limit_error(
            "Delegation depth exceeded",
            Some(LimitInfo {
                limit: arbor_protocol::LimitKind::MaxDepth,
                maximum: u64::from(max_depth),
                observed: u64::from(depth),
            }),
        ));
    }
    Ok(())
}

fn unknown() -> CoreError {
    CoreError::denied(
        crate::error::DenyReason::Unknown,
        "Unknown or deleted session".to_owned(),
    )
}
