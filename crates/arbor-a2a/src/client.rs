//! [`A2aClient`]: one remote agent over JSON-RPC, its card fetched and checked once, its
//! streams read under caps.
//!
//! Every request carries `A2A-Version: 1.0` and, when configured, `Authorization: Bearer`
//! (the card's fetch too). What an agent sends is bounded: a card or a JSON answer at
//! [`MAX_JSON_BYTES`], one stream event at [`arbor_model::sse::MAX_EVENT_BYTES`], a whole
//! stream at [`A2aConfig::max_stream_bytes`], and the silence within an answer at
//! [`A2aConfig::idle_timeout`]. An answer of another content type than the call takes is
//! refused by name.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use arbor_model::http::ApiKey;
use arbor_model::sse::{SseDecoder, SseEvent};
use futures::Stream;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::OnceCell;

use crate::error::A2aError;
use crate::wire::{
    AgentCard, CARD_PATH, PROTOCOL_VERSION, RpcRequest, RpcResponse, SendMessageRequest,
    StreamEvent, StreamResponse, Task, TaskIdParams, VERSION_HEADER,
};

/// The most a card or a JSON answer may take, in bytes.
pub const MAX_JSON_BYTES: usize = 1024 * 1024;
/// How often a task of an agent without streaming is read.
pub const POLL: Duration = Duration::from_millis(500);
/// The start of an error body kept for a message, in bytes.
const MAX_ERROR_BYTES: usize = 2048;

/// How to reach one agent, built with [`A2aConfig::new`] and its setters.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct A2aConfig {
    /// The agent's base URL: its card is at [`CARD_PATH`] under it.
    pub base_url: String,
    /// The bearer token sent with every request, if any.
    pub token: Option<ApiKey>,
    /// Waiting for a connection.
    pub connect_timeout: Duration,
    /// Waiting for an answer's headers, and for a whole JSON answer.
    pub response_timeout: Duration,
    /// Silence allowed within a streamed answer.
    pub idle_timeout: Duration,
    /// What one streamed answer may take in all, in bytes.
    pub max_stream_bytes: usize,
}

impl A2aConfig {
    /// The agent at `base_url`, without a token, with the default limits: 10 s to connect,
    /// 120 s for headers, 120 s of silence, 4 MiB a stream.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            token: None,
            connect_timeout: Duration::from_secs(10),
            response_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(120),
            max_stream_bytes: 4 * 1024 * 1024,
        }
    }

    /// With this bearer token.
    #[must_use]
    pub fn token(mut self, token: Option<ApiKey>) -> Self {
        self.token = token;
        self
    }

    /// With these waits: for headers (and a whole JSON answer), and of silence in a stream.
    #[must_use]
    pub fn timeouts(mut self, response: Duration, idle: Duration) -> Self {
        self.response_timeout = response;
        self.idle_timeout = idle;
        self
    }

    /// With this cap on one streamed answer, in bytes.
    #[must_use]
    pub fn max_stream_bytes(mut self, bytes: usize) -> Self {
        self.max_stream_bytes = bytes;
        self
    }
}

/// The card as checked, and where requests go.
#[derive(Debug)]
struct Resolved {
    card: AgentCard,
    endpoint: String,
}

/// The items of one answer, in order; ends when the agent closes it.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<StreamEvent, A2aError>> + Send>>;

/// A client of one remote agent. Cheap to clone: clones share the connection pool and the
/// card.
#[derive(Debug, Clone)]
pub struct A2aClient {
    http: reqwest::Client,
    config: std::sync::Arc<A2aConfig>,
    resolved: std::sync::Arc<OnceCell<Resolved>>,
}

