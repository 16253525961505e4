//! How a run ended.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::limits::LimitKind;

/// The terminal status of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    /// The model gave its final answer.
    Succeeded,
    /// A provider error, a fatal tool error or a limit ended the run.
    Failed,
    /// The run was cancelled.
    Aborted,
    /// The run waits for a human decision and can be resumed.
    Suspended,
    /// A host policy refused to let the run go on.
    Denied,
}

impl RunStatus {
    /// The status as its wire string.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Aborted => "aborted",
            Self::Suspended => "suspended",
            Self::Denied => "denied",
        }
    }
}

impl fmt::Display for RunStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a run stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model answered without asking for tools.
    Completed,
    /// The model answered, but the provider cut its last answer off at the output cap
    /// (`finish_reason: length`, Anthropic's `max_tokens`): the answer may be incomplete.
    CompletedTruncated,
    /// `max_steps` fired.
    TurnLimit,
    /// `max_tool_calls` fired.
    ToolCallLimit,
    /// `max_tokens` fired.
    TokenLimit,
    /// `timeout_ms` fired.
    Timeout,
    /// The run's cancellation token fired.
    Cancelled,
    /// The provider failed.
    ProviderError,
    /// A tool failed in a way that ends the run (for example it panicked).
    ToolError,
    /// A permission policy halted the run.
    HostPolicy,
    /// A tool call waits for approval.
    ApprovalRequired,
    /// A budget pool of the tree (`max_tree_tokens`, `max_tree_cost`) could not cover the
    /// next model call: the call was not made.
    BudgetExhausted,
    /// The session has an output schema and the model's answer did not match it, after
    /// every correction it was allowed.
    InvalidOutput,
}

impl StopReason {
    /// The stop reason a breach of the run limit `limit` gives (`None` for a limit a run
    /// does not carry: those refuse an action, they do not stop a run).
    pub fn for_limit(limit: LimitKind) -> Option<Self> {
        match limit {
            LimitKind::MaxSteps => Some(Self::TurnLimit),
            LimitKind::MaxToolCalls => Some(Self::ToolCallLimit),
            LimitKind::MaxTokens => Some(Self::TokenLimit),
            LimitKind::TimeoutMs => Some(Self::Timeout),
            _ => None,
        }
    }

    /// The stop reason as its wire string.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::CompletedTruncated => "completed_truncated",
            Self::TurnLimit => "turn_limit",
            Self::ToolCallLimit => "tool_call_limit",
            Self::TokenLimit => "token_limit",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::ProviderError => "provider_error",
            Self::ToolError => "tool_error",
            Self::HostPolicy => "host_policy",
            Self::ApprovalRequired => "approval_required",
            Self::BudgetExhausted => "budget_exhausted",
            Self::InvalidOutput => "invalid_output",
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A configured limit that fired: which one, its maximum and the value observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunLimitBreach {
    /// The limit that fired.
    pub limit: LimitKind,
    /// Its configured maximum.
    pub maximum: u64,
    /// The value that went past it.
    pub observed: u64,
}

impl fmt::Display for RunLimitBreach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "run limit {} exceeded (maximum {}, observed {})",
            self.limit, self.maximum, self.observed
        )
    }
}

/// What a run that died on a limit had consumed and done: how a host tells a child that
/// hit one wall from one about to hit all of them. Never holds tool arguments, only their
/// hashes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunAttribution {
    /// What the run consumed.
    pub consumed: Consumed,
    /// The other limit axes, nearest to their maximum first (at most 3).
    pub closest_other_axes: Vec<AxisUse>,
    /// The run's last tool calls (at most 10), oldest first.
    pub recent_tool_calls: Vec<RecentCall>,
}

/// What a run consumed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Consumed {
    /// Model turns taken.
    pub turns: u32,
    /// Prompt tokens the provider counted, over all turns.
    pub input_tokens: u64,
    /// Provider calls made.
    pub provider_attempts: u32,
    /// Bytes of the requests sent to the provider (the conversation, serialized), over all
    /// turns.
    pub request_bytes: u64,
}

/// How much of one limit a run used.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AxisUse {
    /// The limit.
    pub axis: crate::LimitKind,
    /// Used over maximum (1.0 = at the limit).
    pub used_ratio: f64,
}

/// A tool call as attribution shows it: its arguments only as a hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecentCall {
    /// The call's id.
    pub id: String,
    /// The tool.
    pub name: String,
    /// `sha256:<64 hex>` of the arguments' JSON.
    pub arg_hash: String,
}
