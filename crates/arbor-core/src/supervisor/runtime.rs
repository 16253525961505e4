//! The supervisor's types, defined together because they refer to each other: a
//! [`Supervisor`] holds its [`Catalog`] of [`ChildEntry`]s; an entry's [`ChildFactory`] is
//! handed a [`ChildContext`] carrying a [`Delegator`]; a delegator holds the supervisor.
//! Keeping the circle inside this one file keeps the files around it free of circles: the
//! entries' builder methods live in [`catalog`](super::catalog), the delegator's in
//! [`delegate`](super::delegation::delegate), the supervisor's parts in
//! [`settings`](super::config::settings) (what it was built with) and
//! [`live`](super::tree::live) (what its delegations share).
//!
//! A [`Supervisor`] is a handle to three parts with private fields: its settings, its
//! catalog and its live state. Every other module reads them through
//! [`Supervisor::settings`], [`Supervisor::catalog`] and [`Supervisor::live`].

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, MutexGuard};

use arbor_model::{ModelProvider, ThinkingLevel};
use arbor_protocol::{SupervisorEnvelope, SupervisorEvent, Timestamp};
use arbor_store::Store;
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::error::{CoreError, CoreResult};
use crate::identity::Identity;
use crate::permission::Permission;
use crate::session::events::Subscription;
use crate::supervisor::config::limits::{LimitsInput, SupervisorLimits};
use crate::supervisor::config::names::check_child_id;
use crate::supervisor::config::ownership::Ownership;
use crate::supervisor::config::policy::{MilestoneFn, PolicyInput};
use crate::supervisor::config::settings::Settings;
use crate::supervisor::tree::live::{Live, State};
use crate::supervisor::tree::summary::ChildSummary;

/// Where a delegation sits: the chain above it.
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    pub(crate) path: Arc<[String]>,
    pub(crate) parents: Arc<[String]>,
    pub(crate) token: CancellationToken,
    /// The identity the delegating child acts as.
    pub(crate) identity: Option<Arc<Identity>>,
    /// Slots that cannot free while the delegating child waits on a sync spawn: its own and
    /// its sync callers' (see [`crate::supervisor::delegation`]'s admission).
    pub(crate) sync_chain: u32,
}

/// What a child factory receives.
#[derive(Debug, Clone)]
pub struct ChildContext {
    /// The catalog entry.
    pub child_id: String,
    /// The delegation.
    pub delegation_id: String,
    /// Its depth (1 for a root's children).
    pub depth: u32,
    /// Child ids from the top, this one last.
    pub path: Arc<[String]>,
    /// `<supervisor>/<delegation>/<child>`: the scope for the child's own memory and data.
    pub resource_id: String,
    /// The resource id plus the requested thread (`default` when none).
    pub thread_id: String,
    /// The narrowed permission the child's runs are held to (the runtime composes it with the
    /// agent's own; the factory need not apply it).
    pub permission: Permission,
    /// The identity the child acts as: the parent's, narrowed to the entry's scopes (the
    /// runtime forces it onto the agent). Never a credential.
    pub identity: Option<Arc<Identity>>,
    /// The model admission resolved (the request's, else the entry's default), if any: the
    /// agent built must use exactly it.
    pub model: Option<String>,
    /// The thinking level admission checked, if the delegation asked for one (the runtime
    /// forces it onto the agent built; the factory need not apply it).
    pub thinking: Option<ThinkingLevel>,
    /// Fires when the delegation is cancelled or times out.
    pub cancel: CancellationToken,
    /// Delegates further from inside this child (path, depth and cancellation carried).
    pub delegator: Delegator,
}

/// Builds a child's agent for one delegation.
#[async_trait]
pub trait ChildFactory: fmt::Debug + Send + Sync {
    /// Builds the agent. It may use the context's ids, permission and delegator.
    async fn create(&self, ctx: ChildContext) -> CoreResult<Agent>;
}

const _: fn(&dyn ChildFactory) = |_| {};

/// Delegates on behalf of one place in the tree: the host (top level) or a running child.
#[derive(Debug, Clone)]
pub struct Delegator {
    pub(crate) supervisor: Supervisor,
    pub(crate) scope: Option<Arc<Scope>>,
}

/// The allow-list: the entries in catalog order, indexed by id. Checked once, at build.
pub(crate) struct Catalog {
    entries: Vec<ChildEntry>,
    index: HashMap<String, usize>,
    ids: Arc<[String]>,
}

