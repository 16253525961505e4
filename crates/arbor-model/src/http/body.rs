//! A streamed answer: the body's chunks decoded as server-sent events, then by the wire
//! decoder into model events, under the idle timeout.

use std::collections::VecDeque;
use std::fmt;
use std::pin::Pin;
use std::time::Duration;

use futures::{Stream, StreamExt};

use crate::error::ModelError;
use crate::provider::{ModelEvent, ModelStream};
use crate::sse::{MAX_EVENT_BYTES, SseDecoder, SseError};
use crate::wire::Decoder;

type Bytes = Pin<Box<dyn Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

/// A streamed answer being decoded.
struct Body<D> {
    body: Bytes,
    sse: SseDecoder,
    decoder: D,
    queue: VecDeque<Result<ModelEvent, ModelError>>,
    ended: bool,
    idle: Duration,
    name: String,
}

fn stream_error(e: &dyn fmt::Display) -> ModelError {
    ModelError::Stream {
        message: e.to_string(),
    }
}

/// An SSE failure: an event past its cap is an answer too large, anything else a broken
/// stream.
fn sse_error(e: &SseError) -> ModelError {
    match e {
        SseError::TooLarge => ModelError::TooLarge {
            limit: MAX_EVENT_BYTES as u64,
            message: e.to_string(),
        },
        SseError::Truncated => stream_error(e),
    }
}

impl<D: Decoder> Body<D> {
    fn feed(&mut self, payloads: Vec<crate::sse::SseEvent>) {
        for e in payloads {
            match self.decoder.push(&e.data) {
                Ok(events) => self.queue.extend(events.into_iter().map(Ok)),
                Err(err) => {
                    self.fail(err);
                    return;
                }
            }
        }
    }

    fn fail(&mut self, err: ModelError) {
        self.queue.push_back(Err(err));
        self.ended = true;
    }

    /// Reads one chunk (or the end, or a timeout) into the queue.
    async fn next_chunk(&mut self) {
        match tokio::time::timeout(self.idle, self.body.next()).await {
            Err(_) => {
                let message = format!("no data for {} s", self.idle.as_secs_f64());
                let provider = self.name.clone();
                self.fail(ModelError::Timeout { provider, message });
            }
            Ok(Some(Ok(bytes))) => match self.sse.push(&bytes) {
                Ok(payloads) => self.feed(payloads),
                Err(e) => self.fail(sse_error(&e)),
            },
            Ok(Some(Err(e))) => {
                let e = super::transport::body_failed(&self.name, &e.without_url());
                self.fail(e);
            }
            Ok(None) => {
                match self.sse.finish() {
                    Ok(payloads) => self.feed(payloads),
                    Err(e) => self.fail(sse_error(&e)),
                }
                if !self.ended {
                    match self.decoder.finish() {
                        Ok(events) => self.queue.extend(events.into_iter().map(Ok)),
                        Err(e) => self.queue.push_back(Err(e)),
                    }
                    self.ended = true;
                }
            }
        }
    }
}

/// The turn's events, decoded from the streamed `response` under the `idle` timeout.
pub(crate) fn events(
    response: reqwest::Response,
    decoder: impl Decoder,
    idle: Duration,
    name: &str,
) -> ModelStream {
    let state = Body {
        body: Box::pin(response.bytes_stream()),
        sse: SseDecoder::new(),
        decoder,
        queue: VecDeque::new(),
        ended: false,
        idle,
        name: name.to_owned(),
    };
    Box::pin(futures::stream::unfold(state, |mut s| async move {
        loop {
            if let Some(item) = s.queue.pop_front() {
                return Some((item, s));
            }
            if s.ended {
                return None;
            }
            s.next_chunk().await;
        }
    }))
}
