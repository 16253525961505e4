//! The supervisor: allow-listed delegation to child agents.
//!
//! Every delegation is an admission first ([`Supervisor::delegate`] /
//! [`Supervisor::delegate_async`] check the allow-list, cycles, policy, limits, depth and
//! input size, then reserve a slot, all before anything is counted), then a drive: the
//! `before` hook, the child's factory and its run, under the delegation's timeout and
//! cancellation, ending in exactly one terminal report (events, counters, `after` hook).
//!
//! **Teardown.** A delegation that ends (success, failure or cancel) cancels its
//! task-lifetime descendants: nothing keeps running under a delegation that is over (the
//! delegation contract's rule; the supervisor reference leaves them running). Session-lifetime
//! and message-mode children run until cancelled, deleted, their parent closed, or the
//! supervisor's session ends. [`Supervisor::summary`] shows a torn-down child `aborted`, and
//! `failure_radius` counts the task-lifetime descendants live at the moment of the failure.
//!
//! - [`limits`], [`SupervisorLimits`], defaults, hard caps and narrowing.
//! - [`policy`], child policies (lifetime, report, milestones, budget share).
//! - [`catalog`], the allow-list ([`ChildEntry`], [`ChildFactory`]).
//! - [`hooks`], `before` and `after`.
//! - [`runner`], children whose runs a host hands to another process ([`ChildRunner`]).
//! - [`summary`], the recovery counters.
//! - Suspended runs nobody awaits (a message-mode child waiting for approval):
//!   [`Supervisor::resume_child`] (what finds and closes them is in
//!   [`process`](crate::process)).
//! - [`tools`], the model-facing `spawn_agent`, `wait_agent` and `cancel_agent`;
//!   [`SendMessageTool`] and [`ListChildrenTool`], `send_message` and `list_children`;
//!   [`FindModelsTool`], `find_models` (the models and thinking levels a child may run).

pub(crate) mod config;
pub(crate) mod delegation;
pub(crate) mod lifecycle;
pub(crate) mod request;
mod runtime;
pub(crate) mod stopped;
pub mod tools;
pub(crate) mod tree;

pub use config::{catalog, hooks, limits, names, policy, runner};
pub use tree::{messages, summary};

pub use catalog::{
    AgentFactory, ChildContext, ChildEntry, ChildFactory, FnFactory, MilestoneContext, MilestoneFn,
    Product, erased_factory, factory_fn,
};
pub use config::builder::{DEFAULT_AFTER_TIMEOUT, DEFAULT_MAX_QUEUED, SupervisorBuilder};
pub use config::ownership::Ownership;
pub use config::sink::{ChildEventSink, FnSink, sink_fn};
pub use delegation::decide::{answer_at, decide_at, waiting_at};
pub use delegation::join::{WaitOptions, WaitOutcome};
pub use delegation::suspended::SuspendedDelegation;
pub use hooks::{
    AfterHook, BeforeContext, BeforeDecision, BeforeHook, Completion, CompletionStatus, FnAfter,
    FnBefore, HookError, after_fn, before_fn,
};
pub use lifecycle::{Deleted, Renamed};
pub use limits::{LimitsInput, SupervisorLimits};
pub use messages::{MAX_MESSAGE_BYTES, MAX_PENDING, Receipt, Sender};
pub use policy::{EffectivePolicy, Lifetime, PolicyInput, Report};
pub use request::{
    AsyncHandle, DelegationRequest, DelegationResult, DeleteChild, Mode, OnFull, RenameChild,
};
pub use runner::{ChildRunner, RemoteChild, RemoteOutcome, Waiting};
pub use runtime::Delegator;
pub use runtime::Supervisor;
pub use stopped::{Cancelled, Stopped, waiting_under};
pub use summary::{ChildSummary, Outcome};
pub use tools::DELEGATION_TOOLS;
pub use tools::find_models::FindModelsTool;
pub use tools::handle::{CancelAgentTool, WaitAgentTool};
pub use tools::list_children::ListChildrenTool;
pub use tools::read_child::{ChildPage, ReadChild, ReadChildTool};
pub use tools::rename_child::RenameChildTool;
pub use tools::send_message::SendMessageTool;
pub use tools::spawn_agent::{HostSpawn, SpawnAgentTool};