impl Catalog {
    /// Checks the entries (at least one; valid, unique ids; valid policies) and indexes them.
    pub(crate) fn new(entries: Vec<ChildEntry>) -> CoreResult<Self> {
        if entries.is_empty() {
            return Err(CoreError::validation("At least one child is required"));
        }
        let mut index = HashMap::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            check_child_id(&entry.id)?;
            if index.insert(entry.id.clone(), i).is_some() {
                return Err(CoreError::validation(format!(
                    "Duplicate child id: {}",
                    entry.id
                )));
            }
            entry.policy.validate()?;
        }
        let ids = entries.iter().map(|e| e.id.clone()).collect();
        Ok(Self {
            entries,
            index,
            ids,
        })
    }

    /// The entry named `id` and its position.
    pub(crate) fn get(&self, id: &str) -> Option<(usize, &ChildEntry)> {
        let i = *self.index.get(id)?;
        Some((i, self.entries.get(i)?))
    }

    /// The entry at `i` (a position [`get`](Self::get) returned).
    pub(crate) fn entry(&self, i: usize) -> Option<&ChildEntry> {
        self.entries.get(i)
    }

    /// Every entry, in catalog order.
    pub(crate) fn entries(&self) -> &[ChildEntry] {
        &self.entries
    }

    /// The ids, in catalog order.
    pub(crate) fn ids(&self) -> &[String] {
        &self.ids
    }
}

/// A catalog position that does not exist (admission hands out only real ones).
pub(crate) fn unknown_entry() -> CoreError {
    CoreError::Supervisor("unknown catalog entry".to_owned())
}

struct Inner {
    settings: Settings,
    catalog: Catalog,
    live: Live,
}

/// Allow-listed delegation to child agents, under limits that only narrow. Cheap to clone;
/// clones share everything.
#[derive(Clone)]
pub struct Supervisor {
    inner: Arc<Inner>,
}

impl fmt::Debug for Supervisor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Supervisor")
            .field("id", &self.settings().id())
            .field("children", &self.catalog().ids())
            .field("limits", self.settings().limits())
            .finish()
    }
}

impl Supervisor {
    /// A supervisor of parts its builder checked.
    pub(crate) fn assemble(
        settings: Settings,
        catalog: Catalog,
        store: Arc<dyn arbor_store::Store>,
        session_token: CancellationToken,
        capacity: usize,
    ) -> Self {
        let live = Live::new(store, session_token, catalog.ids(), capacity);
        Self {
            inner: Arc::new(Inner {
                settings,
                catalog,
                live,
            }),
        }
    }

    /// What it was built with.
    pub(crate) fn settings(&self) -> &Settings {
        &self.inner.settings
    }

    /// Its allow-list.
    pub(crate) fn catalog(&self) -> &Catalog {
        &self.inner.catalog
    }

    /// What its delegations share.
    pub(crate) fn live(&self) -> &Live {
        &self.inner.live
    }
}

/// One allow-listed child.
#[derive(Debug, Clone)]
pub struct ChildEntry {
    pub(crate) id: String,
    pub(crate) description: Option<String>,
    pub(crate) factory: Arc<dyn ChildFactory>,
    pub(crate) permission: Permission,
    pub(crate) limits: LimitsInput,
    pub(crate) policy: PolicyInput,
    pub(crate) scopes: Option<BTreeSet<String>>,
    /// The model it runs when none is requested.
    pub(crate) model: Option<String>,
    /// Other models a request may choose.
    pub(crate) allowed_models: Vec<String>,
    /// The provider a requested model is preflighted against.
    pub(crate) preflight: Option<Arc<dyn ModelProvider>>,
    /// The agent name its sessions record.
    pub(crate) agent_name: Option<String>,
    /// Which of its events are milestones (`report = milestones`), when the host decides.
    pub(crate) milestone: Option<MilestoneFn>,
    /// The thinking levels each model supports, as the host declared them.
    pub(crate) thinking: BTreeMap<String, Vec<ThinkingLevel>>,
    /// The pool a delegation of it gets when the request names none.
    pub(crate) budget: Option<crate::budget::Budget>,
    /// The JSON Schema its answers must match (a request may not name another).
    pub(crate) output: Option<crate::output::OutputSchema>,
    /// Whether its spawns may, must or must not fork the parent's conversation.
    pub(crate) context: crate::session::fork::ContextPolicy,
    /// How it narrows the standing decisions it inherits.
    pub(crate) standing: Option<crate::approval::standing::StandingLayer>,
}

