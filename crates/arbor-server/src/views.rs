//! The objects the API answers with, and the requests it takes. Each view has one JSON
//! shape, the library's serde form where the library has one (a [`ChildRow`] is served as
//! `arbor ls --json` prints it); the `ToSchema` mirrors here describe those shapes for
//! the OpenAPI document, and a test holds each mirror to the type it describes.

use arbor_core::registry::SessionView as SessionView_;
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

/// One session: the one JSON shape of a session everywhere (the library's
/// [`arbor_core::registry::SessionView`], as `arbor ls --json`, `tree --json` and `run
/// --json` print it; `docs/schema/session.schema.json`). This mirror describes it for the
/// OpenAPI document; a test holds it to the library's type.
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
    /// The catalog entry a child was built from (none for a root).
    pub child_id: Option<String>,
    /// The model it uses.
    pub model: String,
    /// 0 for a root.
    pub depth: u32,
    /// `idle`, `running`, `succeeded`, `failed`, `aborted`, `suspended`, `denied` or
    /// `interrupted`.
    pub status: String,
    /// How its parent takes its result: `sync`, `async` or `message`.
    pub mode: Option<String>,
    /// `task` or `session`.
    pub lifetime: Option<String>,
    /// Its token totals.
    pub usage: Totals,
    /// Prompt tokens of its last turn (how full its context is).
    pub context_tokens: u64,
    /// Messages it sent its parent.
    pub replies: u32,
    /// Artifacts it wrote.
    pub artifacts: u32,
    /// Finished with no reply and no artifact (message mode).
    pub silent: bool,
    /// Whether it was deleted (its transcript stays).
    pub deleted: bool,
    /// When it was created (ms since the epoch).
    pub created_at: u64,
    /// When it last changed (ms since the epoch).
    pub updated_at: u64,
    /// Set when it was deleted: when, by whom, why, its final status and usage.
    #[schema(value_type = Option<Object>)]
    pub tombstone: Option<serde_json::Value>,
    /// The tool call that made it: `{session, run, turn, call_id}` of its parent (none for a
    /// root and for a child a host started).
    #[schema(value_type = Option<Object>)]
    pub spawned_by: Option<serde_json::Value>,
}

fn status_word(s: arbor_protocol::SessionStatus) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

impl From<&SessionRecord> for SessionView {
    fn from(r: &SessionRecord) -> Self {
        let v = SessionView_::of(r);
        Self {
            id: v.id.to_string(),
            parent_id: v.parent_id.map(|p| p.to_string()),
            root_id: v.root_id.to_string(),
            name: v.name,
            agent: v.agent,
            child_id: v.child_id,
            model: v.model,
            depth: v.depth,
            status: status_word(v.status),
            mode: v.mode,
            lifetime: v.lifetime,
            usage: Totals {
                own: v.usage.own.into(),
                aggregate: v.usage.aggregate.into(),
            },
            context_tokens: v.context_tokens,
            replies: v.replies,
            artifacts: v.artifacts,
            silent: v.silent,
            deleted: v.deleted,
            created_at: v.created_at.0,
            updated_at: v.updated_at.0,
            tombstone: v.tombstone.and_then(|t| serde_json::to_value(t).ok()),
            spawned_by: v.spawned_by.and_then(|s| serde_json::to_value(s).ok()),
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

/// A session's children.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ChildrenView {
    /// The parent.
    pub session_id: String,
    /// Its children, oldest first (deleted ones included, with their tombstone).
    #[schema(value_type = Vec<SessionView>)]
    pub children: Vec<SessionView_>,
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

    /// The mirror is the library's shape exactly: the same keys, the same values.
    #[test]
    fn the_session_mirror_is_the_librarys_shape() {
        let root = SessionRecord::new_root("r", "agent", "scripted");
        let mut kid = SessionRecord::new_child(&root, "k", "kid", "scripted");
        kid.meta =
            serde_json::json!({"child_id": "kid", "mode": "message", "lifetime": "task"}).into();
        kid.tombstone = Some(arbor_store::Tombstone {
            at: arbor_protocol::Timestamp(5),
            by: "user:x".into(),
            reason: "done".into(),
            final_status: arbor_protocol::SessionStatus::Succeeded,
            usage: arbor_protocol::Usage::new(3, 4),
        });
        for record in [&root, &kid] {
            let library = serde_json::to_value(SessionView_::of(record)).unwrap();
            let mirror: SessionView = serde_json::from_value(library.clone()).unwrap();
            assert_eq!(serde_json::to_value(&mirror).unwrap(), library);
            assert_eq!(SessionView::from(record), mirror);
        }
    }
}
