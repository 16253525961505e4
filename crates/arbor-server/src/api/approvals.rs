//! Approvals at a session: what waits for a decision there (`GET
//! /v1/sessions/{id}/approvals`: its own suspended run and the runs below it that nobody
//! awaits, each call with its id, path, tool and arguments), deciding (`POST
//! /v1/sessions/{id}/approvals`: allow or reject, once or for the run, with a reason; a
//! question an agent asked with `ask_human` is answered with `answer`), and
//! letting the tree go on (`POST /v1/runs/{id}/resume`). Deciding records the decisions
//! only; nothing runs until the resume, and an approved call runs exactly once.

use arbor_protocol::{ApprovalDecision, DecidedBy, RunId, Verdict};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Tenant;
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::extract::{Body, Params};
use crate::state::AppState;

/// One call waiting for a decision.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct PendingView {
    /// What a decision names (`apr_…` for the run's own calls, `sub_…` for a child's).
    pub id: String,
    /// The tool.
    pub tool: String,
    /// Its arguments, as the model wrote them.
    #[schema(value_type = Object)]
    pub arguments: serde_json::Value,
    /// The call's id in the run that made it.
    pub call_id: String,
    /// Child ids from the session down to the run that made the call (empty: its own).
    pub path: Vec<String>,
    /// The session whose run made the call (its transcript records the decision).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// When the call is a question for a person (`ask_human`): what it asks. Answer it with
    /// a decision's `answer`; `reject_once` declines it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub question: Option<QuestionView>,
    /// What the person deciding sees beyond the arguments, when the call's tool shows
    /// something (a `merge_child`: `summary`, `branch`, `tip`, `files`, `added`, `removed`);
    /// once approved, the call does what was shown or nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub review: Option<serde_json::Value>,
}

/// A question an agent asked the person at the root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct QuestionView {
    /// The question.
    pub question: String,
    /// The answers to choose from (empty: free text).
    pub choices: Vec<String>,
}

/// One suspended run and what it waits on.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct SuspensionView {
    /// The run.
    pub run_id: String,
    /// Its session.
    pub session_id: String,
    /// The checkpoint version the decisions are taken against.
    pub version: u64,
    /// The calls still undecided, in call order.
    pub pending: Vec<PendingView>,
}

impl From<&arbor_core::Suspension> for SuspensionView {
    fn from(s: &arbor_core::Suspension) -> Self {
        Self {
            run_id: s.run_id.to_string(),
            session_id: s.session_id.to_string(),
            version: s.version,
            pending: s
                .pending
                .iter()
                .map(|p| PendingView {
                    id: p.id.clone(),
                    tool: p.tool.clone(),
                    arguments: p.arguments.clone(),
                    call_id: p.call_id.clone(),
                    path: p.path.clone(),
                    session_id: p.session_id.map(|s| s.to_string()),
                    question: arbor_core::tool::ask::Question::of(p).map(|q| QuestionView {
                        question: q.question,
                        choices: q.choices,
                    }),
                    review: None,
                })
                .collect(),
        }
    }
}

impl SuspensionView {
    /// The same, each pending call with its review (what its tool showed), if any.
    pub(crate) async fn reviewed(
        mut self,
        s: &arbor_core::Suspension,
        store: &dyn arbor_store::Store,
    ) -> Self {
        let reviews = arbor_core::approval::review::reviews_of(store, &s.pending)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "the reviews of pending calls could not be read");
                Default::default()
            });
        for p in &mut self.pending {
            p.review = reviews.get(&p.id).cloned();
        }
        self
    }
}

/// What waits at a session.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ApprovalsView {
    /// The session.
    pub session_id: String,
    /// Its suspended run first, then those below it nobody awaits, oldest run first.
    pub suspensions: Vec<SuspensionView>,
    /// Where the next page starts (`cursor=`); none on the last page.
    pub next_cursor: Option<String>,
}

/// What a decision does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerdictInput {
    /// Run this call.
    AllowOnce,
    /// Run it and every later call of the same tool on the same path in this run.
    AllowForRun,
    /// Do not run it; the model reads the rejection.
    RejectOnce,
    /// Reject it and every later call of the same tool on the same path in this run.
    RejectForRun,
}

