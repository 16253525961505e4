//! What a host (or a model, through `spawn_agent`) asks for and gets back: a
//! [`DelegationRequest`], how its caller takes the result ([`Mode`]), the [`AsyncHandle`] of an
//! admitted child, and the [`DelegationResult`] of a finished one.

use arbor_protocol::{SessionId, SpawnPoint};
use tokio_util::sync::CancellationToken;

use crate::outcome::{RunResult, SessionRef};
use crate::supervisor::config::limits::LimitsInput;
use crate::supervisor::config::policy::PolicyInput;

/// One delegation request.
#[derive(Debug, Clone, Default)]
pub struct DelegationRequest {
    /// The allow-listed child to run.
    pub child_id: String,
    /// Its task.
    pub input: String,
    /// A thread within the child's resource (default `default`).
    pub thread_id: Option<String>,
    /// A readable name for the child's session (default: the child id).
    pub name: Option<String>,
    /// Limits that may only lower the inherited ones.
    pub limits: LimitsInput,
    /// Lifetime, report, milestone and budget share, narrowing the child's policy.
    pub policy: PolicyInput,
    /// The caller's cancellation (ignored for session lifetime).
    pub cancel: Option<CancellationToken>,
    /// The session delegating, whose child the new session becomes.
    pub parent: Option<SessionRef>,
    /// The parent's run and turn that asked for the child (its usage is attributed there).
    pub spawned_by: Option<SpawnPoint>,
    /// The parent's tool call that asked for the child, kept in its record
    /// (`meta.spawn_call`): a parent run continued after its process died finds the child
    /// that call started and waits for it instead of calling it interrupted.
    pub spawn_call: Option<String>,
    /// The model to run: one the child's catalog entry allows (default: the entry's own).
    pub model: Option<String>,
    /// How much the child's model reasons: one of the levels the resolved model supports
    /// ([`ChildEntry::supported_thinking`](crate::supervisor::ChildEntry::supported_thinking)),
    /// else admission refuses the spawn naming them. Kept in the child's record
    /// (`meta.thinking`) and forced onto every run of it; unset leaves the agent's own.
    pub thinking: Option<arbor_model::ThinkingLevel>,
    /// Model controls for the child's calls (sampling, length, tool use), over its agent's
    /// own: checked at admission (a value out of range, or one the child's provider cannot
    /// carry, refuses the spawn naming it), kept in the child's record (`meta.controls`)
    /// and forced onto every run of it.
    pub controls: Option<arbor_model::Controls>,
    /// A pool for the child's whole subtree (`max_tree_tokens`, `max_tree_cost`), reserved
    /// from its parent's pools at admission (clamped to what they have left, or refused, per
    /// the supervisor's [`BudgetPolicy`](crate::budget::BudgetPolicy)); over its catalog
    /// entry's.
    pub budget: Option<crate::budget::Budget>,
    /// The JSON Schema the child's answer must match (see [`crate::output`]); its
    /// catalog entry's when none.
    pub output_schema: Option<crate::output::OutputSchema>,
    /// How much of the parent's conversation the child starts with (see
    /// [`crate::session::fork`]); its catalog entry's policy decides when none.
    pub context: Option<crate::session::fork::ForkContext>,
    /// Past `max_active_children`: refuse (the default) or wait in the queue.
    pub on_full: Option<OnFull>,
}

impl DelegationRequest {
    /// A request to run `child_id` on `input`.
    pub fn new(child_id: impl Into<String>, input: impl Into<String>) -> Self {
        Self {
            child_id: child_id.into(),
            input: input.into(),
            ..Self::default()
        }
    }

    /// The session delegating: the new child is recorded under it (required for a
    /// message-mode child, whose answer goes to it).
    pub fn parent(mut self, parent: impl Into<SessionRef>) -> Self {
        self.parent = Some(parent.into());
        self
    }

    /// A readable name for the child's session.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// A thread within the child's resource.
    pub fn thread(mut self, thread_id: impl Into<String>) -> Self {
        self.thread_id = Some(thread_id.into());
        self
    }

    /// Limits that may only lower the inherited ones.
    pub fn limits(mut self, limits: LimitsInput) -> Self {
        self.limits = limits;
        self
    }

    /// Lifetime, report, milestone and budget share, narrowing the child's policy.
    pub fn policy(mut self, policy: PolicyInput) -> Self {
        self.policy = policy;
        self
    }

    /// The model to run (one the child's catalog entry allows).
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// How much the child's model reasons.
    pub fn thinking(mut self, level: arbor_model::ThinkingLevel) -> Self {
        self.thinking = Some(level);
        self
    }

    /// Model controls for the child's calls, over its agent's own.
    pub fn controls(mut self, controls: arbor_model::Controls) -> Self {
        self.controls = (!controls.is_empty()).then_some(controls);
        self
    }

    /// A pool for the child's whole subtree (see [`crate::budget`]).
    pub fn budget(mut self, budget: crate::budget::Budget) -> Self {
        self.budget = (!budget.is_empty()).then_some(budget);
        self
    }

