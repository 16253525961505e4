//! Compaction and forks: what a session's model sees, rewritten or copied, while the host's
//! records stay whole.
//!
//! [`Session::compact`] replaces the conversation before the last few messages with a
//! summary. It is a transcript entry (`compacted`), so a reopened session sees the same
//! compacted conversation; the earlier entries, the usage and attribution records and the
//! registry of children are untouched. Whether to compact is a question about the session's
//! own prompt ([`Session::needs_compaction`] reads [`Session::context_tokens`]), never about
//! the aggregate its children added: a parent billed for several context windows may hold a
//! small one.
//!
//! [`Session::fork`] copies the conversation into a new root session. Children belong to the
//! transcript that spawned them, so a fork starts with none, and usage is not copied (each
//! token is billed once, to the session that spent it).

use arbor_protocol::{EntryKind, Message, RunId};
use arbor_store::SessionUpdate;

use crate::error::{CoreError, CoreResult};
use crate::session::Session;
use crate::session::replay::summary_message;

/// Where the last `keep` messages start, moved back so that no kept tool result is parted
/// from the assistant message that called it.
fn kept_start(messages: &[Message], keep: usize) -> usize {
    let mut start = messages.len().saturating_sub(keep);
    while start > 0 && matches!(messages.get(start), Some(Message::Tool(_))) {
        start -= 1;
    }
    start
}

impl Session {
    /// Whether its own context fills at least `ratio` of a `window`-token context window.
    /// Reads [`context_tokens`](Self::context_tokens): the prompt of its last turn, never
    /// its children's usage.
    pub fn needs_compaction(&self, window: u64, ratio: f64) -> bool {
        window > 0 && self.context_tokens() as f64 >= window as f64 * ratio
    }

    /// Replaces the conversation before its last `keep` messages (more, if a kept tool
    /// result needs its call) with `summary`, durably. Returns how many messages were kept.
    pub async fn compact(&mut self, summary: &str, keep: usize) -> CoreResult<usize> {
        let summary = summary.trim();
        if summary.is_empty() {
            return Err(CoreError::validation("a compaction needs a summary"));
        }
        let start = kept_start(&self.messages, keep);
        let kept = self.messages.len() - start;
        let entry = EntryKind::Compacted {
            summary: summary.to_owned(),
            kept: u32::try_from(kept)
                .map_err(|_| CoreError::validation("too many messages to keep"))?,
            context_tokens: self.context_tokens(),
        };
        self.commit(RunId::new(), &[entry], None).await?;
        let tail = self.messages.split_off(start);
        self.messages = std::iter::once(summary_message(summary))
            .chain(tail)
            .collect();
        tracing::debug!(session = %self.id(), kept, "compacted");
        Ok(kept)
    }

    /// A new root session of the same agent and store whose conversation is a copy of this
    /// one's (as its model sees it now). It has no children and no usage of its own yet; its
    /// record says where it came from (`meta.forked_from`).
    pub async fn fork(&self, name: Option<&str>) -> CoreResult<Session> {
        let name = name.map_or_else(|| format!("{}-fork", self.record().name), str::to_owned);
        let mut fork = self
            .agent()
            .session()
            .store(self.store().clone())
            .name(name)
            .meta(serde_json::json!({ "forked_from": self.id() }))
            .create()
            .await?;
        let entries: Vec<EntryKind> = self
            .messages
            .iter()
            .map(|m| EntryKind::Message { message: m.clone() })
            .collect();
        let update = SessionUpdate {
            context_tokens: Some(self.context_tokens()),
            ..SessionUpdate::default()
        };
        fork.commit(RunId::new(), &entries, Some(update)).await?;
        fork.messages = self.messages.clone();
        Ok(fork)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arbor_protocol::{ToolCall, ToolResult};

    #[test]
    fn a_kept_tool_result_keeps_its_call() {
        let call = Message::Assistant {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "echo".into(),
                arguments: serde_json::json!({}),
            }],
        };
        let result = Message::Tool(ToolResult {
            call_id: "c1".into(),
            name: "echo".into(),
            content: "x".into(),
            is_error: false,
        });
        let messages = vec![Message::user("a"), call, result, Message::user("b")];
        assert_eq!(kept_start(&messages, 1), 3);
        assert_eq!(kept_start(&messages, 2), 1, "the result pulls in its call");
        assert_eq!(kept_start(&messages, 9), 0);
        assert_eq!(kept_start(&messages, 0), 4);
    }
}
