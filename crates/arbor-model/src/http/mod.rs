//! The transport of the HTTP providers: one reqwest client over rustls (ring, the platform's
//! trust store, no process-wide provider installed), requests retried on 408/409/429/5xx/529
//! and on connection failures (refused, closed) before any model event, and streamed bodies decoded as server-sent
//! events under an idle timeout.
//!
//! A call is retried only before its stream starts: once a model event is out, its text has
//! been published, so a broken stream fails the turn instead. Usage therefore comes from one
//! attempt only and is never counted twice.

pub mod anthropic;
mod body;
pub mod openai;
mod retry;
mod secret;
mod transport;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderValue};

pub use anthropic::{AnthropicConfig, AnthropicProvider};
pub use openai::{OpenAiConfig, OpenAiProvider};
pub use retry::RetryPolicy;
pub use secret::ApiKey;

use crate::error::ModelError;
use crate::provider::ModelStream;
use crate::wire::{self, Decoder};
use secret::scrub;

/// Bytes of an error body read.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Timeouts of one provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Connecting (default 10 s).
    pub connect: Duration,
    /// Waiting for the answer's headers (default 120 s).
    pub response: Duration,
    /// Silence within a streamed answer (default 120 s).
    pub idle: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            response: Duration::from_secs(120),
            idle: Duration::from_secs(120),
        }
    }
}

/// The retries one turn has left: one attempt count and one wait budget, shared by every
/// way an attempt can fail (a refused request, a dropped connection, an overload inside
/// the stream), so retries never multiply.
#[derive(Debug, Default)]
struct Budget {
    /// Retries made so far.
    attempt: u32,
    /// Time waited so far.
    waited: Duration,
}

/// A failed attempt: its error (already scrubbed), the wait the provider asked for, and
/// whether another attempt may help.
#[derive(Debug)]
struct Failed {
    error: ModelError,
    asked: Option<Duration>,
    retry: bool,
}

/// How long a passed preflight is trusted.
const PREFLIGHT_TTL: Duration = Duration::from_secs(600);

/// The client half every HTTP provider shares.
#[derive(Debug, Clone)]
pub(crate) struct Endpoint {
    pub(crate) name: String,
    client: reqwest::Client,
    retry: RetryPolicy,
    timeouts: Timeouts,
    /// Models whose preflight passed, and when.
    passed: Arc<std::sync::Mutex<std::collections::HashMap<String, std::time::Instant>>>,
    /// The key, scrubbed from every error message (a server may echo it).
    secret: Option<ApiKey>,
}

fn client(timeouts: &Timeouts) -> Result<reqwest::Client, String> {
    tls_client(timeouts.connect)
}

/// An HTTP client over rustls (ring, the platform's verifier, HTTP/1.1) that connects within
/// `connect`: the one the providers use, for other HTTP clients of a host (an MCP server's,
/// say) so the process keeps one TLS stack.
pub fn tls_client(connect: Duration) -> Result<reqwest::Client, String> {
    use rustls_platform_verifier::BuilderVerifierExt;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .with_platform_verifier()
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .connect_timeout(connect)
        .build()
        .map_err(|e| format!("HTTP client setup failed: {e}"))
}

/// Up to 64 KiB of a body, each chunk waited for at most `idle`.
async fn read_capped(mut response: reqwest::Response, idle: Duration) -> Vec<u8> {
    let mut body = Vec::new();
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout(idle, response.chunk()).await {
        let room = MAX_ERROR_BODY.saturating_sub(body.len());
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= MAX_ERROR_BODY {
            break;
        }
    }
    body
}