/// One decision.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionInput {
    /// The pending call's id.
    pub id: String,
    /// What to do with it (required, unless `answer` is given: then `allow_once`, the only
    /// verdict an answer goes with).
    pub verdict: Option<VerdictInput>,
    /// Why (the model reads it for a rejection; at most 2048 bytes).
    pub reason: Option<String>,
    /// The answer to a question (`ask_human`): 1 to 2048 bytes, one of its choices when it
    /// offers some. The model reads it as the call's result.
    pub answer: Option<String>,
}

/// Decisions on calls waiting at a session.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecideRequest {
    /// One or more decisions, all on calls of one suspended run.
    pub decisions: Vec<DecisionInput>,
    /// Who decides (a person's name, a program's): written with each decision beside the
    /// tenant (at most 128 bytes).
    pub by: Option<String>,
}

/// Bytes of a decider's name.
const MAX_BY_BYTES: usize = 128;

/// Which suspended runs.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct ApprovalsQuery {
    /// At most this many suspended runs (default 50, at most 200).
    limit: Option<u32>,
    /// The `next_cursor` of the page before.
    cursor: Option<String>,
}

/// What waits for a decision at a session, a page of suspended runs at a time: the
/// session's own run first, then those below it nobody awaits, oldest run first. The list is
/// live: a run that suspends while a client pages through may sort before its cursor (runs
/// are ordered by when they started); `GET /v1/events` tells of each as it comes.
#[utoipa::path(get, path = "/v1/sessions/{id}/approvals", operation_id = "list_approvals", tag = "approvals",
    params(("id" = String, Path, description = "The session (a root, usually)"), ApprovalsQuery),
    responses(
        (status = 200, body = ApprovalsView),
        (status = 400, description = "A bad limit or cursor (named)", body = ApiError),
        (status = 401, body = ApiError),
        (status = 404, description = "Unknown or foreign", body = ApiError)))]
pub(crate) async fn list(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Params(q): Params<ApprovalsQuery>,
) -> ApiResult<Json<ApprovalsView>> {
    let limit = super::listing::page_limit(q.limit)? as usize;
    let bad = || ApiError::field("cursor", "cursor must be a next_cursor this server gave");
    // The order: the session's own runs (0), then the others (1); each by run id, which
    // runs are given in time order.
    let after: Option<(u8, RunId)> = match &q.cursor {
        Some(c) => {
            let (own, run) = c.split_once('.').ok_or_else(bad)?;
            Some((
                own.parse().map_err(|_| bad())?,
                run.parse().map_err(|_| bad())?,
            ))
        }
        None => None,
    };
    let record = state.visible(&tenant, &id).await?;
    let all = arbor_core::supervisor::waiting_at(state.store.as_ref(), record.id).await?;
    let mut keyed: Vec<((u8, RunId), &arbor_core::Suspension)> = all
        .iter()
        .map(|s| ((u8::from(s.session_id != record.id), s.run_id), s))
        .filter(|(k, _)| after.is_none_or(|a| *k > a))
        .collect();
    keyed.sort_by_key(|(k, _)| *k);
    let more = keyed.len() > limit;
    keyed.truncate(limit);
    let next_cursor = more
        .then(|| keyed.last().map(|((own, run), _)| format!("{own}.{run}")))
        .flatten();
    let mut suspensions = Vec::with_capacity(keyed.len());
    for (_, s) in &keyed {
        suspensions.push(
            SuspensionView::from(*s)
                .reviewed(s, state.store.as_ref())
                .await,
        );
    }
    Ok(Json(ApprovalsView {
        session_id: record.id.to_string(),
        suspensions,
        next_cursor,
    }))
}

/// Records decisions (nothing runs until `POST /v1/runs/{id}/resume`); answers with what
/// still waits on that run.
#[utoipa::path(post, path = "/v1/sessions/{id}/approvals", tag = "approvals",
    request_body = DecideRequest,
    params(("id" = String, Path, description = "The session the calls wait at")),
    responses(
        (status = 200, description = "Recorded; what still waits on the run", body = SuspensionView),
        (status = 400, body = ApiError), (status = 401, body = ApiError),
        (status = 404, description = "Unknown or foreign", body = ApiError),
        (status = 409, description = "Decided already (through this id or another that names the same call): the message names the decision taken, who took it and when", body = ApiError)))]
