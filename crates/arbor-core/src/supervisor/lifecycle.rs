//! Host-facing lifecycle of a tree's sessions: attaching the host's own session (a root) so
//! replies and notices reach its inbox, waiting until the tree is quiet, deleting a child
//! (tombstone) and closing a session (teardown of its live descendants).

use arbor_protocol::{SessionId, SessionStatus};
use arbor_store::Tombstone;

use crate::error::CoreResult;
use crate::registry;
use crate::session::Session;
use crate::session::inbox::Inbox;
use crate::supervisor::request::{DeleteChild, RenameChild};
use crate::supervisor::runtime::Supervisor;

/// What [`Supervisor::delete_child`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deleted {
    /// The child's session.
    pub session_id: SessionId,
    /// Its tombstone.
    pub tombstone: Tombstone,
    /// A run of the child itself was in flight (or starting) and was cancelled.
    pub run_cancelled: bool,
    /// Live descendants whose runs were cancelled with it.
    pub cancelled: Vec<SessionId>,
    /// Every descendant it stopped, with its name and the state it was in: runs cancelled
    /// (`running`), retained children closed (`idle`), waits for a decision closed
    /// (`suspended`). Shallowest first.
    pub stopped: Vec<crate::supervisor::stopped::Stopped>,
    /// It was deleted before: nothing changed.
    pub already: bool,
}

impl Supervisor {
    /// The host's entry point: a new root session of `agent` in the supervisor's own store,
    /// attached (its children's replies and notices reach its inbox). Its children are
    /// recorded under it; a root created elsewhere cannot have any (its spawns fail with a
    /// [`CoreErrorKind::Config`](crate::CoreErrorKind::Config) error that ends the run).
    ///
    /// `configure` sets what a [`SessionBuilder`](crate::SessionBuilder) may (a name, host
    /// data); its store is always the supervisor's.
    pub async fn root_session(
        &self,
        agent: &crate::Agent,
        configure: impl FnOnce(crate::SessionBuilder) -> crate::SessionBuilder,
    ) -> CoreResult<Session> {
        let mut session = configure(agent.session())
            .store(self.live().store().clone())
            .create()
            .await?;
        self.attach(&mut session);
        Ok(session)
    }

    /// Reopens the root session `id` of `agent` from the supervisor's store, attached (after
    /// a restart, to resume or continue it).
    pub async fn open_root(&self, agent: &crate::Agent, id: SessionId) -> CoreResult<Session> {
        let mut session = agent.open_session(self.live().store().clone(), id).await?;
        self.attach(&mut session);
        Ok(session)
    }

    /// Attaches a session the host runs itself (typically the root): messages and notices
    /// for it go to its inbox, and the runtime never starts its runs (the host does, with
    /// [`Session::run_inbox`]).
    pub fn attach(&self, session: &mut Session) {
        // The roots a host dropped since are let go of now: a host that opens one root per
        // conversation keeps only those it holds.
        self.live().hub().release_dropped();
        let inbox = self.live().hub().register(
            session.id(),
            session.record().parent_id,
            session.inbox().clone(),
            true,
        );
        session.share_inbox(inbox);
    }

    /// Waits until `inbox` has mail or no run the runtime started is in flight. A host calls
    /// it after its session's run to decide: run again on the mail, or stop (quiet).
    pub async fn wait_for_mail_or_quiet(&self, inbox: &Inbox) {
        loop {
            let changed = self.live().hub().changed.notified();
            if !inbox.is_empty() || !self.live().hub().any_running() {
                return;
            }
            tokio::select! {
                () = inbox.ready() => return,
                () = changed => {}
            }
        }
    }

    /// Waits until no run the runtime started is in flight: each has ended or stopped on a
    /// call waiting for a decision. A host whose root's run suspended calls it before it
    /// shuts the supervisor down, so a message-mode child still running (spawned in the
    /// same turn, say) reaches its own end or suspension instead of being cancelled with the
    /// tree. Mail that arrives meanwhile stays in the inbox.
    pub async fn wait_for_quiet(&self) {
        loop {
            let changed = self.live().hub().changed.notified();
            if !self.live().hub().any_running() {
                return;
            }
            changed.await;
        }
    }

