//! Building a supervisor: [`SupervisorBuilder`] validates, in the documented order
//! (ownership, identity, id, catalog, limits), and assembles the [`Settings`], the
//! [`Catalog`] and the live part a [`Supervisor`] is made of.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::Timestamp;
use arbor_store::{MemoryStore, Store};
use tokio_util::sync::CancellationToken;

use crate::error::{CoreError, CoreResult};
use crate::identity::Identity;
use crate::permission::Permission;
use crate::redact::Redactor;
use crate::supervisor::config::hooks::{AfterHook, BeforeHook};
use crate::supervisor::config::limits::{LimitsInput, SupervisorLimits};
use crate::supervisor::config::names::valid_id;
use crate::supervisor::config::ownership::Ownership;
use crate::supervisor::config::policy::Report;
use crate::supervisor::config::runner::ChildRunner;
use crate::supervisor::config::settings::Settings;
use crate::supervisor::config::sink::ChildEventSink;
use crate::supervisor::runtime::{Catalog, ChildEntry, Supervisor};
use crate::tool::effect::EffectStore;

/// How long an `after` hook may run by default.
pub const DEFAULT_AFTER_TIMEOUT: Duration = Duration::from_secs(10);

/// How many spawns may wait for a slot at once across a tree, unless the host says.
pub const DEFAULT_MAX_QUEUED: u32 = 16;
const MAX_AFTER_TIMEOUT: Duration = Duration::from_secs(600);

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
            gate_children: false,
            runner: None,
            pricing: None,
            standing: crate::approval::standing::Standing::default(),
            max_queued: DEFAULT_MAX_QUEUED,
            budget_policy: crate::budget::BudgetPolicy::default(),
        }
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
    after_timeout: Duration,
    redactor: Option<Arc<dyn Redactor>>,
    effects: Option<Arc<dyn EffectStore>>,
    child_events: bool,
    sink: Option<Arc<dyn ChildEventSink>>,
    session_token: CancellationToken,
    store: Option<Arc<dyn Store>>,
    revision: Option<String>,
    gate_children: bool,
    runner: Option<Arc<dyn ChildRunner>>,
    pricing: Option<Arc<crate::pricing::PriceTable>>,
    standing: crate::approval::standing::Standing,
    max_queued: u32,
    budget_policy: crate::budget::BudgetPolicy,
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
    pub fn after_timeout(mut self, timeout: Duration) -> Self {
        self.after_timeout = timeout;
        self
    }

    /// The redactor applied to everything that leaves the supervisor.
    pub fn redactor(mut self, redactor: impl Redactor + 'static) -> Self {
        self.redactor = Some(Arc::new(redactor));
        self
    }

    /// The prices every child's provider turns are costed with (over the child agent's own,
    /// as the redactor is). With `missing = "error"`, a child whose model has no price is
    /// refused at admission, naming `pricing`, before anything is created.
    pub fn pricing(mut self, table: impl Into<Arc<crate::pricing::PriceTable>>) -> Self {
        self.pricing = Some(table.into());
        self
    }

    /// Standing decisions for the supervisor's children at every depth (see
    /// [`crate::approval::standing`]; the root's own calls are its host's to gate): a call
    /// that would wait for a decision and matches one is allowed or rejected at once,
    /// written down as decided by `standing`. Every child inherits them; its catalog entry
    /// (`ChildEntry::standing`) can only narrow them.
    pub fn standing(mut self, layer: crate::approval::standing::StandingLayer) -> Self {
        self.standing = crate::approval::standing::Standing::new(layer);
        self
    }

    /// How many spawns may wait for a slot at once across the tree (`on_full = "queue"`;
    /// default [`DEFAULT_MAX_QUEUED`]; 0 refuses every queued spawn as the queue full).
    pub fn max_queued(mut self, max_queued: u32) -> Self {
        self.max_queued = max_queued;
        self
    }

    /// What a spawn asking for a larger pool than its parent's has left gets: what is left
    /// (the default, and the tool result says it was clamped), or a refusal.
    pub fn budget_policy(mut self, policy: crate::budget::BudgetPolicy) -> Self {
        self.budget_policy = policy;
        self
    }

    /// The effect store every child's idempotent tool effects are recorded in (over the
    /// child agent's own, as the redactor is); see [`crate::tool::effect`].
    pub fn effect_store(mut self, effects: impl EffectStore + 'static) -> Self {
        self.effects = Some(Arc::new(effects));
        self
    }

    /// Hands children's runs to another process (a worker that claims them from a shared
    /// store) instead of running them here; see [`crate::supervisor::runner`] for which runs
    /// go and what stays with this supervisor.
    pub fn runner(mut self, runner: impl ChildRunner + 'static) -> Self {
        self.runner = Some(Arc::new(runner));
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
        self.gate_children = true;
        self
    }

    /// The definition children are built from, without gating their calls: a child that
    /// suspends on its own (a question for a person, `ask_human`) is resumed from the store,
    /// also by another process, under this revision only. [`durable_approvals`] sets it too.
    ///
    /// [`durable_approvals`]: SupervisorBuilder::durable_approvals
    pub fn definition_revision(mut self, revision: impl Into<String>) -> Self {
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
        let catalog = Catalog::new(self.entries)?;
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
        let some_entry_streams = catalog
            .entries()
            .iter()
            .any(|e| e.policy.report.is_some_and(|r| r != Report::OnComplete));
        if self.sink.is_some() && !self.child_events && !some_entry_streams {
            return Err(CoreError::Config(
                "a child_event_sink is set, but child events are off and no child's report \
                 policy streams them: the sink would receive nothing (set child_events(true), \
                 or give a child a report policy)"
                    .to_owned(),
            ));
        }
        let limits = SupervisorLimits::resolve(&self.limits)?;
        let capacity = usize::try_from(limits.max_queued_events).unwrap_or(128);
        let store = self.store.unwrap_or_else(|| Arc::new(MemoryStore::new()));
        let settings = Settings {
            id: self.id,
            ownership: self.ownership,
            permission: self.permission,
            identity: self.identity.map(Arc::new),
            limits,
            before: self.before,
            after: self.after,
            after_timeout: self.after_timeout,
            redactor: self.redactor,
            effects: self.effects,
            child_events: self.child_events,
            sink: self.sink,
            revision: self.revision,
            gate_children: self.gate_children,
            runner: self.runner,
            pricing: self.pricing,
            standing: self.standing,
            max_queued: self.max_queued,
            budget_policy: self.budget_policy,
        };
        Ok(Supervisor::assemble(
            settings,
            catalog,
            store,
            self.session_token,
            capacity,
        ))
    }
}