    /// The JSON Schema the child's answer must match (see [`crate::output`]): refused when
    /// its catalog entry fixes another.
    pub fn output_schema(mut self, output: crate::output::OutputSchema) -> Self {
        self.output_schema = Some(output);
        self
    }

    /// How much of the parent's conversation the child starts with: `All` or its
    /// `LastTurns(n)` (refused when its catalog entry forbids it, and without a parent).
    pub fn context(mut self, context: crate::session::fork::ForkContext) -> Self {
        self.context = Some(context);
        self
    }

    /// Past `max_active_children`: wait in the tree's queue ([`OnFull::Queue`]) rather than
    /// be refused.
    pub fn on_full(mut self, on_full: OnFull) -> Self {
        self.on_full = Some(on_full);
        self
    }

    /// The caller's cancellation: cancelling it cancels a task-lifetime child.
    pub fn cancel(mut self, token: CancellationToken) -> Self {
        self.cancel = Some(token);
        self
    }
}

/// A finished delegation.
#[derive(Debug, Clone, PartialEq)]
pub struct DelegationResult {
    /// The delegation.
    pub delegation_id: String,
    /// The catalog entry.
    pub child_id: String,
    /// The child's session (where its transcript lives).
    pub session_id: SessionId,
    /// The child session's name.
    pub name: String,
    /// The child run's result.
    pub result: RunResult,
    /// The child's answer as the value its output schema asked for (when it had one and
    /// its run succeeded: `result.text` is this value's JSON).
    pub output: Option<serde_json::Value>,
}

/// What a spawn does when `max_active_children` are live: fail at once (the default), or
/// wait in the tree's queue (at most the supervisor's `max_queued`) and start, in the order
/// it came, when a slot frees. A queued child is registered at once with status `queued`.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum OnFull {
    /// Refused at once, naming `max_active_children`.
    #[default]
    Refuse,
    /// Queued until a slot frees.
    Queue,
}

/// How the caller takes a child's result: the one mode of every surface (the `spawn_agent`
/// tool's `mode`, the records' `mode`, the HTTP API's and MCP's), named `sync`, `async` and
/// `message` in all of them (`join`, the HTTP API's old name for `async`, is still read).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The caller waits for the answer (`delegate`).
    Sync,
    /// The caller gets a handle and collects the answer with `wait` (`delegate_async`).
    #[serde(alias = "join")]
    Async,
    /// The child answers its parent session by message (`spawn`).
    Message,
}

impl Mode {
    /// The mode's name in records and tool arguments.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sync => "sync",
            Self::Async => "async",
            Self::Message => "message",
        }
    }
}

/// The handle of an admitted delegation: what a parent needs to address the child later,
/// and nothing of its result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsyncHandle {
    /// The delegation.
    pub delegation_id: String,
    /// The catalog entry.
    pub child_id: String,
    /// The child's session: where its transcript lives.
    pub session_id: SessionId,
    /// Its readable name, unique among its siblings.
    pub name: String,
    /// The model it runs (none when its factory chooses).
    pub model: Option<String>,
}

/// A delete of one child ([`Supervisor::delete_child`]): which child of which parent, who
/// asks and why (both kept in its tombstone). By default the host deletes it for `user`.
///
/// [`Supervisor::delete_child`]: crate::supervisor::Supervisor::delete_child
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeleteChild {
    /// The parent session.
    pub parent: SessionId,
    /// The child: its name among its live siblings, or its session id (a deleted child
    /// only by its id).
    pub selector: String,
    /// Who deletes it (`host`, `user:<name>`, a session).
    pub by: String,
    /// Why (redacted before it is kept).
    pub reason: String,
}

impl DeleteChild {
    /// A delete of the child of `parent` that `selector` names, by the host, for `user`.
    pub fn new(parent: SessionId, selector: impl Into<String>) -> Self {
        Self {
            parent,
            selector: selector.into(),
            by: "host".to_owned(),
            reason: "user".to_owned(),
        }
    }

    /// Who deletes it.
    #[must_use]
    pub fn by(mut self, by: impl Into<String>) -> Self {
        self.by = by.into();
        self
    }

    /// Why.
    #[must_use]
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = reason.into();
        self
    }
}

/// A rename of one child ([`Supervisor::rename_child`]): which child of which parent, its
/// new name, and who renames it (kept in its transcript). By default the host renames it.
///
/// [`Supervisor::rename_child`]: crate::supervisor::Supervisor::rename_child
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RenameChild {
    /// The parent session.
    pub parent: SessionId,
    /// The child: its name among its live siblings, or its session id.
    pub selector: String,
    /// Its new name (checked like a requested one).
    pub new_name: String,
    /// Who renames it.
    pub by: String,
}

impl RenameChild {
    /// A rename of the child of `parent` that `selector` names to `new_name`, by the host.
    pub fn new(
        parent: SessionId,
        selector: impl Into<String>,
        new_name: impl Into<String>,
    ) -> Self {
        Self {
            parent,
            selector: selector.into(),
            new_name: new_name.into(),
            by: "host".to_owned(),
        }
    }

    /// Who renames it.
    #[must_use]
    pub fn by(mut self, by: impl Into<String>) -> Self {
        self.by = by.into();
        self
    }
}
