//! What a transcript shows its model: the messages of its entries, with each compaction
//! applied where it was written. A leaf: reopening a session ([`crate::Session`]) and
//! compacting one both read it.

use arbor_protocol::{EntryKind, Message, TranscriptEntry};

/// The user message a summary becomes.
pub(crate) fn summary_message(summary: &str) -> Message {
    Message::user(format!(
        "[Summary of the earlier conversation]\n\n{summary}"
    ))
}

/// The reasoning of the last run's tool-calling turns, by each one's first call id: every
/// `reasoning` entry after the last user message, keyed by the assistant message just
/// before it.
pub(crate) fn replay_reasoning(entries: &[TranscriptEntry]) -> arbor_model::Reasonings {
    let mut kept = arbor_model::Reasonings::new();
    let mut last_call: Option<&str> = None;
    for entry in entries {
        match &entry.kind {
            EntryKind::Message {
                message: Message::User { .. },
            } => {
                kept.clear();
                last_call = None;
            }
            EntryKind::Message {
                message: Message::Assistant { tool_calls, .. },
            } => last_call = tool_calls.first().map(|c| c.id.as_str()),
            EntryKind::Reasoning { blocks, .. } => {
                if let Some(id) = last_call {
                    kept.insert(id.to_owned(), blocks.clone());
                }
            }
            _ => {}
        }
    }
    kept
}

/// The messages a transcript shows its model: `start` (a forked session's prefix), then
/// every message entry, with each compaction applied where it was written.
pub(crate) fn replay_messages(
    start: Vec<Message>,
    entries: impl IntoIterator<Item = TranscriptEntry>,
) -> Vec<Message> {
    let mut messages = start;
    for entry in entries {
        match entry.kind {
            EntryKind::Message { message } => messages.push(message),
            EntryKind::Compacted { summary, kept, .. } => {
                let start = messages.len().saturating_sub(kept as usize);
                let tail = messages.split_off(start);
                messages = std::iter::once(summary_message(&summary))
                    .chain(tail)
                    .collect();
            }
            _ => {}
        }
    }
    messages
}
