//! The objects the API answers with, and the requests it takes. Each view has one JSON
//! shape, the library's serde form where the library has one (a [`ChildRow`] is served as
//! `arbor ls --json` prints it); the `ToSchema` mirrors here describe those shapes for
//! the OpenAPI document, and a test holds each mirror to the type it describes.

use arbor_core::registry::ChildRow;
use arbor_protocol::TranscriptEntry;
use arbor_store::SessionRecord;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Token counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UsageView {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Both.
    pub total_tokens: u64,
    /// Prompt tokens read from a cache.
    pub cache_read_tokens: u64,
    /// Prompt tokens written to a cache.
    pub cache_write_tokens: u64,
}

impl From<arbor_protocol::Usage> for UsageView {
    fn from(u: arbor_protocol::Usage) -> Self {
        Self {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            total_tokens: u.total_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
        }
    }
}

/// A session's two token totals, never confused: its own provider turns, and its own plus
/// every descendant's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Totals {
    /// Its own provider turns.
    pub own: UsageView,
    /// Own plus its descendants'.
    pub aggregate: UsageView,
}

/// One session of a tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SessionView {
    /// The session.
    pub id: String,
    /// Its parent (none for a root).
    pub parent_id: Option<String>,
    /// The root of its tree.
    pub root_id: String,
    /// Its name, unique among its siblings.
    pub name: String,
    /// The agent it runs.
    pub agent: String,
    /// The model it uses.
    pub model: String,
    /// 0 for a root.
    pub depth: u32,
    /// `idle`, `running`, `succeeded`, `failed`, `aborted`, `suspended`, `denied` or
    /// `interrupted`.
    pub status: String,
    /// Its token totals.
    pub usage: Totals,
    /// Prompt tokens of its last turn (how full its context is).
    pub context_tokens: u64,
    /// Messages it sent its parent.
    pub replies: u32,
    /// Artifacts it wrote.
    pub artifacts: u32,
    /// Whether it was deleted (its transcript stays).
    pub deleted: bool,
    /// When it was created (ms since the epoch).
    pub created_at: u64,
    /// When it last changed (ms since the epoch).
    pub updated_at: u64,
}

fn status_word(s: arbor_protocol::SessionStatus) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

impl From<&SessionRecord> for SessionView {
    fn from(r: &SessionRecord) -> Self {
        Self {
            id: r.id.to_string(),
            parent_id: r.parent_id.map(|p| p.to_string()),
            root_id: r.root_id.to_string(),
            name: r.name.clone(),
            agent: r.agent.clone(),
            model: r.model.clone(),
            depth: r.depth,
            status: status_word(r.status),
            usage: Totals {
                own: r.own_usage.into(),
                aggregate: r.aggregate_usage().into(),
            },
            context_tokens: r.context_tokens,
            replies: r.replies,
            artifacts: r.artifacts,
            deleted: r.tombstone.is_some(),
            created_at: r.created_at.0,
            updated_at: r.updated_at.0,
        }
    }
}

/// A tree: its root first, then every session below it, parents before children.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TreeView {
    /// The root.
    pub root_id: String,
    /// Every session of the tree, in tree order.
    pub sessions: Vec<SessionView>,
}

/// One child of a session, as `arbor ls --json` prints it (the registry's row).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChildRowView {
    /// Its session: where its transcript lives.
    pub session_id: String,
    /// Its name, unique among its siblings.
    pub name: String,
    /// The catalog entry it was built from.
    pub child_id: Option<String>,
    /// Its model.
    pub model: String,
    /// Where it stands.
    pub status: String,
    /// `sync`, `async` or `message`.
    pub mode: Option<String>,
    /// `task` or `session`.
    pub lifetime: Option<String>,
    /// Its depth in the tree.
    pub depth: u32,
    /// Its own usage.
    pub own_usage: UsageView,
    /// Own plus its descendants'.
    pub aggregate_usage: UsageView,
    /// Prompt tokens of its last turn.
    pub context_tokens: u64,
    /// Messages it sent its parent.
    pub replies: u32,
    /// Artifacts it wrote.
    pub artifacts: u32,
    /// Finished with no reply and no artifact.
    pub silent: bool,
    /// When it was made (ms since the epoch).
    pub created_at: u64,
    /// When it last changed (ms since the epoch).
    pub updated_at: u64,
    /// Set when it was deleted: when, by whom, why, its final status and usage.
    #[schema(value_type = Option<Object>)]
    pub tombstone: Option<serde_json::Value>,
}

/// A session's children.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ChildrenView {
    /// The parent.
    pub session_id: String,
    /// Its children, oldest first (deleted ones included, with their tombstone).
    #[schema(value_type = Vec<ChildRowView>)]
    pub children: Vec<ChildRow>,
}

/// A page of a transcript.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct TranscriptPage {
    /// The session.
    pub session_id: String,
    /// The entries after `after`, oldest first: each has `seq`, `at`, `run_id` and `type`
    /// with that type's fields.
    #[schema(value_type = Vec<Object>)]
    pub entries: Vec<TranscriptEntry>,
    /// Pass as `after` for the next page; absent at the end.
    pub next_after: Option<u64>,
}

/// Starts a root run of a named spec.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartRunRequest {
    /// The spec's name (one of `GET /v1/specs`).
    pub spec: Option<String>,
    /// An inline spec (TOML) instead of a name: refused unless the server was started with
    /// `--allow-inline-specs`, since a spec can name commands, repositories and servers to
    /// call.
    pub spec_text: Option<String>,
    /// The task; default the spec's own.
    pub task: Option<String>,
    /// Another provider for the root agent.
    pub provider: Option<String>,
    /// Another model for the root agent.
    pub model: Option<String>,
}

/// How a root's run ended, as its launcher kept it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunResultView {
    /// `succeeded`, `failed`, `aborted`, `suspended`, `denied`.
    pub status: String,
    /// Why it stopped (`completed`, `turn_limit`, …).
    pub stop_reason: Option<String>,
    /// The root's answer (redacted).
    pub text: Option<String>,
    /// What went wrong, for a run that did not succeed (redacted).
    pub error: Option<String>,
}

/// A started run.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct RunView {
    /// The root session: the run's id in every other call.
    pub root_id: String,
    /// Where the root stands.
    pub status: String,
    /// How its last run ended, once it has (absent while it runs, and for runs not started
    /// through this API).
    pub result: Option<RunResultView>,
    /// The whole tree.
    pub tree: TreeView,
}

/// A cancel under way.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct CancelView {
    /// The session.
    pub session_id: String,
    /// `cancelling`: it ends `aborted` (follow `GET /v1/sessions/{id}`).
    pub status: String,
}

/// The specs a server can start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct SpecList {
    /// Their names, sorted.
    pub specs: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The mirror describes the row exactly: the same keys.
    #[test]
    fn the_child_row_mirror_has_the_rows_keys() {
        let record = SessionRecord::new_root("r", "agent", "scripted");
        let row = serde_json::to_value(ChildRow::of(&record)).unwrap();
        let mirror: ChildRowView = serde_json::from_value(row.clone()).unwrap();
        assert_eq!(serde_json::to_value(mirror).unwrap(), row);
    }
}
