//! Async delegation handles: the running ones and a bounded record of finished ones.
//!
//! A finished handle stays answerable (`wait` is idempotent) until `max_queued_events` newer
//! ones have finished; an evicted, unknown or foreign id gets the same error.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::error::{CoreError, CoreResult};
use crate::supervisor::request::DelegationResult;

/// The shared outcome of one async delegation.
pub(crate) type Outcome = Arc<CoreResult<DelegationResult>>;

#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) child_id: String,
    /// The child's session.
    pub(crate) session: arbor_protocol::SessionId,
    /// The tree of the session that started it (`None`: the host did). A model-facing
    /// tool reaches only its own tree's handles.
    pub(crate) root: Option<arbor_protocol::SessionId>,
    pub(crate) token: CancellationToken,
    pub(crate) reason: CancelReason,
    pub(crate) cancelled: bool,
    pub(crate) terminal: bool,
    pub(crate) rx: watch::Receiver<Option<Outcome>>,
}

#[derive(Debug)]
pub(crate) struct Handles {
    entries: HashMap<String, Entry>,
    finished: VecDeque<String>,
    retain: usize,
}

/// Who asks for a handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reach {
    /// The host: every handle.
    Host,
    /// A session of the tree rooted here: that tree's handles only.
    Tree(arbor_protocol::SessionId),
}

impl Reach {
    fn reaches(self, entry: &Entry) -> bool {
        match self {
            Reach::Host => true,
            Reach::Tree(root) => entry.root == Some(root),
        }
    }
}

/// The error every unknown, foreign or evicted handle gets.
pub(crate) fn unknown() -> CoreError {
    CoreError::denied(
        crate::error::DenyReason::Unknown,
        "Unknown async delegation".to_owned(),
    )
}

impl Handles {
    pub(crate) fn new(retain: usize) -> Self {
        Self {
            entries: HashMap::new(),
            finished: VecDeque::new(),
            retain: retain.max(1),
        }
    }

    pub(crate) fn insert(&mut self, id: String, entry: Entry) {
        self.entries.insert(id, entry);
    }

    /// The handle `id` as seen from `scope`: [`Reach::Host`] reaches every handle, a
    /// tree only its own (another tree's gets the unknown answer).
    pub(crate) fn get(&self, id: &str, scope: Reach) -> CoreResult<&Entry> {
        self.entries
            .get(id)
            .filter(|e| scope.reaches(e))
            .ok_or_else(unknown)
    }

    pub(crate) fn get_mut(&mut self, id: &str, scope: Reach) -> CoreResult<&mut Entry> {
        self.entries
            .get_mut(id)
            .filter(|e| scope.reaches(e))
            .ok_or_else(unknown)
    }

    /// Marks a handle finished and evicts the oldest finished ones past the bound.
    pub(crate) fn finish(&mut self, id: &str) {
        if let Some(entry) = self.entries.get_mut(id) {
            entry.terminal = true;
            self.finished.push_back(id.to_owned());
        }
        while self.finished.len() > self.retain {
            if let Some(old) = self.finished.pop_front() {
                self.entries.remove(&old);
            }
        }
    }

    pub(crate) fn running(&self) -> usize {
        self.entries.values().filter(|e| !e.terminal).count()
    }
}

/// Why a delegation was cancelled: the first reason set wins.
#[derive(Debug, Clone, Default)]
pub(crate) struct CancelReason(Arc<std::sync::OnceLock<(&'static str, Option<String>)>>);

impl CancelReason {
    pub(crate) fn set(&self, reason: &'static str) {
        let _ = self.0.set((reason, None));
    }

    /// The reason, with the words of whoever cancelled (a host's `cancel_with`).
    pub(crate) fn set_with(&self, reason: &'static str, detail: String) {
        let _ = self.0.set((reason, Some(detail)));
    }

    pub(crate) fn get(&self) -> Option<&'static str> {
        self.0.get().map(|(r, _)| *r)
    }

    /// The words given with the reason, if any.
    pub(crate) fn detail(&self) -> Option<&str> {
        self.0.get().and_then(|(_, d)| d.as_deref())
    }
}
