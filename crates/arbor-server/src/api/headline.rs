//! A session's headline: its task (its first user message) in one line, as the run list
//! and the tree show it.

use arbor_protocol::{EntryKind, Message, SessionId};
use arbor_store::Store;

/// The longest headline, in characters.
const HEADLINE_CHARS: usize = 120;

fn one_line(text: &str) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= HEADLINE_CHARS {
        return flat;
    }
    let cut: String = flat.chars().take(HEADLINE_CHARS - 1).collect();
    format!("{cut}…")
}

/// The task a session was given: its first user message.
pub(crate) async fn task_of(store: &dyn Store, id: SessionId) -> String {
    let Ok(entries) = store.transcript(id, 0, Some(8)).await else {
        return String::new();
    };
    entries
        .iter()
        .find_map(|e| match &e.kind {
            EntryKind::Message {
                message: Message::User { content },
            } => Some(one_line(content)),
            _ => None,
        })
        .unwrap_or_default()
}