impl Supervisor {
    /// The supervisor's id.
    pub fn id(&self) -> &str {
        self.settings().id()
    }

    /// The identity children act as, if any.
    pub fn identity(&self) -> Option<&Identity> {
        self.settings().identity().map(|i| &**i)
    }

    /// The owner it acts for.
    pub fn ownership(&self) -> &Ownership {
        self.settings().ownership()
    }

    /// The advertised child ids, in catalog order.
    pub fn child_ids(&self) -> &[String] {
        self.catalog().ids()
    }

    /// The description of a child, if it has one.
    pub fn child_description(&self, child_id: &str) -> Option<&str> {
        let (_, entry) = self.catalog().get(child_id)?;
        entry.description.as_deref()
    }

    /// The resolved limits.
    pub fn limits(&self) -> &SupervisorLimits {
        self.settings().limits()
    }

    /// The store children's sessions are kept in.
    pub fn store(&self) -> &Arc<dyn Store> {
        self.live().store()
    }

    /// Live children across the tree.
    pub fn active_children(&self) -> u32 {
        self.live().slots().active()
    }

    /// Spawns waiting for a slot across the tree (`on_full: queue`).
    pub fn queued_children(&self) -> usize {
        self.live().slots().queued()
    }

    /// The most sessions these limits permit at once (root included).
    pub(crate) fn worst_case_sessions(&self) -> u64 {
        self.settings().limits().worst_case_sessions()
    }

    /// Subscribes to the supervisor's events from now on. The first subscription also gets
    /// what was published before it (up to `max_queued_events`; a lag marker counts any
    /// dropped). Every subscription ends after [`shutdown`](Self::shutdown).
    pub fn subscribe(&self) -> Subscription<SupervisorEnvelope> {
        self.watch_session_end();
        self.live().bus().subscribe()
    }

    /// Closes the event stream once the session token is cancelled (by [`shutdown`] or by
    /// the host directly), after the children it ends have reported their terminals:
    /// subscribers read what is queued, then their `recv` returns `None`. Started once,
    /// by the first subscription or delegation made inside a Tokio runtime.
    ///
    /// [`shutdown`]: Self::shutdown
    pub(crate) fn watch_session_end(&self) {
        use std::sync::atomic::Ordering;
        if self.live().watching().swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.live().watching().store(false, Ordering::Release);
            return;
        };
        let token = self.live().session_token().clone();
        let dropped = self.live().dropped().clone();
        let abandoned = self.live().abandoned().clone();
        let inner = Arc::downgrade(&self.inner);
        runtime.spawn(async move {
            tokio::select! {
                () = token.cancelled() => {}
                () = dropped.cancelled() => return,
                () = abandoned.cancelled() => return,
            }
            let Some(inner) = inner.upgrade() else {
                return;
            };
            let (tracker, bus) = (inner.live.tracker().clone(), inner.live.bus().clone());
            drop(inner);
            tracker.close();
            tracker.wait().await;
            bus.close();
        });
    }

    /// `text` with the supervisor's secrets replaced.
    pub fn redact(&self, text: &str) -> String {
        match self.settings().redactor() {
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
        let live = self.live();
        live.session_token().cancel();
        live.tracker().close();
        live.tracker().wait().await;
        live.bus().close();
    }

    /// Stops everything this supervisor runs where it stands, as if its process had died:
    /// every delegation and task of it is dropped at its next poll, no cancellation runs,
    /// and nothing more is written (a store operation in flight is dropped with its future).
    /// The runs are left as a crash leaves them, for whoever takes them over, which goes on
    /// from their transcripts.
    ///
    /// For a host that lost its claim on the work, like a worker whose lease ran out while
    /// its store was unreachable: another may be running it already, and two writers of one
    /// run must never be. The host drops the futures it awaits (a
    /// [`run_claimed`](Self::run_claimed), say) right after this; the supervisor runs
    /// nothing afterwards.
    pub(crate) fn abandon_runs(&self) {
        self.live().abandoned().cancel();
    }

    /// The token whose cancellation ends every child.
    pub fn session_token(&self) -> &CancellationToken {
        self.live().session_token()
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.live().state()
    }

    pub(crate) fn publish(&self, event: SupervisorEvent) -> Option<Arc<SupervisorEnvelope>> {
        self.live()
            .bus()
            .publish_with(self.settings().sink().is_some(), |seq| SupervisorEnvelope {
                seq,
                at: Timestamp::now(),
                event,
            })
            .1
    }
}
