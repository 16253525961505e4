//! A2A v1.0: each spec the launcher offers is an agent at `/a2a/{spec}` (JSON-RPC) and
//! `/a2a/{spec}/rest` (HTTP+JSON, [`rest`]), its card at
//! `/a2a/{spec}/.well-known/agent-card.json`, behind the same tenant tokens as `/v1` (a spec
//! the tenant may not start is unknown to it: 404).
//!
//! One task is one root run of the spec ([`task`]): `SendMessage` and
//! `SendStreamingMessage` start one with the message's text as its task (the run counts
//! against the tenant's quotas like `POST /v1/runs`), `GetTask` reads it, `CancelTask`
//! cancels it, `SubscribeToTask` follows it ([`follow`]). A tree that stops for decisions
//! (an approval, a question from any depth) is `TASK_STATE_INPUT_REQUIRED`, its message
//! listing what waits; the client's reply to the task records the decisions and resumes the
//! tree ([`reply`]). Another tenant's task and an unknown one get the same
//! `TaskNotFoundError`. Errors are JSON-RPC errors with HTTP 200, as the SDKs read them; a
//! request without a token, or with a wrong one, is the `/v1` 401.

mod follow;
mod reply;
mod rest;
mod task;

use std::time::Duration;

use arbor_a2a::wire::{
    AgentCard, AgentInterface, AgentSkill, Capabilities, JSONRPC_BINDING, PROTOCOL_VERSION,
    RpcError, RpcRequest, RpcResponse, SendMessageRequest, StreamEvent, StreamResponse,
    TaskIdParams, TaskState, VERSION_HEADER, codes,
};
use arbor_protocol::SessionId;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::Value;

use crate::auth::Tenant;
use crate::error::{ApiError, ApiResult, ErrorKind};
use crate::state::AppState;

/// How long `CancelTask` waits for the run to end before it answers.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// The A2A routes.
pub(crate) fn router(state: &AppState) -> Router {
    Router::new()
        .route("/a2a/{spec}/.well-known/agent-card.json", get(card))
        .route("/a2a/{spec}", post(rpc))
        .route("/a2a/{spec}/rest/message:send", post(rest::send))
        .route("/a2a/{spec}/rest/message:stream", post(rest::stream))
        .route(
            "/a2a/{spec}/rest/tasks/{task}",
            get(rest::task_get).post(rest::task_post),
        )
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state.clone())
}

/// A request a web page could not have made: JSON (`Content-Type`, which a cross-origin
/// page cannot send without a preflight), and, when no token is required (a loopback
/// server), a `Host` of loopback or one `--mcp-host` names (DNS rebinding).
pub(crate) fn check_origin(state: &AppState, headers: &HeaderMap, body: bool) -> ApiResult<()> {
    if state.tenants.is_open() {
        let host = headers
            .get(axum::http::header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let name = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => host.rsplit_once(':').map_or(host, |(h, _)| h),
        };
        let known = ["localhost", "127.0.0.1", "::1"].contains(&name)
            || state.mcp.hosts.iter().any(|h| h == name);
        if !known {
            return Err(ApiError::new(
                ErrorKind::NotFound,
                format!(
                    "Host {host:?} is not served without a token (loopback, or a name given \
                     with --mcp-host)"
                ),
            ));
        }
    }
    if body {
        let kind = headers
            .get(axum::http::header::CONTENT_TYPE)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        let essence = kind
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        if essence != "application/json" && !essence.ends_with("+json") {
            return Err(ApiError::field(
                "Content-Type",
                format!("an A2A request is JSON: Content-Type {kind:?} must be application/json"),
            ));
        }
    }
    Ok(())
}

/// 404 unless the launcher offers `spec` and the tenant may start it.
pub(crate) fn check_spec(state: &AppState, tenant: &Tenant, spec: &str) -> ApiResult<()> {
    let offered = state
        .launcher
        .as_ref()
        .is_some_and(|l| l.specs().iter().any(|s| s == spec));
    if offered && state.policies.may_start(&tenant.0, spec) {
        Ok(())
    } else {
        Err(ApiError::not_found("spec"))
    }
}

