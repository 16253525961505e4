//! What a cancel or a delete stopped: the descendants whose runs it cancelled, whose
//! waiting for a decision it closed, or (a delete) whose retained session it closed, each
//! with its name, depth and the state it was in. The host reads it from
//! [`Supervisor::cancel_reported`] and [`Deleted::stopped`](crate::supervisor::Deleted), a
//! parent's model from `cancel_agent`'s result; `/v1`, MCP and `arbor rm` show the same list.

use arbor_protocol::{SessionId, SessionStatus};
use serde::{Deserialize, Serialize};

use crate::error::CoreResult;
use crate::supervisor::runtime::Supervisor;
use crate::supervisor::tree::handles::Reach;

/// One descendant a cancel or a delete stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Stopped {
    /// Its session.
    pub session_id: SessionId,
    /// Its name among its siblings.
    pub name: String,
    /// Its depth (a root's children are at 1).
    pub depth: u32,
    /// The state it was in: `running` (its run was cancelled), `suspended` (it waited for a
    /// decision: it never runs again, and its wait is closed now, or by the run that
    /// carries it when that goes on) or `idle` (a retained child, closed: no message
    /// starts it again).
    pub was: SessionStatus,
}

/// What [`Supervisor::cancel_reported`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cancelled {
    /// The child's session.
    pub session_id: SessionId,
    /// Its run was in flight and is being cancelled (`false`: it had already ended, and
    /// nothing was stopped).
    pub running: bool,
    /// The descendants whose runs ended with it, shallowest first.
    pub stopped: Vec<Stopped>,
}

impl Supervisor {
    /// [`cancel_with`](Self::cancel_with) (or [`cancel`](Self::cancel) without a reason)
    /// that says what it stopped: the descendants whose runs were in flight under the child
    /// and end with it (its task-lifetime children and theirs). A message-mode descendant's
    /// run is bound to the tree, not to its parent's: a hosted child's release, once its run
    /// has ended, closes them too, after this report.
    pub async fn cancel_reported(
        &self,
        delegation_id: &str,
        reason: Option<&str>,
    ) -> CoreResult<Cancelled> {
        self.end_reported(Reach::Host, delegation_id, reason, false)
            .await
    }

    /// [`stop`](Self::stop) that says what it stopped, as [`cancel_reported`](Self::cancel_reported).
    pub async fn stop_reported(
        &self,
        delegation_id: &str,
        reason: Option<&str>,
    ) -> CoreResult<Cancelled> {
        self.end_reported(Reach::Host, delegation_id, reason, true)
            .await
    }

    /// Ends the run of a handle as `reach` sees it (`keep`: a stop, the child stays) and
    /// reports the descendants it stopped: the runs in flight under the child whose tokens
    /// the cancel reached.
    pub(crate) async fn end_reported(
        &self,
        reach: Reach,
        delegation_id: &str,
        reason: Option<&str>,
        keep: bool,
    ) -> CoreResult<Cancelled> {
        let session_id = self.state().handles.get(delegation_id, reach)?.session;
        let Some(token) = self.mark_cancelled(reach, delegation_id, reason, keep)? else {
            return Ok(Cancelled {
                session_id,
                running: false,
                stopped: Vec::new(),
            });
        };
        let ended = self
            .live()
            .hub()
            .cancel_under(session_id, &token)
            .into_iter()
            .map(|id| (id, Some(SessionStatus::Running)))
            .collect();
        Ok(Cancelled {
            session_id,
            running: true,
            stopped: self.describe_stopped(ended).await,
        })
    }

    /// The records of `ids` as [`Stopped`] entries, shallowest first then by name: `was`
    /// given, or the record's status. One that cannot be read is listed by id (unnamed)
    /// rather than dropped: it was stopped all the same.
    pub(crate) async fn describe_stopped(
        &self,
        ids: Vec<(SessionId, Option<SessionStatus>)>,
    ) -> Vec<Stopped> {
        let store = self.live().store();
        let mut out = Vec::with_capacity(ids.len());
        for (id, was) in ids {
            let record = store.session(id).await.ok().flatten();
            out.push(Stopped {
                session_id: id,
                name: record.as_ref().map(|r| r.name.clone()).unwrap_or_default(),
                depth: record.as_ref().map_or(0, |r| r.depth),
                was: was
                    .or(record.map(|r| r.status))
                    .unwrap_or(SessionStatus::Running),
            });
        }
        out.sort_by(|a, b| (a.depth, &a.name).cmp(&(b.depth, &b.name)));
        out
    }
}

/// The descendants of `child` in `tree` (one tree's records, parents first, as
/// [`registry::tree`](crate::registry::tree) reads them) that wait for a decision, not
/// deleted: what a delete of `child` stops (none of them runs again).
pub fn waiting_under(tree: &[arbor_store::SessionRecord], child: SessionId) -> Vec<Stopped> {
    let mut under = std::collections::HashSet::from([child]);
    let mut out = Vec::new();
    for record in tree {
        // Under `child`, and not under a descendant deleted before (whose own delete
        // stopped what waits there).
        if record.tombstone.is_some() || !record.parent_id.is_some_and(|p| under.contains(&p)) {
            continue;
        }
        under.insert(record.id);
        if record.tombstone.is_none() && record.status == SessionStatus::Suspended {
            out.push(Stopped {
                session_id: record.id,
                name: record.name.clone(),
                depth: record.depth,
                was: SessionStatus::Suspended,
            });
        }
    }
    out
}
