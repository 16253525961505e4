//! A fault-injecting store for tests (feature `testing`): [`FaultStore`] wraps any store and
//! either holds one chosen write until the test lets it go (how a test forces a delete, a
//! cancel or a crash into a precise point of a run) or fails one chosen write as if the
//! store were unavailable, changing nothing.
//!
//! ```
//! # async fn demo() {
//! use std::sync::Arc;
//! use arbor_store::testing::{Call, FaultStore};
//! use arbor_store::{MemoryStore, Store};
//!
//! let store = FaultStore::new(Arc::new(MemoryStore::new()));
//! // The next session update fails; everything else goes through.
//! store.fail_once(|call| matches!(call, Call::Update(..)));
//! let held = store.arm(false, |call| matches!(call, Call::Create(_)));
//! # let _ = held;
//! # }
//! ```

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::{
    Attribution, Checkpoint, SessionQuery, SessionRecord, SessionUpdate, Store, StoreError,
    StoreResult,
};
use arbor_protocol::{EntryKind, RunId, SessionId, TranscriptEntry};
use async_trait::async_trait;
use tokio::sync::oneshot;

/// A write a hold or a fault matches (a test matches on the parts it needs).
#[derive(Debug)]
#[non_exhaustive]
pub enum Call<'a> {
    /// `create_session`.
    Create(&'a SessionRecord),
    /// `update_session`.
    Update(SessionId, &'a SessionUpdate),
    /// `append` or `append_attributed`.
    Append(SessionId, &'a [EntryKind], Option<&'a SessionUpdate>),
    /// `put_checkpoint` (namespace, value).
    PutCheckpoint(&'a str, &'a serde_json::Value),
}

type Matcher = Box<dyn Fn(&Call<'_>) -> bool + Send>;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

struct Armed {
    matches: Matcher,
    /// Hold after the inner store did the call (else before).
    after: bool,
    reached: oneshot::Sender<()>,
    release: oneshot::Receiver<()>,
}

/// See the module docs.
pub struct FaultStore {
    inner: Arc<dyn Store>,
    armed: Mutex<Option<Armed>>,
    failing: Mutex<Option<Matcher>>,
}

impl std::fmt::Debug for FaultStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FaultStore")
    }
}

/// The two ends of an armed hold: `reached` fires when the call is held; send on `release`
/// to let it go.
#[derive(Debug)]
pub struct Held {
    /// Fires when the matched call is held.
    pub reached: oneshot::Receiver<()>,
    /// Send on it to let the call go.
    pub release: oneshot::Sender<()>,
}

