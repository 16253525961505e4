//! The [`Store`] trait.

use std::fmt;
use std::sync::Arc;

use arbor_protocol::{EntryKind, RunId, SessionId, SessionStatus, TranscriptEntry};
use async_trait::async_trait;

use crate::error::StoreError;
use crate::page::RootPage;
use crate::record::{
    Attribution, Checkpoint, SessionQuery, SessionRecord, SessionUpdate, StatusCount,
    census_key_is_valid,
};

/// Result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// Durable (or in-memory) state of sessions and their transcripts.
///
/// Every write is atomic: it happens whole or not at all, and a failed write leaves the store
/// as it was. Backends must pass [`conformance`](crate) (feature `conformance`).
#[async_trait]
pub trait Store: fmt::Debug + Send + Sync {
    /// Creates a session. Fails with `AlreadyExists` when its id is taken, with `NameTaken`
    /// when a sibling (same parent, not deleted) has its name, and with `NotFound` when its
    /// parent does not exist. Root names need not be unique.
    async fn create_session(&self, record: &SessionRecord) -> StoreResult<()>;

    /// The session with this id, if any.
    async fn session(&self, id: SessionId) -> StoreResult<Option<SessionRecord>>;

    /// Applies `update` and returns the new record. Fails with `NotFound` for an unknown
    /// session and with `Conflict` (changing nothing) when `expected_version` is set and
    /// differs from the stored version.
    async fn update_session(
        &self,
        id: SessionId,
        update: &SessionUpdate,
    ) -> StoreResult<SessionRecord>;

    /// Sessions matching `query`, oldest first.
    async fn list_sessions(&self, query: SessionQuery) -> StoreResult<Vec<SessionRecord>>;

    /// Appends `entries` to a session's transcript, numbering them after the last entry, and
    /// applies `update` to the session in the same atomic write. Returns the sequence number
    /// of the last entry written (the current last one when `entries` is empty).
    async fn append(
        &self,
        session: SessionId,
        run: RunId,
        entries: &[EntryKind],
        update: Option<&SessionUpdate>,
    ) -> StoreResult<u64>;

    /// [`append`](Self::append), and in the same atomic write: adds `attribution.usage` to
    /// the attributed usage of every target and appends to each target's transcript a
    /// `usage_attributed` entry carrying its resulting aggregate. Nothing is written when any
    /// part fails (an unknown target included).
    async fn append_attributed(
        &self,
        session: SessionId,
        run: RunId,
        entries: &[EntryKind],
        update: Option<&SessionUpdate>,
        attribution: &Attribution,
    ) -> StoreResult<u64>;

    /// Transcript entries with a sequence number above `after`, oldest first, at most `limit`.
    async fn transcript(
        &self,
        session: SessionId,
        after: u64,
        limit: Option<usize>,
    ) -> StoreResult<Vec<TranscriptEntry>>;

    /// Writes `value` under `(namespace, key)` if its stored version is `expected_version`
    /// (0: it must not exist yet), and returns the new version. Fails with `Conflict`,
    /// changing nothing, on any other version.
    async fn put_checkpoint(
        &self,
        namespace: &str,
        key: &str,
        value: &serde_json::Value,
        expected_version: u64,
    ) -> StoreResult<u64>;

    /// The checkpoint under `(namespace, key)`, if any.
    async fn checkpoint(&self, namespace: &str, key: &str) -> StoreResult<Option<Checkpoint>>;

    /// Every checkpoint of `namespace`, by key.
    async fn list_checkpoints(&self, namespace: &str) -> StoreResult<Vec<Checkpoint>>;

    /// Deletes the checkpoint if its version is `expected_version`; `Conflict` otherwise
    /// (and `NotFound` when there is none).
    async fn delete_checkpoint(
        &self,
        namespace: &str,
        key: &str,
        expected_version: u64,
    ) -> StoreResult<()>;

    /// Marks every session whose status is `running` as `interrupted` and returns their ids:
    /// what a process calls at start-up on a durable store, since no run survives the process
    /// that ran it.
    async fn mark_interrupted(&self) -> StoreResult<Vec<SessionId>>;

    /// The sessions among `sessions` whose runs a work queue of this store holds: handed to
    /// workers and not yet reported (queued, or claimed, its lease running or not, for a
    /// takeover). A crash sweep leaves them to the queue: their runs are not cut off by the
    /// death of the process that handed them over. A store without a queue holds none.
    async fn held_by_queue(&self, sessions: &[SessionId]) -> StoreResult<Vec<SessionId>> {
        let _ = sessions;
        Ok(Vec::new())
    }

