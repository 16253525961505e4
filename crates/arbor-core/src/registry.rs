//! The parent-scoped child registry, read from the store: which children a session has,
//! their names, models, status, lifetime, both token totals, where their transcript lives,
//! when they were made and changed, and whether they finished without a word (a silent
//! no-op). It is the host's record, never a model's context, so it survives compaction and
//! restarts; a later process (`arbor ls`) reads the same rows.
//!
//! Selectors name a child by its name or its session id. An unknown name, an unknown id and
//! the id of another parent's child get one error, which does not say which. A selector that
//! is one child's name and another child's session id (a deleted child's id included) is
//! refused as ambiguous, naming both, for every verb that takes one: nothing is picked.

use arbor_protocol::{SessionId, SessionStatus, Timestamp, Usage};
use arbor_store::{SessionQuery, SessionRecord, SessionUpdate, Store, Tombstone};
use serde::Serialize;

use crate::error::{CoreError, CoreResult};

/// A session's two token totals, never confused: its own provider turns, and its own plus
/// every descendant's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct Totals {
    /// Its own provider turns.
    pub own: Usage,
    /// Own plus its descendants'.
    pub aggregate: Usage,
}

/// A session's own and aggregate cost, in micro-units (millionths) of its price table's
/// currency; both 0 without prices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct CostTotals {
    /// Its own provider turns.
    pub own_micros: u64,
    /// Own plus its descendants'.
    pub aggregate_micros: u64,
}

/// A session as every surface shows it: the one JSON shape of a session, the same in `arbor
/// ls --json`, `tree --json`, `run --json`, the HTTP API and MCP (documented by
/// `docs/schema/session.schema.json`). The registry's row of a child is one.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SessionView {
    /// The session: where its transcript lives.
    pub id: SessionId,
    /// Its parent (none for a root).
    pub parent_id: Option<SessionId>,
    /// The root of its tree.
    pub root_id: SessionId,
    /// Its name, unique among its siblings.
    pub name: String,
    /// The agent it runs.
    pub agent: String,
    /// The catalog entry a child was built from (none for a root).
    pub child_id: Option<String>,
    /// Its model.
    pub model: String,
    /// Its depth in the tree (0 for a root).
    pub depth: u32,
    /// Where it stands (`interrupted` when a process died under its run).
    pub status: SessionStatus,
    /// How the parent takes its result: `sync`, `async` or `message`.
    pub mode: Option<String>,
    /// `task` or `session`.
    pub lifetime: Option<String>,
    /// Its own and its aggregate usage.
    pub usage: Totals,
    /// Its own and its aggregate cost.
    pub cost: CostTotals,
    /// Prompt tokens of its last turn (how full its context is).
    pub context_tokens: u64,
    /// Messages it sent its parent.
    pub replies: u32,
    /// Artifacts it wrote.
    pub artifacts: u32,
    /// Finished with no reply to its parent and no artifact (message mode): tokens spent,
    /// nothing returned.
    pub silent: bool,
    /// Whether it was deleted (its transcript stays).
    pub deleted: bool,
    /// When it was made (ms since the epoch).
    pub created_at: Timestamp,
    /// When it last changed (ms since the epoch).
    pub updated_at: Timestamp,
    /// Set when it was deleted: when, by whom, why, its final status and usage.
    pub tombstone: Option<Tombstone>,
    /// The tool call that made it: its parent's session, run, turn and call id (none for a
    /// root, and for a child a host started rather than a model's call).
    pub spawned_by: Option<SpawnedBy>,
}

/// The tool call that made a child.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "utoipa", derive(utoipa::ToSchema))]
pub struct SpawnedBy {
    /// The parent's session.
    pub session: SessionId,
    /// The parent's run.
    pub run: arbor_protocol::RunId,
    /// The turn of that run.
    pub turn: u32,
    /// The call's id (none in records from before it was kept).
    pub call_id: Option<String>,
}

impl SpawnedBy {
    /// Where `r` was spawned from, if a call of its parent's run made it.
    pub fn of(r: &SessionRecord) -> Option<Self> {
        let (point, parent) = (r.spawned_by?, r.parent_id?);
        Some(Self {
            session: parent,
            run: point.run_id,
            turn: point.turn,
            call_id: r.meta["spawn_call"].as_str().map(str::to_owned),
        })
    }
}

