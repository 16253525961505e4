//! Sessions: one session (`GET /v1/sessions/{id}`), its children as the registry lists them
//! (`GET /v1/sessions/{id}/children`) and its transcript, paged
//! (`GET /v1/sessions/{id}/transcript?after=&limit=`).

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use utoipa::IntoParams;

use super::listing;
use crate::auth::Tenant;
use crate::error::{ApiError, ApiResult};
use crate::extract::Params;
use crate::state::AppState;
use crate::views::{CancelView, ChildrenView, SessionView, TranscriptPage};

/// The most transcript entries one page holds.
pub const MAX_PAGE: u32 = 500;
const DEFAULT_PAGE: u32 = 100;

/// One session.
#[utoipa::path(get, path = "/v1/sessions/{id}", operation_id = "get_session", tag = "sessions",
    params(("id" = String, Path, description = "The session")),
    responses(
        (status = 200, body = SessionView),
        (status = 401, body = ApiError),
        (status = 404, description = "Unknown or foreign", body = ApiError)))]
pub(crate) async fn get(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<SessionView>> {
    let record = state.visible(&tenant, &id).await?;
    Ok(Json(SessionView::of(&record)))
}

/// Which children.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ChildrenQuery {
    /// At most this many (default 50, at most 200).
    limit: Option<u32>,
    /// The `next_cursor` of the page before.
    cursor: Option<String>,
    /// Only children with this status.
    status: Option<String>,
}

/// A session's children, oldest first, a page at a time: both token totals, status, model,
/// mode, replies, tombstones. The cursor names the last child listed, so children spawned
/// meanwhile (newer) come on a later page, never twice.
#[utoipa::path(get, path = "/v1/sessions/{id}/children", tag = "sessions",
    params(("id" = String, Path, description = "The parent session"), ChildrenQuery),
    responses(
        (status = 200, body = ChildrenView),
        (status = 400, description = "A bad filter, limit or cursor (named)", body = ApiError),
        (status = 401, body = ApiError),
        (status = 404, description = "Unknown or foreign", body = ApiError)))]
pub(crate) async fn children(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Params(q): Params<ChildrenQuery>,
) -> ApiResult<Json<ChildrenView>> {
    let limit = listing::page_limit(q.limit)? as usize;
    let after = q.cursor.as_deref().map(listing::parse_cursor).transpose()?;
    let status = q.status.as_deref().map(listing::parse_status).transpose()?;
    let record = state.visible(&tenant, &id).await?;
    let mut children: Vec<SessionView> =
        arbor_core::registry::children(state.store.as_ref(), record.id, true)
            .await?
            .into_iter()
            .filter(|c| after.is_none_or(|a| (c.created_at, c.id) > a))
            .filter(|c| status.is_none_or(|s| c.status == s))
            .collect();
    children.sort_by_key(|c| (c.created_at, c.id));
    let more = children.len() > limit;
    children.truncate(limit);
    let next_cursor = more
        .then(|| {
            children
                .last()
                .map(|c| listing::cursor_of(c.created_at, c.id))
        })
        .flatten();
    Ok(Json(ChildrenView {
        session_id: record.id.to_string(),
        children,
        next_cursor,
    }))
}

/// Which page of a transcript.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct PageQuery {
    /// Entries after this sequence number (default 0: from the start).
    after: Option<u64>,
    /// At most this many entries (default 100, at most 500).
    limit: Option<u32>,
}

/// A page of a session's transcript, oldest first.
#[utoipa::path(get, path = "/v1/sessions/{id}/transcript", tag = "sessions",
    params(("id" = String, Path, description = "The session"), PageQuery),
    responses(
        (status = 200, body = TranscriptPage),
        (status = 400, body = ApiError), (status = 401, body = ApiError),
        (status = 404, description = "Unknown or foreign", body = ApiError)))]
pub(crate) async fn transcript(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Params(q): Params<PageQuery>,
) -> ApiResult<Json<TranscriptPage>> {
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if limit == 0 || limit > MAX_PAGE {
        return Err(ApiError::field(
            "limit",
            format!("limit must be between 1 and {MAX_PAGE}"),
        ));
    }
    let record = state.visible(&tenant, &id).await?;
    let after = q.after.unwrap_or(0);
    // One more than asked, to tell whether a next page exists.
    let mut entries = state
        .store
        .transcript(record.id, after, Some(limit as usize + 1))
        .await?;
    let more = entries.len() > limit as usize;
    entries.truncate(limit as usize);
    let next_after = more.then(|| entries.last().map(|e| e.seq)).flatten();
    Ok(Json(TranscriptPage {
        session_id: record.id.to_string(),
        entries,
        next_after,
    }))
}

/// Cancels the run of a session going on in this server: a root's run ends with its whole
/// tree; a child's ends with its task-lifetime descendants. The session stays.
#[utoipa::path(post, path = "/v1/sessions/{id}/cancel", operation_id = "cancel_session", tag = "sessions",
    params(("id" = String, Path, description = "The session")),
    responses(
        (status = 202, description = "Cancelling", body = CancelView),
        (status = 401, body = ApiError),
        (status = 404, description = "Unknown or foreign", body = ApiError),
        (status = 409, description = "No run of it goes on in this server", body = ApiError)))]
pub(crate) async fn cancel(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<(axum::http::StatusCode, Json<CancelView>)> {
    let record = state.visible(&tenant, &id).await?;
    let cancelled = match &state.launcher {
        Some(l) => l.cancel(record.root_id, record.id).await?,
        None => false,
    };
    if !cancelled {
        return Err(ApiError::new(
            crate::error::ErrorKind::Conflict,
            "No run of this session goes on in this server: nothing to cancel",
        ));
    }
    Ok((
        axum::http::StatusCode::ACCEPTED,
        Json(CancelView {
            session_id: record.id.to_string(),
            status: "cancelling".to_owned(),
        }),
    ))
}
