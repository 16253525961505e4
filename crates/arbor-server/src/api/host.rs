//! A host acting as a parent, on a tree this server runs: spawn a child under a session
//! (`POST /v1/sessions/{id}/children`: `sync`, `join` or `message`), wait for one
//! (`GET /v1/sessions/{id}/delegations/{delegation}?wait_ms=`), cancel one
//! (`POST …/delegations/{delegation}/cancel`), send a session a message
//! (`POST /v1/sessions/{id}/messages`) and delete a child (`DELETE /v1/sessions/{id}`).
//! Each goes through the tree's live supervisor: the same allow-list, limits, policies,
//! redaction and events as a delegation its model makes. A tree whose run is over is hosted
//! for these calls (the launcher rebuilds it from the store and releases it once idle).

use std::time::Duration;

use arbor_core::supervisor::{
    DelegationRequest, DelegationResult, Mode, Sender, WaitOptions, WaitOutcome,
};
use arbor_core::{CoreError, DenyReason, SessionRef};
use arbor_store::SessionRecord;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use utoipa::IntoParams;

use crate::auth::Tenant;
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::extract::{Body, Params};
use crate::state::AppState;

/// The longest a request waits for a child, in milliseconds.
pub const MAX_WAIT_MS: u64 = 25_000;
const DEFAULT_WAIT_MS: u64 = 10_000;

pub use crate::api::host_views::{
    AnswerView, DelegationState, DeletedView, HandleView, MessageRequest, ReceiptView,
    SpawnRequest, WaitAnswer,
};

fn answer(
    sup: &arbor_core::supervisor::Supervisor,
    r: &DelegationResult,
    text: String,
) -> AnswerView {
    AnswerView {
        value: r.output.as_ref().map(|v| sup.redact_json(v)),
        delegation_id: r.delegation_id.clone(),
        child_id: r.child_id.clone(),
        session_id: r.session_id.to_string(),
        name: r.name.clone(),
        status: serde_json::to_value(r.result.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        text,
        usage: r.result.usage,
    }
}

/// A refusal of the spawn, said for the host: an entry not in the catalog names the field.
fn spawn_error(e: CoreError) -> ApiError {
    match e.deny_reason() {
        Some(DenyReason::NotAllowListed) => ApiError::field("child_id", e.to_string()),
        _ => ApiError::from(e),
    }
}

/// The live supervisor of the record's tree for a host's call: the launcher's host (the
/// run's own supervisor while the tree runs here, kept for the host past the run's end;
/// else the tree rebuilt from the store), or, with a launcher that does not host, the
/// supervisor running the tree here.
async fn live(
    state: &AppState,
    record: &SessionRecord,
) -> ApiResult<arbor_core::supervisor::Supervisor> {
    let launcher = state
        .launcher
        .as_ref()
        .ok_or_else(|| ApiError::new(ErrorKind::Conflict, "This server runs no trees"))?;
    match launcher.host(record.root_id).await {
        Ok(sup) => Ok(sup),
        Err(refused) => launcher.supervisor(record.root_id).ok_or(refused),
    }
}

/// Waits up to `wait` for the delegation: its answer (200), a cancelled or failed state
/// (200), `still_running` when the wait ran out (the child goes on), or 503 when the server
/// shuts down meanwhile.
async fn waited(
    state: &AppState,
    sup: &arbor_core::supervisor::Supervisor,
    delegation: &str,
    wait: Duration,
    still_running: Response,
) -> ApiResult<Response> {
    let shutting_down = || {
        ApiError::new(
            ErrorKind::Unavailable,
            "The server is shutting down: the child's run stops with it (its tree goes on \
             where it runs next)",
        )
    };
    let waited = tokio::select! {
        w = tokio::time::timeout(wait, sup.wait(delegation, WaitOptions::default())) => w,
        () = state.closing.cancelled() => return Err(shutting_down()),
    };
    match waited {
        Err(_) => Ok(still_running),
        Ok(Ok(WaitOutcome::Finished(r))) => {
            let text = sup.redact(&r.result.text);
            Ok((StatusCode::OK, Json(answer(sup, &r, text))).into_response())
        }
        // The server shuts down: the child was stopped with it, not cancelled for good.
        Ok(Ok(WaitOutcome::Cancelled { .. }) | Err(_)) if state.draining() => Err(shutting_down()),
        Ok(Ok(_)) => Ok(ended(delegation, "cancelled", None)),
        // The child's run waits for decisions (`GET /v1/sessions/{id}/approvals`): not a
        // failure; a wait after the resume gives its answer.
        Ok(Err(e)) if e.kind() == arbor_core::CoreErrorKind::Suspended => {
            Ok(ended(delegation, "suspended", None))
        }
        // The child's run ended without an answer: a host's cancel or delete (it may have
        // released the handle meanwhile), or a failure. The wait itself went well.
        Ok(Err(e)) if e.kind() == arbor_core::CoreErrorKind::Run => {
            let aborted = e
                .result()
                .is_some_and(|r| r.status == arbor_protocol::RunStatus::Aborted);
            Ok(if aborted {
                ended(delegation, "cancelled", None)
            } else {
                ended(delegation, "failed", Some(sup.redact(&e.to_string())))
            })
        }
        Ok(Err(e)) => Err(ApiError::from(e)),
    }
}

/// A delegation that ended without an answer, as a wait reports it (200).
fn ended(delegation: &str, status: &str, error: Option<String>) -> Response {
    (
        StatusCode::OK,
        Json(DelegationState {
            delegation_id: delegation.to_owned(),
            status: status.to_owned(),
            error,
            stopped: Vec::new(),
        }),
    )
        .into_response()
}

fn wait_for(ms: Option<u64>) -> ApiResult<Duration> {
    let ms = ms.unwrap_or(DEFAULT_WAIT_MS);
    if ms > MAX_WAIT_MS {
        return Err(ApiError::field(
            "wait_ms",
            format!("wait_ms must be at most {MAX_WAIT_MS}"),
        ));
    }
    Ok(Duration::from_millis(ms))
}

/// Spawns a child under a session, as its parent.
#[utoipa::path(post, path = "/v1/sessions/{id}/children", tag = "host",
    request_body = SpawnRequest,
    params(("id" = String, Path, description = "The parent session")),
    responses(
        (status = 200, description = "sync: the child's answer; or how it ended without one", body = WaitAnswer),
        (status = 201, description = "join or message: the child's handle", body = HandleView),
        (status = 202, description = "sync: still running after wait_ms; its handle", body = HandleView),
        (status = 400, body = ApiError), (status = 401, body = ApiError),
        (status = 404, description = "Unknown or foreign", body = ApiError),
        (status = 409, description = "The tree does not run here, or a policy refused", body = ApiError),
        (status = 429, description = "A limit refused it (which, its maximum, observed)", body = ApiError),
        (status = 503, description = "sync: the server shuts down meanwhile", body = ApiError)))]
