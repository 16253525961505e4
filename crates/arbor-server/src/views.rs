//! The objects the API answers with, and the requests it takes. Each view has one JSON
//! shape, the library's serde form where the library has one: a session is the library's
//! [`SessionView`] itself (served as `arbor ls --json` prints it), its schema derived on it
//! behind arbor-core's feature `utoipa`, so the document cannot drift from what is served.
//!
//! Ids are named one way: a view of a session names its own id `id` (and its tree's
//! `parent_id`, `root_id`); any other object names the session it is about or refers to
//! `session_id` (a page of a transcript, a handle, a cancel), a delegation `delegation_id`.

use arbor_protocol::TranscriptEntry;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A session's two token totals, never confused (the library's
/// [`arbor_core::registry::Totals`]).
pub use arbor_core::registry::Totals;

/// A session's own and aggregate cost in micro-units (the library's
/// [`arbor_core::registry::CostTotals`]).
pub use arbor_core::registry::CostTotals;

/// One session: the one JSON shape of a session everywhere, the library's type itself (as
/// `arbor ls --json`, `tree --json` and `run --json` print it;
/// `docs/schema/session.schema.json`), its schema derived on it (arbor-core's feature
/// `utoipa`).
pub use arbor_core::registry::SessionView;

/// A tree: its root first, then every session below it, parents before children.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
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
    pub children: Vec<SessionView>,
    /// Where the next page starts (`cursor=`); none on the last page.
    pub next_cursor: Option<String>,
}

/// A page of a transcript.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct TranscriptPage {
    /// The session.
    pub session_id: String,
    /// The entries after `after`, oldest first: each has `seq`, `at`, `run_id` and `kind`
    /// with that kind's fields.
    #[schema(value_type = Vec<Object>)]
    pub entries: Vec<TranscriptEntry>,
    /// Pass as `after` for the next page; absent at the end.
    pub next_after: Option<u64>,
}

/// Starts a root run of a named spec.
#[derive(Debug, Clone, PartialEq, Deserialize, ToSchema)]
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
    /// Model controls for the root agent, over its spec's (kept with the run: a resumed run
    /// keeps them). One out of range, or one the root's provider cannot carry, is refused
    /// naming it.
    #[schema(value_type = Option<crate::controls::ControlsSchema>)]
    pub controls: Option<arbor_model::Controls>,
    /// The host's labels for the run, to find it again (`GET /v1/runs?label=user:ann`): at
    /// most 16, each key 1 to 64 of `a-z A-Z 0-9 _ -`, each value 1 to 256 bytes.
    #[serde(default)]
    pub labels: Option<std::collections::BTreeMap<String, String>>,
    /// A pool for the whole tree (over the root agent's `budget`): a model call it cannot
    /// cover is refused before it is made, and the run ends `budget_exhausted`.
    pub budget: Option<BudgetRequest>,
}

/// A pool for a subtree: tokens and/or money (in the spec's `[pricing] currency`).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetRequest {
    /// Tokens (input plus output) the subtree may spend.
    #[schema(minimum = 1)]
    pub max_tree_tokens: Option<u64>,
    /// Money the subtree may spend, in currency units (above 0).
    pub max_tree_cost: Option<f64>,
}

impl BudgetRequest {
    /// [`BudgetRequest::checked`], of a request that may have none.
    pub fn checked_or_none(
        request: Option<Self>,
    ) -> crate::error::ApiResult<Option<arbor_core::budget::Budget>> {
        request.map(Self::checked).transpose()
    }

    /// The pool, or a 400 naming the field that is out of range.
    pub fn checked(self) -> crate::error::ApiResult<arbor_core::budget::Budget> {
        arbor_core::budget::Budget::from_units(self.max_tree_tokens, self.max_tree_cost, None)
            .map_err(|(field, message)| crate::error::ApiError::field(field, message))
    }
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
    /// Its budget pools, root first: each one's limits, what its subtree spent and what it
    /// holds for work in flight (empty without pools).
    pub pools: Vec<arbor_core::budget::PoolView>,
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
