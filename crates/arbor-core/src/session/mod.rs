//! Sessions: one agent's conversation, its transcript and its usage, and the run loop that
//! drives it.
//!
//! A session is created through [`Agent::session`], which writes its record to the store,
//! or reopened from the store with [`Agent::open_session`], which rebuilds its messages and
//! usage from the transcript (`replay`). [`Session::run`](crate::Session::run) drives one
//! input to a terminal status, in the order the files below run:
//!
//! - `run`: the loop (model turns, limits, cancellation), and `resumer`, its seams with
//!   what it delegated;
//! - `dispatch`: a turn's tool calls (permission, concurrency, effects);
//! - `approval_gate`: calls that wait for a decision, and [`Session::resume`];
//! - `finish`: the terminal status, the result, the closing of a checkpoint;
//! - `recover`: continuing a run a crash interrupted; `compact`: compaction and forks;
//! - [`events`], [`inbox`] and `attribution`: what a run publishes, reads and bills.

use std::sync::Arc;

use arbor_protocol::{EntryKind, Message, RunId, SessionId, SessionStatus, SpawnPoint, Usage};
use arbor_store::{
    Attribution, AttributionTarget, MemoryStore, SessionRecord, SessionUpdate, Store, StoreError,
};

use crate::agent::Agent;
use crate::error::{CoreError, CoreResult};
use crate::outcome::SessionRef;
use crate::redact::redact_serde;
use crate::session::events::{EventBus, Subscription};
use crate::session::inbox::Inbox;

pub(crate) mod approval_gate;
pub(crate) mod attribution;
pub(crate) mod budget_gate;
pub(crate) mod compact;
pub(crate) mod cost;
pub(crate) mod dispatch;
pub mod events;
pub(crate) mod finish;
pub mod fork;
mod hold;
pub mod inbox;
pub(crate) mod output_gate;
pub(crate) mod provider_turn;
pub(crate) mod reasoning;
pub(crate) mod recover;
pub(crate) mod replay;
pub(crate) mod resumer;
pub(crate) mod run;
pub(crate) mod steps;
pub(crate) mod turn_stop;

/// A live session. Runs take `&mut self`, so one session runs one input at a time.
#[derive(Debug)]
pub struct Session {
    pub(crate) agent: Agent,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) record: SessionRecord,
    pub(crate) messages: Vec<Message>,
    /// The reasoning of the current run's tool-calling turns, by each one's first call id:
    /// sent back with its message where the API wants it (Anthropic's thinking).
    pub(crate) reasoning: arbor_model::Reasonings,
    pub(crate) bus: EventBus,
    /// Its ancestors, nearest first, whom each of its provider turns' usage is attributed to.
    pub(crate) ancestors: Vec<AttributionTarget>,
    /// Messages delivered to it and not yet read by a turn.
    pub(crate) inbox: Arc<Inbox>,
    /// A record (namespace, value) its runs store under their run id just before they
    /// first store a suspension: a supervisor's delegation mapping, so a crash can never
    /// leave a suspended child whose run nobody can rebuild.
    pub(crate) beside_suspension: Option<(&'static str, serde_json::Value)>,
    /// A store write was left unanswered (its future dropped: a cancel, a timeout): it may
    /// have landed without `record` hearing of it, so `record` is read again before a value
    /// is computed from it ([`Session::sync_record`]).
    pub(crate) unsure: bool,
    /// Its fork of its parent's conversation, recorded with its first run
    /// ([`fork`]): written then, and never again.
    pub(crate) fork_entry: Option<EntryKind>,
    /// Corrections its next run starts counting from: those a run a crash cut off had sent
    /// back already, for the run that continues it ([`recover`]).
    pub(crate) carried_corrections: u32,
}

impl Agent {
    /// Starts creating a session of this agent.
    pub fn session(&self) -> SessionBuilder {
        SessionBuilder {
            agent: self.clone(),
            store: None,
            name: None,
            parent: None,
            spawned_by: None,
            meta: serde_json::Value::Null,
            id: None,
            budget: None,
            output: None,
        }
    }

    /// Reopens a stored session: its messages and usage are rebuilt from its transcript and
    /// record. The session's agent name must match this agent's.
    pub async fn open_session(&self, store: Arc<dyn Store>, id: SessionId) -> CoreResult<Session> {
        let record = store
            .session(id)
            .await?
            .ok_or_else(|| CoreError::NotFound {
                what: "session",
                id: id.to_string(),
            })?;
        if record.agent != self.name() {
            return Err(CoreError::validation(format!(
                "session {id} runs agent {:?}, not {:?}",
                record.agent,
                self.name()
            )));
        }
        Session::reopen(self.clone(), store, record).await
    }
}