pub(crate) async fn spawn(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Body(req): Body<SpawnRequest>,
) -> ApiResult<Response> {
    // A blank input is refused by admission, naming `input`, as on every surface.
    let wait = wait_for(req.wait_ms)?;
    let parent = state.visible(&tenant, &id).await?;
    let sup = live(&state, &parent).await?;
    let mut request = DelegationRequest::new(req.child_id.clone(), req.input.clone())
        .parent(SessionRef::from(&parent));
    request.name = req.name.clone();
    request.model = req.model.clone();
    request.controls = crate::controls::checked(req.controls.clone())?;
    request.budget = crate::views::BudgetRequest::checked_or_none(req.budget)?;
    request.output_schema = match (req.output_schema.clone(), req.output_retries) {
        (Some(schema), retries) => Some(
            arbor_core::output::OutputSchema::new(schema)?
                .retries(retries.unwrap_or(arbor_core::output::DEFAULT_OUTPUT_RETRIES))?,
        ),
        (None, Some(_)) => {
            return Err(ApiError::field(
                "output_retries",
                "output_retries: only with output_schema",
            ));
        }
        (None, None) => None,
    };
    request.context = req.context;
    request.on_full = req.on_full;
    let handle = match req.mode {
        Mode::Message => sup.spawn(request).await,
        Mode::Sync | Mode::Async => sup.delegate_async(request).await,
    }
    .map_err(spawn_error)?;
    // Waiting for a slot (`on_full: queue`): said so until it starts.
    let queued = sup
        .store()
        .session(handle.session_id)
        .await
        .ok()
        .flatten()
        .is_some_and(|r| r.status == arbor_protocol::SessionStatus::Queued);
    let view = HandleView {
        delegation_id: handle.delegation_id.clone(),
        child_id: handle.child_id.clone(),
        session_id: handle.session_id.to_string(),
        name: handle.name.clone(),
        model: handle.model.clone(),
        status: if queued { "queued" } else { "running" }.to_owned(),
    };
    if req.mode != Mode::Sync {
        return Ok((StatusCode::CREATED, Json(view)).into_response());
    }
    let still_running = (StatusCode::ACCEPTED, Json(view)).into_response();
    waited(&state, &sup, &handle.delegation_id, wait, still_running).await
}

