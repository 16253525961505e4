//! What the delegation tools return, typed. The text a parent model reads from
//! `spawn_agent`, `wait_agent` and `cancel_agent` is one of these values as JSON, so a host
//! reading a transcript or a tool event can parse it back ([`ToolReport::parse`]) instead of
//! picking at strings.

use arbor_model::ThinkingLevel;
use arbor_protocol::SessionId;
use serde::{Deserialize, Serialize};

pub use crate::supervisor::delegation::answer::ChildAnswer;
pub(crate) use crate::supervisor::delegation::answer::{answer, finished, text};
use crate::supervisor::request::AsyncHandle;

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
    /// [`HandleStatus::Running`], or [`HandleStatus::Queued`] while it waits for a slot.
    pub status: HandleStatus,
    /// Its own pool, as granted (with `clamped` when it got less than it asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::budget::Granted>,
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
    /// The child waits for a free slot (`on_full: queue`); it starts when one frees.
    Queued,
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

/// What `cancel_agent` did when the cancel stopped descendants of the child too: the
/// handle's update and each descendant whose run ended with it. (A cancel that stopped
/// only the child reads as a [`HandleUpdate`].)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelReport {
    /// The delegation.
    pub delegation_id: String,
    /// [`HandleStatus::Cancelling`].
    pub status: HandleStatus,
    /// The child's descendants whose runs ended with it, shallowest first.
    pub stopped: Vec<crate::supervisor::stopped::Stopped>,
}

/// Any of the delegation tools' results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolReport {
    /// A child's answer.
    Answer(ChildAnswer),
    /// A child started.
    Started(ChildStarted),
    /// A cancel that stopped descendants too (before [`Handle`](Self::Handle): it is the
    /// one with `stopped`).
    Cancel(CancelReport),
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
            budget: None,
        }
    }
}
