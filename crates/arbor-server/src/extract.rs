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
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(Self(v)),
            Err(rejection) => Err(json_error(&rejection)),
        }
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
