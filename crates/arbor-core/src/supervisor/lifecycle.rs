//! Host-facing lifecycle of a tree's sessions: attaching the host's own session (a root) so
//! replies and notices reach its inbox, waiting until the tree is quiet, deleting a child
//! (tombstone) and closing a session (teardown of its live descendants).

use arbor_protocol::{SessionId, SessionStatus, Timestamp};
use arbor_store::{SessionUpdate, Tombstone};

use crate::error::CoreResult;
use crate::inbox::Inbox;
use crate::registry;
use crate::session::Session;
use crate::supervisor::core::Supervisor;

/// What [`Supervisor::delete_child`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deleted {
    /// The child's session.
    pub session_id: SessionId,
    /// Its tombstone.
    pub tombstone: Tombstone,
    /// Live descendants whose runs were cancelled with it.
    pub cancelled: Vec<SessionId>,
    /// It was deleted before: nothing changed.
    pub already: bool,
}

impl Supervisor {
    /// Attaches a session the host runs itself (typically the root): messages and notices
    /// for it go to its inbox, and the runtime never starts its runs (the host does, with
    /// [`Session::run_inbox`]).
    pub fn attach(&self, session: &mut Session) {
        let inbox = self.inner.hub.register(
            session.id(),
            session.record().parent_id,
            session.inbox().clone(),
            true,
        );
        session.inbox = inbox;
    }

    /// Waits until `inbox` has mail or no run the runtime started is in flight. A host calls
    /// it after its session's run to decide: run again on the mail, or stop (quiet).
    pub async fn wait_for_mail_or_quiet(&self, inbox: &Inbox) {
        loop {
            let changed = self.inner.hub.changed.notified();
            if !inbox.is_empty() || !self.inner.hub.any_running() {
                return;
            }
            tokio::select! {
                () = inbox.ready() => return,
                () = changed => {}
            }
        }
    }

    /// Deletes the child of `parent` that `selector` names: cancels its run and its live
    /// descendants' runs, writes its tombstone (who, when, why, final status and usage), and
    /// drops it from listings and messaging. Its transcript stays readable. Deleting a child
    /// that is already deleted (by its session id) changes nothing and says so.
    pub async fn delete_child(
        &self,
        parent: SessionId,
        selector: &str,
        by: &str,
        reason: &str,
    ) -> CoreResult<Deleted> {
        let store = &self.inner.store;
        let child = match registry::find_child(store.as_ref(), parent, selector).await {
            Ok(child) => child,
            Err(e) => {
                // Already deleted: harmless, when named by its id.
                if let Ok(id) = selector.parse::<SessionId>()
                    && let Some(r) = store.session(id).await?
                    && r.parent_id == Some(parent)
                    && let Some(tombstone) = r.tombstone
                {
                    return Ok(Deleted {
                        session_id: id,
                        tombstone,
                        cancelled: Vec::new(),
                        already: true,
                    });
                }
                return Err(e);
            }
        };
        let cancelled = self.inner.hub.close(child.id);
        let final_status = if child.status.is_live() {
            SessionStatus::Aborted
        } else {
            child.status
        };
        let tombstone = Tombstone {
            at: Timestamp::now(),
            by: by.to_owned(),
            reason: self.redact(reason),
            final_status,
            usage: child.aggregate_usage(),
        };
        store
            .update_session(
                child.id,
                &SessionUpdate {
                    tombstone: Some(tombstone.clone()),
                    ..SessionUpdate::default()
                },
            )
            .await?;
        tracing::info!(child = %child.id, parent = %parent, by, "child deleted");
        Ok(Deleted {
            session_id: child.id,
            tombstone,
            cancelled,
            already: false,
        })
    }

    /// Closes `id`: cancels the runs of its live descendants (nothing keeps running
    /// unwatched) and refuses new children under it or them. Returns the descendants
    /// closed.
    pub fn close_session(&self, id: SessionId) -> Vec<SessionId> {
        self.inner.hub.close(id)
    }
}