impl SessionView {
    /// The view of a record.
    pub fn of(r: &SessionRecord) -> Self {
        let meta = |key: &str| r.meta[key].as_str().map(str::to_owned);
        let mode = meta("mode");
        Self {
            id: r.id,
            parent_id: r.parent_id,
            root_id: r.root_id,
            name: r.name.clone(),
            agent: r.agent.clone(),
            child_id: meta("child_id"),
            model: r.model.clone(),
            status: r.status,
            silent: r.parent_id.is_some()
                && mode.as_deref() == Some("message")
                && r.status == SessionStatus::Succeeded
                && r.replies == 0
                && r.artifacts == 0,
            mode,
            lifetime: meta("lifetime"),
            depth: r.depth,
            usage: Totals {
                own: r.own_usage,
                aggregate: r.aggregate_usage(),
            },
            cost: CostTotals {
                own_micros: r.own_cost,
                aggregate_micros: r.aggregate_cost(),
            },
            context_tokens: r.context_tokens,
            replies: r.replies,
            artifacts: r.artifacts,
            deleted: r.tombstone.is_some(),
            created_at: r.created_at,
            updated_at: r.updated_at,
            tombstone: r.tombstone.clone(),
            spawned_by: SpawnedBy::of(r),
        }
    }
}

/// The error every unknown, deleted or foreign selector gets.
pub fn no_such_child(selector: &str) -> CoreError {
    CoreError::NotFound {
        what: "child",
        id: format!("{selector:?} of this session"),
    }
}

/// The session, which must exist.
pub async fn session(store: &dyn Store, id: SessionId) -> CoreResult<SessionRecord> {
    store.session(id).await?.ok_or_else(|| CoreError::NotFound {
        what: "session",
        id: id.to_string(),
    })
}

/// The direct children of `parent`, oldest first; deleted ones only when asked.
pub async fn children(
    store: &dyn Store,
    parent: SessionId,
    include_deleted: bool,
) -> CoreResult<Vec<SessionView>> {
    session(store, parent).await?;
    Ok(store
        .list_sessions(SessionQuery::Children(parent))
        .await?
        .iter()
        .filter(|r| include_deleted || r.tombstone.is_none())
        .map(SessionView::of)
        .collect())
}

/// The error a selector that names more than one session gets: it says which names and
/// which id it matched, so the caller can pick one by what only it has.
pub fn ambiguous(selector: &str, matches: &[&SessionRecord]) -> CoreError {
    let by_id: Option<SessionId> = selector.parse().ok();
    let each: Vec<String> = matches
        .iter()
        .map(|r| {
            if Some(r.id) == by_id {
                format!("the session id of \"{}\"", r.name)
            } else {
                format!("the name of session {}", r.id)
            }
        })
        .collect();
    CoreError::Validation(format!(
        "Selector \"{selector}\" is ambiguous: it is {}; use a name or session id only one of \
         them has",
        each.join(" and ")
    ))
}

/// The one record among `records` that `selector` names: a live record by its name, or any
/// record (deleted too) by its session id. `None` when nothing matches; an error naming
/// each match when it names more than one. A deleted record's name does not count (names
/// are free again once deleted).
pub fn select<'a>(
    records: &'a [SessionRecord],
    selector: &str,
) -> CoreResult<Option<&'a SessionRecord>> {
    let by_id: Option<SessionId> = selector.parse().ok();
    let mut matches: Vec<&SessionRecord> = records
        .iter()
        .filter(|r| Some(r.id) == by_id || (r.tombstone.is_none() && r.name == selector))
        .collect();
    matches.sort_by_key(|r| r.id);
    matches.dedup_by_key(|r| r.id);
    // Name matches first, then the id match: the message reads in that order.
    matches.sort_by_key(|r| Some(r.id) == by_id);
    match matches.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(*one)),
        _ => Err(ambiguous(selector, &matches)),
    }
}

/// The child of `parent` that `selector` names (its name, or its session id), not deleted.
/// A selector that is one child's name and another's session id is refused as ambiguous.
pub async fn find_child(
    store: &dyn Store,
    parent: SessionId,
    selector: &str,
) -> CoreResult<SessionRecord> {
    let kids = store.list_sessions(SessionQuery::Children(parent)).await?;
    match select(&kids, selector)? {
        Some(r) if r.tombstone.is_none() => Ok(r.clone()),
        _ => Err(no_such_child(selector)),
    }
}

/// The descendant of `parent` that `selector` names: a direct child by its name or session
/// id (deleted too: its transcript stays), or a deeper descendant by its session id. Anything
/// else (unknown, or another family's) is not found, as every unknown child is.
pub async fn find_descendant(
    store: &dyn Store,
    parent: SessionId,
    selector: &str,
) -> CoreResult<SessionRecord> {
    let kids = store.list_sessions(SessionQuery::Children(parent)).await?;
    if let Some(r) = select(&kids, selector)? {
        return Ok(r.clone());
    }
    let Ok(id) = selector.trim().parse::<SessionId>() else {
        return Err(no_such_child(selector));
    };
    let Some(found) = store.session(id).await? else {
        return Err(no_such_child(selector));
    };
    // Up its parents to `parent`, never further than its depth.
    let mut up = found.parent_id;
    for _ in 0..found.depth {
        match up {
            Some(p) if p == parent => return Ok(found),
            Some(p) => up = store.session(p).await?.and_then(|r| r.parent_id),
            None => break,
        }
    }
    Err(no_such_child(selector))
}