pub(crate) async fn decide(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Body(req): Body<DecideRequest>,
) -> ApiResult<Json<SuspensionView>> {
    if req.decisions.is_empty() {
        return Err(ApiError::field(
            "decisions",
            "decisions must hold at least one decision",
        ));
    }
    let mut verdicts = Vec::with_capacity(req.decisions.len());
    for (i, d) in req.decisions.iter().enumerate() {
        verdicts.push(checked(i, d)?);
    }
    if let Some(by) = &req.by
        && (by.is_empty() || by.len() > MAX_BY_BYTES)
    {
        return Err(ApiError::field(
            "by",
            format!("by names who decides in 1 to {MAX_BY_BYTES} bytes"),
        ));
    }
    let record = state.visible(&tenant, &id).await?;
    // The feed follows the tree from now on: the calls decided leave it.
    state.watcher.follow(record.root_id, None);
    let decided_by = DecidedBy::new(Some(tenant.0.clone()), req.by.clone());
    let decisions: Vec<ApprovalDecision> = req
        .decisions
        .iter()
        .zip(verdicts)
        .map(|(d, (verdict, reason))| ApprovalDecision {
            id: d.id.clone(),
            verdict,
            // An answer is the decision's reason: what the model reads as the call's result.
            reason,
            decided_by: Some(decided_by.clone()),
        })
        .collect();
    // One record per call, whichever of its ids names it: the first decision wins, a second
    // is refused (409) naming it; an unknown, foreign or forged id is the one 404.
    // With an answer, every id must name a question: an answer never approves a tool call.
    let recorded = if req.decisions.iter().any(|d| d.answer.is_some()) {
        arbor_core::supervisor::answer_at(state.store.as_ref(), record.id, &decisions).await
    } else {
        arbor_core::supervisor::decide_at(state.store.as_ref(), record.id, &decisions).await
    };
    let left = recorded.map_err(|e| match (e.field(), req.decisions.len()) {
        // A single decision's answer or verdict that does not fit its call: named in full.
        (Some(field @ ("answer" | "verdict")), 1) => {
            ApiError::field(format!("decisions[0].{field}"), e.to_string())
        }
        _ => ApiError::from(e),
    })?;
    Ok(Json(
        SuspensionView::from(&left)
            .reviewed(&left, state.store.as_ref())
            .await,
    ))
}

/// The verdict and reason of decision `i` (an answer is its reason), each error naming the
/// field.
pub(crate) fn checked(i: usize, d: &DecisionInput) -> ApiResult<(Verdict, Option<String>)> {
    let verdict = d.verdict.map(|v| match v {
        VerdictInput::AllowOnce => Verdict::AllowOnce,
        VerdictInput::AllowForRun => Verdict::AllowForRun,
        VerdictInput::RejectOnce => Verdict::RejectOnce,
        VerdictInput::RejectForRun => Verdict::RejectForRun,
    });
    arbor_core::approval::question::decision_parts(
        verdict,
        d.reason.as_deref(),
        d.answer.as_deref(),
    )
    .map_err(|(field, why)| ApiError::field(format!("decisions[{i}].{field}"), why))
}

/// A resume was started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ResumeView {
    /// The root.
    pub root_id: String,
    /// `resuming`: the tree goes on in the background (follow `GET /v1/runs/{id}`).
    pub status: String,
}

/// Lets a tree go on with its decisions: the root's suspended run and the decided runs
/// below it that nobody awaits. The approved calls run exactly once.
#[utoipa::path(post, path = "/v1/runs/{id}/resume", tag = "approvals",
    params(("id" = String, Path, description = "The root session")),
    responses(
        (status = 202, description = "Resuming", body = ResumeView),
        (status = 401, body = ApiError),
        (status = 404, description = "Unknown, foreign or not a root", body = ApiError),
        (status = 409, description = "Calls still wait for a decision, nothing waits, or another process runs the tree", body = ApiError),
        (status = 503, body = ApiError)))]
pub(crate) async fn resume(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<ResumeView>)> {
    if state.draining() {
        return Err(ApiError::new(
            ErrorKind::Unavailable,
            "The server is shutting down",
        ));
    }
    let root = state.visible(&tenant, &id).await?;
    if root.parent_id.is_some() {
        return Err(ApiError::not_found("run"));
    }
    let launcher = state
        .launcher
        .as_ref()
        .ok_or_else(|| ApiError::new(ErrorKind::Conflict, "This server cannot resume runs"))?;
    launcher.resume(root.id).await?;
    state.watcher.follow(root.id, None);
    Ok((
        StatusCode::ACCEPTED,
        Json(ResumeView {
            root_id: root.id.to_string(),
            status: "resuming".to_owned(),
        }),
    ))
}