/// How long to wait.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct WaitQuery {
    /// Milliseconds (default 10000, at most 25000; 0 answers at once).
    wait_ms: Option<u64>,
}

/// Waits for a child spawned in the tree (by the host or by a model).
#[utoipa::path(get, path = "/v1/sessions/{id}/delegations/{delegation}", tag = "host",
    params(("id" = String, Path, description = "A session of the tree (its parent, usually)"),
        ("delegation" = String, Path, description = "The delegation"), WaitQuery),
    responses(
        (status = 200, description = "It finished: its answer; or it ended without one (cancelled, failed)", body = WaitAnswer),
        (status = 202, description = "Still running after wait_ms", body = DelegationState),
        (status = 400, body = ApiError), (status = 401, body = ApiError),
        (status = 404, description = "Unknown, foreign or forgotten", body = ApiError),
        (status = 409, description = "The tree does not run here", body = ApiError),
        (status = 503, description = "The server shuts down meanwhile", body = ApiError)))]
pub(crate) async fn wait(
    tenant: Tenant,
    State(state): State<AppState>,
    Path((id, delegation)): Path<(String, String)>,
    Params(q): Params<WaitQuery>,
) -> ApiResult<Response> {
    let wait = wait_for(q.wait_ms)?;
    let record = state.visible(&tenant, &id).await?;
    let sup = live(&state, &record).await?;
    let running = (
        StatusCode::ACCEPTED,
        Json(DelegationState {
            delegation_id: delegation.clone(),
            status: "running".to_owned(),
            error: None,
            stopped: Vec::new(),
        }),
    )
        .into_response();
    waited(&state, &sup, &delegation, wait, running).await
}

/// Cancels a child by its handle.
#[utoipa::path(post, path = "/v1/sessions/{id}/delegations/{delegation}/cancel", operation_id = "cancel_delegation", tag = "host",
    params(("id" = String, Path, description = "A session of the tree"),
        ("delegation" = String, Path, description = "The delegation")),
    responses(
        (status = 200, description = "`cancelling`, or `terminal` when it had ended", body = DelegationState),
        (status = 401, body = ApiError),
        (status = 404, description = "Unknown, foreign or forgotten", body = ApiError),
        (status = 409, description = "The tree does not run here", body = ApiError)))]
pub(crate) async fn cancel(
    tenant: Tenant,
    State(state): State<AppState>,
    Path((id, delegation)): Path<(String, String)>,
) -> ApiResult<Json<DelegationState>> {
    let record = state.visible(&tenant, &id).await?;
    let sup = live(&state, &record).await?;
    let ended = sup.cancel_reported(&delegation, None).await?;
    Ok(Json(ended_state(delegation, "cancelling", ended)))
}

/// Stops a child's run by its handle and keeps the child: its session stays (`aborted`, not
/// deleted) and a message to it starts its next run; a cancel releases it instead.
#[utoipa::path(post, path = "/v1/sessions/{id}/delegations/{delegation}/stop", tag = "host",
    params(("id" = String, Path, description = "A session of the tree"),
        ("delegation" = String, Path, description = "The delegation")),
    responses(
        (status = 200, description = "`stopping`, or `terminal` when it had ended", body = DelegationState),
        (status = 401, body = ApiError),
        (status = 404, description = "Unknown, foreign or forgotten", body = ApiError),
        (status = 409, description = "The tree does not run here", body = ApiError)))]
pub(crate) async fn stop(
    tenant: Tenant,
    State(state): State<AppState>,
    Path((id, delegation)): Path<(String, String)>,
) -> ApiResult<Json<DelegationState>> {
    let record = state.visible(&tenant, &id).await?;
    let sup = live(&state, &record).await?;
    let ended = sup
        .stop_reported(&delegation, Some("stopped by the host"))
        .await?;
    Ok(Json(ended_state(delegation, "stopping", ended)))
}

/// What a cancel or a stop of `delegation` did: `doing` while it ends, `terminal` when it
/// had ended, with the descendants it stopped.
fn ended_state(
    delegation: String,
    doing: &str,
    ended: arbor_core::supervisor::Cancelled,
) -> DelegationState {
    DelegationState {
        delegation_id: delegation,
        status: if ended.running { doing } else { "terminal" }.to_owned(),
        error: None,
        stopped: ended.stopped,
    }
}

/// Sends a session a message from the host.
#[utoipa::path(post, path = "/v1/sessions/{id}/messages", tag = "host",
    request_body = MessageRequest,
    params(("id" = String, Path, description = "The target session")),
    responses(
        (status = 202, description = "Queued or delivered", body = ReceiptView),
        (status = 400, body = ApiError), (status = 401, body = ApiError),
        (status = 404, description = "Unknown, foreign or deleted", body = ApiError),
        (status = 409, description = "The tree does not run here", body = ApiError),
        (status = 429, description = "Its inbox is full or the rate is exceeded", body = ApiError)))]
