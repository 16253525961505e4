//! A [`Store`] wrapper that counts the calls a scenario makes: writes (each one atomic
//! write, on SQLite one transaction and one commit) and reads. The report gives both per
//! operation. With `ARBOR_BENCH_STORE_TRACE=1` it also prints each call's name to stderr,
//! to see which writes one operation makes in order.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arbor_protocol::{EntryKind, RunId, SessionId, TranscriptEntry};
use arbor_store::{
    Attribution, Checkpoint, SessionQuery, SessionRecord, SessionUpdate, Store, StoreResult,
};
use async_trait::async_trait;

/// Calls counted so far.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub(crate) writes: AtomicU64,
    pub(crate) reads: AtomicU64,
}

/// `inner`, counted into `counts`.
#[derive(Debug)]
pub(crate) struct Counted {
    inner: Arc<dyn Store>,
    counts: Arc<Counts>,
    trace: bool,
}

impl Counted {
    pub(crate) fn new(inner: Arc<dyn Store>, counts: Arc<Counts>) -> Self {
        let trace = std::env::var_os("ARBOR_BENCH_STORE_TRACE").is_some_and(|v| v == "1");
        Self {
            inner,
            counts,
            trace,
        }
    }

    fn write(&self, what: &str) {
        self.counts.writes.fetch_add(1, Ordering::Relaxed);
        if self.trace {
            eprintln!("store write {what}");
        }
    }

    fn read(&self, what: &str) {
        self.counts.reads.fetch_add(1, Ordering::Relaxed);
        if self.trace {
            eprintln!("store read  {what}");
        }
    }
}

#[async_trait]
impl Store for Counted {
    async fn create_session(&self, record: &SessionRecord) -> StoreResult<()> {
        self.write("create_session");
        self.inner.create_session(record).await
    }

    async fn session(&self, id: SessionId) -> StoreResult<Option<SessionRecord>> {
        self.read("session");
        self.inner.session(id).await
    }

    async fn update_session(
        &self,
        id: SessionId,
        update: &SessionUpdate,
    ) -> StoreResult<SessionRecord> {
        self.write("update_session");
        self.inner.update_session(id, update).await
    }

    async fn list_sessions(&self, query: SessionQuery) -> StoreResult<Vec<SessionRecord>> {
        self.read("list_sessions");
        self.inner.list_sessions(query).await
    }

    async fn append(
        &self,
        session: SessionId,
        run: RunId,
        entries: &[EntryKind],
        update: Option<&SessionUpdate>,
    ) -> StoreResult<u64> {
        if self.trace {
            let kinds: Vec<&str> = entries.iter().map(EntryKind::kind_name).collect();
            eprintln!("store write append {kinds:?} update={}", update.is_some());
            self.counts.writes.fetch_add(1, Ordering::Relaxed);
        } else {
            self.write("append");
        }
        self.inner.append(session, run, entries, update).await
    }

    async fn append_attributed(
        &self,
        session: SessionId,
        run: RunId,
        entries: &[EntryKind],
        update: Option<&SessionUpdate>,
        attribution: &Attribution,
    ) -> StoreResult<u64> {
        self.write("append_attributed");
        self.inner
            .append_attributed(session, run, entries, update, attribution)
            .await
    }

    async fn transcript(
        &self,
        session: SessionId,
        after: u64,
        limit: Option<usize>,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        self.read("transcript");
        self.inner.transcript(session, after, limit).await
    }

    async fn put_checkpoint(
        &self,
        namespace: &str,
        key: &str,
        value: &serde_json::Value,
        expected_version: u64,
    ) -> StoreResult<u64> {
        self.write("put_checkpoint");
        self.inner
            .put_checkpoint(namespace, key, value, expected_version)
            .await
    }

    async fn checkpoint(&self, namespace: &str, key: &str) -> StoreResult<Option<Checkpoint>> {
        self.read("checkpoint");
        self.inner.checkpoint(namespace, key).await
    }

    async fn list_checkpoints(&self, namespace: &str) -> StoreResult<Vec<Checkpoint>> {
        self.read("list_checkpoints");
        self.inner.list_checkpoints(namespace).await
    }

    async fn delete_checkpoint(
        &self,
        namespace: &str,
        key: &str,
        expected_version: u64,
    ) -> StoreResult<()> {
        self.write("delete_checkpoint");
        self.inner
            .delete_checkpoint(namespace, key, expected_version)
            .await
    }

    async fn mark_interrupted(&self) -> StoreResult<Vec<SessionId>> {
        self.write("mark_interrupted");
        self.inner.mark_interrupted().await
    }

    async fn held_by_queue(&self, sessions: &[SessionId]) -> StoreResult<Vec<SessionId>> {
        self.inner.held_by_queue(sessions).await
    }
    async fn roots_page(
        &self,
        page: &arbor_store::RootPage,
    ) -> StoreResult<Vec<arbor_store::SessionRecord>> {
        self.inner.roots_page(page).await
    }
    async fn census(&self, key: &str) -> StoreResult<Vec<arbor_store::StatusCount>> {
        self.inner.census(key).await
    }

    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
}
