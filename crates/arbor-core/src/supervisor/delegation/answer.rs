//! A child's answer as its parent's model reads it: the typed [`ChildAnswer`], redacted and cut
//! to the parent's `max_result_bytes` (a marker says how much was left out, and where the
//! whole of it is). The delegation tools return it (`tools/report.rs` re-exports it), and so
//! do a nested resume and a rejoined call.

use arbor_protocol::{RunStatus, Usage};
use serde::{Deserialize, Serialize};

use crate::supervisor::request::DelegationResult;
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
    /// What they cost, in micro-units of the price table's currency (left out without
    /// prices).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cost_micros: u64,
    /// The child's answer, redacted and cut to the parent's `max_result_bytes` (a marker
    /// says how much was left out and which transcript holds the whole of it).
    pub text: String,
    /// The provider cut the child's last answer off at its output cap: `text` may be
    /// incomplete.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// The child's own pool, as granted (with `clamped` when it got less than it asked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::budget::Granted>,
    /// The child's answer as the value its output schema asked for (it had one, and its
    /// run succeeded): structured, whole, and left out when its JSON is over the parent's
    /// `max_result_bytes` (then `text`, its JSON cut to the cap, says where the whole is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<serde_json::Value>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The text of a typed report, as the model reads it.
pub(crate) fn text<T: Serialize>(report: &T) -> String {
    // These types hold only strings, numbers and enums: serializing them cannot fail.
    serde_json::to_string(report).unwrap_or_default()
}

/// A finished delegation as the parent's model reads it: redacted and cut to its cap.
pub(crate) fn finished(delegator: &Delegator, r: &DelegationResult) -> String {
    text(&answer(delegator, r))
}

/// [`finished`], typed.
pub(crate) fn answer(delegator: &Delegator, r: &DelegationResult) -> ChildAnswer {
    let sup = delegator.supervisor();
    let answer = sup.redact(&r.result.text);
    let cap = sup.result_cap(&r.child_id);
    ChildAnswer {
        child_id: r.child_id.clone(),
        delegation_id: r.delegation_id.clone(),
        status: r.result.status,
        usage: r.result.usage,
        cost_micros: r.result.cost_micros,
        text: cut(&answer, cap, r.session_id),
        truncated: r.result.stop_reason == arbor_protocol::StopReason::CompletedTruncated,
        budget: None,
        // Never past the cap: a value too big to give whole is left to `text` (cut, with
        // where the whole of it is).
        value: r
            .output
            .as_ref()
            .map(|v| sup.redact_json(v))
            .filter(|v| v.to_string().len() <= cap),
    }
}

impl Supervisor {
    /// `value` with every string in it (keys too) redacted: a child's structured answer
    /// leaves the supervisor as its text does.
    pub fn redact_json(&self, value: &serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::String(s) => serde_json::Value::String(self.redact(s)),
            serde_json::Value::Array(a) => a.iter().map(|v| self.redact_json(v)).collect(),
            serde_json::Value::Object(o) => o
                .iter()
                .map(|(k, v)| (self.redact(k), self.redact_json(v)))
                .collect(),
            other => other.clone(),
        }
    }

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