/// Creates a [`Session`].
#[derive(Debug)]
#[must_use]
pub struct SessionBuilder {
    agent: Agent,
    store: Option<Arc<dyn Store>>,
    name: Option<String>,
    parent: Option<SessionRef>,
    spawned_by: Option<SpawnPoint>,
    meta: serde_json::Value,
    id: Option<SessionId>,
    budget: Option<crate::budget::Budget>,
    output: Option<crate::output::OutputSchema>,
}

impl SessionBuilder {
    /// The session's id, chosen by the host (a fresh one by default): creating a second
    /// session with it fails (`AlreadyExists`), so a host that names the id up front can
    /// make a retried creation idempotent.
    pub fn id(mut self, id: SessionId) -> Self {
        self.id = Some(id);
        self
    }

    /// Where the session is kept; defaults to a fresh in-memory store.
    pub fn store(mut self, store: Arc<dyn Store>) -> Self {
        self.store = Some(store);
        self
    }

    /// The session's readable name; defaults to the agent's name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Makes it a child of `parent` (same tree, one level deeper).
    pub fn parent(mut self, parent: impl Into<SessionRef>) -> Self {
        self.parent = Some(parent.into());
        self
    }

    /// The parent's run and turn whose tool call spawned it (its usage is attributed there).
    pub fn spawned_by(mut self, point: SpawnPoint) -> Self {
        self.spawned_by = Some(point);
        self
    }

    /// Host data kept with the record (never credentials).
    pub fn meta(mut self, meta: serde_json::Value) -> Self {
        self.meta = meta;
        self
    }

    /// A pool for the session's whole subtree (`max_tree_tokens`, `max_tree_cost`; see
    /// [`crate::budget`]): every model call below it reserves its worst case first. A child's
    /// pool is reserved from its parent's, clamped to what they have left.
    pub fn budget(mut self, budget: crate::budget::Budget) -> Self {
        self.budget = (!budget.is_empty()).then_some(budget);
        self
    }

    /// The JSON Schema the session's answers must match ([`crate::output`]): each run's
    /// final answer is checked, a mismatch sent back to the model (at most the schema's
    /// retries), and the run ends `invalid_output` past them. Kept in the record, so a run
    /// resumed after a restart checks it too.
    pub fn output_schema(mut self, output: crate::output::OutputSchema) -> Self {
        self.output = Some(output);
        self
    }

    /// Writes the session record and returns the session.
    pub async fn create(self) -> CoreResult<Session> {
        let store = self
            .store
            .unwrap_or_else(|| Arc::new(MemoryStore::new()) as Arc<dyn Store>);
        let name = self.name.unwrap_or_else(|| self.agent.name().to_owned());
        validate_session_name(&name)?;
        let mut record = SessionRecord::new_root(name, self.agent.name(), self.agent.model());
        if let Some(id) = self.id {
            record.id = id;
            record.root_id = id;
        }
        let mut under_pool = false;
        if let Some(parent) = self.parent {
            // The stored parent is the authority on the tree and the depth.
            let stored = store
                .session(parent.id)
                .await?
                .ok_or_else(|| CoreError::NotFound {
                    what: "session",
                    id: parent.id.to_string(),
                })?;
            record.parent_id = Some(stored.id);
            record.root_id = stored.root_id;
            record.depth = stored.depth + 1;
            under_pool = stored
                .meta
                .field(crate::budget::BUDGETED)
                .is_some_and(|v| v.as_bool() == Some(true));
        }
        record.spawned_by = self.spawned_by;
        let mut meta = self.meta;
        if let Some(output) = &self.output {
            set_meta(
                &mut meta,
                crate::output::OUTPUT_SCHEMA,
                serde_json::to_value(output).unwrap_or_default(),
            )?;
        }
        if under_pool {
            set_meta(&mut meta, crate::budget::BUDGETED, true.into())?;
        }
        let mut opened = false;
        if let Some(asked) = self.budget {
            asked.check()?;
            // Checked before the pool is opened: nothing is written for a meta that cannot
            // carry it.
            set_meta(&mut meta, crate::budget::BUDGETED, true.into())?;
            let above: Vec<SessionId> = ancestors(store.as_ref(), &record)
                .await?
                .into_iter()
                .map(|t| t.session)
                .collect();
            let grant = crate::budget::open_pool(
                store.as_ref(),
                record.root_id,
                record.id,
                (&above, asked, crate::budget::BudgetPolicy::Clamp, false),
            )
            .await?
            .map_err(|r| CoreError::limit_error(r.message(), None))?;
            set_meta(
                &mut meta,
                "budget",
                serde_json::to_value(grant.budget).unwrap_or_default(),
            )?;
            if grant.clamped {
                set_meta(&mut meta, "budget_clamped", true.into())?;
            }
            opened = grant.opened;
        }
        record.meta = meta.into();
        if let Err(e) = store.create_session(&record).await {
            if opened {
                crate::budget::remove_pool(store.as_ref(), record.root_id, record.id).await;
            }
            return Err(name_error(e, record.depth));
        }
        Session::attach(self.agent, store, record).await
    }
}

