//! Errors: [`ApiError`], the one JSON shape every failed request answers with,
//! `{"error": {"kind", "message", "field"?, "limit"?}}`, and the status each kind maps to.
//!
//! A foreign id (another tenant's) and an unknown one get the same `not_found` answer, word
//! for word: nothing tells them apart. A `5xx` is only for a real fault (the store failed);
//! everything a caller can fix is a `4xx` that says what to fix.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// What kind of failure a request met. Serialized in `snake_case`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ErrorKind {
    /// The request is malformed or a field is invalid (400; `field` names it).
    Validation,
    /// No bearer token, or one no tenant holds (401).
    Unauthorized,
    /// Unknown id, or one that belongs to another tenant (404, identical for both).
    NotFound,
    /// The route exists but not with this method (405).
    MethodNotAllowed,
    /// The request conflicts with the object's state (409).
    Conflict,
    /// The request took longer than the server gives one (its body came too slowly, say):
    /// 408.
    Timeout,
    /// The body is larger than the server accepts (413).
    TooLarge,
    /// A limit refused it (429; `limit` names it).
    Limit,
    /// The server is shutting down and admits nothing new (503).
    Unavailable,
    /// A real fault of the server or its store (500).
    Internal,
}

impl ErrorKind {
    /// The HTTP status of this kind.
    pub fn status(self) -> StatusCode {
        match self {
            Self::Validation => StatusCode::BAD_REQUEST,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::Conflict => StatusCode::CONFLICT,
            Self::Timeout => StatusCode::REQUEST_TIMEOUT,
            Self::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::Limit => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Which limit refused a request, with its maximum and what was observed.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct LimitBody {
    /// The limit's configuration key (`max_active_children`, …).
    pub name: String,
    /// Its maximum.
    pub maximum: u64,
    /// What was observed.
    pub observed: u64,
}

/// The body of an error.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ErrorBody {
    /// What kind of failure.
    pub kind: ErrorKind,
    /// What went wrong, in one sentence a person can act on.
    pub message: String,
    /// The request field at fault (`task`, `spec`, a query parameter), when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The limit that refused the request, for `limit` errors.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<LimitBody>,
}

/// A failed request, as every endpoint answers it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema, thiserror::Error)]
#[error("{}", error.message)]
pub struct ApiError {
    /// The error.
    pub error: ErrorBody,
}

impl ApiError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self {
            error: ErrorBody {
                kind,
                message: message.into(),
                field: None,
                limit: None,
            },
        }
    }

    /// A validation error naming `field`.
    pub fn field(field: impl Into<String>, message: impl Into<String>) -> Self {
        let mut e = Self::new(ErrorKind::Validation, message);
        e.error.field = Some(field.into());
        e
    }

    /// The one answer for an unknown id and a foreign one.
    pub fn not_found(what: &str) -> Self {
        Self::new(ErrorKind::NotFound, format!("Unknown {what}"))
    }

    /// This error, naming the request `field` at fault (an unknown `spec`, say).
    #[must_use]
    pub fn at(mut self, field: impl Into<String>) -> Self {
        self.error.field = Some(field.into());
        self
    }

    /// A fault of the store or the server (logged; the caller sees only that it failed).
    pub fn internal(cause: &dyn std::fmt::Display) -> Self {
        tracing::error!("request failed: {cause}");
        Self::new(ErrorKind::Internal, "The server failed; see its log")
    }

    /// An error of `kind` that names the limit `name` it met.
    pub fn limited(
        kind: ErrorKind,
        message: impl Into<String>,
        name: &str,
        maximum: usize,
    ) -> Self {
        let maximum = u64::try_from(maximum).unwrap_or(u64::MAX);
        let mut e = Self::new(kind, message);
        e.error.limit = Some(LimitBody {
            name: name.to_owned(),
            maximum,
            observed: maximum,
        });
        e
    }

    /// The kind.
    pub fn kind(&self) -> ErrorKind {
        self.error.kind
    }
}

impl From<arbor_store::StoreError> for ApiError {
    fn from(e: arbor_store::StoreError) -> Self {
        Self::internal(&e)
    }
}

impl From<arbor_core::CoreError> for ApiError {
    fn from(e: arbor_core::CoreError) -> Self {
        use arbor_core::CoreErrorKind as K;
        let mut out = match e.kind() {
            K::Validation => match e.field() {
                Some(field) => Self::field(field, e.to_string()),
                None => Self::new(ErrorKind::Validation, e.to_string()),
            },
            // A stale version, or a delegation cancelled meanwhile: the caller's view is out
            // of date (409); a session that ended takes nothing new (503).
            K::Conflict | K::Cancelled => Self::new(ErrorKind::Conflict, e.to_string()),
            K::Closed => Self::new(ErrorKind::Unavailable, e.to_string()),
            K::NotFound => Self::new(ErrorKind::NotFound, e.to_string()),
            K::Denied => match e.deny_reason() {
                Some(arbor_core::DenyReason::Unknown) => {
                    Self::new(ErrorKind::NotFound, e.to_string())
                }
                _ => Self::new(ErrorKind::Conflict, e.to_string()),
            },
            K::Limit => Self::new(ErrorKind::Limit, e.to_string()),
            _ => return Self::internal(&e),
        };
        if let Some(info) = e.limit() {
            out.error.limit = Some(LimitBody {
                name: info.limit.to_string(),
                maximum: info.maximum,
                observed: info.observed,
            });
        }
        out
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.error.kind.status(), Json(self)).into_response()
    }
}

/// What a handler returns.
pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;
    use arbor_core::CoreError;

    #[test]
    fn core_errors_get_their_status_by_kind_never_by_text() {
        let status = |e: CoreError| {
            let api = ApiError::from(e);
            (api.error.kind.status(), api.error.field)
        };
        assert_eq!(
            status(CoreError::Conflict("the run's approvals changed".into())),
            (StatusCode::CONFLICT, None)
        );
        assert_eq!(
            status(CoreError::Cancelled("Delegation cancelled".into())),
            (StatusCode::CONFLICT, None)
        );
        assert_eq!(
            status(CoreError::Closed("Supervisor session has ended".into())),
            (StatusCode::SERVICE_UNAVAILABLE, None)
        );
        // The field comes from the error, whatever its message says.
        assert_eq!(
            status(CoreError::Invalid {
                field: "model",
                message: "no such name".into()
            }),
            (StatusCode::BAD_REQUEST, Some("model".to_owned()))
        );
        assert_eq!(
            status(CoreError::Validation("the name of the model".into())),
            (StatusCode::BAD_REQUEST, None)
        );
    }
}
