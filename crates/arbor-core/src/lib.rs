//! The arbor runtime: agents, their runs, and a supervisor that lets them delegate to
//! allow-listed child agents under limits that only narrow.
//!
//! A host builds a [`Supervisor`](supervisor::Supervisor) with its catalog of children
//! (hooks, limits, a sink for child events), gives the root agent the delegator's tools
//! ([`Delegator::tools`](supervisor::Delegator::tools)), creates the root session in the
//! supervisor's store ([`Supervisor::root_session`](supervisor::Supervisor::root_session))
//! and runs it. This program is `examples/host.rs` (`cargo run -p arbor-core --example
//! host`); `examples/approvals.rs` runs a tree on a real provider with every child's call
//! approved from stdin.
//!
#![doc = concat!("```rust\n", include_str!("../../../examples/host.rs"), "\n```")]
//!
//! # Agents and sessions
//!
//! An [`Agent`] is an immutable configuration: a model provider and model, a system prompt,
//! [`tool`]s, a [`Permission`] of AND-composed policies, and [`RunLimits`]. A [`Session`] is
//! one conversation of an agent, kept in a [`Store`](arbor_store::Store); [`Session::run`]
//! drives one input through model turns and tool calls until the model answers, a limit
//! fires, a policy halts it or it is cancelled, and returns a [`RunResult`]. Every run
//! publishes typed events on the session's [`EventBus`].
//!
//! ```
//! # async fn demo() -> Result<(), arbor_core::CoreError> {
//! use arbor_core::{Agent, RunOptions};
//! use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
//!
//! let agent = Agent::builder("helper")
//!     .provider(ScriptedProvider::new(Script::new([ScriptedTurn::text("hello")])))
//!     .build()?;
//! let mut session = agent.session().create().await?;
//! let result = session.run("say hello", RunOptions::default()).await?;
//! assert_eq!(result.text, "hello");
//! # Ok(()) }
//! ```
//!
//! # Where things live
//!
//! The run loop: [`Session`] (`session/mod.rs`, `run.rs`, `dispatch.rs`, `approval_gate.rs`,
//! `finish.rs`), what runs hand back ([`RunResult`], `outcome.rs`), tools ([`tool`],
//! [`builtin`]), permissions ([`permission`]), durable approvals ([`approval`]), events
//! ([`events`]), inboxes ([`inbox`]), the stored registry of children ([`registry`]), and the
//! [`supervisor`] (config, delegation, tree, tools). docs/ARCHITECTURE.md follows one
//! delegation through the files.

mod agent;
pub mod approval;
pub mod budget;
mod error;
pub mod identity;
mod outcome;
pub mod output;
pub mod permission;
pub mod pricing;
pub mod process;
pub mod redact;
pub mod registry;
pub mod session;
pub mod supervisor;
pub mod tool;

pub use session::{events, inbox};
pub use tool::{builtin, effect};

pub use agent::{
    Agent, AgentBuilder, DEFAULT_EVENT_CAPACITY, DEFAULT_MAX_ANSWER_BYTES,
    DEFAULT_TOOL_CONCURRENCY, HARD_MAX_ANSWER_BYTES, MAX_TOOL_CONCURRENCY, validate_agent_name,
};
pub use arbor_protocol::RunLimits;
/// Re-exported so a host implements arbor's async traits (hooks, factories, tools) without
/// depending on `async-trait` itself.
pub use async_trait::async_trait;
pub use effect::{EffectStore, StoreEffects, ToolEffect};
pub use error::{CoreError, CoreErrorKind, CoreResult, DenyReason, LimitError, LimitInfo};
pub use events::{Bus, EventBus, Sequenced, Subscription};
pub use identity::{Identity, IdentityError, IdentityErrorCode};
pub use outcome::{NestedSuspension, RunResult, SessionRef, Suspension};
pub use permission::{Decision, Permission, PermissionPolicy, PermissionRequest, ToolBudget};
pub use redact::{Redactor, SecretRedactor};
pub use session::recover::Continued;
pub use session::run::RunOptions;
pub use session::{Session, SessionBuilder, validate_session_name};
pub use tool::{DynTool, Tool, ToolContext, ToolError, ToolSet, Typed};

#[cfg(test)]
mod send_checks {
    //! The run and delegation futures must be `Send`: hosts spawn them.
    fn assert_send<T: Send>(_: &T) {}

    #[allow(dead_code)]
    async fn futures_are_send(mut s: crate::Session, sup: crate::supervisor::Supervisor) {
        let run = s.run("x", crate::RunOptions::default());
        assert_send(&run);
        let d = sup.delegate(crate::supervisor::DelegationRequest::new("a", "b"));
        assert_send(&d);
    }
}
