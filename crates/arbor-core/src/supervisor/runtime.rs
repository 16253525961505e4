//! The [`Supervisor`] and its builder.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use arbor_protocol::{SupervisorEnvelope, SupervisorEvent, Timestamp};
use arbor_store::{MemoryStore, Store};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::{CoreError, CoreResult};
use crate::identity::Identity;
use crate::permission::Permission;
use crate::redact::Redactor;
use crate::session::events::{Bus, Subscription};
use crate::supervisor::config::catalog::{ChildEntry, check_child_id, valid_id};
use crate::supervisor::config::hooks::{AfterHook, BeforeHook};
use crate::supervisor::config::limits::{LimitsInput, SupervisorLimits};
use crate::supervisor::delegation::handles::Handles;
use crate::supervisor::delegation::slots::Slots;
use crate::supervisor::delegation::summary::{ChildSummary, Summary};
use crate::supervisor::tree::hub::Hub;

/// How long an `after` hook may run by default.
pub const DEFAULT_AFTER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
const MAX_AFTER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// Who a supervisor acts for: a tenant and an account or a user.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ownership {
    /// The tenant.
    pub tenant_id: String,
    /// The account, if any.
    pub account_id: Option<String>,
    /// The user, if any.
    pub user_id: Option<String>,
}

impl Ownership {
    /// A tenant and a user.
    pub fn user(tenant_id: impl Into<String>, user_id: impl Into<String>) -> Self {
        Self {
            tenant_id: tenant_id.into(),
            account_id: None,
            user_id: Some(user_id.into()),
        }
    }

    fn validate(&self) -> CoreResult<()> {
        let blank = |s: &str| s.trim().is_empty();
        let account_ok = self.account_id.as_deref().is_none_or(|s| !blank(s));
        let user_ok = self.user_id.as_deref().is_none_or(|s| !blank(s));
        let one = self.account_id.is_some() || self.user_id.is_some();
        if blank(&self.tenant_id) || !account_ok || !user_ok || !one {
            return Err(CoreError::validation(
                "tenant_id and non-empty account_id or user_id are required",
            ));
        }
        Ok(())
    }
}

/// Receives every projected child event, exactly as the stream carries it, in order.
pub trait ChildEventSink: fmt::Debug + Send + Sync {
    /// Takes one event. Must not block.
    fn send(&self, event: &SupervisorEnvelope);
}

/// A shared sink (the host keeps a handle to what it collects).
impl<T: ChildEventSink + ?Sized> ChildEventSink for Arc<T> {
    fn send(&self, event: &SupervisorEnvelope) {
        (**self).send(event);
    }
}

/// A sink from a closure (see [`sink_fn`]).
pub struct FnSink<F>(F);

impl<F> fmt::Debug for FnSink<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnSink")
    }
}

impl<F: Fn(&SupervisorEnvelope) + Send + Sync> ChildEventSink for FnSink<F> {
    fn send(&self, event: &SupervisorEnvelope) {
        (self.0)(event);
    }
}

/// Makes a child-event sink of a closure (it must not block).
pub fn sink_fn<F: Fn(&SupervisorEnvelope) + Send + Sync>(f: F) -> FnSink<F> {
    FnSink(f)
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.dropped.cancel();
    }
}

pub(crate) struct State {
    pub(crate) summary: Summary,
    pub(crate) handles: Handles,
}

pub(crate) struct Inner {
    pub(crate) id: String,
    pub(crate) ownership: Ownership,
    pub(crate) entries: Vec<ChildEntry>,
    pub(crate) index: HashMap<String, usize>,
    pub(crate) child_ids: Arc<[String]>,
    pub(crate) permission: Permission,
    pub(crate) identity: Option<Arc<Identity>>,
    pub(crate) limits: SupervisorLimits,
    pub(crate) before: Option<Arc<dyn BeforeHook>>,
    pub(crate) after: Option<Arc<dyn AfterHook>>,
    /// How long the `after` hook may take before the delegation's report goes on without it.
    pub(crate) after_timeout: std::time::Duration,
    pub(crate) redactor: Option<Arc<dyn Redactor>>,
    pub(crate) effects: Option<Arc<dyn crate::tool::effect::EffectStore>>,
    pub(crate) child_events: bool,
    pub(crate) sink: Option<Arc<dyn ChildEventSink>>,
    pub(crate) session_token: CancellationToken,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) slots: Arc<Slots>,
    /// Requested names being registered (in-process guard; the store guards across).
    pub(crate) names: Arc<crate::supervisor::config::names::Reservations>,
    pub(crate) bus: Bus<SupervisorEnvelope>,
    /// Set once a task watches for the session's end (to close the event stream).
    pub(crate) watching: std::sync::atomic::AtomicBool,
    /// Cancelled when the supervisor is dropped: its watcher stops.
    pub(crate) dropped: CancellationToken,
    pub(crate) state: Mutex<State>,
    pub(crate) tracker: TaskTracker,
    pub(crate) hub: Hub,
    /// With durable approvals: the revision of the definition children are built from.
    pub(crate) revision: Option<String>,
}