/// Model ids for a message: the first 20, then how many more.
fn some_of(ids: &[String]) -> String {
    const SHOWN: usize = 20;
    let mut text = ids
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if ids.len() > SHOWN {
        text.push_str(&format!(" and {} more", ids.len() - SHOWN));
    }
    text
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

impl Endpoint {
    pub(crate) fn new(
        name: &str,
        retry: RetryPolicy,
        timeouts: Timeouts,
        secret: Option<ApiKey>,
    ) -> Result<Self, ModelError> {
        let client = client(&timeouts).map_err(|message| ModelError::Config {
            provider: name.to_owned(),
            message,
        })?;
        Ok(Self {
            name: name.to_owned(),
            client,
            retry,
            timeouts,
            passed: Arc::default(),
            secret,
        })
    }

    fn passed(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, std::time::Instant>> {
        self.passed.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `model` passed a preflight in the last ten minutes.
    fn preflighted(&self, model: &str) -> bool {
        self.passed()
            .get(model)
            .is_some_and(|at| at.elapsed() < PREFLIGHT_TTL)
    }

    /// Runs `check` for `model` unless a check passed in the last ten minutes; remembers a
    /// pass.
    pub(crate) async fn preflight(
        &self,
        model: &str,
        check: impl std::future::Future<Output = Result<(), ModelError>>,
    ) -> Result<(), ModelError> {
        if self.preflighted(model) {
            return Ok(());
        }
        check.await.map_err(|e| scrub(e, self.secret.as_ref()))?;
        self.passed()
            .insert(model.to_owned(), std::time::Instant::now());
        Ok(())
    }

    /// POSTs a JSON `body` (with retries) and decodes the streamed answer.
    pub(crate) async fn post_events<D: Decoder>(
        &self,
        url: &str,
        mut headers: HeaderMap,
        body: &serde_json::Value,
        decoder: impl Fn() -> D,
    ) -> Result<ModelStream, ModelError> {
        let body = serde_json::to_vec(body).map_err(|e| ModelError::Config {
            provider: self.name.clone(),
            message: format!("the request does not serialize: {e}"),
        })?;
        use reqwest::header::{ACCEPT, CONTENT_TYPE};
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        let mut budget = Budget::default();
        loop {
            let failed = match self
                .send(|c| c.post(url).headers(headers.clone()).body(body.clone()))
                .await
            {
                Ok(response) => match self.stream_of(response, decoder()).await {
                    Ok(stream) => return Ok(stream),
                    Err(failed) => failed,
                },
                Err(failed) => failed,
            };
            if !failed.retry || !self.backoff(&mut budget, failed.asked, &failed.error).await {
                return Err(failed.error);
            }
        }
    }

    /// The events of a successful `response`, or why the attempt failed: a body that is
    /// not a stream, or, before any model event, an overload reported inside the stream or
    /// a connection that broke (as retryable as a 529 or a refused connection: nothing was
    /// shown yet).
    async fn stream_of(
        &self,
        response: reqwest::Response,
        decoder: impl Decoder,
    ) -> Result<ModelStream, Failed> {
        // A success that is not a stream (a server ignoring `stream`, a gateway's error
        // with a 200): its own message, not a "truncated stream".
        let streamed =
            header(response.headers(), "content-type").is_none_or(|t| t.contains("event-stream"));
        if !streamed {
            let body = read_capped(response, self.timeouts.idle).await;
            let e = ModelError::Provider {
                message: format!(
                    "{}: expected an event stream, got: {}",
                    self.name,
                    wire::error_message(&body).0
                ),
            };
            return Err(self.failed(e, None, false));
        }
        let mut stream = body::events(response, decoder, self.timeouts.idle, &self.name);
        let first = stream.next().await;
        let retry = match &first {
            Some(Err(ModelError::Provider { message })) => {
                message.starts_with("overloaded_error:") || message.starts_with("api_error:")
            }
            Some(Err(ModelError::Connection { .. })) => true,
            _ => false,
        };
        if retry && let Some(Err(e)) = first {
            return Err(self.failed(e, None, true));
        }
        let secret = self.secret.clone();
        Ok(Box::pin(futures::stream::iter(first).chain(stream).map(
            move |item| item.map_err(|e| scrub(e, secret.as_ref())),
        )))
    }

    /// A failed attempt, its error scrubbed before anything sees it (the retry warning as
    /// much as the caller).
    fn failed(&self, error: ModelError, asked: Option<Duration>, retry: bool) -> Failed {
        Failed {
            error: scrub(error, self.secret.as_ref()),
            asked,
            retry,
        }
    }

    /// Waits before the turn's next attempt, if its budget allows one (`asked`: the wait
    /// the provider asked for); false to give up.
    async fn backoff(
        &self,
        budget: &mut Budget,
        asked: Option<Duration>,
        error: &ModelError,
    ) -> bool {
        let Some(delay) = self
            .retry
            .delay(budget.attempt, asked, budget.waited, retry::jitter())
        else {
            return false;
        };
        tracing::warn!(provider = %self.name, attempt = budget.attempt, delay_ms = delay.as_millis() as u64, error = %error, "retrying");
        tracing::info!(
            target: crate::METRICS_TARGET,
            metric = "provider_retry",
            provider = %self.name,
            reason = ?error.kind(),
        );
        tokio::time::sleep(delay).await;
        budget.waited += delay;
        budget.attempt += 1;
        true
    }

    /// Sends what `make` builds, once: a success's response, or the classified failure.
    async fn send(
        &self,
        make: impl Fn(&reqwest::Client) -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, Failed> {
        let sent = tokio::time::timeout(self.timeouts.response, make(&self.client).send()).await;
        match sent {
            Err(_) => {
                let message = format!("no answer within {} s", self.timeouts.response.as_secs());
                let provider = self.name.clone();
                Err(self.failed(ModelError::Timeout { provider, message }, None, true))
            }
            Ok(Err(e)) => {
                let (error, retry) = transport::request_failed(&self.name, &e.without_url());
                Err(self.failed(error, None, retry))
            }
            Ok(Ok(response)) if response.status().is_success() => Ok(response),
            Ok(Ok(response)) => {
                let status = response.status().as_u16();
                let headers = response.headers().clone();
                let asked = retry::retry_after(
                    header(&headers, "retry-after-ms"),
                    header(&headers, "retry-after"),
                );
                let should = header(&headers, "x-should-retry").map(|v| v == "true");
                let body = read_capped(response, self.timeouts.idle).await;
                let asked_ms = asked.map(|d| d.as_millis() as u64);
                Err(self.failed(
                    wire::classify(&self.name, status, &body, asked_ms),
                    asked,
                    wire::retryable(status, &body, should),
                ))
            }
        }
    }

    /// The model ids a `GET url` lists.
    pub(crate) async fn models(
        &self,
        url: &str,
        headers: HeaderMap,
    ) -> Result<Vec<String>, ModelError> {
        let (status, body) = self.get(url, headers).await?;
        if !(200..300).contains(&status) {
            return Err(scrub(
                wire::classify(&self.name, status, &body, None),
                self.secret.as_ref(),
            ));
        }
        wire::model_ids(&body).map_err(|message| ModelError::Provider { message })
    }

    /// A provider's `preflight`: [`check_model`](Self::check_model) at its two routes, once
    /// per ten minutes for a model that passed.
    pub(crate) async fn preflight_at(
        &self,
        model: &str,
        one: &str,
        list: &str,
        headers: HeaderMap,
    ) -> Result<(), ModelError> {
        self.preflight(model, self.check_model(model, one, list, headers))
            .await
    }

    /// A provider's `list_models`: what `GET list` lists; a server without the route cannot
    /// list (`None`).
    pub(crate) async fn listed(
        &self,
        list: &str,
        headers: HeaderMap,
    ) -> Result<Option<Vec<String>>, ModelError> {
        match self.models(list, headers).await {
            Ok(ids) => Ok(Some(ids)),
            Err(ModelError::BadRequest { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Checks `model`: `GET one` (its own route), else whether `GET list` lists it. A
    /// refused key or a model not listed is unavailable with the reason; a server with
    /// neither route cannot be asked, and passes.
    pub(crate) async fn check_model(
        &self,
        model: &str,
        one: &str,
        list: &str,
        headers: HeaderMap,
    ) -> Result<(), ModelError> {
        let unavailable = |reason: String| ModelError::Unavailable {
            model: model.to_owned(),
            reason,
        };
        let (status, body) = self.get(one, headers.clone()).await?;
        match status {
            200..=299 => Ok(()),
            401 | 403 => Err(unavailable(format!(
                "{} refused the key: {}",
                self.name,
                wire::error_message(&body).0
            ))),
            _ => match self.models(list, headers).await {
                Ok(ids) if ids.iter().any(|id| id == model) => Ok(()),
                Ok(ids) => Err(unavailable(format!(
                    "{} does not offer it (it offers: {})",
                    self.name,
                    some_of(&ids)
                ))),
                Err(ModelError::BadRequest { status: 404, .. }) => {
                    tracing::debug!(provider = %self.name, model, "no models route: not verified");
                    Ok(())
                }
                Err(e) => Err(unavailable(e.to_string())),
            },
        }
    }

    /// A GET's status and body (capped), without retries: for model lists and preflights.
    pub(crate) async fn get(
        &self,
        url: &str,
        headers: HeaderMap,
    ) -> Result<(u16, Vec<u8>), ModelError> {
        let sent = tokio::time::timeout(
            self.timeouts.response,
            self.client.get(url).headers(headers).send(),
        )
        .await
        .map_err(|_| ModelError::Timeout {
            provider: self.name.clone(),
            message: format!("no answer within {} s", self.timeouts.response.as_secs()),
        })?
        .map_err(|e| transport::request_failed(&self.name, &e.without_url()).0)?;
        let status = sent.status().as_u16();
        Ok((status, read_capped(sent, self.timeouts.idle).await))
    }
}
