//! The OpenAI-compatible provider: Chat Completions over HTTP, as OpenAI, vLLM, llama.cpp's
//! server, Ollama and most gateways speak it.

use async_trait::async_trait;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};

use super::{ApiKey, Endpoint, RetryPolicy, Timeouts};
use crate::error::ModelError;
use crate::provider::{ModelProvider, ModelRequest, ModelStream};
use crate::wire;

/// How to reach an OpenAI-compatible server.
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// The provider's name in errors and reports (default `openai`).
    pub name: String,
    /// The API's base URL, up to `/v1` (default `https://api.openai.com/v1`).
    pub base_url: String,
    /// The key, sent as a bearer token (a local server may need none).
    pub api_key: Option<ApiKey>,
    /// `OpenAI-Organization`.
    pub organization: Option<String>,
    /// `OpenAI-Project`.
    pub project: Option<String>,
    /// More headers sent with every request.
    pub headers: Vec<(String, String)>,
    /// Ask for the final usage chunk (`stream_options.include_usage`; default on).
    pub include_usage: bool,
    /// The most tokens a turn may produce (sent as `max_tokens`; default: the server's).
    pub max_tokens: Option<u32>,
    /// The most one turn may assemble: its text and its tool calls' names, ids and
    /// arguments, each call counting 64 bytes more (default 4 MiB). Past it the turn ends
    /// with [`ModelError::TooLarge`].
    pub max_turn_bytes: usize,
    /// Retries.
    pub retry: RetryPolicy,
    /// Timeouts.
    pub timeouts: Timeouts,
    /// Send a tool-calling turn's kept reasoning back with it as `reasoning_content` (off by
    /// default): servers whose thinking models want it in a tool loop (DeepSeek's, llama.cpp
    /// templates that preserve reasoning).
    pub send_reasoning: bool,
    /// Send a child's output schema as `response_format: json_schema` (default on): the
    /// server constrains the answer to it. Off for servers that refuse the field.
    pub structured_output: bool,
}

impl OpenAiConfig {
    /// A server at `base_url`, no key.
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            name: "openai".to_owned(),
            base_url: base_url.into().trim_end_matches('/').to_owned(),
            api_key: None,
            organization: None,
            project: None,
            headers: Vec::new(),
            include_usage: true,
            send_reasoning: false,
            structured_output: true,
            max_tokens: None,
            max_turn_bytes: wire::DEFAULT_MAX_TURN_BYTES,
            retry: RetryPolicy::default(),
            timeouts: Timeouts::default(),
        }
    }

    /// OpenAI as the environment configures it: `OPENAI_BASE_URL` (default
    /// `https://api.openai.com/v1`), `OPENAI_API_KEY`, `OPENAI_ORG_ID`, `OPENAI_PROJECT_ID`.
    pub fn from_env() -> Self {
        let base = std::env::var("OPENAI_BASE_URL")
            .ok()
            .filter(|v| !v.trim().is_empty())
            .unwrap_or_else(|| "https://api.openai.com/v1".to_owned());
        let mut c = Self::new(base);
        c.api_key = ApiKey::from_env("OPENAI_API_KEY");
        c.organization = std::env::var("OPENAI_ORG_ID")
            .ok()
            .filter(|v| !v.is_empty());
        c.project = std::env::var("OPENAI_PROJECT_ID")
            .ok()
            .filter(|v| !v.is_empty());
        c
    }
}

/// The OpenAI-compatible provider.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    config: OpenAiConfig,
    endpoint: Endpoint,
}

impl OpenAiProvider {
    /// A provider for `config` (no request is made yet).
    pub fn new(config: OpenAiConfig) -> Result<Self, ModelError> {
        let endpoint = Endpoint::new(
            &config.name,
            config.retry,
            config.timeouts,
            config.api_key.clone(),
        )?;
        Ok(Self { config, endpoint })
    }

    fn config_error(&self, message: impl Into<String>) -> ModelError {
        ModelError::Config {
            provider: self.config.name.clone(),
            message: message.into(),
        }
    }

    fn headers(&self) -> Result<HeaderMap, ModelError> {
        let mut h = HeaderMap::new();
        if let Some(key) = &self.config.api_key {
            h.insert(
                AUTHORIZATION,
                key.header("Bearer ").map_err(|m| self.config_error(m))?,
            );
        }
        for (name, value) in [
            ("openai-organization", &self.config.organization),
            ("openai-project", &self.config.project),
        ] {
            if let Some(v) = value {
                h.insert(
                    name,
                    HeaderValue::from_str(v)
                        .map_err(|_| self.config_error(format!("bad {name} header")))?,
                );
            }
        }
        for (name, value) in &self.config.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| self.config_error(format!("bad header name {name:?}")))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| self.config_error(format!("bad value for header {name}")))?;
            h.insert(name, value);
        }
        Ok(h)
    }

    /// The models the server lists.
    pub async fn models(&self) -> Result<Vec<String>, ModelError> {
        let url = format!("{}/models", self.config.base_url);
        self.endpoint.models(&url, self.headers()?).await
    }
}

#[async_trait]
impl ModelProvider for OpenAiProvider {
    fn max_output_tokens(&self) -> Option<u32> {
        self.config.max_tokens
    }

    fn wire(&self) -> crate::Wire {
        crate::Wire::OpenAi
    }

    fn name(&self) -> &str {
        &self.config.name
    }

    async fn stream(&self, request: ModelRequest<'_>) -> Result<ModelStream, ModelError> {
        let url = format!("{}/chat/completions", self.config.base_url);
        // Kept reasoning goes back only to a server that asked for it.
        let request = if self.config.send_reasoning {
            request
        } else {
            request.reasoning(None)
        };
        let request = if self.config.structured_output {
            request
        } else {
            request.output_schema(None)
        };
        let body =
            wire::openai::request_body(&request, self.config.include_usage, self.config.max_tokens);
        self.endpoint
            .post_events(&url, self.headers()?, &body, || {
                wire::openai::ChunkDecoder::with_limit(self.config.max_turn_bytes)
            })
            .await
    }

    /// Asks for the model (`GET models/{id}`), falling back to the list; a refused key or a
    /// missing model fails with the server's reason. A server without a models route cannot
    /// be asked, and passes.
    async fn preflight(&self, model: &str) -> Result<(), ModelError> {
        let one = format!("{}/models/{model}", self.config.base_url);
        let list = format!("{}/models", self.config.base_url);
        self.endpoint
            .preflight_at(model, &one, &list, self.headers()?)
            .await
    }

    /// The models the server lists; a server without a models route cannot list (`None`).
    async fn list_models(&self) -> Result<Option<Vec<String>>, ModelError> {
        let list = format!("{}/models", self.config.base_url);
        self.endpoint.listed(&list, self.headers()?).await
    }
}
