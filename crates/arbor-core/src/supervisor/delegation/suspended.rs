//! A typed view of the delegations that wait for a decision: [`SuspendedDelegation`], read
//! from the store (so also after a restart, or from another process), with
//! [`Supervisor::suspended_delegations`].

use arbor_protocol::RunId;

use crate::approval::{self, RunCheckpoint};
use crate::error::CoreResult;
use crate::outcome::Suspension;
use crate::supervisor::delegation::nested::{DELEGATION_NAMESPACE, Mapping};
use crate::supervisor::runtime::Supervisor;

/// One delegation whose child run is suspended on approvals.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SuspendedDelegation {
    /// The catalog entry.
    pub child_id: String,
    /// The delegation.
    pub delegation_id: String,
    /// Child ids from the top down to this child.
    pub path: Vec<String>,
    /// Its depth (1 for a root's children).
    pub depth: u32,
    /// The definition revision it was suspended under (it resumes only under the same).
    pub revision: String,
    /// Whether a caller's run awaits it. An awaited child is resumed through that caller
    /// (decide and resume the root of its tree, whose own suspension carries these calls);
    /// one nobody awaits (a message-mode child, a follow-up run) is resumed by
    /// [`Supervisor::resume_child`].
    pub awaited: bool,
    /// Whether the suspended run is a follow-up (on messages) rather than its first task.
    pub follow_up: bool,
    /// The child's run, its session, the checkpoint version to decide against and the
    /// calls it waits on, in call order.
    pub suspension: Suspension,
}

impl Supervisor {
    /// This supervisor's suspended delegations, in the order they suspended (by run id,
    /// which is time-ordered). Read from the store: the ones a crashed or stopped process
    /// left are here too. A delegation is listed while its run's checkpoint exists: from its
    /// suspension until its resumed run is past its decided calls (`pending` is empty once
    /// every call is decided and the resume has not run yet).
    pub async fn suspended_delegations(&self) -> CoreResult<Vec<SuspendedDelegation>> {
        let store = self.store();
        let mut found = Vec::new();
        for c in store.list_checkpoints(DELEGATION_NAMESPACE).await? {
            let Ok(mapping) = serde_json::from_value::<Mapping>(c.value) else {
                continue;
            };
            let Ok(run_id) = c.key.parse::<RunId>() else {
                continue;
            };
            if mapping.supervisor_id != self.settings().id() {
                continue;
            }
            let Some(run) = store
                .checkpoint(approval::RUN_NAMESPACE, &run_id.to_string())
                .await?
            else {
                continue;
            };
            let Ok(checkpoint) = serde_json::from_value::<RunCheckpoint>(run.value) else {
                continue;
            };
            let pending = checkpoint.pending();
            found.push(SuspendedDelegation {
                child_id: mapping.child_id,
                delegation_id: mapping.delegation_id,
                path: mapping.path,
                depth: mapping.depth,
                revision: mapping.revision,
                awaited: !mapping.detached,
                follow_up: mapping.follow_up,
                suspension: Suspension {
                    run_id,
                    session_id: mapping.session_id,
                    version: run.version,
                    pending,
                },
            });
        }
        found.sort_by_key(|s| s.suspension.run_id);
        Ok(found)
    }
}
