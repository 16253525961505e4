//! Model providers for spec agents, and `arbor models`.
//!
//! An agent names `provider = "scripted"` (the default: its `turns` play), `"openai"` (an
//! OpenAI-compatible server as `OPENAI_BASE_URL` / `OPENAI_API_KEY` configure it),
//! `"anthropic"` (`ANTHROPIC_BASE_URL` / `ANTHROPIC_API_KEY`), or the name of a
//! `[providers.<name>]` table. Keys come only from the environment (a table names the
//! variable, never the key), so neither the spec, its fingerprint nor the store holds one.

use std::collections::BTreeMap;
use std::sync::Arc;

use arbor_model::ModelProvider;
use arbor_model::http::{
    AnthropicConfig, AnthropicProvider, ApiKey, OpenAiConfig, OpenAiProvider, RetryPolicy, Timeouts,
};
use serde::Deserialize;

/// The wire format a provider table speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// Chat Completions.
    Openai,
    /// Messages.
    Anthropic,
    /// A remote agent over A2A v1.0 (JSON-RPC): it stands in for the agent's model.
    A2a,
}

/// A `[providers.<name>]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProviderSpec {
    /// Its wire format.
    pub(crate) kind: Kind,
    /// Its base URL (default: the kind's environment variable, else its public API).
    pub(crate) base_url: Option<String>,
    /// The environment variable holding its key (never the key itself).
    pub(crate) api_key_env: Option<String>,
    /// More headers (OpenAI kind).
    #[serde(default)]
    pub(crate) headers: BTreeMap<String, String>,
    /// Ask for the final usage chunk (OpenAI kind; default true).
    pub(crate) include_usage: Option<bool>,
    /// Output tokens per turn (Anthropic default 4096; OpenAI kind: the server's).
    pub(crate) max_tokens: Option<u32>,
    /// Bytes one turn may assemble: its text and tool calls (default 4 MiB).
    pub(crate) max_turn_bytes: Option<usize>,
    /// Retries after the first attempt (default 4).
    pub(crate) max_retries: Option<u32>,
    /// Seconds to wait for an answer's headers (default 120).
    pub(crate) timeout_secs: Option<u64>,
    /// Seconds of silence allowed within a streamed answer (default 120).
    pub(crate) idle_timeout_secs: Option<u64>,
    /// Prompt caching (Anthropic kind): `auto` (default) sets breakpoints on the tools,
    /// the system prompt and the conversation; `off` sets none.
    pub(crate) cache: Option<arbor_model::Cache>,
    /// Send a tool-calling turn's reasoning back as `reasoning_content` (OpenAI kind; for
    /// DeepSeek's thinking models and the like; default off).
    pub(crate) send_reasoning: Option<bool>,
    /// Send a child's output schema as `response_format: json_schema` (OpenAI kind; default
    /// on; off for a server that refuses it).
    pub(crate) structured_output: Option<bool>,
}

fn timeouts(t: &ProviderSpec) -> Timeouts {
    let mut out = Timeouts::default();
    if let Some(s) = t.timeout_secs {
        out.response = std::time::Duration::from_secs(s.max(1));
    }
    if let Some(s) = t.idle_timeout_secs {
        out.idle = std::time::Duration::from_secs(s.max(1));
    }
    out
}

/// Names a provider resolves without a table.
pub(crate) const BUILT_IN: [&str; 3] = ["scripted", "openai", "anthropic"];

/// The wire format of provider `name` (a built-in one, else one of `declared`), for the
/// controls it can carry.
pub(crate) fn wire(name: &str, declared: &BTreeMap<String, ProviderSpec>) -> arbor_model::Wire {
    match (name, declared.get(name).map(|p| &p.kind)) {
        (_, Some(Kind::Openai)) | ("openai", None) => arbor_model::Wire::OpenAi,
        (_, Some(Kind::Anthropic)) | ("anthropic", None) => arbor_model::Wire::Anthropic,
        _ => arbor_model::Wire::Own,
    }
}

fn retry(max: Option<u32>) -> RetryPolicy {
    let mut r = RetryPolicy::default();
    if let Some(n) = max {
        r.max_retries = n;
    }
    r
}

/// A built HTTP provider.
#[derive(Debug, Clone)]
pub(crate) enum Http {
    /// Chat Completions.
    Openai(OpenAiProvider),
    /// Messages.
    Anthropic(AnthropicProvider),
    /// A remote A2A agent.
    A2a(arbor_a2a::A2aProvider),
}

impl Http {
    /// As the runtime holds it.
    pub(crate) fn shared(&self) -> Arc<dyn ModelProvider> {
        match self {
            Self::Openai(p) => Arc::new(p.clone()),
            Self::Anthropic(p) => Arc::new(p.clone()),
            Self::A2a(p) => Arc::new(p.clone()),
        }
    }

    pub(crate) async fn models(&self) -> Result<Vec<String>, String> {
        match self {
            Self::Openai(p) => p.models().await,
            Self::Anthropic(p) => p.models().await,
            Self::A2a(p) => p
                .client()
                .card()
                .await
                .map(|card| vec![card.name.clone()])
                .map_err(|e| e.into_model_error(p.name())),
        }
        .map_err(|e| e.to_string())
    }
}

