//! The in-memory backend.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};

use arbor_protocol::{EntryKind, RunId, SessionId, SessionStatus, Timestamp, TranscriptEntry};
use async_trait::async_trait;

use crate::error::StoreError;
use crate::record::{Attribution, Checkpoint, SessionQuery, SessionRecord, SessionUpdate};
use crate::store::{Store, StoreResult, is_live};

/// Maps keyed by ids the runtime makes: hashed with foldhash (seeded per map), not SipHash,
/// whose cost showed in every store call.
type Map<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Debug, Default)]
struct Inner {
    sessions: Map<SessionId, SessionRecord>,
    transcripts: Map<SessionId, Vec<TranscriptEntry>>,
    checkpoints: BTreeMap<(String, String), Checkpoint>,
    /// The names each parent's live (not deleted) children hold.
    names: Map<SessionId, HashSet<String, foldhash::fast::RandomState>>,
}

/// Keeps everything in memory; nothing survives the process. Safe to share between tasks.
#[derive(Debug, Default)]
pub struct MemoryStore {
    inner: Mutex<Inner>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave a half-applied write: every write
        // checks first and mutates last, so the data is usable even if the lock is poisoned.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Inner {
    fn check(&self, session: SessionId, update: Option<&SessionUpdate>) -> StoreResult<()> {
        let record = self
            .sessions
            .get(&session)
            .ok_or_else(|| StoreError::session_not_found(session))?;
        if let Some(update) = update {
            record.check_version(update)?;
            if let (Some(name), Some(parent), None) =
                (&update.name, record.parent_id, &record.tombstone)
                && *name != record.name
                && self.names.get(&parent).is_some_and(|n| n.contains(name))
            {
                return Err(StoreError::NameTaken { name: name.clone() });
            }
        }
        Ok(())
    }

    /// Appends and applies; the caller has checked.
    fn write(
        &mut self,
        session: SessionId,
        run: RunId,
        entries: &[EntryKind],
        update: Option<&SessionUpdate>,
    ) -> u64 {
        let seq = self.push(session, run, entries);
        if let Some(update) = update {
            self.apply(session, update);
        }
        seq
    }

    /// Applies `update` to a session's record; a tombstone frees its name among its
    /// siblings.
    fn apply(&mut self, session: SessionId, update: &SessionUpdate) {
        let Some(record) = self.sessions.get_mut(&session) else {
            return;
        };
        let was_live = record.tombstone.is_none();
        let old_name = record.name.clone();
        record.apply(update);
        if was_live
            && record.tombstone.is_none()
            && record.name != old_name
            && let Some(parent) = record.parent_id
        {
            let names = self.names.entry(parent).or_default();
            names.remove(&old_name);
            names.insert(record.name.clone());
            return;
        }
        if was_live
            && record.tombstone.is_some()
            && let Some(parent) = record.parent_id
            && let Some(names) = self.names.get_mut(&parent)
        {
            names.remove(&record.name);
        }
    }

    fn push(&mut self, session: SessionId, run: RunId, entries: &[EntryKind]) -> u64 {
        let log = self.transcripts.entry(session).or_default();
        let at = Timestamp::now();
        let mut seq = log.last().map_or(0, |e| e.seq);
        log.reserve(entries.len());
        for kind in entries {
            seq += 1;
            log.push(TranscriptEntry {
                seq,
                at,
                run_id: run,
                kind: kind.clone(),
            });
        }
        seq
    }
}

fn sort(records: &mut [SessionRecord]) {
    records.sort_by_key(|r| (r.created_at, r.id));
}

#[async_trait]
impl Store for MemoryStore {
    async fn create_session(&self, record: &SessionRecord) -> StoreResult<()> {
        let mut inner = self.lock();
        if inner.sessions.contains_key(&record.id) {
            return Err(StoreError::AlreadyExists {
                what: "session",
                id: record.id.to_string(),
            });
        }
        if let Some(parent) = record.parent_id {
            if !inner.sessions.contains_key(&parent) {
                return Err(StoreError::session_not_found(parent));
            }
            let taken = inner
                .names
                .get(&parent)
                .is_some_and(|names| names.contains(&record.name));
            if taken && record.tombstone.is_none() {
                return Err(StoreError::NameTaken {
                    name: record.name.clone(),
                });
            }
        }
        if let (Some(parent), None) = (record.parent_id, &record.tombstone) {
            inner
                .names
                .entry(parent)
                .or_default()
                .insert(record.name.clone());
        }
        inner.sessions.insert(record.id, record.clone());
        inner.transcripts.insert(record.id, Vec::new());
        Ok(())
    }

    async fn session(&self, id: SessionId) -> StoreResult<Option<SessionRecord>> {
        Ok(self.lock().sessions.get(&id).cloned())
    }

    async fn update_session(
        &self,
        id: SessionId,
        update: &SessionUpdate,
    ) -> StoreResult<SessionRecord> {
        let mut inner = self.lock();
        inner.check(id, Some(update))?;
        inner.apply(id, update);
        inner
            .sessions
            .get(&id)
            .cloned()
            .ok_or_else(|| StoreError::session_not_found(id))
    }

