//! The wire formats of the HTTP providers, kept pure: request bodies built from a
//! [`ModelRequest`](crate::ModelRequest), stream chunks decoded into
//! [`ModelEvent`]s, error bodies classified, model lists read. Nothing here
//! touches a socket, so every case is tested on recorded bytes.
//!
//! - [`openai`]: Chat Completions (OpenAI and the servers that speak it: vLLM, llama.cpp,
//!   Ollama, gateways).
//! - [`anthropic`]: the Messages API.

pub mod anthropic;
pub mod controls;
pub mod openai;

use crate::error::ModelError;
use crate::provider::ModelEvent;

/// Turns the `data:` payloads of one streamed turn into model events.
pub trait Decoder: Send + 'static {
    /// Decodes one payload.
    fn push(&mut self, data: &str) -> Result<Vec<ModelEvent>, ModelError>;
    /// The stream closed: what completes the turn, or why it is truncated.
    fn finish(&mut self) -> Result<Vec<ModelEvent>, ModelError>;
}

/// What one turn may assemble by default: 4 MiB of text, tool names, ids and arguments.
pub const DEFAULT_MAX_TURN_BYTES: usize = 4 * 1024 * 1024;

/// What each tool call or content block a turn opens counts besides its text (its
/// bookkeeping), so a stream of empty calls is bounded too.
pub const PART_BYTES: usize = 64;

/// The bytes one turn has assembled, against its cap: text, and each tool call's name, id
/// and arguments (so one call's arguments and all of them together stay under it).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TurnSize {
    limit: usize,
    used: usize,
}

impl TurnSize {
    pub(crate) fn new(limit: usize) -> Self {
        Self { limit, used: 0 }
    }

    /// Counts `n` more bytes; past the cap, the error naming `what` added them.
    pub(crate) fn add(
        &mut self,
        n: usize,
        what: impl FnOnce() -> String,
    ) -> Result<(), ModelError> {
        self.used = self.used.saturating_add(n);
        if self.used <= self.limit {
            return Ok(());
        }
        Err(ModelError::TooLarge {
            limit: self.limit as u64,
            message: format!(
                "{} took the turn past {} bytes of text and tool calls",
                what(),
                self.limit
            ),
        })
    }
}

pub(crate) fn stream_error(message: impl Into<String>) -> ModelError {
    ModelError::Stream {
        message: message.into(),
    }
}

/// Decodes `bytes` split in two at `split`, as SSE then with `dec`: for tests that every
/// chunking gives the same events.
#[cfg(test)]
pub(crate) fn decode_split(
    mut dec: impl Decoder,
    bytes: &[u8],
    split: usize,
) -> Result<Vec<ModelEvent>, ModelError> {
    let mut sse = crate::sse::SseDecoder::new();
    let mut out = Vec::new();
    let (a, b) = bytes.split_at(split.min(bytes.len()));
    for part in [a, b] {
        for e in sse.push(part).map_err(|e| stream_error(e.to_string()))? {
            out.extend(dec.push(&e.data)?);
        }
    }
    for e in sse.finish().map_err(|e| stream_error(e.to_string()))? {
        out.extend(dec.push(&e.data)?);
    }
    out.extend(dec.finish()?);
    Ok(out)
}

/// UTF-8 bytes of an error body quoted in an error.
const MAX_QUOTED: usize = 200;

/// The message of a JSON error body (`{"error": {"message": …}}` in both formats), else the
/// body's first 200 characters with runs of whitespace collapsed.
pub(crate) fn error_message(body: &[u8]) -> (String, Option<String>) {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        let e = &v["error"];
        let kind = e["type"]
            .as_str()
            .or_else(|| e["code"].as_str())
            .map(str::to_owned);
        if let Some(m) = e["message"].as_str() {
            return (m.to_owned(), kind);
        }
        if let Some(m) = e.as_str() {
            return (m.to_owned(), kind);
        }
    }
    let text = String::from_utf8_lossy(body);
    let collapsed = text.split_whitespace().collect::<Vec<_>>().join(" ");
    let quoted: String = collapsed.chars().take(MAX_QUOTED).collect();
    if quoted.is_empty() {
        ("(empty body)".to_owned(), None)
    } else {
        (quoted, None)
    }
}