/// Allow-listed delegation to child agents, under limits that only narrow. Cheap to clone;
/// clones share everything.
#[derive(Clone)]
pub struct Supervisor {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Supervisor")
            .field("id", &self.inner.id)
            .field("children", &self.inner.child_ids)
            .field("limits", &self.inner.limits)
            .finish()
    }
}

impl Supervisor {
    /// Starts building a supervisor for `ownership`.
    pub fn builder(ownership: Ownership) -> SupervisorBuilder {
        SupervisorBuilder {
            id: "supervisor".to_owned(),
            ownership,
            entries: Vec::new(),
            permission: Permission::allow_all(),
            identity: None,
            limits: LimitsInput::default(),
            before: None,
            after: None,
            after_timeout: DEFAULT_AFTER_TIMEOUT,
            redactor: None,
            effects: None,
            child_events: false,
            sink: None,
            session_token: CancellationToken::new(),
            store: None,
            revision: None,
        }
    }

    /// The supervisor's id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The identity children act as, if any.
    pub fn identity(&self) -> Option<&Identity> {
        self.inner.identity.as_deref()
    }

    /// The owner it acts for.
    pub fn ownership(&self) -> &Ownership {
        &self.inner.ownership
    }

    /// The advertised child ids, in catalog order.
    pub fn child_ids(&self) -> &[String] {
        &self.inner.child_ids
    }

    /// The description of a child, if it has one.
    pub fn child_description(&self, child_id: &str) -> Option<&str> {
        let i = *self.inner.index.get(child_id)?;
        self.inner.entries[i].description.as_deref()
    }

    /// The resolved limits.
    pub fn limits(&self) -> &SupervisorLimits {
        &self.inner.limits
    }

    /// The store children's sessions are kept in.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// Live children across the tree.
    pub fn active_children(&self) -> u32 {
        self.inner.slots.active()
    }

    /// The most sessions these limits permit at once (root included).
    pub fn worst_case_sessions(&self) -> u64 {
        self.inner.limits.worst_case_sessions()
    }

    /// Subscribes to the supervisor's events from now on. The first subscription also gets
    /// what was published before it (up to `max_queued_events`; a lag marker counts any
    /// dropped). Every subscription ends after [`shutdown`](Self::shutdown).
    pub fn subscribe(&self) -> Subscription<SupervisorEnvelope> {
        self.watch_session_end();
        self.inner.bus.subscribe()
    }

