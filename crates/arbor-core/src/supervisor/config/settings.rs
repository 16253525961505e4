//! The immutable part of a supervisor: [`Settings`], what its builder resolved (id,
//! ownership, permission, identity, limits, hooks, redactor, effect store, child events,
//! sink, durable revision). Fields are private to the configuration; the rest of the
//! supervisor reads them through the methods here.

use std::sync::Arc;
use std::time::Duration;

use crate::identity::Identity;
use crate::permission::Permission;
use crate::redact::Redactor;
use crate::supervisor::config::hooks::{AfterHook, BeforeHook};
use crate::supervisor::config::limits::SupervisorLimits;
use crate::supervisor::config::ownership::Ownership;
use crate::supervisor::config::runner::ChildRunner;
use crate::supervisor::config::sink::ChildEventSink;
use crate::tool::effect::EffectStore;

/// What a supervisor was built with. Never changes after build.
pub(crate) struct Settings {
    pub(in crate::supervisor::config) id: String,
    pub(in crate::supervisor::config) ownership: Ownership,
    pub(in crate::supervisor::config) permission: Permission,
    pub(in crate::supervisor::config) identity: Option<Arc<Identity>>,
    pub(in crate::supervisor::config) limits: SupervisorLimits,
    pub(in crate::supervisor::config) before: Option<Arc<dyn BeforeHook>>,
    pub(in crate::supervisor::config) after: Option<Arc<dyn AfterHook>>,
    pub(in crate::supervisor::config) after_timeout: Duration,
    pub(in crate::supervisor::config) redactor: Option<Arc<dyn Redactor>>,
    pub(in crate::supervisor::config) effects: Option<Arc<dyn EffectStore>>,
    pub(in crate::supervisor::config) child_events: bool,
    pub(in crate::supervisor::config) sink: Option<Arc<dyn ChildEventSink>>,
    pub(in crate::supervisor::config) revision: Option<String>,
    pub(in crate::supervisor::config) gate_children: bool,
    pub(in crate::supervisor::config) runner: Option<Arc<dyn ChildRunner>>,
    pub(in crate::supervisor::config) pricing: Option<Arc<crate::pricing::PriceTable>>,
    pub(in crate::supervisor::config) standing: crate::approval::standing::Standing,
    pub(in crate::supervisor::config) max_queued: u32,
    pub(in crate::supervisor::config) budget_policy: crate::budget::BudgetPolicy,
}

impl Settings {
    /// The supervisor's id.
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Who it acts for.
    pub(crate) fn ownership(&self) -> &Ownership {
        &self.ownership
    }

    /// The supervisor-wide permission.
    pub(crate) fn permission(&self) -> &Permission {
        &self.permission
    }

    /// The identity children act as, if any.
    pub(crate) fn identity(&self) -> Option<&Arc<Identity>> {
        self.identity.as_ref()
    }

    /// The resolved limits.
    pub(crate) fn limits(&self) -> &SupervisorLimits {
        &self.limits
    }

    /// The `before` hook.
    pub(crate) fn before(&self) -> Option<&Arc<dyn BeforeHook>> {
        self.before.as_ref()
    }

    /// The `after` hook.
    pub(crate) fn after(&self) -> Option<&Arc<dyn AfterHook>> {
        self.after.as_ref()
    }

    /// How long the `after` hook may run.
    pub(crate) fn after_timeout(&self) -> Duration {
        self.after_timeout
    }

    /// The redactor applied to everything that leaves the supervisor.
    pub(crate) fn redactor(&self) -> Option<&Arc<dyn Redactor>> {
        self.redactor.as_ref()
    }

    /// What a spawn asking for more than its parent's pool has left gets.
    pub(crate) fn budget_policy(&self) -> crate::budget::BudgetPolicy {
        self.budget_policy
    }

    /// The prices child runs are costed with, over their agents' own.
    pub(crate) fn max_queued(&self) -> u32 {
        self.max_queued
    }

    pub(crate) fn standing(&self) -> &crate::approval::standing::Standing {
        &self.standing
    }

    pub(crate) fn pricing(&self) -> Option<&Arc<crate::pricing::PriceTable>> {
        self.pricing.as_ref()
    }

    /// The effect store child runs record idempotent effects in.
    pub(crate) fn effects(&self) -> Option<&Arc<dyn EffectStore>> {
        self.effects.as_ref()
    }

    /// Whether children without a report policy stream their events.
    pub(crate) fn child_events(&self) -> bool {
        self.child_events
    }

    /// The host's child-event sink.
    pub(crate) fn sink(&self) -> Option<&Arc<dyn ChildEventSink>> {
        self.sink.as_ref()
    }

    /// The definition revision children are built from (durable approvals, or a
    /// definition revision alone): a suspended child resumes only under it.
    pub(crate) fn revision(&self) -> Option<&str> {
        self.revision.as_deref()
    }

    /// Durable approvals: every call of every child waits for a decision.
    pub(crate) fn gates_children(&self) -> bool {
        self.gate_children
    }

    /// Where children run when not here (`None`: every child runs in this process).
    pub(crate) fn runner(&self) -> Option<&Arc<dyn ChildRunner>> {
        self.runner.as_ref()
    }
}