/// The error an HTTP status and body mean, before any retry decision.
pub fn classify(
    provider: &str,
    status: u16,
    body: &[u8],
    retry_after_ms: Option<u64>,
) -> ModelError {
    let (message, kind) = error_message(body);
    let provider = provider.to_owned();
    match status {
        401 | 403 => ModelError::Auth {
            provider,
            status,
            message,
        },
        429 => ModelError::RateLimited {
            provider,
            message,
            retry_after_ms: if kind.as_deref() == Some("insufficient_quota") {
                None
            } else {
                retry_after_ms
            },
        },
        408 => ModelError::Timeout { provider, message },
        500..=599 => ModelError::Server {
            provider,
            status,
            message,
        },
        _ => ModelError::BadRequest {
            provider,
            status,
            message,
        },
    }
}

/// Whether a failed response is worth another attempt: 408, 409, 429 (not a spent quota),
/// 5xx and 529; a provider's `x-should-retry` header overrides.
pub fn retryable(status: u16, body: &[u8], should_retry: Option<bool>) -> bool {
    if let Some(v) = should_retry {
        return v;
    }
    match status {
        429 => error_message(body).1.as_deref() != Some("insufficient_quota"),
        408 | 409 | 500 | 502 | 503 | 504 | 529 => true,
        _ => false,
    }
}

/// Model ids of a `GET …/models` answer (`{"data": [{"id": …}]}` in both formats).
pub fn model_ids(body: &[u8]) -> Result<Vec<String>, String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("the model list is not JSON: {e}"))?;
    let data = v["data"]
        .as_array()
        .ok_or_else(|| "the model list has no `data` array".to_owned())?;
    Ok(data
        .iter()
        .filter_map(|m| m["id"].as_str().map(str::to_owned))
        .collect())
}

/// Arguments text as the JSON value a tool call carries: the parsed object, `{}` for
/// nothing, or the raw text (the tool's own validation then tells the model what is wrong).
pub(crate) fn arguments(raw: &str) -> serde_json::Value {
    if raw.trim().is_empty() {
        return serde_json::json!({});
    }
    serde_json::from_str(raw).unwrap_or_else(|_| serde_json::Value::String(raw.to_owned()))
}

/// The most of a provider's model name a decoder keeps (a longer one is not a model name).
const MAX_MODEL_NAME: usize = 256;

/// `v` as the model a provider named, if it is one.
pub(crate) fn model_name(v: &serde_json::Value) -> Option<String> {
    v.as_str()
        .filter(|m| !m.is_empty() && m.len() <= MAX_MODEL_NAME)
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ModelErrorKind;

    #[test]
    fn errors_are_classified_with_the_providers_message() {
        let body = br#"{"error":{"message":"Incorrect API key provided: sk-te***34.","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#;
        let e = classify("openai", 401, body, None);
        assert_eq!(e.kind(), ModelErrorKind::Auth);
        assert_eq!(
            e.to_string(),
            "openai: HTTP 401: Incorrect API key provided: sk-te***34."
        );
        let quota = br#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}"#;
        assert!(!retryable(429, quota, None));
        assert!(retryable(429, b"{}", None));
        assert!(!retryable(429, b"{}", Some(false)));
        assert!(retryable(529, b"", None));
        assert!(!retryable(400, b"", None));
        let html = b"<html><head><title>502 Bad Gateway</title></head>\n<body>nginx</body></html>";
        let e = classify("local", 502, html, None);
        assert_eq!(
            e.to_string(),
            "local: HTTP 502: <html><head><title>502 Bad Gateway</title></head> <body>nginx</body></html>"
        );
        assert_eq!(e.kind(), ModelErrorKind::Server);
        // llama.cpp's numeric code; Anthropic's shape.
        let e = classify(
            "local",
            401,
            br#"{"error":{"message":"Invalid API Key","type":"authentication_error","code":401}}"#,
            None,
        );
        assert_eq!(e.to_string(), "local: HTTP 401: Invalid API Key");
        let e = classify("anthropic", 404, br#"{"type":"error","error":{"type":"not_found_error","message":"model: claude-nope"}}"#, None);
        assert_eq!(
            (e.kind(), e.to_string()),
            (
                ModelErrorKind::BadRequest,
                "anthropic: HTTP 404: model: claude-nope".to_owned()
            )
        );
        assert_eq!(
            classify("x", 500, b"", None).to_string(),
            "x: HTTP 500: (empty body)"
        );
    }

    #[test]
    fn model_lists_and_arguments_are_read() {
        let body = include_bytes!("../../tests/fixtures/llamacpp/models.json");
        assert_eq!(model_ids(body).unwrap(), ["smollm2"]);
        assert!(model_ids(b"nope").is_err());
        assert_eq!(arguments(""), serde_json::json!({}));
        assert_eq!(arguments("{\"a\":1}"), serde_json::json!({"a": 1}));
        assert_eq!(
            arguments("{\"a\":"),
            serde_json::Value::String("{\"a\":".into())
        );
    }
}
