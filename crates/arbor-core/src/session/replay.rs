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

/// The messages a transcript shows its model: every message entry, with each compaction
/// applied where it was written.
pub(crate) fn replay_messages(entries: impl IntoIterator<Item = TranscriptEntry>) -> Vec<Message> {
    let mut messages: Vec<Message> = Vec::new();
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