pub(crate) async fn message(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Body(req): Body<MessageRequest>,
) -> ApiResult<(StatusCode, Json<ReceiptView>)> {
    if req.text.trim().is_empty() {
        return Err(ApiError::field("text", "text must not be blank"));
    }
    let record = state.visible(&tenant, &id).await?;
    let sup = live(&state, &record).await?;
    let receipt = sup
        .send_message(Sender::Host, record.id, &req.text)
        .await
        .map_err(|e| match e.limit() {
            Some(l) if l.limit == arbor_protocol::LimitKind::MaxMessageBytes => {
                ApiError::field("text", e.to_string())
            }
            _ => ApiError::from(e),
        })?;
    Ok((
        StatusCode::ACCEPTED,
        Json(ReceiptView {
            message_id: receipt.id,
            to: receipt.to.to_string(),
            status: receipt.status.to_owned(),
        }),
    ))
}

/// Why a child is deleted.
#[derive(Debug, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(crate) struct DeleteQuery {
    /// Kept in the tombstone (default "deleted over HTTP").
    reason: Option<String>,
}

/// Deletes a child: its run and its live descendants' runs are cancelled, its tombstone
/// written; its transcript stays readable. A root is not deleted this way.
#[utoipa::path(delete, path = "/v1/sessions/{id}", tag = "host",
    params(("id" = String, Path, description = "The child session"), DeleteQuery),
    responses(
        (status = 200, body = DeletedView),
        (status = 400, body = ApiError), (status = 401, body = ApiError),
        (status = 404, description = "Unknown or foreign", body = ApiError),
        (status = 409, description = "A root, or another process runs the tree", body = ApiError)))]
pub(crate) async fn delete(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Params(q): Params<DeleteQuery>,
) -> ApiResult<Json<DeletedView>> {
    let reason = q.reason.unwrap_or_else(|| "deleted over HTTP".to_owned());
    if reason.len() > 1024 {
        return Err(ApiError::field("reason", "reason is at most 1024 bytes"));
    }
    let record = state.visible(&tenant, &id).await?;
    let Some(parent) = record.parent_id else {
        return Err(ApiError::new(
            ErrorKind::Conflict,
            "A root is not deleted: delete its children, or cancel its run",
        ));
    };
    let launcher = state
        .launcher
        .as_ref()
        .ok_or_else(|| ApiError::new(ErrorKind::Conflict, "This server cannot delete"))?;
    let by = format!("tenant:{}", tenant.0);
    let deleted = match launcher.supervisor(record.root_id) {
        Some(sup) => {
            sup.delete_child(
                arbor_core::supervisor::DeleteChild::new(parent, record.id.to_string())
                    .by(&by)
                    .reason(&reason),
            )
            .await?
        }
        None => {
            launcher
                .delete_offline(record.root_id, parent, record.id, &by, &reason)
                .await?
        }
    };
    Ok(Json(DeletedView {
        session_id: deleted.session_id.to_string(),
        already_deleted: deleted.already,
        tombstone: serde_json::to_value(&deleted.tombstone).unwrap_or_default(),
        stopped: deleted.stopped,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode_of(body: serde_json::Value) -> Result<Mode, String> {
        serde_json::from_value::<SpawnRequest>(body)
            .map(|r| r.mode)
            .map_err(|e| e.to_string())
    }

    /// One mode, one set of names: `async` is the default, `join` (this API's name before
    /// the modes were one) is still read as `async`, anything else is refused naming it.
    #[test]
    fn a_spawn_takes_the_one_modes_names_and_still_reads_join() {
        let base = serde_json::json!({"child_id": "helper", "input": "x"});
        let with = |mode: &str| {
            let mut b = base.clone();
            b["mode"] = serde_json::json!(mode);
            b
        };
        assert_eq!(mode_of(base.clone()), Ok(Mode::Async));
        assert_eq!(mode_of(with("async")), Ok(Mode::Async));
        assert_eq!(mode_of(with("join")), Ok(Mode::Async));
        assert_eq!(mode_of(with("sync")), Ok(Mode::Sync));
        assert_eq!(mode_of(with("message")), Ok(Mode::Message));
        let refused = mode_of(with("later")).unwrap_err();
        assert!(
            refused.contains("later") && refused.contains("async"),
            "{refused}"
        );
        assert_eq!(serde_json::to_value(Mode::Async).unwrap(), "async");
    }
}