    /// How many sessions have each status, grouped by the string their tree's root keeps at
    /// `meta[key]` and by root or not, in any order: what a metrics scrape reads, without
    /// loading the records (a backend counts them in one query). `key` is 1 to 64 of
    /// `a-z A-Z 0-9 _`; another is `Invalid`. This default walks every tree.
    async fn census(&self, key: &str) -> StoreResult<Vec<StatusCount>> {
        if !census_key_is_valid(key) {
            return Err(StoreError::Invalid(format!(
                "census key {key:?}: 1 to 64 of a-z A-Z 0-9 _"
            )));
        }
        let mut counts: std::collections::BTreeMap<
            (Option<String>, bool, &'static str),
            (SessionStatus, u64, u64),
        > = std::collections::BTreeMap::new();
        for root in self.list_sessions(SessionQuery::Roots).await? {
            let group = root.meta[key].as_str().map(str::to_owned);
            for s in self.list_sessions(SessionQuery::Tree(root.id)).await? {
                let at = (group.clone(), s.parent_id.is_none(), s.status.as_str());
                let row = counts.entry(at).or_insert((s.status, 0, 0));
                row.1 += 1;
                row.2 = row.2.saturating_add(s.own_cost);
            }
        }
        Ok(counts
            .into_iter()
            .map(
                |((group, root, _), (status, sessions, own_cost_micros))| StatusCount {
                    group,
                    root,
                    status,
                    sessions,
                    own_cost_micros,
                },
            )
            .collect())
    }

    /// A page of roots, newest first (creation time, then id): those after `page`'s cursor
    /// that pass its filters, at most its limit. `Invalid` for a page [`RootPage::check`]
    /// refuses. This default reads every root; backends select the page in one query.
    async fn roots_page(&self, page: &RootPage) -> StoreResult<Vec<SessionRecord>> {
        page.check()?;
        let mut roots: Vec<SessionRecord> = self
            .list_sessions(SessionQuery::Roots)
            .await?
            .into_iter()
            .filter(|r| page.matches(r))
            .collect();
        roots.sort_by_key(|r| std::cmp::Reverse((r.created_at, r.id)));
        roots.truncate(page.limit as usize);
        Ok(roots)
    }

    /// Backend name for reports (`memory`, `sqlite`).
    fn backend(&self) -> &'static str;
}

macro_rules! forward {
    ($ty:ty) => {
        #[async_trait]
        impl<T: Store + ?Sized> Store for $ty {
            async fn create_session(&self, record: &SessionRecord) -> StoreResult<()> {
                (**self).create_session(record).await
            }
            async fn session(&self, id: SessionId) -> StoreResult<Option<SessionRecord>> {
                (**self).session(id).await
            }
            async fn update_session(
                &self,
                id: SessionId,
                update: &SessionUpdate,
            ) -> StoreResult<SessionRecord> {
                (**self).update_session(id, update).await
            }
            async fn list_sessions(&self, query: SessionQuery) -> StoreResult<Vec<SessionRecord>> {
                (**self).list_sessions(query).await
            }
            async fn append(
                &self,
                session: SessionId,
                run: RunId,
                entries: &[EntryKind],
                update: Option<&SessionUpdate>,
            ) -> StoreResult<u64> {
                (**self).append(session, run, entries, update).await
            }
            async fn append_attributed(
                &self,
                session: SessionId,
                run: RunId,
                entries: &[EntryKind],
                update: Option<&SessionUpdate>,
                attribution: &Attribution,
            ) -> StoreResult<u64> {
                (**self)
                    .append_attributed(session, run, entries, update, attribution)
                    .await
            }
            async fn transcript(
                &self,
                session: SessionId,
                after: u64,
                limit: Option<usize>,
            ) -> StoreResult<Vec<TranscriptEntry>> {
                (**self).transcript(session, after, limit).await
            }
            async fn put_checkpoint(
                &self,
                namespace: &str,
                key: &str,
                value: &serde_json::Value,
                expected_version: u64,
            ) -> StoreResult<u64> {
                (**self)
                    .put_checkpoint(namespace, key, value, expected_version)
                    .await
            }
            async fn checkpoint(
                &self,
                namespace: &str,
                key: &str,
            ) -> StoreResult<Option<Checkpoint>> {
                (**self).checkpoint(namespace, key).await
            }
            async fn list_checkpoints(&self, namespace: &str) -> StoreResult<Vec<Checkpoint>> {
                (**self).list_checkpoints(namespace).await
            }
            async fn delete_checkpoint(
                &self,
                namespace: &str,
                key: &str,
                expected_version: u64,
            ) -> StoreResult<()> {
                (**self)
                    .delete_checkpoint(namespace, key, expected_version)
                    .await
            }
            async fn mark_interrupted(&self) -> StoreResult<Vec<SessionId>> {
                (**self).mark_interrupted().await
            }
            async fn held_by_queue(&self, sessions: &[SessionId]) -> StoreResult<Vec<SessionId>> {
                (**self).held_by_queue(sessions).await
            }
            async fn census(&self, key: &str) -> StoreResult<Vec<StatusCount>> {
                (**self).census(key).await
            }
            async fn roots_page(&self, page: &RootPage) -> StoreResult<Vec<SessionRecord>> {
                (**self).roots_page(page).await
            }
            fn backend(&self) -> &'static str {
                (**self).backend()
            }
        }
    };
}

forward!(Arc<T>);
forward!(Box<T>);

// `Store` must stay object safe: the runtime holds `Arc<dyn Store>`.
const _: fn(&dyn Store) = |_| {};

/// Status values that count as "a run is live" for [`Store::mark_interrupted`].
pub(crate) fn is_live(status: SessionStatus) -> bool {
    status.is_live()
}
