//! Session records and the updates and queries over them.

use arbor_protocol::{EntryKind, RunId, SessionId, SessionStatus, SpawnPoint, Timestamp, Usage};
use serde::{Deserialize, Serialize};

use crate::meta::Meta;

/// What the store keeps of one session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The session.
    pub id: SessionId,
    /// The session that delegated to it; `None` for a root.
    pub parent_id: Option<SessionId>,
    /// The root of its tree (itself for a root).
    pub root_id: SessionId,
    /// Readable name, unique among its siblings.
    pub name: String,
    /// The agent definition it runs.
    pub agent: String,
    /// The model it uses.
    pub model: String,
    /// 0 for a root, parent's depth + 1 otherwise.
    pub depth: u32,
    /// Where it stands.
    pub status: SessionStatus,
    /// Tokens its own provider turns used.
    pub own_usage: Usage,
    /// Tokens attributed to it from its descendants.
    pub attributed_usage: Usage,
    /// What its own provider turns cost, in micro-units of the price table's currency (0
    /// without prices).
    #[serde(default)]
    pub own_cost: u64,
    /// What its descendants' turns cost, attributed to it like their tokens.
    #[serde(default)]
    pub attributed_cost: u64,
    /// Prompt tokens of its last provider turn: how full its context is.
    pub context_tokens: u64,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
    /// Host data (for a root: the definition it ran). Never credentials.
    pub meta: Meta,
    /// Where it was spawned from, for a child spawned by a parent's tool call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spawned_by: Option<SpawnPoint>,
    /// Messages it sent to its parent (zero after a finished task: a silent no-op).
    #[serde(default)]
    pub replies: u32,
    /// Artifacts it wrote: successful calls of tools that declare they write one (with no
    /// reply either, a finished child is a silent no-op).
    #[serde(default)]
    pub artifacts: u32,
    /// Set once it was deleted: it leaves listings and messaging, its transcript stays.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tombstone: Option<Tombstone>,
    /// Bumped by every update, from 1 at creation.
    pub version: u64,
}

/// The durable record of a deletion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Tombstone {
    /// When.
    pub at: Timestamp,
    /// Who deleted it (a user, a parent session, the host).
    pub by: String,
    /// Why.
    pub reason: String,
    /// Its status when it was deleted.
    pub final_status: SessionStatus,
    /// Its aggregate usage when it was deleted.
    pub usage: Usage,
}

impl SessionRecord {
    /// A new root session record, version 1, status `idle`.
    pub fn new_root(
        name: impl Into<String>,
        agent: impl Into<String>,
        model: impl Into<String>,
    ) -> Self {
        let id = SessionId::new();
        let now = Timestamp::now();
        Self {
            id,
            parent_id: None,
            root_id: id,
            name: name.into(),
            agent: agent.into(),
            model: model.into(),
            depth: 0,
            status: SessionStatus::Idle,
            own_usage: Usage::default(),
            attributed_usage: Usage::default(),
            own_cost: 0,
            attributed_cost: 0,
            context_tokens: 0,
            created_at: now,
            updated_at: now,
            meta: Meta::default(),
            spawned_by: None,
            replies: 0,
            artifacts: 0,
            tombstone: None,
            version: 1,
        }
    }

    /// A new child of `parent`, version 1, status `idle`.
    pub fn new_child(
        parent: &SessionRecord,
        name: impl Into<String>,
        agent: impl Into<String>,
        model: impl Into<String>,
    ) -> Self {
        let mut record = Self::new_root(name, agent, model);
        record.parent_id = Some(parent.id);
        record.root_id = parent.root_id;
        record.depth = parent.depth + 1;
        record
    }

    /// Own plus attributed usage: what the session is billed for.
    pub fn aggregate_usage(&self) -> Usage {
        self.own_usage + self.attributed_usage
    }

    /// Own plus attributed cost, in micro-units.
    pub fn aggregate_cost(&self) -> u64 {
        self.own_cost.saturating_add(self.attributed_cost)
    }

