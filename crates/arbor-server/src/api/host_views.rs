//! The objects the host endpoints ([`crate::api::host`]) take and answer with: a spawn, a
//! handle, an answer, a wait's or cancel's state, a message and its receipt, a delete.

use arbor_core::supervisor::Mode;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

fn async_mode() -> Mode {
    Mode::Async
}

/// A child to spawn under a session.
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SpawnRequest {
    /// The catalog entry (allow-listed by the tree's spec).
    pub child_id: String,
    /// Its task.
    pub input: String,
    /// Its name (unique among its siblings; default a readable one).
    pub name: Option<String>,
    /// A model the entry allows; default its own.
    pub model: Option<String>,
    /// Model controls for the child, over its agent's (kept in its record: every run of it
    /// keeps them). One out of range, or one the child's provider cannot carry, is refused
    /// naming it.
    #[schema(value_type = Option<crate::controls::ControlsSchema>)]
    pub controls: Option<arbor_model::Controls>,
    /// A pool for the child's whole subtree, reserved from the run's pools (clamped to what
    /// they have left, or refused, per the spec's `[supervisor] budget_policy`).
    pub budget: Option<crate::views::BudgetRequest>,
    /// A JSON Schema the child's answer must match: a mismatch is sent back to its model
    /// (`output_retries` times, default 1), then it fails `invalid_output`; its answer's
    /// `value` is the checked value. Refused when its catalog entry fixes another.
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<serde_json::Value>,
    /// With `output_schema`: how many times a mismatch is sent back (0 to 5).
    pub output_retries: Option<u32>,
    /// How much of the parent's conversation the child starts with: `none` (default),
    /// `all` or `{"last_turns": N}`; refused when its catalog entry forbids it.
    #[schema(value_type = Option<Object>)]
    pub context: Option<arbor_core::session::fork::ForkContext>,
    /// Past `max_active_children`: `refuse` (the default) or `queue` (the child is listed
    /// `queued` until a slot frees; a full queue is refused naming both limits).
    pub on_full: Option<arbor_core::supervisor::OnFull>,
    /// `sync`, `async` (default; `join` is read as `async`) or `message`.
    #[serde(default = "async_mode")]
    pub mode: Mode,
    /// For `sync`: how long to wait, in ms (default 10000, at most 25000).
    pub wait_ms: Option<u64>,
}

/// A child started: its handle.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct HandleView {
    /// The delegation: what wait and cancel take.
    pub delegation_id: String,
    /// The catalog entry.
    pub child_id: String,
    /// Its session.
    pub session_id: String,
    /// Its name.
    pub name: String,
    /// Its model (none when its factory chooses).
    pub model: Option<String>,
    /// `running`, or `queued` (it waits for a free slot).
    pub status: String,
}

/// A child's answer.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct AnswerView {
    /// The delegation.
    pub delegation_id: String,
    /// The catalog entry.
    pub child_id: String,
    /// Its session.
    pub session_id: String,
    /// Its name.
    pub name: String,
    /// The checked value of its answer, when it had an output schema (redacted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub value: Option<serde_json::Value>,
    /// How its run ended (`succeeded`, `failed`, …).
    pub status: String,
    /// Its answer, redacted.
    pub text: String,
    /// The tokens its run used.
    pub usage: arbor_protocol::Usage,
}

/// What a wait, a cancel or a stop found.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct DelegationState {
    /// The delegation.
    pub delegation_id: String,
    /// `running`, `suspended` (its run waits for decisions), `cancelled`, `failed`,
    /// `cancelling`, `stopping` or `terminal`.
    pub status: String,
    /// Why it ended, when it `failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// A cancel or a stop: the child's descendants whose runs ended with it, shallowest
    /// first (absent when none did).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stopped: Vec<arbor_core::supervisor::Stopped>,
}

/// What a finished wait answers: the child's answer, or how it ended without one.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum WaitAnswer {
    /// It finished: its answer.
    Answer(AnswerView),
    /// It has none (yet): `suspended` (its run waits for decisions), `cancelled` or
    /// `failed`.
    Ended(DelegationState),
}

/// A message to a session.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageRequest {
    /// The text (at most 16 KiB).
    pub text: String,
}

/// A message delivered.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ReceiptView {
    /// The message.
    pub message_id: String,
    /// The target session.
    pub to: String,
    /// `queued` (its run reads it on its next turn) or `delivered` (it starts a new turn).
    pub status: String,
}

/// A child deleted.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct DeletedView {
    /// The child's session.
    pub session_id: String,
    /// It was deleted before: nothing changed.
    pub already_deleted: bool,
    /// Who, when, why, its final status and usage.
    #[schema(value_type = Object)]
    pub tombstone: serde_json::Value,
    /// The descendants the delete stopped, each with the state it was in (`running`: its
    /// run cancelled; `idle`: a retained child closed; `suspended`: it waited for a
    /// decision and never runs again), shallowest first.
    pub stopped: Vec<arbor_core::supervisor::Stopped>,
}