    /// Deletes the child of `parent` that `selector` names: cancels its run and its live
    /// descendants' runs, writes its tombstone (who, when, why, final status and usage), and
    /// drops it from listings and messaging. Its transcript stays readable. Deleting a child
    /// that is already deleted (by its session id) changes nothing and says so.
    pub async fn delete_child(&self, request: DeleteChild) -> CoreResult<Deleted> {
        let DeleteChild {
            parent,
            selector,
            by,
            reason,
        } = request;
        let (selector, by) = (selector.as_str(), by.as_str());
        let store = &self.live().store();
        let child = match registry::delete_target(store.as_ref(), parent, selector).await? {
            registry::DeleteTarget::Live(child) => child,
            registry::DeleteTarget::Deleted(session_id, tombstone) => {
                // A delete cut short before it closed what waited is finished now.
                let closed = self.close_dead(session_id).await;
                self.let_go(closed).await;
                return Ok(Deleted {
                    session_id,
                    tombstone,
                    run_cancelled: false,
                    cancelled: Vec::new(),
                    stopped: Vec::new(),
                    already: true,
                });
            }
        };
        // Read before anything changes: which descendants wait for a decision (the delete
        // closes their waits).
        // A tree that cannot be read only leaves them out of the report: the delete goes on.
        let tree = store
            .list_sessions(arbor_store::SessionQuery::Tree(child.root_id))
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(child = %child.id, error = %e, "could not read the tree to report what the delete stops");
                Vec::new()
            });
        let waiting = crate::supervisor::stopped::waiting_under(&tree, child.id);
        // The calls it leaves unanswered for good, handed over once it is deleted.
        let left = crate::supervisor::delegation::abandoned::calls_left_by_delete(
            store.as_ref(),
            &tree,
            child.id,
        )
        .await
        .unwrap_or_else(|e| {
            tracing::warn!(child = %child.id, error = %e, "could not read the calls a delete leaves unanswered");
            Vec::new()
        });
        let closed = self.live().hub().close(child.id);
        let reason = self.redact(&reason);
        let tombstone = match registry::write_tombstone(store.as_ref(), &child, by, &reason).await {
            Ok(t) => t,
            Err(e) => {
                // Closed here already (nothing of it runs); the tombstone is written again
                // after the next run that ends, or by a retried delete.
                self.live()
                    .hub()
                    .unfinished(crate::supervisor::tree::hub::Unfinished {
                        id: child.id,
                        by: by.to_owned(),
                        reason,
                    });
                return Err(e);
            }
        };
        tracing::info!(child = %child.id, parent = %parent, by, "child deleted");
        // What of it waited for approval nobody can resume now.
        let mut abandoned = left;
        abandoned.extend(self.close_dead(child.id).await);
        self.let_go(crate::supervisor::delegation::abandoned::AbandonedCalls::merged(abandoned))
            .await;
        let mut stopped = self
            .describe_stopped(
                closed
                    .running
                    .iter()
                    .map(|id| (*id, Some(SessionStatus::Running)))
                    .chain(
                        closed
                            .idle
                            .iter()
                            .map(|id| (*id, Some(SessionStatus::Idle))),
                    )
                    .filter(|(id, _)| !waiting.iter().any(|w| w.session_id == *id))
                    .collect(),
            )
            .await;
        stopped.extend(waiting);
        stopped.sort_by(|a, b| (a.depth, &a.name).cmp(&(b.depth, &b.name)));
        Ok(Deleted {
            session_id: child.id,
            tombstone,
            run_cancelled: closed.own_run,
            cancelled: closed.descendants,
            stopped,
            already: false,
        })
    }

    /// Closes the suspensions nobody can resume under the deleted `id` (logged on failure:
    /// the next delete, or `close_dead_suspensions`, finishes it); returns the calls they
    /// left unanswered.
    async fn close_dead(
        &self,
        id: SessionId,
    ) -> Vec<crate::supervisor::delegation::abandoned::AbandonedCalls> {
        let store = self.live().store().as_ref();
        let root = match store.session(id).await {
            Ok(Some(r)) => r.root_id,
            _ => return Vec::new(),
        };
        crate::supervisor::delegation::detached::abandon_dead_suspensions(store, root)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(session = %id, error = %e, "could not close the suspensions of a deleted child");
                Vec::new()
            })
    }

    /// Retries the teardowns whose tombstone could not be written; returns how many are still
    /// unfinished. Runs after every run that ends; a host may call it too.
    pub(crate) async fn retry_cleanups(&self) -> usize {
        let store = self.live().store().as_ref();
        let mut left = 0;
        for u in self.live().hub().take_unfinished() {
            let done = match store.session(u.id).await {
                Ok(Some(r)) if r.tombstone.is_some() => true,
                Ok(Some(r)) => registry::write_tombstone(store, &r, &u.by, &u.reason)
                    .await
                    .is_ok(),
                Ok(None) => true,
                Err(_) => false,
            };
            if done {
                tracing::info!(child = %u.id, "an unfinished teardown was completed");
            } else {
                left += 1;
                self.live().hub().unfinished(u);
            }
        }
        left
    }

    /// How many sessions this process tracks live: running, with messages pending, attached
    /// by the host, or whose start failed. Bounded by what is live, not by how many children
    /// ever ran (for monitoring a long-lived host).
    pub(crate) fn tracked_sessions(&self) -> usize {
        self.live().hub().len()
    }

    /// Cancels the run of the child session `id` in flight in this process: it ends
    /// `aborted` with one terminal report, and its task-lifetime descendants end with it. A
    /// child with a handle (started by `delegate_async` or `spawn`) is cancelled through it,
    /// as [`cancel`](Self::cancel) does: a hosted child is then released (`revoked`, the
    /// delegation contract's stop). Another keeps its record (a message starts a new run of a
    /// retained child). `false` when no run of it is in flight here, or `id` is unknown.
    pub async fn cancel_session(&self, id: SessionId) -> CoreResult<bool> {
        let record = self.live().store().session(id).await?;
        if let Some(did) = record
            .as_ref()
            .and_then(|r| r.meta["delegation_id"].as_str())
            && let Ok(true) = self.cancel(did)
        {
            return Ok(true);
        }
        Ok(self.live().hub().cancel_run(id))
    }

    /// Closes `id`: cancels the runs of its live descendants (nothing keeps running
    /// unwatched) and refuses new children under it or them. Returns the descendants
    /// closed.
    ///
    /// A host's root stays closed while the host holds its session; once the host drops it
    /// (and the runs of its tree have ended), the supervisor keeps nothing of the tree: see
    /// [`release_dropped`](crate::process::SupervisorProcess::release_dropped).
    pub fn close_session(&self, id: SessionId) -> Vec<SessionId> {
        let closed = self.live().hub().close(id).descendants;
        self.live().hub().release_dropped();
        closed
    }

    /// Lets go of the roots the host attached and then dropped (their sessions and every
    /// closed tree of theirs nothing of which runs any more), and returns how many. Called
    /// by [`attach`](Self::attach) and [`close_session`](Self::close_session); a host that
    /// stops opening roots may call it to let go of the last ones.
    pub(crate) fn release_dropped(&self) -> usize {
        self.live().hub().release_dropped()
    }

    /// How many closed sessions this process remembers (to refuse starting anything under
    /// them): the trees of closed roots the host still holds or whose runs are ending, and
    /// deleted children. For monitoring a long-lived host.
    pub(crate) fn closed_sessions(&self) -> usize {
        self.live().hub().closed_len()
    }
}

pub use crate::registry::Renamed;

impl Supervisor {
    /// Renames the child of `parent` that `selector` names (its name or session id): the
    /// new name is checked like a requested one and held among its live siblings (refused,
    /// changing nothing, when taken or being spawned in this process), the old one is
    /// freed, and a `renamed` entry in the child's transcript records who did it, in the
    /// same write ([`registry::rename_child`]).
    pub async fn rename_child(&self, request: RenameChild) -> CoreResult<Renamed> {
        let RenameChild {
            parent,
            selector,
            new_name,
            by,
        } = request;
        let (selector, new_name, by) = (selector.as_str(), new_name.as_str(), by.as_str());
        let to = crate::supervisor::config::names::requested(&self.redact(new_name))?;
        let child = registry::find_child(self.live().store().as_ref(), parent, selector).await?;
        // A spawn of that name in progress holds it too.
        let held = (to != child.name)
            .then(|| self.live().names().reserve(Some(parent), &to, child.depth))
            .transpose()?;
        let renamed = registry::rename_child(
            self.live().store().as_ref(),
            parent,
            selector,
            &to,
            &self.redact(by),
        )
        .await?;
        drop(held);
        Ok(renamed)
    }
}