/// The agent card of a spec: where it is reached, and that it streams.
async fn card(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(spec): Path<String>,
    headers: HeaderMap,
) -> ApiResult<axum::Json<AgentCard>> {
    check_origin(&state, &headers, false)?;
    check_spec(&state, &tenant, &spec)?;
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    let scheme = match headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
    {
        Some("https") => "https",
        _ => "http",
    };
    let mut card = AgentCard {
        name: spec.clone(),
        description: format!(
            "The arbor tree of spec {spec:?}: its root agent takes the message as its task \
             and delegates under arbor's limits; a call that waits for a decision (an \
             approval, a question) is TASK_STATE_INPUT_REQUIRED."
        ),
        supported_interfaces: vec![
            AgentInterface {
                url: format!("{scheme}://{host}/a2a/{spec}"),
                protocol_binding: JSONRPC_BINDING.to_owned(),
                protocol_version: PROTOCOL_VERSION.to_owned(),
                tenant: None,
            },
            AgentInterface {
                url: format!("{scheme}://{host}/a2a/{spec}/rest"),
                protocol_binding: "HTTP+JSON".to_owned(),
                protocol_version: PROTOCOL_VERSION.to_owned(),
                tenant: None,
            },
        ],
        version: env!("CARGO_PKG_VERSION").to_owned(),
        capabilities: Capabilities {
            streaming: Some(true),
            push_notifications: Some(false),
        },
        default_input_modes: vec!["text/plain".to_owned(), "application/json".to_owned()],
        default_output_modes: vec!["text/plain".to_owned(), "application/json".to_owned()],
        skills: vec![AgentSkill {
            id: spec.clone(),
            name: spec.clone(),
            description: "Runs the spec's tree on the message.".to_owned(),
            tags: vec!["arbor".to_owned()],
            examples: Vec::new(),
        }],
        ..AgentCard::default()
    };
    if !state.tenants.is_open() {
        card.security_schemes.insert(
            "bearer".to_owned(),
            serde_json::json!({"httpAuthSecurityScheme": {"scheme": "Bearer"}}),
        );
        card.security_requirements = vec![serde_json::json!({"schemes": {"bearer": {}}})];
    }
    Ok(axum::Json(card))
}

/// A JSON-RPC error for request `id`, with HTTP 200.
fn error(id: Value, e: RpcError) -> Response {
    axum::Json(RpcResponse::error(id, e)).into_response()
}

/// How a call came, and so how it is answered.
#[derive(Debug, Clone)]
pub(crate) enum Binding {
    /// JSON-RPC, request `id`: results and errors in its envelope, errors with HTTP 200.
    JsonRpc(Value),
    /// HTTP+JSON: bare results, errors as a `google.rpc.Status` with their HTTP status.
    Rest,
}

impl Binding {
    /// The error, as this binding answers one.
    pub(crate) fn fail(&self, e: RpcError) -> Response {
        match self {
            Self::JsonRpc(id) => error(id.clone(), e),
            Self::Rest => rest::status(e),
        }
    }

    /// The request id a stream's items answer (JSON-RPC), if any.
    fn envelope(&self) -> Option<Value> {
        match self {
            Self::JsonRpc(id) => Some(id.clone()),
            Self::Rest => None,
        }
    }
}

/// An `ApiError` of the runtime or the store as a JSON-RPC error: a refusal of the
/// caller's is `-32602`, an unknown id `-32001`, a conflict `-32004`; a quota or a limit
/// (`RESOURCE_EXHAUSTED`) and a server shutting down (`UNAVAILABLE`) are `-32603` with that
/// reason in their details, so a client can tell "later" from a fault.
pub(crate) fn from_api(e: ApiError) -> RpcError {
    let (code, reason) = match e.kind() {
        ErrorKind::Validation => (codes::INVALID_PARAMS, None),
        ErrorKind::NotFound => (codes::TASK_NOT_FOUND, None),
        ErrorKind::Conflict => (codes::UNSUPPORTED_OPERATION, None),
        ErrorKind::Limit => (codes::INTERNAL_ERROR, Some("RESOURCE_EXHAUSTED")),
        ErrorKind::Unavailable => (codes::INTERNAL_ERROR, Some("UNAVAILABLE")),
        _ => (codes::INTERNAL_ERROR, None),
    };
    let mut out = RpcError::new(code, e.error.message);
    if let Some(reason) = reason {
        out.data = Some(serde_json::json!([{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": "arbor",
            "metadata": {},
        }]));
    }
    out
}

