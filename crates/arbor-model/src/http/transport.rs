//! Transport failures (reqwest's errors, before or during an answer): what they are called,
//! and whether another attempt may help.

use std::error::Error;

use crate::error::ModelError;

/// Whether `e`, or an error it wraps, is the peer closing or resetting the connection.
fn closed(e: &(dyn Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(h) = err.downcast_ref::<hyper::Error>()
            && h.is_incomplete_message()
        {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            if matches!(
                io.kind(),
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
            ) {
                return true;
            }
        }
        next = err.source();
    }
    false
}

/// The innermost cause of `e` (reqwest's own text says only "error sending request").
fn cause(e: &(dyn Error + 'static)) -> String {
    let mut last = e;
    while let Some(inner) = last.source() {
        last = inner;
    }
    last.to_string()
}

/// A request that got no answer: the error, and whether to try again. A connection closed
/// or refused, and a connect timeout, are retried; anything else (a request that cannot be
/// built) is not.
pub(crate) fn request_failed(provider: &str, e: &reqwest::Error) -> (ModelError, bool) {
    let provider = provider.to_owned();
    if closed(e) {
        let message = "connection closed before the response".to_owned();
        return (ModelError::Connection { provider, message }, true);
    }
    if e.is_connect() || e.is_timeout() {
        let message = format!("cannot reach the provider: {}", cause(e));
        return (ModelError::Connection { provider, message }, true);
    }
    let message = format!("the request failed: {}", cause(e));
    (ModelError::Connection { provider, message }, false)
}

/// A body that broke off after the answer's headers.
pub(crate) fn body_failed(provider: &str, e: &reqwest::Error) -> ModelError {
    let message = if closed(e) {
        "connection closed during the response".to_owned()
    } else {
        format!("the response broke off: {}", cause(e))
    };
    ModelError::Connection {
        provider: provider.to_owned(),
        message,
    }
}
