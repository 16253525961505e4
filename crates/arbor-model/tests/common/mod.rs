//! What the HTTP provider tests share: the key, retry policies, providers on a local
//! server, and a turn collected whole.
#![allow(dead_code)]

use std::time::Duration;

use arbor_model::http::{
    AnthropicConfig, AnthropicProvider, ApiKey, OpenAiConfig, OpenAiProvider, RetryPolicy, Timeouts,
};
use arbor_model::{ModelError, ModelEvent, ModelProvider, ModelRequest};
use arbor_protocol::Message;
use futures::StreamExt;

pub(crate) const KEY: &str = "sk-arbor-SECRET-7f3a";

pub(crate) fn retry(max_retries: u32, max_total_ms: u64) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(50),
        max_total: Duration::from_millis(max_total_ms),
    }
}

pub(crate) fn openai(url: &str, retry: RetryPolicy) -> OpenAiProvider {
    let mut c = OpenAiConfig::new(format!("{url}/v1"));
    c.api_key = Some(ApiKey::new(KEY));
    c.retry = retry;
    c.timeouts = Timeouts {
        idle: Duration::from_millis(300),
        ..Timeouts::default()
    };
    OpenAiProvider::new(c).unwrap()
}

pub(crate) fn anthropic(url: &str, retry: RetryPolicy) -> AnthropicProvider {
    let mut c = AnthropicConfig::new(url);
    c.api_key = Some(ApiKey::new(KEY));
    c.retry = retry;
    AnthropicProvider::new(c).unwrap()
}

pub(crate) async fn collect(p: &dyn ModelProvider) -> Result<Vec<ModelEvent>, ModelError> {
    let messages = vec![Message::user("hi")];
    let req = ModelRequest::new("m", &messages);
    let mut stream = p.stream(req).await?;
    let mut out = Vec::new();
    while let Some(e) = stream.next().await {
        out.push(e?);
    }
    Ok(out)
}