    /// Fails with `Conflict` when `update` expects another version than this record's, and
    /// with `Deleted` when it requires a live session and this one has a tombstone.
    pub fn check_version(&self, update: &SessionUpdate) -> Result<(), crate::StoreError> {
        if update.live_only && self.tombstone.is_some() {
            return Err(crate::StoreError::Deleted {
                id: self.id.to_string(),
            });
        }
        match update.expected_version {
            Some(expected) if expected != self.version => Err(crate::StoreError::Conflict {
                expected,
                actual: self.version,
            }),
            _ => Ok(()),
        }
    }

    /// Applies `update` in place (without the version check), bumping version and time.
    pub fn apply(&mut self, update: &SessionUpdate) {
        if let Some(status) = update.status {
            self.status = status;
        }
        if let Some(usage) = update.own_usage {
            self.own_usage = usage;
        }
        if let Some(usage) = update.attributed_usage {
            self.attributed_usage = usage;
        }
        if let Some(cost) = update.own_cost {
            self.own_cost = cost;
        }
        if let Some(cost) = update.attributed_cost {
            self.attributed_cost = cost;
        }
        if let Some(tokens) = update.context_tokens {
            self.context_tokens = tokens;
        }
        if let Some(meta) = &update.meta {
            self.meta = Meta::from(meta.clone());
        }
        if let Some(replies) = update.replies {
            self.replies = replies;
        }
        if let Some(artifacts) = update.artifacts {
            self.artifacts = artifacts;
        }
        if let Some(tombstone) = &update.tombstone {
            self.tombstone = Some(tombstone.clone());
        }
        if let Some(name) = &update.name {
            self.name = name.clone();
        }
        self.version += 1;
        self.updated_at = Timestamp::now().max(self.updated_at);
    }
}

/// A change to a session record. Fields left `None` keep their value. Usage values are
/// absolute (not increments), so replaying an update is harmless.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionUpdate {
    /// Refuse the update unless the stored version is this one.
    pub expected_version: Option<u64>,
    /// New status.
    pub status: Option<SessionStatus>,
    /// New own usage.
    pub own_usage: Option<Usage>,
    /// New attributed usage.
    pub attributed_usage: Option<Usage>,
    /// New own cost, in micro-units.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_cost: Option<u64>,
    /// New attributed cost, in micro-units.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attributed_cost: Option<u64>,
    /// New context size.
    pub context_tokens: Option<u64>,
    /// New host data.
    pub meta: Option<serde_json::Value>,
    /// New count of replies to the parent.
    pub replies: Option<u32>,
    /// New count of artifacts written.
    pub artifacts: Option<u32>,
    /// The deletion record (a tombstone is never removed).
    pub tombstone: Option<Tombstone>,
    /// A new name (a rename): unique among the live siblings, else `NameTaken`, changing
    /// nothing. A root's name need not be unique.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Refuse the update (with `Deleted`, changing nothing) when the session has a tombstone:
    /// a run start checks the tombstone atomically with its status change.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub live_only: bool,
}

impl SessionUpdate {
    /// An update of the status only.
    pub fn status(status: SessionStatus) -> Self {
        Self {
            status: Some(status),
            ..Self::default()
        }
    }
}

/// A versioned value kept under a namespace and a key: a suspended run's state, a
/// delegation mapping. Writes are compare-and-swap on the version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// What kind of state (`run`, `delegation`, …).
    pub namespace: String,
    /// Which one (a run id, …).
    pub key: String,
    /// From 1 at creation, bumped by every write.
    pub version: u64,
    /// The state.
    pub value: serde_json::Value,
    /// When it was last written.
    pub updated_at: Timestamp,
}

