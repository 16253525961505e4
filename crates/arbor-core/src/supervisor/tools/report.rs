//! What the delegation tools return, typed. The text a parent model reads from
//! `spawn_agent`, `wait_agent` and `cancel_agent` is one of these values as JSON, so a host
//! reading a transcript or a tool event can parse it back ([`ToolReport::parse`]) instead of
//! picking at strings.

use arbor_model::ThinkingLevel;
use arbor_protocol::{RunStatus, SessionId, Usage};
use serde::{Deserialize, Serialize};

use crate::supervisor::delegation::request::{AsyncHandle, DelegationResult};
use crate::supervisor::runtime::{Delegator, Supervisor};

/// A child's answer (a sync spawn, or `wait_agent` on a finished child).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChildAnswer {
    /// The catalog entry.
    pub child_id: String,
    /// The delegation.
    pub delegation_id: String,
    /// How the child's run ended.
    pub status: RunStatus,
    /// The tokens the child's run used.
    pub usage: Usage,
    /// The child's answer, redacted and cut to the parent's `max_result_bytes` (a marker
    /// says how much was left out and which transcript holds the whole of it).
    pub text: String,
    /// The provider cut the child's last answer off at its output cap: `text` may be
    /// incomplete.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// A child started without waiting for it (`mode: async` or `message`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChildStarted {
    /// The catalog entry.
    pub child_id: String,
    /// The delegation: the handle `wait_agent` and `cancel_agent` take.
    pub delegation_id: String,
    /// The child's session.
    pub session_id: SessionId,
    /// Its name, unique among its siblings.
    pub name: String,
    /// The model it runs (none when its factory chooses).
    pub model: Option<String>,
    /// The thinking level asked for, if one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<ThinkingLevel>,
    /// Always [`HandleStatus::Running`].
    pub status: HandleStatus,
}

/// Where a delegation handle stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum HandleStatus {
    /// The child runs.
    Running,
    /// `wait_agent`: the child was cancelled before it answered.
    Cancelled,
    /// `cancel_agent`: the child was running and is being cancelled.
    Cancelling,
    /// `cancel_agent`: the child had already ended; nothing was cancelled.
    Terminal,
}

/// What `cancel_agent` did, or what `wait_agent` found on a cancelled child.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HandleUpdate {
    /// The delegation.
    pub delegation_id: String,
    /// Where it stands.
    pub status: HandleStatus,
}

/// Any of the delegation tools' results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolReport {
    /// A child's answer.
    Answer(ChildAnswer),
    /// A child started.
    Started(ChildStarted),
    /// A handle's state.
    Handle(HandleUpdate),
}

impl ToolReport {
    /// Parses a delegation tool's output (`None` for anything else, such as an error text).
    pub fn parse(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }
}

impl ChildStarted {
    pub(crate) fn new(handle: AsyncHandle, thinking: Option<ThinkingLevel>) -> Self {
        Self {
            child_id: handle.child_id,
            delegation_id: handle.delegation_id,
            session_id: handle.session_id,
            name: handle.name,
            model: handle.model,
            thinking,
            status: HandleStatus::Running,
        }
    }
}

/// The text of a typed report, as the model reads it.
pub(crate) fn text<T: Serialize>(report: &T) -> String {
    // These types hold only strings, numbers and enums: serializing them cannot fail.
    serde_json::to_string(report).unwrap_or_default()
}

/// A finished delegation as the parent's model reads it: redacted and cut to its cap.
pub(crate) fn finished(delegator: &Delegator, r: &DelegationResult) -> String {
    let sup = delegator.supervisor();
    let answer = sup.redact(&r.result.text);
    let cap = sup.result_cap(&r.child_id);
    text(&ChildAnswer {
        child_id: r.child_id.clone(),
        delegation_id: r.delegation_id.clone(),
        status: r.result.status,
        usage: r.result.usage,
        text: cut(&answer, cap, r.session_id),
        truncated: r.result.stop_reason == arbor_protocol::StopReason::CompletedTruncated,
    })
}

impl Supervisor {
    /// The most of `child_id`'s answer its parent's context gets (`max_result_bytes`, the
    /// supervisor's narrowed by the child's catalog entry).
    pub(crate) fn result_cap(&self, child_id: &str) -> usize {
        let max = self.settings().limits().max_result_bytes;
        let entry = self
            .catalog()
            .get(child_id)
            .and_then(|(_, e)| e.limits.max_result_bytes);
        let cap = entry.map_or(max, |e| e.min(max));
        usize::try_from(cap).unwrap_or(usize::MAX)
    }
}

/// `text` cut to at most `cap` bytes on a character boundary, with a marker saying how much
/// was left out and where the whole of it is.
pub(crate) fn cut(text: &str, cap: usize, session: arbor_protocol::SessionId) -> String {
    let kept = crate::tool::prefix_within(text, cap);
    if kept.len() == text.len() {
        return text.to_owned();
    }
    format!(
        "{kept}\n[truncated: {} of {} bytes shown; the whole answer is in the transcript of session {session}]",
        kept.len(),
        text.len()
    )
}
