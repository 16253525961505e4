//! Wire types of the arbor runtime.
//!
//! This crate owns the values that cross a boundary: between the runtime and a host, between
//! processes through the store, and over the HTTP service. It has no runtime behaviour and
//! depends only on serde and uuid.
//!
//! - [`ids`]: newtype identifiers ([`SessionId`], [`RunId`]) that are stable across processes.
//! - [`usage`]: token [`Usage`] and the arithmetic the accounting rules need.
//! - [`message`]: transcript [`Message`]s and [`ToolCall`]s.
//! - [`run`]: a run's terminal [`RunStatus`], [`StopReason`] and [`RunLimitBreach`].
//! - [`limits`]: the run limits an agent carries ([`RunLimits`]) and the [`LimitKind`] names.
//! - [`event`]: the typed [`AgentEvent`]s a run publishes.
//! - [`session`]: a session's [`SessionStatus`].
//! - [`supervisor`]: the [`SupervisorEvent`]s of delegations.
//! - [`transcript`]: the append-only [`TranscriptEntry`] records a session persists.
//! - [`approval`]: [`PendingDecision`]s of a suspended run and the [`ApprovalDecision`]s on them.
//! - [`inbox`]: [`InboxMessage`]s between sessions and lifecycle [`Notice`]s.

pub mod approval;
pub mod event;
pub mod ids;
pub mod inbox;
pub mod limits;
pub mod message;
pub mod reasoning;
pub mod run;
pub mod session;
pub mod supervisor;
pub mod transcript;
pub mod usage;

pub use approval::{ApprovalDecision, DecidedBy, PendingDecision, Verdict};
pub use event::{AgentEvent, EventEnvelope, ToolOutcome};
pub use ids::{IdError, RunId, SessionId, Timestamp};
pub use inbox::{InboxMessage, Notice, Relationship};
pub use limits::{LimitKind, RunLimits};
pub use message::{Message, Role, ToolCall, ToolResult};
pub use reasoning::Reasoning;
pub use run::{
    AxisUse, Consumed, RecentCall, RunAttribution, RunLimitBreach, RunStatus, StopReason,
};
pub use session::SessionStatus;
pub use supervisor::{ChildOrigin, SupervisorEnvelope, SupervisorEvent};
pub use transcript::{EntryKind, SpawnPoint, TranscriptEntry};
pub use usage::Usage;