fn params_of<T: serde::de::DeserializeOwned>(p: Value, method: &str) -> Result<T, RpcError> {
    serde_json::from_value(p).map_err(|e| {
        RpcError::new(
            codes::INVALID_PARAMS,
            format!("{method}'s params are malformed: {e}"),
        )
    })
}

/// The body within the time and size `/v1` gives one (a blocking `SendMessage` then waits
/// as long as its task takes); else the error answered.
pub(crate) async fn read_body(body: axum::body::Body) -> Result<Bytes, ApiError> {
    let limit = crate::api::MAX_BODY_BYTES;
    match tokio::time::timeout(
        crate::api::REQUEST_TIMEOUT,
        axum::body::to_bytes(body, limit),
    )
    .await
    {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(_)) => Err(ApiError::new(
            ErrorKind::TooLarge,
            format!("The body is larger than {limit} bytes, or broke off"),
        )),
        Err(_) => Err(ApiError::new(
            ErrorKind::Timeout,
            format!(
                "The body did not arrive within {} s",
                crate::api::REQUEST_TIMEOUT.as_secs()
            ),
        )),
    }
}

/// The `A2A-Version` a request names, if it is not 1.x (a missing one is taken as 1.0: the
/// SDKs always send it).
pub(crate) fn check_version(headers: &HeaderMap) -> Result<(), RpcError> {
    match headers.get(VERSION_HEADER).and_then(|v| v.to_str().ok()) {
        Some(v) if !(v == "1" || v.starts_with("1.")) => Err(RpcError::new(
            codes::VERSION_NOT_SUPPORTED,
            format!("A2A version {v:?} is not supported: this server speaks 1.0"),
        )),
        _ => Ok(()),
    }
}

/// Every JSON-RPC call.
async fn rpc(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(spec): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    if let Err(e) =
        check_origin(&state, &headers, true).and_then(|()| check_spec(&state, &tenant, &spec))
    {
        return e.into_response();
    }
    let body = match read_body(body).await {
        Ok(b) => b,
        Err(e) => return e.into_response(),
    };
    let Ok(value) = serde_json::from_slice::<Value>(&body) else {
        return error(
            Value::Null,
            RpcError::new(codes::PARSE_ERROR, "the body is not JSON"),
        );
    };
    let id = value.get("id").cloned().unwrap_or(Value::Null);
    let request = match serde_json::from_value::<RpcRequest>(value) {
        Ok(r) if r.jsonrpc == "2.0" => r,
        _ => {
            return error(
                id,
                RpcError::new(
                    codes::INVALID_REQUEST,
                    "not a JSON-RPC 2.0 request (jsonrpc \"2.0\", method, params)",
                ),
            );
        }
    };
    if let Err(e) = check_version(&headers) {
        return error(id, e);
    }
    let call = Call {
        state,
        tenant,
        spec,
        binding: Binding::JsonRpc(id.clone()),
    };
    let answer = match request.method.as_str() {
        "SendMessage" => call.send(request.params).await,
        "SendStreamingMessage" => return call.send_streaming(request.params).await,
        "SubscribeToTask" => return call.subscribe(request.params).await,
        "GetTask" => call.get(request.params).await,
        "CancelTask" => call.cancel(request.params).await,
        other => Err(RpcError::new(
            codes::METHOD_NOT_FOUND,
            format!(
                "method {other:?} is not served (SendMessage, SendStreamingMessage, GetTask, \
                 CancelTask, SubscribeToTask)"
            ),
        )),
    };
    match answer {
        Ok(result) => axum::Json(RpcResponse::result(id, result)).into_response(),
        Err(e) => error(id, e),
    }
}

/// One call's context.
pub(crate) struct Call {
    pub(crate) state: AppState,
    pub(crate) tenant: Tenant,
    pub(crate) spec: String,
    pub(crate) binding: Binding,
}

impl Call {
    /// The task `id` of this spec, if the tenant may see it; else the one not-found.
    async fn snapshot(&self, id: &str) -> Result<task::Snapshot, RpcError> {
        let not_found = || RpcError::new(codes::TASK_NOT_FOUND, "Task not found");
        let root = self
            .state
            .visible(&self.tenant, id)
            .await
            .map_err(|_| not_found())?;
        if root.parent_id.is_some()
            || root.meta.to_value()["spec"].as_str() != Some(self.spec.as_str())
        {
            return Err(not_found());
        }
        follow::read(&self.state, root.id)
            .await
            .map_err(from_api)?
            .ok_or_else(not_found)
    }