/// Every session of the tree under `root` (deleted ones included), oldest first.
pub async fn tree(store: &dyn Store, root: SessionId) -> CoreResult<Vec<SessionRecord>> {
    let top = session(store, root).await?;
    Ok(store.list_sessions(SessionQuery::Tree(top.root_id)).await?)
}

/// How many children under `root` finished without a word.
pub fn silent_count(sessions: &[SessionRecord]) -> usize {
    sessions
        .iter()
        .filter(|r| r.parent_id.is_some() && SessionView::of(r).silent)
        .count()
}

/// What a delete selector names.
#[derive(Debug, Clone, PartialEq)]
pub enum DeleteTarget {
    /// A child to delete.
    Live(Box<SessionRecord>),
    /// A child deleted before (named by its session id): nothing to do.
    Deleted(SessionId, Tombstone),
}

/// Resolves a delete selector among `parent`'s children: a live child by its name, or any
/// child by its session id (a deleted one is found, so deleting twice is harmless); failing
/// both, the latest deleted child of that name (a deleted child's name is free for a new
/// child, which a later delete by that name then deletes). A selector that is one child's
/// name and another's session id is refused as ambiguous, naming both: nothing is deleted.
pub async fn delete_target(
    store: &dyn Store,
    parent: SessionId,
    selector: &str,
) -> CoreResult<DeleteTarget> {
    let kids = store.list_sessions(SessionQuery::Children(parent)).await?;
    if let Some(r) = select(&kids, selector)? {
        return Ok(match &r.tombstone {
            Some(t) => DeleteTarget::Deleted(r.id, t.clone()),
            None => DeleteTarget::Live(Box::new(r.clone())),
        });
    }
    kids.into_iter()
        .filter(|r| r.name == selector)
        .filter_map(|r| r.tombstone.map(|t| (r.id, t)))
        .max_by_key(|(_, t)| t.at)
        .map(|(id, tombstone)| DeleteTarget::Deleted(id, tombstone))
        .ok_or_else(|| no_such_child(selector))
}

/// Writes `child`'s tombstone: who, when, why, its final status (`aborted` if it was still
/// live) and its aggregate usage. The record and transcript stay.
pub async fn write_tombstone(
    store: &dyn Store,
    child: &SessionRecord,
    by: &str,
    reason: &str,
) -> CoreResult<Tombstone> {
    let tombstone = Tombstone {
        at: Timestamp::now(),
        by: by.to_owned(),
        reason: reason.to_owned(),
        // A run cut by the delete, or one that never started for want of a slot.
        final_status: if child.status.is_live() || child.status == SessionStatus::Queued {
            SessionStatus::Aborted
        } else {
            child.status
        },
        usage: child.aggregate_usage(),
    };
    store
        .update_session(
            child.id,
            &SessionUpdate {
                tombstone: Some(tombstone.clone()),
                ..SessionUpdate::default()
            },
        )
        .await?;
    Ok(tombstone)
}

/// What a rename did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Renamed {
    /// The child's session.
    pub session_id: SessionId,
    /// The name it had.
    pub from: String,
    /// The name it has now.
    pub to: String,
}

/// Renames the child of `parent` that `selector` names, in the store: the new name is
/// checked like a requested one and must be free among its live siblings (`Validation`
/// naming it otherwise, nothing changed), and the record's change and a `renamed` entry in
/// its transcript (who, from, to) are one write. Renaming to its current name changes
/// nothing.
pub async fn rename_child(
    store: &dyn Store,
    parent: SessionId,
    selector: &str,
    new_name: &str,
    by: &str,
) -> CoreResult<Renamed> {
    let to = crate::supervisor::config::names::requested(new_name)?;
    let child = find_child(store, parent, selector).await?;
    if to == child.name {
        return Ok(Renamed {
            session_id: child.id,
            from: child.name.clone(),
            to,
        });
    }
    let update = arbor_store::SessionUpdate {
        expected_version: Some(child.version),
        name: Some(to.clone()),
        live_only: true,
        ..arbor_store::SessionUpdate::default()
    };
    let entry = arbor_protocol::EntryKind::Renamed {
        from: child.name.clone(),
        to: to.clone(),
        by: by.to_owned(),
    };
    store
        .append(
            child.id,
            arbor_protocol::RunId::new(),
            &[entry],
            Some(&update),
        )
        .await
        .map_err(|e| match e {
            arbor_store::StoreError::Conflict { .. } => CoreError::validation(format!(
                "\"{}\" changed while it was renamed; try again",
                child.name
            )),
            arbor_store::StoreError::Deleted { .. } => no_such_child(selector),
            other => crate::session::name_error(other, child.depth),
        })?;
    tracing::info!(child = %child.id, from = %child.name, to = %to, by, "child renamed");
    Ok(Renamed {
        session_id: child.id,
        from: child.name,
        to,
    })
}