impl Session {
    /// An existing session rebuilt from its transcript for `agent`, whatever agent name its
    /// record carries (a catalog entry's factory may name its agent freely).
    pub(crate) async fn reopen(
        agent: Agent,
        store: Arc<dyn Store>,
        record: SessionRecord,
    ) -> CoreResult<Session> {
        let entries = store.transcript(record.id, 0, None).await?;
        let inbox = Inbox::from_transcript(&entries);
        let reasoning = crate::session::replay::replay_reasoning(&entries);
        let (prefix, fork_entry) =
            fork::of_session(store.as_ref(), &record, &entries, agent.redactor()).await?;
        let messages = crate::session::replay::replay_messages(prefix, entries);
        let mut session = Self::assemble(agent, store, record, messages, inbox).await?;
        session.reasoning = reasoning;
        session.fork_entry = fork_entry;
        Ok(session)
    }

    /// A session for a record written moments ago (by admission), with no transcript yet.
    pub(crate) async fn attach(
        agent: Agent,
        store: Arc<dyn Store>,
        record: SessionRecord,
    ) -> CoreResult<Session> {
        let (prefix, fork_entry) =
            fork::of_session(store.as_ref(), &record, &[], agent.redactor()).await?;
        let mut session = Self::assemble(agent, store, record, prefix, Inbox::new()).await?;
        session.fork_entry = fork_entry;
        Ok(session)
    }

    async fn assemble(
        agent: Agent,
        store: Arc<dyn Store>,
        record: SessionRecord,
        messages: Vec<Message>,
        inbox: Inbox,
    ) -> CoreResult<Session> {
        let ancestors = ancestors(store.as_ref(), &record).await?;
        Ok(Session {
            bus: EventBus::new(record.id, agent.event_capacity())
                .with_redactor(agent.redactor().cloned()),
            agent,
            store,
            record,
            messages,
            reasoning: arbor_model::Reasonings::new(),
            ancestors,
            inbox: Arc::new(inbox),
            beside_suspension: None,
            unsure: false,
            fork_entry: None,
            carried_corrections: 0,
        })
    }

    /// Who its spans are about.
    pub(crate) fn who(&self) -> crate::process::telemetry::Who<'_> {
        crate::process::telemetry::Who {
            agent: self.agent.name(),
            provider: self.agent.provider().name(),
            model: self.agent.model(),
            session: self.record.id,
            root: self.record.root_id,
            depth: self.record.depth,
            parent: self.record.parent_id,
            redactor: self
                .agent
                .redactor()
                .map(|r| r.as_ref() as &dyn crate::redact::Redactor),
        }
    }

    /// Its inbox: what others delivered and no turn has read yet.
    pub fn inbox(&self) -> &Arc<Inbox> {
        &self.inbox
    }

    /// Makes `inbox` this session's inbox: the one a supervisor's hub holds for it, so
    /// deliveries made before the session was opened are read by its runs.
    pub(crate) fn share_inbox(&mut self, inbox: Arc<Inbox>) {
        self.inbox = inbox;
    }

    /// Stores `value` in `namespace`, keyed by the run id, before any run of this session
    /// stores a suspension (see the field).
    pub(crate) fn keep_beside_suspension(
        &mut self,
        namespace: &'static str,
        value: serde_json::Value,
    ) {
        self.beside_suspension = Some((namespace, value));
    }

    /// The session's id.
    pub fn id(&self) -> SessionId {
        self.record.id
    }

    /// Its place in its tree.
    pub fn as_ref(&self) -> SessionRef {
        SessionRef::from(&self.record)
    }

    /// The agent it runs.
    pub fn agent(&self) -> &Agent {
        &self.agent
    }

    /// The store it is kept in.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Its record as last written.
    pub fn record(&self) -> &SessionRecord {
        &self.record
    }

    /// Its messages, oldest first.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// Tokens its own provider turns used, over all its runs.
    pub fn usage(&self) -> Usage {
        self.record.own_usage
    }

    /// How full its context is: the prompt tokens of its last provider turn. Never includes
    /// what other sessions used.
    pub fn context_tokens(&self) -> u64 {
        self.record.context_tokens
    }

    /// Its status.
    pub fn status(&self) -> SessionStatus {
        self.record.status
    }

    /// Subscribes to its events from now on.
    pub fn subscribe(&self) -> Subscription {
        self.bus.subscribe()
    }

    /// Its event bus (to hand to code that subscribes later).
    pub fn events(&self) -> &EventBus {
        &self.bus
    }

    /// Appends entries and applies an update in one store write, keeping the cached record
    /// in step; with `attributed`, the same write attributes that usage to every ancestor.
    pub(crate) async fn commit(
        &mut self,
        run: RunId,
        entries: &[EntryKind],
        update: Option<SessionUpdate>,
    ) -> CoreResult<()> {
        self.commit_usage(run, entries, update, None).await
    }

    pub(crate) async fn commit_usage(
        &mut self,
        run: RunId,
        entries: &[EntryKind],
        update: Option<SessionUpdate>,
        attributed: Option<(Usage, u64)>,
    ) -> CoreResult<()> {
        let redacted;
        let entries = match self.agent.redactor() {
            Some(r) => {
                redacted = entries
                    .iter()
                    .map(|e| match redact_serde(r.as_ref(), e) {
                        Ok(clean) => Ok(clean.unwrap_or_else(|| e.clone())),
                        Err(why) => Err(CoreError::Validation(format!(
                            "a transcript entry could not be redacted: {why}"
                        ))),
                    })
                    .collect::<CoreResult<Vec<_>>>()?;
                &redacted[..]
            }
            None => entries,
        };
        let started = std::time::Instant::now();
        // Back as it was once the write's answer is in (only a read clears it): a caller that
        // stops waiting leaves it set.
        let unsure = std::mem::replace(&mut self.unsure, true);
        match attributed {
            // A turn that used nothing attributes nothing.
            Some((usage, cost))
                if !self.ancestors.is_empty() && (usage != Usage::default() || cost > 0) =>
            {
                let attribution = Attribution {
                    from: self.record.id,
                    usage,
                    cost,
                    targets: self.ancestors.clone(),
                };
                self.store
                    .append_attributed(self.record.id, run, entries, update.as_ref(), &attribution)
                    .await?;
            }
            _ => {
                self.store
                    .append(self.record.id, run, entries, update.as_ref())
                    .await?;
            }
        }
        crate::process::telemetry::store_commit(started.elapsed());
        if let Some(update) = update {
            self.record.apply(&update);
        }
        self.unsure = unsure;
        Ok(())
    }

    /// Reads the record again if a write was left unanswered (see `unsure`), so usage and
    /// counts computed from it start from what the store holds.
    pub(crate) async fn sync_record(&mut self) -> CoreResult<()> {
        if self.unsure {
            if let Some(stored) = self.store.session(self.record.id).await? {
                self.record = stored;
            }
            self.unsure = false;
        }
        Ok(())
    }
}