    async fn list_sessions(&self, query: SessionQuery) -> StoreResult<Vec<SessionRecord>> {
        let inner = self.lock();
        let mut out: Vec<SessionRecord> = inner
            .sessions
            .values()
            .filter(|r| match query {
                SessionQuery::Roots => r.parent_id.is_none(),
                SessionQuery::Children(parent) => r.parent_id == Some(parent),
                SessionQuery::Tree(root) => r.root_id == root,
                SessionQuery::Status(status) => r.status == status,
                SessionQuery::LatestRoots(_) => r.parent_id.is_none(),
            })
            .cloned()
            .collect();
        sort(&mut out);
        if let SessionQuery::LatestRoots(n) = query {
            let keep = usize::try_from(n).unwrap_or(usize::MAX);
            out.drain(..out.len().saturating_sub(keep));
        }
        Ok(out)
    }

    async fn append(
        &self,
        session: SessionId,
        run: RunId,
        entries: &[EntryKind],
        update: Option<&SessionUpdate>,
    ) -> StoreResult<u64> {
        let mut inner = self.lock();
        inner.check(session, update)?;
        Ok(inner.write(session, run, entries, update))
    }

    async fn append_attributed(
        &self,
        session: SessionId,
        run: RunId,
        entries: &[EntryKind],
        update: Option<&SessionUpdate>,
        attribution: &Attribution,
    ) -> StoreResult<u64> {
        let mut inner = self.lock();
        // Every check before any change: the write happens whole or not at all.
        inner.check(session, update)?;
        if let Some(t) = attribution
            .targets
            .iter()
            .find(|t| !inner.sessions.contains_key(&t.session))
        {
            return Err(StoreError::session_not_found(t.session));
        }
        let seq = inner.write(session, run, entries, update);
        for target in &attribution.targets {
            if let Some(record) = inner.sessions.get_mut(&target.session) {
                let added = attribution.apply_to(target, record);
                inner.push(target.session, Attribution::run_for(target, run), &added);
            }
        }
        Ok(seq)
    }

    async fn transcript(
        &self,
        session: SessionId,
        after: u64,
        limit: Option<usize>,
    ) -> StoreResult<Vec<TranscriptEntry>> {
        let inner = self.lock();
        let log = inner
            .transcripts
            .get(&session)
            .ok_or_else(|| StoreError::session_not_found(session))?;
        // Sequence numbers are 1..=n without gaps, so `after` is also an index.
        let start = usize::try_from(after).unwrap_or(usize::MAX).min(log.len());
        let rest = &log[start..];
        let take = limit.unwrap_or(rest.len()).min(rest.len());
        Ok(rest[..take].to_vec())
    }

    async fn mark_interrupted(&self) -> StoreResult<Vec<SessionId>> {
        let mut inner = self.lock();
        let mut ids = Vec::new();
        for record in inner.sessions.values_mut() {
            if is_live(record.status) {
                record.apply(&SessionUpdate::status(SessionStatus::Interrupted));
                ids.push(record.id);
            }
        }
        ids.sort();
        Ok(ids)
    }

    async fn put_checkpoint(
        &self,
        namespace: &str,
        key: &str,
        value: &serde_json::Value,
        expected_version: u64,
    ) -> StoreResult<u64> {
        let mut inner = self.lock();
        let id = (namespace.to_owned(), key.to_owned());
        let actual = inner.checkpoints.get(&id).map_or(0, |c| c.version);
        if actual != expected_version {
            return Err(StoreError::Conflict {
                expected: expected_version,
                actual,
            });
        }
        let version = actual + 1;
        inner.checkpoints.insert(
            id,
            Checkpoint {
                namespace: namespace.to_owned(),
                key: key.to_owned(),
                version,
                value: value.clone(),
                updated_at: Timestamp::now(),
            },
        );
        Ok(version)
    }

    async fn checkpoint(&self, namespace: &str, key: &str) -> StoreResult<Option<Checkpoint>> {
        Ok(self
            .lock()
            .checkpoints
            .get(&(namespace.to_owned(), key.to_owned()))
            .cloned())
    }

    async fn list_checkpoints(&self, namespace: &str) -> StoreResult<Vec<Checkpoint>> {
        Ok(self
            .lock()
            .checkpoints
            .values()
            .filter(|c| c.namespace == namespace)
            .cloned()
            .collect())
    }

    async fn delete_checkpoint(
        &self,
        namespace: &str,
        key: &str,
        expected_version: u64,
    ) -> StoreResult<()> {
        let mut inner = self.lock();
        let id = (namespace.to_owned(), key.to_owned());
        match inner.checkpoints.get(&id) {
            None => Err(StoreError::NotFound {
                what: "checkpoint",
                id: format!("{namespace}/{key}"),
            }),
            Some(c) if c.version != expected_version => Err(StoreError::Conflict {
                expected: expected_version,
                actual: c.version,
            }),
            Some(_) => {
                inner.checkpoints.remove(&id);
                Ok(())
            }
        }
    }

    fn backend(&self) -> &'static str {
        "memory"
    }
}
