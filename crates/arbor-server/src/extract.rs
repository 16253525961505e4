//! Request extractors that answer in the API's error shape: a JSON body ([`Body`]) and a
//! query ([`Params`]) whose failures are `validation` errors naming the field (an unknown
//! field, a missing one, a value of the wrong type), or `too_large` for a body over the cap.

use axum::extract::rejection::{JsonRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use crate::error::{ApiError, ErrorKind};

/// The field a serde error names (`unknown field `x``, `missing field `x``), if any.
fn named_field(message: &str) -> Option<String> {
    for marker in ["unknown field `", "missing field `", "duplicate field `"] {
        if let Some(rest) = message.split(marker).nth(1) {
            return rest.split('`').next().map(str::to_owned);
        }
    }
    None
}

/// Drops serde's position suffix (`at line 1 column 9`), which says nothing to a caller.
fn tidy(message: &str) -> String {
    let m = message.split(" at line ").next().unwrap_or(message);
    m.trim_start_matches("Failed to deserialize the JSON body into the target type: ")
        .trim_start_matches("Failed to deserialize query string: ")
        .to_owned()
}

fn invalid(message: &str, default_field: Option<&str>) -> ApiError {
    let text = tidy(message);
    match named_field(&text).or_else(|| default_field.map(str::to_owned)) {
        Some(field) => ApiError::field(field, text),
        None => ApiError::new(ErrorKind::Validation, text),
    }
}

/// A JSON request body.
#[derive(Debug)]
pub(crate) struct Body<T>(pub(crate) T);

impl<S, T> FromRequest<S> for Body<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        // JSON first (type, size, syntax), then the shape, with the path of what is wrong.
        let axum::Json(value) = axum::Json::<serde_json::Value>::from_request(req, state)
            .await
            .map_err(|r| json_error(&r))?;
        serde_path_to_error::deserialize::<_, T>(value)
            .map(Self)
            .map_err(|e| shape_error(&e))
    }
}

/// A body that is JSON but not the request's shape: the error names the field at fault by
/// its path (`task`, `decisions[0].verdict`).
fn shape_error(e: &serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let path = e.path().to_string();
    let message = tidy(&e.inner().to_string());
    let at = (path != ".").then_some(path);
    let field = match (named_field(&message), at) {
        // An unknown or missing key inside an object: the object's path, then the key.
        (Some(key), Some(at)) if !at.ends_with(&key) => Some(format!("{at}.{key}")),
        (Some(key), None) => Some(key),
        (_, at) => at,
    };
    match field {
        Some(field) => ApiError::field(field, message),
        None => ApiError::new(ErrorKind::Validation, message),
    }
}

fn json_error(rejection: &JsonRejection) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::new(ErrorKind::TooLarge, "The request body is too large");
    }
    match rejection {
        JsonRejection::MissingJsonContentType(_) => ApiError::new(
            ErrorKind::Validation,
            "The body must be JSON (Content-Type: application/json)",
        ),
        other => invalid(&other.body_text(), None),
    }
}

/// A query string.
#[derive(Debug)]
pub(crate) struct Params<T>(pub(crate) T);

impl<S, T> FromRequestParts<S> for Params<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(Self(v)),
            Err(rejection) => Err(query_error(&rejection)),
        }
    }
}

fn query_error(rejection: &QueryRejection) -> ApiError {
    invalid(&rejection.body_text(), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Decision {
        id: String,
        verdict: bool,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Shape {
        task: String,
        decisions: Vec<Decision>,
    }

    fn shape(v: serde_json::Value) -> ApiError {
        shape_error(&serde_path_to_error::deserialize::<_, Shape>(v).unwrap_err())
    }

    #[test]
    fn a_body_of_the_wrong_shape_names_the_path_at_fault() {
        let e = shape(serde_json::json!({"task": 3, "decisions": []}));
        assert_eq!(e.error.field.as_deref(), Some("task"));
        assert_eq!(
            e.error.message,
            "invalid type: integer `3`, expected a string"
        );
        let e =
            shape(serde_json::json!({"task": "t", "decisions": [{"id": "a", "verdict": "maybe"}]}));
        assert_eq!(e.error.field.as_deref(), Some("decisions[0].verdict"));
        let e = shape(
            serde_json::json!({"task": "t", "decisions": [{"id": "a", "verdict": true, "x": 1}]}),
        );
        assert_eq!(e.error.field.as_deref(), Some("decisions[0].x"), "{e:?}");
        let e = shape(serde_json::json!({"task": "t", "decisions": [], "tools": []}));
        assert_eq!(e.error.field.as_deref(), Some("tools"), "{e:?}");
        let e = shape(serde_json::json!({"decisions": []}));
        assert_eq!(e.error.field.as_deref(), Some("task"), "{e:?}");
    }

    #[test]
    fn serde_messages_name_their_field() {
        let e = invalid(
            "Failed to deserialize the JSON body into the target type: unknown field `tools`, expected one of `spec`, `task` at line 1 column 9",
            None,
        );
        assert_eq!(e.error.field.as_deref(), Some("tools"));
        assert_eq!(
            e.error.message,
            "unknown field `tools`, expected one of `spec`, `task`"
        );
        let e = invalid("missing field `spec` at line 1 column 2", None);
        assert_eq!(e.error.field.as_deref(), Some("spec"));
    }
}