/// Usage of one session's provider turn, attributed to its ancestors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attribution {
    /// The session whose own usage it is.
    pub from: SessionId,
    /// The usage.
    pub usage: Usage,
    /// What it cost, in micro-units (0 without prices: no cost entry is written).
    pub cost: u64,
    /// Each ancestor, nearest first.
    pub targets: Vec<AttributionTarget>,
}

impl Attribution {
    /// Adds the usage (and cost) to `target`'s record (version and time bumped) and returns
    /// the entries to append to its transcript: a `usage_attributed`, then a
    /// `cost_attributed` when the turn cost something. Backends call it inside their atomic
    /// write.
    pub fn apply_to(
        &self,
        target: &AttributionTarget,
        record: &mut SessionRecord,
    ) -> Vec<EntryKind> {
        let attributed = record.attributed_usage + self.usage;
        let cost = record.attributed_cost.saturating_add(self.cost);
        record.apply(&SessionUpdate {
            attributed_usage: Some(attributed),
            attributed_cost: (self.cost > 0).then_some(cost),
            ..SessionUpdate::default()
        });
        self.entries(target, record.aggregate_usage(), record.aggregate_cost())
    }

    /// The entries [`apply_to`](Self::apply_to) returns, for a target whose aggregate usage
    /// and cost are `aggregate` and `aggregate_cost` once this is added: for a backend that
    /// adds it to the record's columns without reading the whole record.
    pub fn entries(
        &self,
        target: &AttributionTarget,
        aggregate: Usage,
        aggregate_cost: u64,
    ) -> Vec<EntryKind> {
        let mut out = vec![EntryKind::UsageAttributed {
            from: self.from,
            via: target.via,
            target: target.target,
            child_usage: self.usage,
            aggregate,
        }];
        if self.cost > 0 {
            out.push(EntryKind::CostAttributed {
                from: self.from,
                via: target.via,
                micros: self.cost,
                aggregate_micros: aggregate_cost,
            });
        }
        out
    }

    /// The run id the entry in `target`'s transcript is filed under: the run it applies to,
    /// else the attributed session's run.
    pub fn run_for(target: &AttributionTarget, fallback: RunId) -> RunId {
        target.target.map_or(fallback, |t| t.run_id)
    }
}

/// One ancestor an [`Attribution`] is written to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttributionTarget {
    /// The ancestor.
    pub session: SessionId,
    /// Its direct child on the path down to the attributed session.
    pub via: SessionId,
    /// Where `via` was spawned in the ancestor, if known.
    pub target: Option<SpawnPoint>,
}

/// How many sessions have one status within one group: a row of
/// [`Store::census`](crate::Store::census).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusCount {
    /// The string the tree's root keeps at the census' key of its `meta` (`None` when it
    /// keeps none, or not a string): every session of a tree is in its root's group.
    pub group: Option<String>,
    /// Whether these are roots (else sessions with a parent).
    pub root: bool,
    /// Their status.
    pub status: SessionStatus,
    /// How many.
    pub sessions: u64,
    /// What they spent themselves (the sum of their `own_cost`, micro-units of the price
    /// table's currency): summed over every row of a group, the group's whole spend, each
    /// turn counted once.
    pub own_cost_micros: u64,
}

/// Whether `key` may name a census' group: 1 to 64 of `a-z A-Z 0-9 _` (it becomes part of a
/// JSON path in the backends' queries).
pub fn census_key_is_valid(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 64
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Which sessions [`Store::list_sessions`](crate::Store::list_sessions) returns, oldest first
/// (creation time, then id).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionQuery {
    /// Every root session.
    Roots,
    /// The direct children of a session.
    Children(SessionId),
    /// Every session of a tree, the root included.
    Tree(SessionId),
    /// Every session whose status is this one, through an index: what a crash sweep reads
    /// (the sessions left `running`), whatever the store holds besides.
    Status(SessionStatus),
    /// The newest `n` roots (creation time, then id), returned oldest first: what `@latest`
    /// and a listing read, whatever the number of older ones.
    LatestRoots(u32),
}