    /// Starts a task, or replies to the one the message names: the root to follow, and
    /// whether it is new.
    async fn begin(&self, req: &SendMessageRequest) -> Result<(SessionId, bool), RpcError> {
        if !task::from_user(&req.message) {
            return Err(RpcError::new(
                codes::INVALID_PARAMS,
                "message.role must be ROLE_USER",
            ));
        }
        match req.message.task_id.as_deref().filter(|t| !t.is_empty()) {
            Some(task_id) => {
                let snap = self.snapshot(task_id).await?;
                reply::reply(&self.state, &self.tenant, &snap, &req.message).await?;
                Ok((snap.root.id, false))
            }
            None => {
                let root =
                    reply::start(&self.state, &self.tenant, &self.spec, &req.message).await?;
                Ok((root, true))
            }
        }
    }

    pub(crate) async fn send(&self, params: Value) -> Result<Value, RpcError> {
        let req: SendMessageRequest = params_of(params, "SendMessage")?;
        let (root, _) = self.begin(&req).await?;
        let immediate = req
            .configuration
            .as_ref()
            .and_then(|c| c.return_immediately)
            .unwrap_or(false);
        let snap = if immediate {
            follow::read(&self.state, root).await.map_err(from_api)?
        } else {
            follow::settled(&self.state, root).await.map_err(from_api)?
        };
        let task = snap
            .ok_or_else(|| RpcError::new(codes::TASK_NOT_FOUND, "Task not found"))?
            .task();
        serde_json::to_value(StreamResponse::of(StreamEvent::Task(task)))
            .map_err(|e| RpcError::new(codes::INTERNAL_ERROR, e.to_string()))
    }

    pub(crate) async fn send_streaming(self, params: Value) -> Response {
        let req: SendMessageRequest = match params_of(params, "SendStreamingMessage") {
            Ok(r) => r,
            Err(e) => return self.binding.fail(e),
        };
        // The stream's slot first: a task is never started for a stream that cannot open.
        let slot = match self.state.streams.open(&self.tenant.0) {
            Ok(slot) => slot,
            Err(e) => return self.binding.fail(from_api(e)),
        };
        match self.begin(&req).await {
            Ok((root, new)) => follow::stream(self.state, slot, self.binding.envelope(), root, new),
            Err(e) => self.binding.fail(e),
        }
    }

    pub(crate) async fn subscribe(self, params: Value) -> Response {
        let p: TaskIdParams = match params_of(params, "SubscribeToTask") {
            Ok(p) => p,
            Err(e) => return self.binding.fail(e),
        };
        match self.snapshot(&p.id).await {
            Ok(s) if s.state().is_terminal() => self.binding.fail(RpcError::new(
                codes::UNSUPPORTED_OPERATION,
                format!("Task {} is in terminal state: {}", p.id, s.state()),
            )),
            Ok(s) => match self.state.streams.open(&self.tenant.0) {
                Ok(slot) => {
                    follow::stream(self.state, slot, self.binding.envelope(), s.root.id, true)
                }
                Err(e) => self.binding.fail(from_api(e)),
            },
            Err(e) => self.binding.fail(e),
        }
    }

    pub(crate) async fn get(&self, params: Value) -> Result<Value, RpcError> {
        let p: TaskIdParams = params_of(params, "GetTask")?;
        let task = self.snapshot(&p.id).await?.task();
        serde_json::to_value(task).map_err(|e| RpcError::new(codes::INTERNAL_ERROR, e.to_string()))
    }

    pub(crate) async fn cancel(&self, params: Value) -> Result<Value, RpcError> {
        let p: TaskIdParams = params_of(params, "CancelTask")?;
        let snap = self.snapshot(&p.id).await?;
        if snap.state().is_terminal() {
            return Err(RpcError::new(
                codes::TASK_NOT_CANCELABLE,
                format!("Task {} cannot be canceled: it is {}", p.id, snap.state()),
            ));
        }
        let snap = reply::cancel(&self.state, &self.tenant, snap, CANCEL_WAIT).await?;
        serde_json::to_value(snap.task())
            .map_err(|e| RpcError::new(codes::INTERNAL_ERROR, e.to_string()))
    }
}

/// Whether a state ends what a stream or a blocking send follows.
pub(crate) fn settles(state: TaskState) -> bool {
    state.is_terminal() || state.is_interrupted()
}
