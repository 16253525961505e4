//! A2A's HTTP+JSON binding at `/a2a/{spec}/rest`: the same calls as JSON-RPC ([`super::Call`]),
//! without the envelope.
//!
//! | route | call |
//! | --- | --- |
//! | `POST …/message:send` | `SendMessage`: `{"task": …}` |
//! | `POST …/message:stream` | `SendStreamingMessage`: SSE, each `data:` a bare stream item |
//! | `GET …/tasks/{id}` | `GetTask`: the task |
//! | `POST …/tasks/{id}:cancel` | `CancelTask`: the task |
//! | `POST` (or `GET`) `…/tasks/{id}:subscribe` | `SubscribeToTask`: SSE |
//!
//! Results are `application/a2a+json`. An error is a `google.rpc.Status`
//! (`{"error": {"code", "status", "message", "details": [ErrorInfo]}}`) with the HTTP status
//! A2A names for it (404 for an unknown task and another tenant's alike, 400 for the rest of
//! the caller's errors, 500 for the server's), as the SDKs read it.

use arbor_a2a::wire::{RpcError, codes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{Binding, Call, check_origin, check_spec, check_version, read_body};
use crate::auth::Tenant;
use crate::state::AppState;

/// An error as HTTP+JSON answers it.
pub(crate) fn status(e: RpcError) -> Response {
    let reason = e
        .data
        .as_ref()
        .and_then(|d| d.get(0))
        .and_then(|d| d.get("reason"))
        .and_then(Value::as_str);
    let (http, status) = match (e.code, reason) {
        (_, Some("RESOURCE_EXHAUSTED")) => (StatusCode::TOO_MANY_REQUESTS, "RESOURCE_EXHAUSTED"),
        (_, Some("UNAVAILABLE")) => (StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE"),
        _ => by_code(e.code),
    };
    body(http, status, e.message, e.data)
}

/// A refusal of the server's own (a host, a content type, a body, a spec not there) in the
/// same `google.rpc.Status` shape, with its HTTP status.
fn refused(e: crate::error::ApiError) -> Response {
    let message = e.error.message.clone();
    let http = e.into_response().status();
    let status = match http.as_u16() {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        404 => "NOT_FOUND",
        408 => "DEADLINE_EXCEEDED",
        413 => "OUT_OF_RANGE",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        _ => "INTERNAL",
    };
    let details = json!([{
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": status,
        "domain": "arbor",
        "metadata": {},
    }]);
    body(http, status, message, Some(details))
}

fn body(http: StatusCode, status: &str, message: String, details: Option<Value>) -> Response {
    let body = json!({"error": {
        "code": http.as_u16(),
        "status": status,
        "message": message,
        "details": details.unwrap_or_else(|| json!([])),
    }});
    (http, axum::Json(body)).into_response()
}

/// The HTTP status and `google.rpc` status of an A2A error code.
fn by_code(code: i64) -> (StatusCode, &'static str) {
    match code {
        codes::TASK_NOT_FOUND | codes::METHOD_NOT_FOUND => (StatusCode::NOT_FOUND, "NOT_FOUND"),
        codes::INTERNAL_ERROR => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL"),
        codes::TASK_NOT_CANCELABLE | codes::UNSUPPORTED_OPERATION => {
            (StatusCode::BAD_REQUEST, "FAILED_PRECONDITION")
        }
        _ => (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT"),
    }
}

/// A result, as `application/a2a+json`.
fn ok(result: Result<Value, RpcError>) -> Response {
    match result {
        Ok(v) => (
            [(header::CONTENT_TYPE, "application/a2a+json")],
            serde_json::to_string(&v).unwrap_or_default(),
        )
            .into_response(),
        Err(e) => status(e),
    }
}

/// The call's context once the request is checked (and its JSON body, if it has one), or
/// the answer to a request refused.
async fn open(
    state: AppState,
    tenant: Tenant,
    spec: String,
    headers: &HeaderMap,
    body: Option<axum::body::Body>,
) -> Result<(Call, Value), Response> {
    check_origin(&state, headers, body.is_some())
        .and_then(|()| check_spec(&state, &tenant, &spec))
        .map_err(refused)?;
    check_version(headers).map_err(status)?;
    let params = match body {
        Some(body) => {
            let bytes = read_body(body).await.map_err(refused)?;
            serde_json::from_slice::<Value>(&bytes)
                .map_err(|_| status(RpcError::new(codes::INVALID_PARAMS, "the body is not JSON")))?
        }
        None => Value::Null,
    };
    let call = Call {
        state,
        tenant,
        spec,
        binding: Binding::Rest,
    };
    Ok((call, params))
}

/// `POST /a2a/{spec}/rest/message:send`.
pub(crate) async fn send(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(spec): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    match open(state, tenant, spec, &headers, Some(body)).await {
        Ok((call, params)) => ok(call.send(params).await),
        Err(r) => r,
    }
}

/// `POST /a2a/{spec}/rest/message:stream`.
pub(crate) async fn stream(
    tenant: Tenant,
    State(state): State<AppState>,
    Path(spec): Path<String>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    match open(state, tenant, spec, &headers, Some(body)).await {
        Ok((call, params)) => call.send_streaming(params).await,
        Err(r) => r,
    }
}

/// The task and the action a `tasks/{…}` segment names: `ID`, `ID:cancel`, `ID:subscribe`.
fn action(segment: &str) -> (&str, &str) {
    match segment.rsplit_once(':') {
        Some((id, action @ ("cancel" | "subscribe"))) => (id, action),
        _ => (segment, ""),
    }
}

/// `GET /a2a/{spec}/rest/tasks/{id}` (and `GET …:subscribe`).
pub(crate) async fn task_get(
    tenant: Tenant,
    State(state): State<AppState>,
    Path((spec, task)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let (call, _) = match open(state, tenant, spec, &headers, None).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    match action(&task) {
        (id, "") => ok(call.get(json!({ "id": id })).await),
        (id, "subscribe") => call.subscribe(json!({ "id": id })).await,
        _ => status(not_served()),
    }
}

/// `POST /a2a/{spec}/rest/tasks/{id}:cancel` and `…:subscribe`.
pub(crate) async fn task_post(
    tenant: Tenant,
    State(state): State<AppState>,
    Path((spec, task)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Response {
    // A cancel must be JSON, as every call that changes something (the SDK posts it so); a
    // subscription, which changes nothing, may come without a body (the SDK's does).
    let cancel = action(&task).1 == "cancel";
    let (call, _) = match open(state, tenant, spec, &headers, cancel.then_some(body)).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    match action(&task) {
        (id, "cancel") => ok(call.cancel(json!({ "id": id })).await),
        (id, "subscribe") => call.subscribe(json!({ "id": id })).await,
        _ => status(not_served()),
    }
}

fn not_served() -> RpcError {
    RpcError::new(
        codes::METHOD_NOT_FOUND,
        "this route is not served (tasks/{id}, tasks/{id}:cancel, tasks/{id}:subscribe)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_segment_names_its_action() {
        assert_eq!(action("01a2:cancel"), ("01a2", "cancel"));
        assert_eq!(action("01a2:subscribe"), ("01a2", "subscribe"));
        assert_eq!(action("01a2"), ("01a2", ""));
        assert_eq!(action("a:b:cancel"), ("a:b", "cancel"));
        assert_eq!(action("a:other"), ("a:other", ""));
    }
}
