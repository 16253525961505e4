//! A coding child's work, for a person at the tree's root (the caller is the approver):
//! what its branch changes against the main checkout (`GET /v1/sessions/{id}/diff`), merged
//! in (`POST /v1/sessions/{id}/merge`, only the commit the caller saw when it names it) or
//! thrown away (`POST /v1/sessions/{id}/discard`). The tree's repository is the host's: the
//! launcher says which ([`crate::Launcher::child_work`]).

use arbor_coding::child_work::{DEFAULT_PAGE_BYTES, MAX_FILES};
use arbor_coding::{ChildWork, FileChange, Located, Merged};
use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Tenant;
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::extract::{Body, Params};
use crate::state::AppState;

/// Which page of the patch.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct DiffQuery {
    /// Bytes of the patch already read (a page's `next_offset`; default 0).
    offset: Option<usize>,
    /// Bytes of patch at most (1 to 65536, default 16384).
    max_bytes: Option<usize>,
}

/// How to merge.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MergeRequest {
    /// `merge` (a merge commit, the default), `squash` (one commit) or `ff` (only a
    /// fast-forward).
    pub strategy: Option<String>,
    /// The commit the caller saw (a diff's `tip`): refused (409) when the branch moved since.
    pub expect_tip: Option<String>,
}

/// One file a change touches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub(crate) struct FileView {
    /// Its path in the repository.
    pub path: String,
    /// Lines added (absent for a binary file).
    pub added: Option<u64>,
    /// Lines removed (absent for a binary file).
    pub removed: Option<u64>,
}

/// Files (at most 200 listed) and their totals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub(crate) struct FilesView {
    /// The files, at most 200.
    pub files: Vec<FileView>,
    /// How many files in all.
    pub files_total: usize,
    /// Lines added in all.
    pub added: u64,
    /// Lines removed in all.
    pub removed: u64,
}

impl FilesView {
    fn of(files: &[FileChange]) -> Self {
        Self {
            files: files
                .iter()
                .take(MAX_FILES)
                .map(|f| FileView {
                    path: f.path.clone(),
                    added: f.added,
                    removed: f.removed,
                })
                .collect(),
            files_total: files.len(),
            added: files.iter().filter_map(|f| f.added).sum(),
            removed: files.iter().filter_map(|f| f.removed).sum(),
        }
    }
}

/// What a coding child's branch changes against the main checkout now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub(crate) struct DiffView {
    /// The child's name.
    pub child: String,
    /// Its session.
    pub session_id: String,
    /// Its branch.
    pub branch: String,
    /// The branch's tip: the commit a merge now brings in (pass it as `expect_tip`).
    pub tip: String,
    /// The merge base the change is read from.
    pub base: String,
    /// Its files and lines.
    #[serde(flatten)]
    pub files: FilesView,
    /// A page of the patch.
    pub patch: String,
    /// Where the next page starts (`offset=`); none on the last.
    pub next_offset: Option<usize>,
    /// The whole patch's size, in bytes.
    pub total_bytes: usize,
}

/// A file a merge would conflict on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub(crate) struct ConflictView {
    /// Its path.
    pub path: String,
    /// Its conflicting hunks, with git's markers (capped).
    pub hunks: String,
}

/// How a merge ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub(crate) struct MergeView {
    /// The child's name.
    pub child: String,
    /// Its session.
    pub session_id: String,
    /// Whether the checkout holds the child's change now (merged now or before).
    pub merged: bool,
    /// It was merged before: nothing changed.
    pub already_merged: bool,
    /// The commit the checkout is at (absent on a conflict).
    pub commit: Option<String>,
    /// How it was merged now (`merge`, `squash`, `ff`).
    pub strategy: Option<String>,
    /// What a merge made now changed (empty otherwise).
    #[serde(flatten)]
    pub files: FilesView,
    /// The files it would conflict on (nothing was changed), each with its hunks.
    pub conflicts: Vec<ConflictView>,
}

/// What a discard removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub(crate) struct DiscardView {
    /// The child's name.
    pub child: String,
    /// Its session.
    pub session_id: String,
    /// Always true: nothing of its work is left.
    pub discarded: bool,
    /// The branch deleted, if there was one.
    pub branch: Option<String>,
    /// The worktree removed, if there was one.
    pub worktree: Option<String>,
}

fn merge_view(found: &Located, merged: &Merged) -> MergeView {
    let mut v = MergeView {
        child: found.name.clone(),
        session_id: found.session_id.to_string(),
        merged: true,
        already_merged: false,
        commit: None,
        strategy: None,
        files: FilesView::of(&[]),
        conflicts: Vec::new(),
    };
    match merged {
        Merged::Done {
            commit,
            strategy,
            files,
        } => {
            v.commit = Some(commit.clone());
            v.strategy = Some(strategy.as_str().to_owned());
            v.files = FilesView::of(files);
        }
        Merged::AlreadyMerged { commit } => {
            v.already_merged = true;
            v.commit = Some(commit.clone());
        }
        Merged::Conflicts(conflicts) => {
            v.merged = false;
            v.conflicts = conflicts
                .iter()
                .map(|c| ConflictView {
                    path: c.path.clone(),
                    hunks: c.hunks.clone(),
                })
                .collect();
        }
        // A way to end added later reads as not merged, with nothing to show.
        _ => v.merged = false,
    }
    v
}

