//! The tenant's runs, a page at a time (`GET /v1/runs`): newest first, filtered by status,
//! spec, labels and creation time, each with its spec, labels, start time and headline. A
//! page is one store query ([`Store::roots_page`](arbor_store::Store::roots_page)), whatever
//! the number of runs stored; its `next_cursor` names the last run listed, so runs started
//! meanwhile never shift a later page (no run listed twice, none skipped).
//!
//! Also the cursor the other paged lists share (children, approvals): the last item's
//! creation time and id, opaque to clients.

use std::collections::BTreeMap;

use arbor_protocol::{SessionId, SessionStatus, Timestamp};
use arbor_store::RootPage;
use axum::Json;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::headline::task_of;
use crate::auth::{LOCAL_TENANT, Tenant};
use crate::error::{ApiError, ApiResult};
use crate::extract::Params;
use crate::state::AppState;
use crate::views::SessionView;

/// Items on a page unless `limit` says otherwise.
pub const DEFAULT_PAGE: u32 = 50;
/// The most items on one page.
pub const MAX_LIST_PAGE: u32 = 200;

/// One run in a list.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct RunSummary {
    /// The root session (`created_at`: when the run started).
    #[serde(flatten)]
    pub root: SessionView,
    /// Its task, in one line.
    pub headline: String,
    /// The spec it was started from (`inline` for an inline spec; none for a run started
    /// before runs kept it).
    pub spec: Option<String>,
    /// The labels it was started with.
    pub labels: BTreeMap<String, String>,
}

/// A page of this tenant's runs.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct RunList {
    /// Newest first.
    pub runs: Vec<RunSummary>,
    /// Where the next page starts (`cursor=`); none on the last page.
    pub next_cursor: Option<String>,
}

/// Which runs.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct RunsQuery {
    /// At most this many (default 50, at most 200).
    limit: Option<u32>,
    /// The `next_cursor` of the page before.
    cursor: Option<String>,
    /// Only runs whose root has this status (`running`, `succeeded`, …).
    status: Option<String>,
    /// Only runs of this spec.
    spec: Option<String>,
    /// Only runs with these labels: `key:value`, several separated by commas.
    label: Option<String>,
    /// Only runs started at or after this time (ms since the epoch).
    created_after: Option<u64>,
    /// Only runs started before this time (ms since the epoch).
    created_before: Option<u64>,
}

/// A page's size, checked (400 naming `limit`).
pub(crate) fn page_limit(limit: Option<u32>) -> ApiResult<u32> {
    match limit.unwrap_or(DEFAULT_PAGE) {
        0 => Err(ApiError::field("limit", "limit must be at least 1")),
        n if n > MAX_LIST_PAGE => Err(ApiError::field(
            "limit",
            format!("limit must be at most {MAX_LIST_PAGE}"),
        )),
        n => Ok(n),
    }
}

/// A cursor naming the item listed last.
pub(crate) fn cursor_of(at: Timestamp, id: SessionId) -> String {
    format!("{}.{id}", at.0)
}

/// The item a cursor names (400 naming `cursor` for one this server did not give).
pub(crate) fn parse_cursor(cursor: &str) -> ApiResult<(Timestamp, SessionId)> {
    let bad = || ApiError::field("cursor", "cursor must be a next_cursor this server gave");
    let (at, id) = cursor.split_once('.').ok_or_else(bad)?;
    let at: u64 = at.parse().map_err(|_| bad())?;
    if at > i64::MAX as u64 {
        return Err(bad());
    }
    Ok((Timestamp(at), id.parse().map_err(|_| bad())?))
}

/// The status a filter names (400 naming `status`).
pub(crate) fn parse_status(status: &str) -> ApiResult<SessionStatus> {
    SessionStatus::parse(status).ok_or_else(|| {
        ApiError::field(
            "status",
            format!(
                "status {status:?} is not one of idle, running, succeeded, failed, aborted, \
                 suspended, denied, interrupted"
            ),
        )
    })
}

fn page_of(tenant: &Tenant, q: &RunsQuery, limit: u32) -> ApiResult<RootPage> {
    // One more than asked: whether there is a next page.
    let mut page = RootPage::new(limit + 1);
    page = if tenant.0 == LOCAL_TENANT {
        // Trees the CLI started name no tenant: they are the local tenant's.
        page.meta_or_absent(&["tenant"], LOCAL_TENANT)
    } else {
        page.meta(&["tenant"], tenant.0.clone())
    };
    if let Some(c) = &q.cursor {
        let (at, id) = parse_cursor(c)?;
        page = page.after(at, id);
    }
    if let Some(s) = &q.status {
        page = page.status(parse_status(s)?);
    }
    if let Some(spec) = &q.spec {
        page = page.meta(&["spec"], spec.clone());
    }
    if let Some(labels) = &q.label {
        for pair in labels.split(',').filter(|p| !p.trim().is_empty()) {
            let (key, value) = pair.split_once(':').ok_or_else(|| {
                ApiError::field("label", "label takes key:value pairs separated by commas")
            })?;
            if !arbor_store::meta_key_is_valid(key) {
                return Err(ApiError::field(
                    "label",
                    format!("label {key:?}: a key is 1 to 64 of a-z A-Z 0-9 _ -, not a number"),
                ));
            }
            page = page.meta(&["labels", key], value);
        }
    }
    for (field, at) in [
        ("created_after", q.created_after),
        ("created_before", q.created_before),
    ] {
        if at.is_some_and(|t| t > i64::MAX as u64) {
            return Err(ApiError::field(
                field,
                format!("{field} is ms since the epoch, at most {}", i64::MAX),
            ));
        }
    }
    if let Some(at) = q.created_after {
        page = page.created_from(Timestamp(at));
    }
    if let Some(at) = q.created_before {
        page = page.created_before(Timestamp(at));
    }
    Ok(page)
}

/// This tenant's runs, newest first, a page at a time.
#[utoipa::path(get, path = "/v1/runs", operation_id = "list_runs", tag = "runs", params(RunsQuery),
    responses(
        (status = 200, body = RunList),
        (status = 400, description = "A bad filter, limit or cursor (named)", body = ApiError),
        (status = 401, body = ApiError)))]
pub(crate) async fn list(
    tenant: Tenant,
    State(state): State<AppState>,
    Params(q): Params<RunsQuery>,
) -> ApiResult<Json<RunList>> {
    let limit = page_limit(q.limit)?;
    let page = page_of(&tenant, &q, limit)?;
    let mut roots = state.store.roots_page(&page).await?;
    let more = roots.len() > limit as usize;
    roots.truncate(limit as usize);
    let next_cursor = more
        .then(|| roots.last().map(|r| cursor_of(r.created_at, r.id)))
        .flatten();
    let mut runs = Vec::with_capacity(roots.len());
    for r in &roots {
        let labels = serde_json::from_value(r.meta["labels"].clone()).unwrap_or_default();
        runs.push(RunSummary {
            root: SessionView::of(r),
            headline: task_of(state.store.as_ref(), r.id).await,
            spec: r.meta["spec"].as_str().map(str::to_owned),
            labels,
        });
    }
    Ok(Json(RunList { runs, next_cursor }))
}