/// Builds the HTTP provider `name` (`openai`, `anthropic` or a table's name).
pub(crate) fn build(name: &str, tables: &BTreeMap<String, ProviderSpec>) -> Result<Http, String> {
    let table = tables.get(name);
    let kind = match (name, table) {
        (_, Some(t)) => t.kind,
        ("openai", None) => Kind::Openai,
        ("anthropic", None) => Kind::Anthropic,
        _ => return Err(format!("provider {name:?} is not defined")),
    };
    // A table that names its own server gets a key only from the variable it names: the
    // user's OpenAI or Anthropic key never goes to a host a spec chose.
    let own_server = table.is_some_and(|t| t.base_url.is_some());
    let key = |default_env: &str| match table.and_then(|t| t.api_key_env.as_deref()) {
        Some(env) => ApiKey::from_env(env),
        None if own_server => None,
        None => ApiKey::from_env(default_env),
    };
    match kind {
        Kind::Anthropic if table.is_some_and(|t| t.send_reasoning.is_some()) => Err(format!(
            "provider {name:?}: send_reasoning applies to kind = \"openai\" (Anthropic's \
             thinking blocks always go back in a tool loop)"
        )),
        Kind::Anthropic if table.is_some_and(|t| t.structured_output.is_some()) => Err(format!(
            "provider {name:?}: structured_output applies to kind = \"openai\" (an Anthropic \
             child's answer is checked against its output_schema, not constrained)"
        )),
        Kind::Openai if table.is_some_and(|t| t.cache.is_some()) => Err(format!(
            "provider {name:?}: cache applies to kind = \"anthropic\" (OpenAI-compatible \
             servers cache on their own; what they report as cached is read either way)"
        )),
        Kind::A2a => a2a(name, table),
        Kind::Openai => {
            let mut c = match table.and_then(|t| t.base_url.as_deref()) {
                Some(url) => OpenAiConfig::new(url),
                None => OpenAiConfig::from_env(),
            };
            c.name = name.to_owned();
            c.api_key = key("OPENAI_API_KEY");
            if let Some(t) = table {
                c.timeouts = timeouts(t);
                c.headers = t.headers.clone().into_iter().collect();
                c.include_usage = t.include_usage.unwrap_or(true);
                c.send_reasoning = t.send_reasoning.unwrap_or(false);
                c.structured_output = t.structured_output.unwrap_or(true);
                c.max_tokens = t.max_tokens;
                if let Some(n) = t.max_turn_bytes {
                    c.max_turn_bytes = n;
                }
                c.retry = retry(t.max_retries);
            }
            OpenAiProvider::new(c)
                .map(Http::Openai)
                .map_err(|e| e.to_string())
        }
        Kind::Anthropic => {
            let mut c = match table.and_then(|t| t.base_url.as_deref()) {
                Some(url) => AnthropicConfig::new(url),
                None => AnthropicConfig::from_env(),
            };
            c.name = name.to_owned();
            c.api_key = key("ANTHROPIC_API_KEY");
            if let Some(t) = table {
                c.timeouts = timeouts(t);
                if let Some(n) = t.max_tokens {
                    c.max_tokens = n;
                }
                if let Some(n) = t.max_turn_bytes {
                    c.max_turn_bytes = n;
                }
                c.retry = retry(t.max_retries);
                if let Some(cache) = t.cache {
                    c.cache = cache;
                }
            }
            AnthropicProvider::new(c)
                .map(Http::Anthropic)
                .map_err(|e| e.to_string())
        }
    }
}

/// A remote A2A agent: `base_url` (required), `api_key_env` (its bearer token), the
/// timeouts and `max_turn_bytes` (what one streamed answer may take); the other fields are
/// a model server's and are refused by name.
fn a2a(name: &str, table: Option<&ProviderSpec>) -> Result<Http, String> {
    let Some(t) = table else {
        return Err(format!("provider {name:?} is not defined"));
    };
    let refused = [
        ("headers", !t.headers.is_empty()),
        ("include_usage", t.include_usage.is_some()),
        ("max_tokens", t.max_tokens.is_some()),
        ("max_retries", t.max_retries.is_some()),
        ("cache", t.cache.is_some()),
        ("send_reasoning", t.send_reasoning.is_some()),
        ("structured_output", t.structured_output.is_some()),
    ];
    if let Some((field, _)) = refused.iter().find(|(_, set)| *set) {
        return Err(format!(
            "provider {name:?}: {field} does not apply to kind = \"a2a\" (a remote agent is \
             not a model server; a message to it is sent once, never retried)"
        ));
    }
    let Some(url) = t.base_url.as_deref() else {
        return Err(format!(
            "provider {name:?}: kind = \"a2a\" needs base_url, the agent's base URL (its card \
             is at /.well-known/agent-card.json under it)"
        ));
    };
    let times = timeouts(t);
    let mut config = arbor_a2a::A2aConfig::new(url)
        .token(t.api_key_env.as_deref().and_then(ApiKey::from_env))
        .timeouts(times.response, times.idle);
    if let Some(n) = t.max_turn_bytes {
        config = config.max_stream_bytes(n);
    }
    let client =
        arbor_a2a::A2aClient::new(config).map_err(|e| format!("provider {name:?}: {e}"))?;
    Ok(Http::A2a(arbor_a2a::A2aProvider::new(name, client)))
}

/// Whether provider `name` is a remote A2A agent (it takes no controls).
pub(crate) fn is_a2a(name: &str, declared: &BTreeMap<String, ProviderSpec>) -> bool {
    declared.get(name).is_some_and(|p| p.kind == Kind::A2a)
}

pub(crate) fn configured(vars: &[&str]) -> bool {
    vars.iter()
        .any(|v| std::env::var(v).is_ok_and(|x| !x.trim().is_empty()))
}
