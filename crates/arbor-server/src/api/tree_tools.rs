//! What each running session of a tree is doing right now, for the tree's snapshots: the
//! tool calls its model asked for that have no result yet. Read incrementally from each
//! running session's transcript (only the entries after the last one read: a result lands
//! without changing the session's record, so the tree's versions cannot say when to read).
//! A quiet tree, whose sessions all wait or have ended, costs nothing.

use std::collections::HashMap;

use arbor_protocol::{EntryKind, Message, SessionId};
use arbor_store::{SessionRecord, Store};

/// A session's calls in flight, as its transcript says so far.
#[derive(Debug, Default)]
struct InFlight {
    /// The last entry read.
    seq: u64,
    /// The calls asked for and not answered: `(call id, tool)`, in call order.
    calls: Vec<(String, String)>,
}

/// The calls in flight of a tree's sessions.
#[derive(Debug, Default)]
pub(crate) struct RunningTools(HashMap<SessionId, InFlight>);

impl RunningTools {
    /// Reads what the live sessions of `sessions` wrote since the last call; forgets the
    /// others (their runs ended: nothing of them is in flight).
    pub(crate) async fn refresh(&mut self, store: &dyn Store, sessions: &[SessionRecord]) {
        self.0
            .retain(|id, _| sessions.iter().any(|s| s.id == *id && s.status.is_live()));
        for s in sessions.iter().filter(|s| s.status.is_live()) {
            let state = self.0.entry(s.id).or_default();
            let entries = match store.transcript(s.id, state.seq, None).await {
                Ok(entries) => entries,
                Err(e) => {
                    tracing::debug!(session = %s.id, "running tools not read: {e}");
                    continue;
                }
            };
            for e in entries {
                state.seq = state.seq.max(e.seq);
                match e.kind {
                    EntryKind::Message {
                        message: Message::Assistant { tool_calls, .. },
                    } => {
                        state.calls = tool_calls.into_iter().map(|c| (c.id, c.name)).collect();
                    }
                    EntryKind::Message {
                        message: Message::Tool(r),
                    } => state.calls.retain(|(id, _)| *id != r.call_id),
                    // A run that suspended keeps its calls: those approved run when it
                    // resumes (the session is not running meanwhile, so none shows).
                    EntryKind::RunFinished { status, .. }
                        if status != arbor_protocol::RunStatus::Suspended =>
                    {
                        state.calls.clear();
                    }
                    _ => {}
                }
            }
        }
    }

    /// The tools `session` runs now (empty when none, or when it is not live).
    pub(crate) fn of(&self, session: SessionId) -> Vec<String> {
        self.0
            .get(&session)
            .map(|s| s.calls.iter().map(|(_, tool)| tool.clone()).collect())
            .unwrap_or_default()
    }

    /// What changes when the tools shown change (for the fingerprint): a hash of each
    /// running session's calls in flight, so entries that change nothing shown send no
    /// snapshot.
    pub(crate) fn mark(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut shown: Vec<(&SessionId, &Vec<(String, String)>)> =
            self.0.iter().map(|(id, s)| (id, &s.calls)).collect();
        shown.sort_by_key(|(id, _)| **id);
        let mut h = std::collections::hash_map::DefaultHasher::new();
        shown.hash(&mut h);
        h.finish()
    }
}
