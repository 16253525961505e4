//! Root runs: the specs a server can start (`GET /v1/specs`), starting one
//! (`POST /v1/runs`), and a run's tree and status (`GET /v1/runs/{id}`).

use std::collections::BTreeMap;

use arbor_store::SessionQuery;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};

use crate::auth::Tenant;
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::extract::Body;
use crate::idempotency::{self, Claimed};
use crate::launcher::StartRun;
use crate::state::AppState;
use crate::views::{RunResultView, RunView, SessionView, SpecList, StartRunRequest, TreeView};

/// The longest task a request may carry, in bytes.
pub const MAX_TASK_BYTES: usize = 32 * 1024;
/// The longest inline spec, in bytes (the body cap holds it too).
pub const MAX_SPEC_BYTES: usize = 48 * 1024;

/// The specs this server can start for the calling tenant.
#[utoipa::path(get, path = "/v1/specs", tag = "runs",
    responses(
        (status = 200, body = SpecList),
        (status = 401, body = ApiError)))]
pub(crate) async fn specs(tenant: Tenant, State(state): State<AppState>) -> Json<SpecList> {
    let specs = state
        .launcher
        .as_ref()
        .map(|l| l.specs())
        .unwrap_or_default()
        .into_iter()
        .filter(|s| state.policies.may_start(&tenant.0, s))
        .collect();
    Json(SpecList { specs })
}

/// Starts a root run of a named spec; answers once its root exists (the run goes on). With
/// an `Idempotency-Key` header, a retry of the same request answers with the run the first
/// one started (200) instead of starting another; the same key on another request is a 409.
#[utoipa::path(post, path = "/v1/runs", tag = "runs", request_body = StartRunRequest,
    params(("Idempotency-Key" = Option<String>, Header,
        description = "1 to 255 visible ASCII characters: a retry with the same key and request never starts a second run")),
    responses(
        (status = 201, description = "Started", body = RunView),
        (status = 200, description = "Started before, by a request with the same Idempotency-Key", body = RunView),
        (status = 400, body = ApiError), (status = 401, body = ApiError),
        (status = 404, description = "Unknown spec", body = ApiError),
        (status = 409, description = "The Idempotency-Key was used for another request", body = ApiError),
        (status = 413, body = ApiError),
        (status = 429, description = "A quota of the tenant's policy (max_runs_in_flight, max_runs_per_minute, max_tokens_per_day)", body = ApiError),
        (status = 503, body = ApiError)))]
pub(crate) async fn start(
    tenant: Tenant,
    State(state): State<AppState>,
    headers: HeaderMap,
    Body(mut req): Body<StartRunRequest>,
) -> ApiResult<(StatusCode, Json<RunView>)> {
    let key = idempotency::key_of(&headers)?;
    let launcher = launcher_for_a_start(&state)?;
    let (spec, spec_text) = check_start(&mut req, launcher.accepts_inline())?;
    let labels = check_labels(req.labels.take().unwrap_or_default())?;
    let controls = crate::controls::checked(req.controls.take())?;
    let budget = crate::views::BudgetRequest::checked_or_none(req.budget.take())?;
    // A spec the tenant may not start is unknown to it.
    if spec_text.is_none()
        && (!launcher.specs().contains(&spec) || !state.policies.may_start(&tenant.0, &spec))
    {
        return Err(ApiError::not_found("spec").at("spec"));
    }
    state.policies.check_start(
        &tenant.0,
        spec_text.is_some(),
        req.provider.as_deref(),
        req.model.as_deref(),
    )?;

    // One run per key: the key names the root's id before anything starts.
    let root_id = match &key {
        Some(k) => {
            let settings =
                serde_json::to_string(&(&labels, &controls, &budget)).unwrap_or_default();
            let fingerprint = idempotency::fingerprint(&[
                Some(spec.as_str()),
                spec_text.as_deref(),
                req.task.as_deref(),
                req.provider.as_deref(),
                req.model.as_deref(),
                Some(settings.as_str()),
            ]);
            match idempotency::claim(state.store.as_ref(), &tenant.0, k, &fingerprint).await? {
                Claimed::Replay(root) if state.store.session(root).await?.is_some() => {
                    let view = run_view(&state, &tenant, &root.to_string()).await?;
                    return Ok((StatusCode::OK, Json(view)));
                }
                // Claimed by a request that has not created the root (yet, or ever): start
                // it as that root; of two starts, the store lets one create it.
                Claimed::Replay(root) | Claimed::Start(root) => Some(root),
            }
        }
        None => None,
    };
    // The tenant's quotas, after a replay (which starts nothing) and before the launch.
    let policy = state.policies.of(&tenant.0);
    let place = match state
        .quotas
        .admit(state.store.as_ref(), &tenant.0, &policy)
        .await
    {
        Ok(place) => place,
        Err(e) => {
            if let Some(k) = &key {
                idempotency::release(state.store.as_ref(), &tenant.0, k).await;
            }
            return Err(e);
        }
    };
    let started = launcher
        .start(StartRun {
            tenant: tenant.0.clone(),
            spec,
            spec_text,
            task: req.task,
            provider: req.provider,
            model: req.model,
            controls,
            root_id,
            labels,
            budget,
        })
        .await;
    let root = match (started, root_id) {
        (Ok(root), _) => root,
        (Err(e), Some(root)) => {
            if state.store.session(root).await?.is_some() {
                // Another request with the key created it first: that is the run.
                let view = run_view(&state, &tenant, &root.to_string()).await?;
                return Ok((StatusCode::OK, Json(view)));
            }
            if let Some(k) = &key {
                idempotency::release(state.store.as_ref(), &tenant.0, k).await;
            }
            return Err(e);
        }
        (Err(e), None) => return Err(e),
    };
    place.landed(root);
    state.metrics.run_started();
    let view = run_view(&state, &tenant, &root.to_string()).await?;
    log_start(&state, &tenant, root, &view).await;
    Ok((StatusCode::CREATED, Json(view)))
}