/// Checks a session name: 1–64 characters, none of them a control character.
pub fn validate_session_name(name: &str) -> CoreResult<()> {
    if name.trim().is_empty() || name.chars().count() > 64 || name.chars().any(char::is_control) {
        return Err(CoreError::validation(
            "session name must be 1-64 characters, without control characters",
        ));
    }
    Ok(())
}

/// The ancestors of `record`, nearest first, each with the child it is reached through and
/// where that child was spawned.
pub(crate) async fn ancestors(
    store: &dyn Store,
    record: &SessionRecord,
) -> CoreResult<Vec<AttributionTarget>> {
    let mut out = Vec::with_capacity(record.depth as usize);
    let mut via = record.clone();
    while let Some(parent_id) = via.parent_id {
        // Depth bounds the walk even if stored data were to loop.
        if out.len() > record.depth as usize {
            return Err(CoreError::Store(StoreError::Corrupt(format!(
                "the ancestors of session {} do not end at a root",
                record.id
            ))));
        }
        let parent = store
            .session(parent_id)
            .await?
            .ok_or_else(|| CoreError::NotFound {
                what: "session",
                id: parent_id.to_string(),
            })?;
        out.push(AttributionTarget {
            session: parent_id,
            via: via.id,
            target: via.spawned_by,
        });
        via = parent;
    }
    Ok(out)
}

/// Sets `key` of a host's `meta`, which must then be an object (or nothing yet).
fn set_meta(meta: &mut serde_json::Value, key: &str, value: serde_json::Value) -> CoreResult<()> {
    if meta.is_null() {
        *meta = serde_json::Value::Object(serde_json::Map::new());
    }
    match meta.as_object_mut() {
        Some(map) => {
            map.insert(key.to_owned(), value);
            Ok(())
        }
        None => Err(CoreError::invalid(
            "meta",
            format!("meta must be a JSON object to carry {key}"),
        )),
    }
}

/// The error for a name a sibling already has (other store errors pass through).
pub(crate) fn name_error(e: StoreError, depth: u32) -> CoreError {
    match e {
        StoreError::NameTaken { name } => CoreError::invalid(
            "name",
            format!(
                "Agent name \"{name}\" is unavailable: an agent of that name already exists at \
                 depth {depth} under this parent"
            ),
        ),
        other => CoreError::Store(other),
    }
}