    /// Closes the event stream once the session token is cancelled (by [`shutdown`] or by
    /// the host directly), after the children it ends have reported their terminals:
    /// subscribers read what is queued, then their `recv` returns `None`. Started once,
    /// by the first subscription or delegation made inside a Tokio runtime.
    ///
    /// [`shutdown`]: Self::shutdown
    pub(crate) fn watch_session_end(&self) {
        use std::sync::atomic::Ordering;
        if self.inner.watching.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.inner.watching.store(false, Ordering::Release);
            return;
        };
        let token = self.inner.session_token.clone();
        let dropped = self.inner.dropped.clone();
        let inner = Arc::downgrade(&self.inner);
        runtime.spawn(async move {
            tokio::select! {
                () = token.cancelled() => {}
                () = dropped.cancelled() => return,
            }
            let Some(inner) = inner.upgrade() else {
                return;
            };
            let (tracker, bus) = (inner.tracker.clone(), inner.bus.clone());
            drop(inner);
            tracker.close();
            tracker.wait().await;
            bus.close();
        });
    }

    /// `text` with the supervisor's secrets replaced.
    pub fn redact(&self, text: &str) -> String {
        match &self.inner.redactor {
            Some(r) => r.redact(text).into_owned(),
            None => text.to_owned(),
        }
    }

    /// One row of recovery counters per child, in catalog order.
    pub fn summary(&self) -> Vec<ChildSummary> {
        self.state().summary.rows()
    }

    /// The counters of one catalog entry (none for an id not in the catalog).
    pub fn summary_of(&self, child_id: &str) -> Option<ChildSummary> {
        self.summary().into_iter().find(|r| r.child_id == child_id)
    }

    /// The counters, then zeroes them (live delegations stay `running` and settle into the
    /// new window).
    pub fn summary_reset(&self) -> Vec<ChildSummary> {
        let mut state = self.state();
        let rows = state.summary.rows();
        state.summary.reset();
        rows
    }

    /// Ends the supervisor's session: cancels every child (session lifetime included), waits
    /// for them to report their terminals, then closes the event stream (subscribers read
    /// what is queued, then their `recv` returns `None`).
    pub async fn shutdown(&self) {
        self.inner.session_token.cancel();
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
        self.inner.bus.close();
    }

    /// The token whose cancellation ends every child.
    pub fn session_token(&self) -> &CancellationToken {
        &self.inner.session_token
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        // Every critical section is short and never panics midway.
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn publish(&self, event: SupervisorEvent) -> Option<Arc<SupervisorEnvelope>> {
        self.inner
            .bus
            .publish_with(self.inner.sink.is_some(), |seq| SupervisorEnvelope {
                seq,
                at: Timestamp::now(),
                event,
            })
            .1
    }
}

/// Builds a [`Supervisor`].
#[must_use]
pub struct SupervisorBuilder {
    id: String,
    ownership: Ownership,
    entries: Vec<ChildEntry>,
    permission: Permission,
    identity: Option<Identity>,
    limits: LimitsInput,
    before: Option<Arc<dyn BeforeHook>>,
    after: Option<Arc<dyn AfterHook>>,
    after_timeout: std::time::Duration,
    redactor: Option<Arc<dyn Redactor>>,
    effects: Option<Arc<dyn crate::tool::effect::EffectStore>>,
    child_events: bool,
    sink: Option<Arc<dyn ChildEventSink>>,
    session_token: CancellationToken,
    store: Option<Arc<dyn Store>>,
    revision: Option<String>,
}

impl fmt::Debug for SupervisorBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SupervisorBuilder")
            .field("id", &self.id)
            .finish()
    }
}

impl SupervisorBuilder {
    /// The supervisor's id (default `supervisor`).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// Adds an allow-listed child.
    pub fn child(mut self, entry: ChildEntry) -> Self {
        self.entries.push(entry);
        self
    }

    /// The supervisor-wide permission, AND-composed first onto every child run.
    pub fn permission(mut self, permission: Permission) -> Self {
        self.permission = permission;
        self
    }

    /// The identity children act as (narrowed per child by its catalog scopes). It must be
    /// active and the owner's.
    pub fn identity(mut self, identity: Identity) -> Self {
        self.identity = Some(identity);
        self
    }

    /// Limits over the defaults (each within its hard cap).
    pub fn limits(mut self, limits: LimitsInput) -> Self {
        self.limits = limits;
        self
    }

    /// The `before` hook.
    pub fn before(mut self, hook: impl BeforeHook + 'static) -> Self {
        self.before = Some(Arc::new(hook));
        self
    }

    /// The `after` hook.
    pub fn after(mut self, hook: impl AfterHook + 'static) -> Self {
        self.after = Some(Arc::new(hook));
        self
    }