/// The launcher a new run starts on: 503 while the server shuts down, 404 naming `spec`
/// when it has none.
fn launcher_for_a_start(
    state: &AppState,
) -> ApiResult<&std::sync::Arc<dyn crate::launcher::Launcher>> {
    if state.draining() {
        return Err(ApiError::new(
            ErrorKind::Unavailable,
            "The server is shutting down",
        ));
    }
    state
        .launcher
        .as_ref()
        .ok_or_else(|| ApiError::not_found("spec").at("spec"))
}

/// Starts a run as `POST /v1/runs` does once its request is checked (no idempotency key):
/// the tenant's policy and quotas, the launch, the metrics and the feed. For the adapters
/// that start runs (A2A).
pub(crate) async fn launch(
    state: &AppState,
    tenant: &Tenant,
    run: StartRun,
) -> ApiResult<arbor_protocol::SessionId> {
    let launcher = launcher_for_a_start(state)?;
    state.policies.check_start(&tenant.0, false, None, None)?;
    let policy = state.policies.of(&tenant.0);
    let place = state
        .quotas
        .admit(state.store.as_ref(), &tenant.0, &policy)
        .await?;
    let root = launcher.start(run).await?;
    place.landed(root);
    state.metrics.run_started();
    let view = run_view(state, tenant, &root.to_string()).await?;
    log_start(state, tenant, root, &view).await;
    Ok(root)
}

/// Logs the run's start in the tenant's feed and follows it there.
async fn log_start(
    state: &AppState,
    tenant: &Tenant,
    root: arbor_protocol::SessionId,
    view: &RunView,
) {
    let status = arbor_protocol::SessionStatus::parse(&view.status);
    let record = state.store.session(root).await.ok().flatten();
    let meta = record
        .as_ref()
        .map(|r| r.meta.to_value())
        .unwrap_or_default();
    let event = crate::feed::FeedEvent::Run {
        root_id: view.root_id.clone(),
        status: view.status.clone(),
        spec: meta["spec"].as_str().map(str::to_owned),
        labels: serde_json::from_value(meta["labels"].clone()).unwrap_or_default(),
    };
    if let Err(e) = state.feed.append(&tenant.0, event).await {
        tracing::warn!(root = %root, "the feed did not log a run's start: {e:?}");
    }
    state.watcher.follow(root, status);
}