impl A2aClient {
    /// A client of the agent `config` names (nothing is fetched yet: see [`card`](Self::card)).
    pub fn new(config: A2aConfig) -> Result<Self, A2aError> {
        let base = config.base_url.trim_end_matches('/');
        let parsed = reqwest::Url::parse(base)
            .map_err(|e| A2aError::Config(format!("url {base:?} is not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(A2aError::Config(format!(
                "url {base:?} must be http or https"
            )));
        }
        if let Some(t) = &config.token
            && HeaderValue::from_str(&format!("Bearer {}", t.expose())).is_err()
        {
            return Err(A2aError::Config(
                "the token cannot be sent as an Authorization header (a control character \
                 or a line break in it?)"
                    .to_owned(),
            ));
        }
        let http =
            arbor_model::http::tls_client(config.connect_timeout).map_err(A2aError::Config)?;
        Ok(Self {
            http,
            config: std::sync::Arc::new(config),
            resolved: std::sync::Arc::new(OnceCell::new()),
        })
    }

    /// The agent's base URL.
    pub fn base_url(&self) -> &str {
        self.config.base_url.trim_end_matches('/')
    }

    /// The agent's card, fetched on first use and checked: it must offer JSON-RPC of
    /// protocol 1.x. A failed fetch is tried again on the next call.
    pub async fn card(&self) -> Result<&AgentCard, A2aError> {
        Ok(&self.resolved().await?.card)
    }

    async fn resolved(&self) -> Result<&Resolved, A2aError> {
        self.resolved
            .get_or_try_init(|| async {
                let url = format!("{}{CARD_PATH}", self.base_url());
                let request = self.authorized(self.http.get(&url));
                let response = self.execute(request, &url).await?;
                let bytes = self.json_body(response, "its card").await?;
                let card: AgentCard = serde_json::from_slice(&bytes).map_err(|e| {
                    A2aError::Card(format!("the agent card at {url} is not a card: {e}"))
                })?;
                let Some(interface) = card.jsonrpc_interface() else {
                    return Err(A2aError::Card(format!(
                        "the agent card at {url} offers no JSON-RPC interface of protocol \
                         1.x (supportedInterfaces with protocolBinding \"JSONRPC\")"
                    )));
                };
                let endpoint = interface.url.clone();
                let parsed = reqwest::Url::parse(&endpoint).map_err(|e| {
                    A2aError::Card(format!(
                        "the agent card at {url} names a JSON-RPC url {endpoint:?} that is \
                         not a URL: {e}"
                    ))
                })?;
                // The token goes where the card says, but never from https down to http.
                let base_is_https =
                    reqwest::Url::parse(self.base_url()).is_ok_and(|u| u.scheme() == "https");
                if base_is_https && parsed.scheme() != "https" {
                    return Err(A2aError::Card(format!(
                        "the agent card at {url} names a JSON-RPC url {endpoint:?} that is not \
                         https: refused (the token would travel in the clear)"
                    )));
                }
                Ok(Resolved { card, endpoint })
            })
            .await
    }

    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let request = request.header(VERSION_HEADER, PROTOCOL_VERSION);
        match &self.config.token {
            Some(t) => match HeaderValue::from_str(&format!("Bearer {}", t.expose())) {
                Ok(mut v) => {
                    v.set_sensitive(true);
                    request.header(AUTHORIZATION, v)
                }
                Err(_) => request,
            },
            None => request,
        }
    }

    /// Sends `request`: the response if its status is a success, else the error it names.
    async fn execute(
        &self,
        request: reqwest::RequestBuilder,
        url: &str,
    ) -> Result<reqwest::Response, A2aError> {
        let response = tokio::time::timeout(self.config.response_timeout, request.send())
            .await
            .map_err(|_| {
                A2aError::Timeout(format!(
                    "no answer from {url} within {} ms",
                    self.config.response_timeout.as_millis()
                ))
            })?
            .map_err(|e| A2aError::Connection(format!("cannot reach {url}: {e}")))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = self
            .capped(response, MAX_ERROR_BYTES)
            .await
            .unwrap_or_default();
        let message = String::from_utf8_lossy(&body).trim().to_owned();
        let code = status.as_u16();
        Err(if matches!(code, 401 | 403) {
            A2aError::Auth {
                status: code,
                message,
            }
        } else {
            A2aError::Http {
                status: code,
                message,
            }
        })
    }

    /// Up to `cap` bytes of the body, the whole within the response timeout.
    async fn capped(&self, mut response: reqwest::Response, cap: usize) -> Option<Vec<u8>> {
        let read = async {
            let mut body = Vec::new();
            while let Ok(Some(chunk)) = response.chunk().await {
                let room = cap.saturating_sub(body.len());
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if body.len() >= cap {
                    break;
                }
            }
            body
        };
        tokio::time::timeout(self.config.response_timeout, read)
            .await
            .ok()
    }

    /// A JSON body: its content type must be JSON, its size at most [`MAX_JSON_BYTES`].
    async fn json_body(
        &self,
        response: reqwest::Response,
        what: &str,
    ) -> Result<Vec<u8>, A2aError> {
        let kind = content_type(&response);
        if !is_json(&kind) {
            return Err(A2aError::ContentType(format!(
                "the agent answered {what} with content type {kind:?}, not application/json"
            )));
        }
        if response
            .content_length()
            .is_some_and(|n| n > MAX_JSON_BYTES as u64)
        {
            return Err(too_large(what, MAX_JSON_BYTES));
        }
        let body = self
            .capped(response, MAX_JSON_BYTES + 1)
            .await
            .ok_or_else(|| {
                A2aError::Timeout(format!(
                    "{what} did not arrive within {} ms",
                    self.config.response_timeout.as_millis()
                ))
            })?;
        if body.len() > MAX_JSON_BYTES {
            return Err(too_large(what, MAX_JSON_BYTES));
        }
        Ok(body)
    }

    /// Calls `method` and reads its result as `T`.
    async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        params: impl Serialize,
    ) -> Result<T, A2aError> {
        let endpoint = &self.resolved().await?.endpoint;
        let params = serde_json::to_value(params)
            .map_err(|e| A2aError::Protocol(format!("cannot write {method}'s params: {e}")))?;
        let request = self
            .authorized(self.http.post(endpoint))
            .header(ACCEPT, "application/json")
            .json(&RpcRequest::new(method, params));
        let response = self.execute(request, endpoint).await?;
        let body = self.json_body(response, method).await?;
        result_of(&body, method)
    }

    /// `GetTask`: the task as it stands.
    pub async fn get_task(&self, id: &str) -> Result<Task, A2aError> {
        self.call(
            "GetTask",
            TaskIdParams {
                id: id.to_owned(),
                history_length: Some(0),
            },
        )
        .await
    }

    /// `CancelTask`: the task as cancelling left it.
    pub async fn cancel_task(&self, id: &str) -> Result<Task, A2aError> {
        self.call(
            "CancelTask",
            TaskIdParams {
                id: id.to_owned(),
                history_length: None,
            },
        )
        .await
    }

    /// Sends a message: `SendStreamingMessage` when the card offers streaming (the items as
    /// they come), else `SendMessage` asked to answer at once (`returnImmediately`), the task
    /// then read every [`POLL`] (`GetTask`) until it ends or asks: each change of its state is
    /// an item, so the task is named (and can be cancelled) from the start.
    pub async fn send(&self, mut request: SendMessageRequest) -> Result<EventStream, A2aError> {
        let resolved = self.resolved().await?;
        if resolved.card.capabilities.streaming != Some(true) {
            request
                .configuration
                .get_or_insert_with(Default::default)
                .return_immediately = Some(true);
            let item: StreamResponse = self.call("SendMessage", request).await?;
            let event = item.into_event().ok_or_else(|| {
                A2aError::Protocol("SendMessage's result holds neither a task nor a message".into())
            })?;
            return Ok(match event {
                StreamEvent::Task(task)
                    if !task.status.state.is_terminal() && !task.status.state.is_interrupted() =>
                {
                    Box::pin(self.polled(task))
                }
                event => Box::pin(futures::stream::iter([Ok(event)])),
            });
        }
        let params = serde_json::to_value(&request).map_err(|e| {
            A2aError::Protocol(format!("cannot write SendStreamingMessage's params: {e}"))
        })?;
        let endpoint = &resolved.endpoint;
        let http = self
            .authorized(self.http.post(endpoint))
            .header(ACCEPT, "text/event-stream")
            .json(&RpcRequest::new("SendStreamingMessage", params));
        let response = self.execute(http, endpoint).await?;
        let kind = content_type(&response);
        if is_json(&kind) {
            // An error (or a single result) before any stream.
            let body = self.json_body(response, "SendStreamingMessage").await?;
            let item: StreamResponse = result_of(&body, "SendStreamingMessage")?;
            let event = item.into_event().ok_or_else(|| {
                A2aError::Protocol("the answer holds no single stream item".into())
            })?;
            return Ok(Box::pin(futures::stream::iter([Ok(event)])));
        }
        if !kind.starts_with("text/event-stream") {
            return Err(A2aError::ContentType(format!(
                "the agent answered SendStreamingMessage with content type {kind:?}, not \
                 text/event-stream"
            )));
        }
        Ok(Box::pin(sse_items(
            response,
            self.config.idle_timeout,
            self.config.max_stream_bytes,
        )))
    }
}