/// Whether `tip` is a whole commit id (SHA-1 or SHA-256, lowercase hex).
fn full_commit(tip: &str) -> bool {
    matches!(tip.len(), 40 | 64) && tip.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The child and its tree's coding work, for a caller of this tenant.
async fn work(
    state: &AppState,
    tenant: &Tenant,
    id: &str,
) -> ApiResult<(ChildWork, String, String)> {
    let record = state.visible(tenant, id).await?;
    if record.parent_id.is_none() {
        return Err(ApiError::new(
            ErrorKind::Conflict,
            "A root has no branch of its own: name one of its coding children",
        ));
    }
    let launcher = state
        .launcher
        .as_ref()
        .ok_or_else(|| ApiError::new(ErrorKind::Conflict, "This server runs no trees"))?;
    let Some(work) = launcher.child_work(record.root_id).await? else {
        return Err(ApiError::new(
            ErrorKind::Conflict,
            "The tree of this session has no coding children (no [workspace])",
        ));
    };
    Ok((work, record.root_id.to_string(), record.id.to_string()))
}

/// What a coding child's branch changes against the main checkout now (from their merge
/// base): its files with lines added and removed, and a page of its patch.
#[utoipa::path(get, path = "/v1/sessions/{id}/diff", operation_id = "child_diff", tag = "coding",
    params(("id" = String, Path, description = "The coding child's session"), DiffQuery),
    responses(
        (status = 200, body = DiffView),
        (status = 400, description = "A bad offset or max_bytes (named)", body = ApiError),
        (status = 401, body = ApiError),
        (status = 404, description = "Unknown or foreign", body = ApiError),
        (status = 409, description = "No worktree: not a coding child, or its work was discarded", body = ApiError)))]
pub(crate) async fn diff(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Params(q): Params<DiffQuery>,
) -> ApiResult<Json<DiffView>> {
    let (work, root, child) = work(&state, &tenant, &id).await?;
    let root = root.parse().map_err(|_| ApiError::not_found("session"))?;
    let (found, diff) = work
        .diff(
            root,
            &child,
            q.offset.unwrap_or(0),
            q.max_bytes.unwrap_or(DEFAULT_PAGE_BYTES),
        )
        .await?;
    Ok(Json(DiffView {
        child: found.name,
        session_id: found.session_id.to_string(),
        files: FilesView::of(&diff.files),
        branch: diff.branch,
        tip: diff.tip,
        base: diff.base,
        patch: diff.patch,
        next_offset: diff.next_offset,
        total_bytes: diff.total_bytes,
    }))
}

/// Merges a finished coding child's branch into the main checkout: the caller approves it.
/// A conflict changes nothing and comes back (`merged: false`, `conflicts`: each file with
/// its hunks); a branch merged already changes nothing (`already_merged`).
#[utoipa::path(post, path = "/v1/sessions/{id}/merge", operation_id = "child_merge", tag = "coding",
    request_body = MergeRequest,
    params(("id" = String, Path, description = "The coding child's session")),
    responses(
        (status = 200, description = "Merged now, merged before (`already_merged`), or not at all for a conflict (`merged: false`, `conflicts`)", body = MergeView),
        (status = 400, description = "A bad strategy or expect_tip (named)", body = ApiError),
        (status = 401, body = ApiError),
        (status = 404, description = "Unknown or foreign", body = ApiError),
        (status = 409, description = "The child still works, its branch moved past expect_tip, or the checkout cannot take a merge now (uncommitted changes, another operation)", body = ApiError)))]
pub(crate) async fn merge(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Body(req): Body<MergeRequest>,
) -> ApiResult<Json<MergeView>> {
    let strategy = match &req.strategy {
        Some(s) => Some(
            arbor_coding::Strategy::parse(s)
                .map_err(|e| ApiError::field("strategy", e.to_string()))?,
        ),
        None => None,
    };
    if let Some(tip) = &req.expect_tip
        && !full_commit(tip)
    {
        return Err(ApiError::field(
            "expect_tip",
            "expect_tip must be a whole commit id (40 or 64 hex digits), as a diff's tip",
        ));
    }
    let (work, root, child) = work(&state, &tenant, &id).await?;
    let root = root.parse().map_err(|_| ApiError::not_found("session"))?;
    // The caller chose the strategy: the spec's list binds the model only.
    let chosen = strategy.unwrap_or(arbor_coding::Strategy::Merge);
    let (found, merged) = work
        .strategies(&[chosen])
        .merge(root, &child, Some(chosen), req.expect_tip.as_deref())
        .await?;
    Ok(Json(merge_view(&found, &merged)))
}

/// Throws a finished coding child's work away: its worktree and branch (its transcript
/// stays).
#[utoipa::path(post, path = "/v1/sessions/{id}/discard", operation_id = "child_discard", tag = "coding",
    params(("id" = String, Path, description = "The coding child's session")),
    responses(
        (status = 200, body = DiscardView),
        (status = 401, body = ApiError),
        (status = 404, description = "Unknown or foreign", body = ApiError),
        (status = 409, description = "The child still works, or a merge of its branch was cut off", body = ApiError)))]
pub(crate) async fn discard(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<DiscardView>> {
    let (work, root, child) = work(&state, &tenant, &id).await?;
    let root = root.parse().map_err(|_| ApiError::not_found("session"))?;
    let (found, gone) = work.discard(root, &child).await?;
    Ok(Json(DiscardView {
        child: found.name,
        session_id: found.session_id.to_string(),
        discarded: true,
        branch: gone.branch,
        worktree: gone.worktree.map(|w| w.display().to_string()),
    }))
}