/// The request's fields checked before anything is claimed or started, each refusal naming
/// its field: the spec (a name or inline text, not both), the task, the provider and model.
/// Returns the spec's name (`inline` for inline text) and its text.
fn check_start(
    req: &mut StartRunRequest,
    accepts_inline: bool,
) -> ApiResult<(String, Option<String>)> {
    let (spec, spec_text) = match (req.spec.take(), req.spec_text.take()) {
        (Some(_), Some(_)) => {
            return Err(ApiError::field(
                "spec_text",
                "give spec (a name) or spec_text (an inline spec), not both",
            ));
        }
        (None, None) => {
            return Err(ApiError::field(
                "spec",
                "spec (one of GET /v1/specs) or spec_text is required",
            ));
        }
        (Some(name), None) if name.trim().is_empty() => {
            return Err(ApiError::field(
                "spec",
                "spec must name one of GET /v1/specs",
            ));
        }
        (Some(name), None) => (name, None),
        (None, Some(_)) if !accepts_inline => {
            return Err(ApiError::field(
                "spec_text",
                "inline specs are refused: this server was not started with \
                 --allow-inline-specs (a spec can name commands, repositories and servers to \
                 call)",
            ));
        }
        (None, Some(text)) if text.len() > MAX_SPEC_BYTES => {
            return Err(ApiError::field(
                "spec_text",
                format!(
                    "spec_text is {} bytes; at most {MAX_SPEC_BYTES}",
                    text.len()
                ),
            ));
        }
        (None, Some(text)) => ("inline".to_owned(), Some(text)),
    };
    if let Some(task) = &req.task {
        if task.trim().is_empty() {
            return Err(ApiError::field(
                "task",
                "task must not be blank (leave it out to run the spec's own)",
            ));
        }
        if task.len() > MAX_TASK_BYTES {
            return Err(ApiError::field(
                "task",
                format!("task is {} bytes; at most {MAX_TASK_BYTES}", task.len()),
            ));
        }
    }
    for (field, value) in [("provider", &req.provider), ("model", &req.model)] {
        if value.as_deref().is_some_and(|v| v.trim().is_empty()) {
            return Err(ApiError::field(field, format!("{field} must not be blank")));
        }
    }
    Ok((spec, spec_text))
}

/// The most labels a run carries.
pub const MAX_LABELS: usize = 16;
/// The longest label value, in bytes.
pub const MAX_LABEL_BYTES: usize = 256;

/// A run's labels, each refusal naming `labels`.
fn check_labels(labels: BTreeMap<String, String>) -> ApiResult<BTreeMap<String, String>> {
    if labels.len() > MAX_LABELS {
        return Err(ApiError::field(
            "labels",
            format!("{} labels; at most {MAX_LABELS}", labels.len()),
        ));
    }
    for (key, value) in &labels {
        if !arbor_store::meta_key_is_valid(key) {
            return Err(ApiError::field(
                "labels",
                format!("label {key:?}: a key is 1 to 64 of a-z A-Z 0-9 _ -, not a number"),
            ));
        }
        if value.is_empty() || value.len() > MAX_LABEL_BYTES || value.chars().any(char::is_control)
        {
            return Err(ApiError::field(
                "labels",
                format!(
                    "label {key:?}: a value is 1 to {MAX_LABEL_BYTES} bytes without control \
                     characters"
                ),
            ));
        }
    }
    Ok(labels)
}

/// A run: where its root stands and its whole tree.
#[utoipa::path(get, path = "/v1/runs/{id}", operation_id = "get_run", tag = "runs",
    params(("id" = String, Path, description = "The root session")),
    responses(
        (status = 200, body = RunView),
        (status = 401, body = ApiError),
        (status = 404, description = "Unknown, foreign, or not a root", body = ApiError)))]
pub(crate) async fn get(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> ApiResult<Json<RunView>> {
    Ok(Json(run_view(&state, &tenant, &id).await?))
}

async fn run_view(state: &AppState, tenant: &Tenant, id: &str) -> ApiResult<RunView> {
    let root = state.visible(tenant, id).await?;
    if root.parent_id.is_some() {
        return Err(ApiError::not_found("run"));
    }
    let sessions = state
        .store
        .list_sessions(SessionQuery::Tree(root.id))
        .await?;
    let view = SessionView::of(&root);
    let result = serde_json::from_value::<RunResultView>(root.meta["result"].clone()).ok();
    Ok(RunView {
        root_id: view.id.to_string(),
        status: view.status.to_string(),
        result,
        tree: TreeView {
            root_id: view.id.to_string(),
            sessions: sessions.iter().map(SessionView::of).collect(),
        },
        pools: arbor_core::budget::pools(state.store.as_ref(), root.id)
            .await
            .map_err(|e| ApiError::internal(&e.to_string()))?,
    })
}