impl FaultStore {
    /// Wraps `inner`; nothing is held or failed until a test arms it.
    pub fn new(inner: Arc<dyn Store>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            armed: Mutex::new(None),
            failing: Mutex::new(None),
        })
    }

    /// Holds the first call `matches` accepts, before or `after` the inner store does it.
    pub fn arm(&self, after: bool, matches: impl Fn(&Call<'_>) -> bool + Send + 'static) -> Held {
        let (reached_tx, reached_rx) = oneshot::channel();
        let (release_tx, release_rx) = oneshot::channel();
        *lock(&self.armed) = Some(Armed {
            matches: Box::new(matches),
            after,
            reached: reached_tx,
            release: release_rx,
        });
        Held {
            reached: reached_rx,
            release: release_tx,
        }
    }

    /// Fails the first call `matches` accepts (the store unavailable), changing nothing.
    pub fn fail_once(&self, matches: impl Fn(&Call<'_>) -> bool + Send + 'static) {
        *lock(&self.failing) = Some(Box::new(matches));
    }

    fn take(&self, call: &Call<'_>) -> Option<Armed> {
        let mut armed = lock(&self.armed);
        if armed.as_ref().is_some_and(|a| (a.matches)(call)) {
            armed.take()
        } else {
            None
        }
    }

    async fn gate<T>(
        &self,
        call: Call<'_>,
        op: impl std::future::Future<Output = StoreResult<T>>,
    ) -> StoreResult<T> {
        {
            let mut failing = lock(&self.failing);
            if failing.as_ref().is_some_and(|m| m(&call)) {
                *failing = None;
                return Err(StoreError::Unavailable {
                    path: "fault".into(),
                    reason: "injected fault".into(),
                });
            }
        }
        let Some(armed) = self.take(&call) else {
            return op.await;
        };
        if armed.after {
            let out = op.await;
            let _ = armed.reached.send(());
            let _ = armed.release.await;
            out
        } else {
            let _ = armed.reached.send(());
            let _ = armed.release.await;
            op.await
        }
    }
}

#[async_trait]
impl Store for FaultStore {
    async fn create_session(&self, record: &SessionRecord) -> StoreResult<()> {
        self.gate(Call::Create(record), self.inner.create_session(record))
            .await
    }
    async fn session(&self, id: SessionId) -> StoreResult<Option<SessionRecord>> {
        self.inner.session(id).await
    }
    async fn update_session(
        &self,
        id: SessionId,
        update: &SessionUpdate,
    ) -> StoreResult<SessionRecord> {
        self.gate(
            Call::Update(id, update),
            self.inner.update_session(id, update),
        )
        .await
    }
    async fn list_sessions(&self, query: SessionQuery) -> StoreResult<Vec<SessionRecord>> {
        self.inner.list_sessions(query).await
    }
    async fn append(
        &self,
        session: SessionId,
        run: RunId,
        entries: &[EntryKind],
        update: Option<&SessionUpdate>,
    ) -> StoreResult<u64> {
        self.gate(
            Call::Append(session, entries, update),
            self.inner.append(session, run, entries, update),
        )
        .await
    }
    async fn append_attributed(
        &self,
        session: SessionId,
        run: RunId,
        entries: &[EntryKind],
        update: Option<&SessionUpdate>,
        attribution: &Attribution,
    ) -> StoreResult<u64> {
        self.gate(
            Call::Append(session, entries, update),
            self.inner
                .append_attributed(session, run, entries, update, attribution),
        )
        .await
    }
    async fn transcript(
        &self,
        session: SessionId,
        after: u64,
        limit: Option<usize>,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        self.inner.transcript(session, after, limit).await
    }
    async fn put_checkpoint(
        &self,
        namespace: &str,
        key: &str,
        value: &serde_json::Value,
        expected_version: u64,
    ) -> StoreResult<u64> {
        self.gate(
            Call::PutCheckpoint(namespace, value),
            self.inner
                .put_checkpoint(namespace, key, value, expected_version),
        )
        .await
    }
    async fn checkpoint(&self, namespace: &str, key: &str) -> StoreResult<Option<Checkpoint>> {
        self.inner.checkpoint(namespace, key).await
    }
    async fn list_checkpoints(&self, namespace: &str) -> StoreResult<Vec<Checkpoint>> {
        self.inner.list_checkpoints(namespace).await
    }
    async fn delete_checkpoint(
        &self,
        namespace: &str,
        key: &str,
        expected_version: u64,
    ) -> StoreResult<()> {
        self.inner
            .delete_checkpoint(namespace, key, expected_version)
            .await
    }
    async fn mark_interrupted(&self) -> StoreResult<Vec<SessionId>> {
        self.inner.mark_interrupted().await
    }
    async fn held_by_queue(&self, sessions: &[SessionId]) -> StoreResult<Vec<SessionId>> {
        self.inner.held_by_queue(sessions).await
    }
    async fn roots_page(&self, page: &crate::RootPage) -> StoreResult<Vec<crate::SessionRecord>> {
        self.inner.roots_page(page).await
    }
    async fn census(&self, key: &str) -> StoreResult<Vec<crate::StatusCount>> {
        self.inner.census(key).await
    }
    fn backend(&self) -> &'static str {
        "fault"
    }
}
