//! The append-only records a session persists.
//!
//! A transcript is the durable history of a session: its messages, the usage each provider
//! turn reported, and the start and end of each run. A later process rebuilds a session from
//! it, so every figure a report shows can be recomputed from the entries alone.

use serde::{Deserialize, Serialize};

use crate::ids::{RunId, SessionId, Timestamp};
use crate::inbox::InboxMessage;
use crate::message::Message;
use crate::run::{RunLimitBreach, RunStatus, StopReason};
use crate::usage::Usage;

/// Where a child was spawned from: the parent's run and the turn of that run whose tool call
/// spawned it. Attribution of the child's usage names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SpawnPoint {
    /// The parent's run.
    pub run_id: RunId,
    /// The turn within it.
    pub turn: u32,
}

/// What one transcript entry records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EntryKind {
    /// A message of the conversation.
    Message {
        /// The message.
        message: Message,
    },
    /// The usage one provider turn reported.
    Usage {
        /// Turn number within the run.
        turn: u32,
        /// What the provider reported.
        usage: Usage,
        /// The session's context size after this turn: the prompt tokens of this turn.
        context_tokens: u64,
    },
    /// The model's reasoning before the assistant message just before this entry (written
    /// with its turn; a turn without reasoning has none).
    Reasoning {
        /// Turn number within the run.
        turn: u32,
        /// Its blocks, in the order the model produced them.
        blocks: Vec<crate::Reasoning>,
    },
    /// The provider cut this turn's answer off at its output cap (`finish_reason: length`):
    /// its text, or a tool call's arguments, may be incomplete. Written with the turn.
    Truncated {
        /// Turn number within the run.
        turn: u32,
        /// The provider's finish reason, as it said it.
        finish_reason: String,
    },
    /// A run began.
    RunStarted {
        /// The agent's name.
        agent: String,
        /// The model used.
        model: String,
        /// The W3C `traceparent` of the run's span, when traces are exported: a run that
        /// continues this one after a crash joins its trace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace: Option<String>,
    },
    /// Usage of a descendant attributed to this session: written into an ancestor's
    /// transcript in the same atomic write as the descendant's own usage entry, so a reload
    /// reapplies it without the descendants (which may be deleted since).
    UsageAttributed {
        /// The descendant whose own provider turn used the tokens.
        from: SessionId,
        /// This session's direct child the usage came through (`from` itself for a child).
        via: SessionId,
        /// The turn of this session it applies to: where `via` was spawned.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target: Option<SpawnPoint>,
        /// The usage attributed.
        child_usage: Usage,
        /// This session's aggregate (own + attributed) after the attribution.
        aggregate: Usage,
    },
    /// What the provider turn whose `usage` entry is just before this one cost: written in
    /// the same write, only when the session's agent has prices and the turn cost something.
    Cost {
        /// Turn number within the run.
        turn: u32,
        /// The model it was priced as: the one the provider said served the turn, else the
        /// agent's.
        model: String,
        /// The cost, in micro-units (millionths) of the price table's currency.
        micros: u64,
    },
    /// What a descendant's turn cost, attributed to this session: written just after the
    /// `usage_attributed` entry of the same turn, in the same write.
    CostAttributed {
        /// The descendant whose own provider turn it was.
        from: SessionId,
        /// This session's direct child the cost came through.
        via: SessionId,
        /// The cost attributed, in micro-units.
        micros: u64,
        /// This session's aggregate cost (own + attributed) after the attribution.
        aggregate_micros: u64,
    },
    /// The session's conversation begins with its parent's, forked at its spawn: the
    /// messages the parent's model saw up to entry `through` of `from`'s transcript (its
    /// pending tool call left out), read from there, not copied here. Written with the
    /// session's first run.
    Forked {
        /// The session forked from (the parent).
        from: SessionId,
        /// The last entry of `from`'s transcript the fork holds.
        through: u64,
        /// The messages the fork gave the session.
        messages: u32,
    },
    /// A message was delivered into this session's inbox (it is pending until read).
    InboxReceived {
        /// The message.
        message: InboxMessage,
    },
    /// A turn read these pending messages (they now appear as user messages before it).
    InboxRead {
        /// The messages' ids.
        ids: Vec<String>,
    },
    /// Pending messages were dropped unread: the run they were to start could not begin
    /// (its factory failed, a hook denied it, it was deleted). They stay in the transcript;
    /// no later run reads them.
    InboxDropped {
        /// The messages' ids.
        ids: Vec<String>,
        /// Why.
        reason: String,
    },
    /// The session was renamed (its new name is held among its siblings, the old one freed).
    Renamed {
        /// The name it had.
        from: String,
        /// The name it has.
        to: String,
        /// Who renamed it (a user, a parent session, the host).
        by: String,
    },
    /// A person (or a program) decided a call of this session that waited for approval:
    /// written when the decision is recorded, whichever surface and whichever of the call's
    /// ids (its own, or the one an ancestor lists) it was taken through. The entry's `at` is
    /// when.
    Decision {
        /// The call's approval id in this session's run (`apr_…`).
        approval_id: String,
        /// The call's id.
        call_id: String,
        /// The tool.
        tool: String,
        /// What was decided.
        verdict: crate::Verdict,
        /// Why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// The tenant it was decided under.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tenant: Option<String>,
        /// Who decided.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// The conversation was compacted: from here on the model sees `summary` (as a user
    /// message) followed by the last `kept` messages before this entry. The earlier entries
    /// stay in the transcript; usage and attribution records are untouched.
    Compacted {
        /// What replaces the earlier messages.
        summary: String,
        /// How many of the latest messages were kept as they were.
        kept: u32,
        /// The context size (own prompt tokens) when it was compacted.
        context_tokens: u64,
    },
    /// A run ended.
    RunFinished {
        /// Terminal status.
        status: RunStatus,
        /// Why it stopped.
        stop_reason: StopReason,
        /// The run's own usage.
        usage: Usage,
        /// The limit that fired, if one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        breach: Option<RunLimitBreach>,
        /// The error text of a failed run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

impl EntryKind {
    /// The entry's `kind` tag.
    pub fn kind_name(&self) -> &'static str {
        match self {
            Self::Message { .. } => "message",
            Self::Usage { .. } => "usage",
            Self::Reasoning { .. } => "reasoning",
            Self::Truncated { .. } => "truncated",
            Self::RunStarted { .. } => "run_started",
            Self::UsageAttributed { .. } => "usage_attributed",
            Self::Cost { .. } => "cost",
            Self::CostAttributed { .. } => "cost_attributed",
            Self::Forked { .. } => "forked",
            Self::InboxReceived { .. } => "inbox_received",
            Self::InboxRead { .. } => "inbox_read",
            Self::InboxDropped { .. } => "inbox_dropped",
            Self::Renamed { .. } => "renamed",
            Self::Decision { .. } => "decision",
            Self::Compacted { .. } => "compacted",
            Self::RunFinished { .. } => "run_finished",
        }
    }
}

/// One stored transcript entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TranscriptEntry {
    /// Position in the session's transcript, from 1, assigned by the store.
    pub seq: u64,
    /// When it was written.
    pub at: Timestamp,
    /// The run that wrote it.
    pub run_id: RunId,
    /// What it records.
    #[serde(flatten)]
    pub kind: EntryKind,
}
