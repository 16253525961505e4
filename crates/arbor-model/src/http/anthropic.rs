//! The Anthropic provider: the Messages API over HTTP.

use async_trait::async_trait;
use reqwest::header::{HeaderMap, HeaderValue};

use super::{ApiKey, Endpoint, RetryPolicy, Timeouts};
use crate::error::ModelError;
use crate::provider::{ModelProvider, ModelRequest, ModelStream};
use crate::wire;

/// The API version sent with every request.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// How to reach the Messages API.
#[derive(Debug, Clone)]
pub struct AnthropicConfig {
    /// The provider's name in errors and reports (default `anthropic`).
    pub name: String,
    /// The base URL (default `https://api.anthropic.com`).
    pub base_url: String,
    /// The key (`x-api-key`); required by Anthropic itself.
    pub api_key: Option<ApiKey>,
    /// The most tokens a turn may produce (required by the API; default 4096).
    pub max_tokens: u32,
    /// The most one turn may assemble: its text and its tool calls' names, ids and
    /// arguments, each call counting 64 bytes more (default 4 MiB). Past it the turn ends
    /// with [`ModelError::TooLarge`].
    pub max_turn_bytes: usize,
    /// Retries.
    pub retry: RetryPolicy,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Prompt caching (default [`Cache::Auto`](crate::Cache::Auto): breakpoints on the
    /// tools, the system prompt and the conversation).
    pub cache: crate::Cache,
}

impl AnthropicConfig {
    /// A server at `base_url`, no key.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            name: "anthropic".to_owned(),
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key: None,
            max_tokens: 4096,
            max_turn_bytes: wire::DEFAULT_MAX_TURN_BYTES,
            retry: RetryPolicy::default(),
            timeouts: Timeouts::default(),
            cache: crate::Cache::Auto,
        }
    }

    /// Anthropic as the environment configures it: `ANTHROPIC_BASE_URL` (default
    /// `https://api.anthropic.com`) and `ANTHROPIC_API_KEY`.
    pub fn from_env() -> Self {
        let base = std::env::var("ANTHROPIC_BASE_URL")
            .ok()
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| "https://api.anthropic.com".to_owned());
        let mut c = Self::new(base);
        c.api_key = ApiKey::from_env("ANTHROPIC_API_KEY");
        c
    }
}

/// The Anthropic provider.
#[derive(Debug, Clone)]
pub struct AnthropicProvider {
    config: AnthropicConfig,
    endpoint: Endpoint,
}

impl AnthropicProvider {
    /// A provider for `config` (no request is made yet).
    pub fn new(config: AnthropicConfig) -> Result<Self, ModelError> {
        let endpoint = Endpoint::new(
            &config.name,
            config.retry,
            config.timeouts,
            config.api_key.clone(),
        )?;
        Ok(Self { config, endpoint })
    }

    fn headers(&self) -> Result<HeaderMap, ModelError> {
        let mut h = HeaderMap::new();
        if let Some(key) = &self.config.api_key {
            h.insert(
                "x-api-key",
                key.header("").map_err(|message| ModelError::Config {
                    provider: self.config.name.clone(),
                    message,
                })?,
            );
        }
        h.insert(
            "anthropic-version",
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        Ok(h)
    }

    /// The models the API lists.
    pub async fn models(&self) -> Result<Vec<String>, ModelError> {
        let url = format!("{}/v1/models?limit=1000", self.config.base_url);
        self.endpoint.models(&url, self.headers()?).await
    }
}

#[async_trait]
impl ModelProvider for AnthropicProvider {
    fn max_output_tokens(&self) -> Option<u32> {
        Some(self.config.max_tokens)
    }

    fn wire(&self) -> crate::Wire {
        crate::Wire::Anthropic
    }

    fn name(&self) -> &str {
        &self.config.name
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        let url = format!("{}/v1/messages", self.config.base_url);
        let body =
            wire::anthropic::request_body_with(&request, self.config.max_tokens, self.config.cache);
        self.endpoint
            .post_events(&url, self.headers()?, &body, || {
                wire::anthropic::EventDecoder::with_limit(self.config.max_turn_bytes)
            })
            .await
    }

    /// Asks for the model (`GET /v1/models/{id}`), falling back to the list; a refused key
    /// or a model not listed fails with the reason. A server with neither route passes.
    async fn preflight(&self, model: &str) -> Result<(), ModelError> {
        let one = format!("{}/v1/models/{model}", self.config.base_url);
        let list = format!("{}/v1/models?limit=1000", self.config.base_url);
        self.endpoint
            .preflight_at(model, &one, &list, self.headers()?)
            .await
    }

    /// The models the server lists; a server without a models route cannot list (`None`).
    async fn list_models(&self) -> Result<Option<Vec<String>>, ModelError> {
        let list = format!("{}/v1/models?limit=1000", self.config.base_url);
        self.endpoint.listed(&list, self.headers()?).await
    }
}