impl A2aClient {
    /// `task`, then each change of its state read every [`POLL`], until it ends or asks.
    fn polled(
        &self,
        task: Task,
    ) -> impl Stream<Item = Result<StreamEvent, A2aError>> + Send + use<> {
        let client = self.clone();
        let first = Some(task.clone());
        futures::stream::unfold(
            (client, first, task.id.clone(), task.status.state, false),
            |(client, first, id, mut last, done)| async move {
                if let Some(t) = first {
                    return Some((Ok(StreamEvent::Task(t)), (client, None, id, last, false)));
                }
                if done {
                    return None;
                }
                loop {
                    tokio::time::sleep(POLL).await;
                    match client.get_task(&id).await {
                        Ok(t) => {
                            let state = t.status.state;
                            let settled = state.is_terminal() || state.is_interrupted();
                            if state != last || settled {
                                last = state;
                                return Some((
                                    Ok(StreamEvent::Task(t)),
                                    (client, None, id, last, settled),
                                ));
                            }
                        }
                        Err(e) => return Some((Err(e), (client, None, id, last, true))),
                    }
                }
            },
        )
    }
}

fn content_type(response: &reqwest::Response) -> String {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase()
}

fn is_json(kind: &str) -> bool {
    let essence = kind.split(';').next().unwrap_or("").trim();
    essence == "application/json" || essence.ends_with("+json")
}

