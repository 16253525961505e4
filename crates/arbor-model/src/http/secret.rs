//! The key of a provider: how it is held, sent and kept out of every error and log line.

use std::fmt;

use reqwest::header::HeaderValue;

use crate::error::ModelError;

/// A credential. It prints as `***`, is marked sensitive in headers, and is never
/// serialized.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key.
    pub fn new(key: impl Into<String>) -> Self {
        Self(key.into())
    }

    /// The key from the environment variable `var`, if set and not blank.
    pub fn from_env(var: &str) -> Option<Self> {
        std::env::var(var)
            .ok()
            .filter(|k| !k.trim().is_empty())
            .map(|k| Self(k.trim().to_owned()))
    }

    /// The key itself, for a redactor that must never let it through.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub(crate) fn header(&self, prefix: &str) -> Result<HeaderValue, String> {
        let mut v = HeaderValue::from_str(&format!("{prefix}{}", self.0))
            .map_err(|_| "the API key is not a valid header value".to_owned())?;
        v.set_sensitive(true);
        Ok(v)
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

/// `e` with every occurrence of the key in its messages replaced by `***`.
pub(crate) fn scrub(e: ModelError, secret: Option<&ApiKey>) -> ModelError {
    let Some(key) = secret.map(ApiKey::expose).filter(|k| !k.is_empty()) else {
        return e;
    };
    let clean = |m: String| m.replace(key, "***");
    match e {
        ModelError::Auth {
            provider,
            status,
            message,
        } => ModelError::Auth {
            provider,
            status,
            message: clean(message),
        },
        ModelError::BadRequest {
            provider,
            status,
            message,
        } => ModelError::BadRequest {
            provider,
            status,
            message: clean(message),
        },
        ModelError::Server {
            provider,
            status,
            message,
        } => ModelError::Server {
            provider,
            status,
            message: clean(message),
        },
        ModelError::RateLimited {
            provider,
            message,
            retry_after_ms,
        } => ModelError::RateLimited {
            provider,
            message: clean(message),
            retry_after_ms,
        },
        ModelError::Timeout { provider, message } => ModelError::Timeout {
            provider,
            message: clean(message),
        },
        ModelError::Config { provider, message } => ModelError::Config {
            provider,
            message: clean(message),
        },
        ModelError::Connection { provider, message } => ModelError::Connection {
            provider,
            message: clean(message),
        },
        ModelError::TooLarge { limit, message } => ModelError::TooLarge {
            limit,
            message: clean(message),
        },
        ModelError::Provider { message } => ModelError::Provider {
            message: clean(message),
        },
        ModelError::Stream { message } => ModelError::Stream {
            message: clean(message),
        },
        ModelError::Unavailable { model, reason } => ModelError::Unavailable {
            model,
            reason: clean(reason),
        },
        other => other,
    }
}