    /// How long the `after` hook may run (default 10 s, at most 10 minutes). A hook that
    /// takes longer is abandoned (its future dropped) and a `delegation_error` says so: it
    /// never holds the delegation's slot or the supervisor's shutdown.
    pub fn after_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.after_timeout = timeout;
        self
    }

    /// The redactor applied to everything that leaves the supervisor.
    pub fn redactor(mut self, redactor: impl Redactor + 'static) -> Self {
        self.redactor = Some(Arc::new(redactor));
        self
    }

    /// The effect store every child's idempotent tool effects are recorded in (over the
    /// child agent's own, as the redactor is); see [`crate::tool::effect`].
    pub fn effect_store(
        mut self,
        effects: impl crate::tool::effect::EffectStore + 'static,
    ) -> Self {
        self.effects = Some(Arc::new(effects));
        self
    }

    /// Streams child events for children without their own report policy (default off: a
    /// child without a report policy reports on completion).
    pub fn child_events(mut self, on: bool) -> Self {
        self.child_events = on;
        self
    }

    /// A sink that receives every projected child event. With child events off and no
    /// catalog entry streaming by its own report policy, [`build`](Self::build) refuses it
    /// (it would receive nothing): set [`child_events`](Self::child_events)`(true)`.
    pub fn child_event_sink(mut self, sink: impl ChildEventSink + 'static) -> Self {
        self.sink = Some(Arc::new(sink));
        self
    }

    /// The session token: cancelling it ends every child.
    pub fn session_token(mut self, token: CancellationToken) -> Self {
        self.session_token = token;
        self
    }

    /// Durable approvals: every child run suspends before each tool call until a decision
    /// (taken at the root) allows it, and suspended children are resumed from the store,
    /// also by another process. `revision` names the definition children are built from; a
    /// child suspended under another revision is not resumed.
    pub fn durable_approvals(mut self, revision: impl Into<String>) -> Self {
        self.revision = Some(revision.into());
        self
    }

    /// The store for children's sessions (default: in memory).
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// Validates, in the documented order: ownership, identity, id, catalog, limits.
    pub fn build(self) -> CoreResult<Supervisor> {
        self.ownership.validate()?;
        if let Some(identity) = &self.identity {
            identity.check_active(Timestamp::now())?;
            let o = &self.ownership;
            identity.check_ownership(
                &o.tenant_id,
                o.account_id.as_deref(),
                o.user_id.as_deref(),
            )?;
        }
        if !valid_id(&self.id) {
            return Err(CoreError::validation("Supervisor id is invalid"));
        }
        if self.entries.is_empty() {
            return Err(CoreError::validation("At least one child is required"));
        }
        let mut index = HashMap::with_capacity(self.entries.len());
        for (i, entry) in self.entries.iter().enumerate() {
            check_child_id(&entry.id)?;
            if index.insert(entry.id.clone(), i).is_some() {
                return Err(CoreError::validation(format!(
                    "Duplicate child id: {}",
                    entry.id
                )));
            }
            entry.policy.validate()?;
        }
        if self
            .revision
            .as_deref()
            .is_some_and(|r| r.trim().is_empty())
        {
            return Err(CoreError::validation(
                "definition_revision is required when durable approvals are configured",
            ));
        }
        if self.after_timeout.is_zero() || self.after_timeout > MAX_AFTER_TIMEOUT {
            return Err(CoreError::validation(
                "after_timeout must be positive and at most 600000 ms",
            ));
        }
        let child_events = self.child_events;
        let some_entry_streams = self.entries.iter().any(|e| {
            e.policy
                .report
                .is_some_and(|r| r != crate::supervisor::config::policy::Report::OnComplete)
        });
        if self.sink.is_some() && !child_events && !some_entry_streams {
            return Err(CoreError::Config(
                "a child_event_sink is set, but child events are off and no child's report \
                 policy streams them: the sink would receive nothing (set child_events(true), \
                 or give a child a report policy)"
                    .to_owned(),
            ));
        }
        let limits = SupervisorLimits::resolve(&self.limits)?;
        let child_ids: Arc<[String]> = self.entries.iter().map(|e| e.id.clone()).collect();
        let capacity = usize::try_from(limits.max_queued_events).unwrap_or(128);
        Ok(Supervisor {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    summary: Summary::new(&child_ids),
                    handles: Handles::new(capacity),
                }),
                id: self.id,
                ownership: self.ownership,
                entries: self.entries,
                index,
                child_ids,
                permission: self.permission,
                identity: self.identity.map(Arc::new),
                limits,
                before: self.before,
                after: self.after,
                after_timeout: self.after_timeout,
                redactor: self.redactor,
                effects: self.effects,
                child_events,
                sink: self.sink,
                session_token: self.session_token,
                store: self.store.unwrap_or_else(|| Arc::new(MemoryStore::new())),
                slots: Arc::new(Slots::default()),
                names: Arc::default(),
                bus: Bus::retaining(capacity),
                watching: std::sync::atomic::AtomicBool::new(false),
                dropped: CancellationToken::new(),
                tracker: TaskTracker::new(),
                hub: Hub::default(),
                revision: self.revision,
            }),
        })
    }
}