fn too_large(what: &str, limit: usize) -> A2aError {
    A2aError::TooLarge {
        limit: limit as u64,
        message: format!("{what} passed {limit} bytes"),
    }
}

/// The result of a JSON-RPC response body, or its error.
fn result_of<T: DeserializeOwned>(body: &[u8], method: &str) -> Result<T, A2aError> {
    let response: RpcResponse = serde_json::from_slice(body)
        .map_err(|e| A2aError::Protocol(format!("{method}'s answer is not JSON-RPC: {e}")))?;
    rpc_result(response, method)
}

fn rpc_result<T: DeserializeOwned>(response: RpcResponse, method: &str) -> Result<T, A2aError> {
    if let Some(e) = response.error {
        return Err(A2aError::Remote {
            code: e.code,
            message: e.message,
        });
    }
    let result = response
        .result
        .ok_or_else(|| A2aError::Protocol(format!("{method}'s answer has no result")))?;
    serde_json::from_value(result)
        .map_err(|e| A2aError::Protocol(format!("{method}'s result is malformed: {e}")))
}

/// What the stream reader keeps between items.
struct Reader {
    response: reqwest::Response,
    decoder: SseDecoder,
    pending: VecDeque<SseEvent>,
    bytes: usize,
    idle: Duration,
    max: usize,
    done: bool,
}

/// The stream items of an SSE answer: each `data:` a JSON-RPC response whose result is a
/// [`StreamResponse`] (an `event: error` one carries a JSON-RPC error).
fn sse_items(
    response: reqwest::Response,
    idle: Duration,
    max: usize,
) -> impl Stream<Item = Result<StreamEvent, A2aError>> + Send {
    let reader = Reader {
        response,
        decoder: SseDecoder::new(),
        pending: VecDeque::new(),
        bytes: 0,
        idle,
        max,
        done: false,
    };
    futures::stream::unfold(reader, |mut r| async move {
        if r.done {
            return None;
        }
        match next_item(&mut r).await {
            Ok(Some(event)) => Some((Ok(event), r)),
            Ok(None) => None,
            Err(e) => {
                r.done = true;
                Some((Err(e), r))
            }
        }
    })
}

async fn next_item(r: &mut Reader) -> Result<Option<StreamEvent>, A2aError> {
    loop {
        if let Some(event) = r.pending.pop_front() {
            if event.data.trim().is_empty() {
                continue;
            }
            let response: RpcResponse = serde_json::from_str(&event.data).map_err(|e| {
                A2aError::Protocol(format!("a stream item is not a JSON-RPC response: {e}"))
            })?;
            let item: StreamResponse = rpc_result(response, "SendStreamingMessage")?;
            return item.into_event().map(Some).ok_or_else(|| {
                A2aError::Protocol(
                    "a stream item holds none, or more than one, of task, message, \
                     statusUpdate and artifactUpdate"
                        .into(),
                )
            });
        }
        let chunk = tokio::time::timeout(r.idle, r.response.chunk())
            .await
            .map_err(|_| {
                A2aError::Timeout(format!(
                    "the agent's stream was silent for {} ms",
                    r.idle.as_millis()
                ))
            })?
            .map_err(|e| A2aError::Connection(format!("the agent's stream broke: {e}")))?;
        let Some(chunk) = chunk else {
            let rest = r
                .decoder
                .finish()
                .map_err(|e| A2aError::Connection(format!("the agent's stream broke: {e}")))?;
            if rest.is_empty() {
                return Ok(None);
            }
            r.pending.extend(rest);
            continue;
        };
        r.bytes = r.bytes.saturating_add(chunk.len());
        if r.bytes > r.max {
            return Err(too_large("the agent's stream", r.max));
        }
        let events = r.decoder.push(&chunk).map_err(|e| A2aError::TooLarge {
            limit: arbor_model::sse::MAX_EVENT_BYTES as u64,
            message: format!("the agent's stream: {e}"),
        })?;
        r.pending.extend(events);
    }
}
