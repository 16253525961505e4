//! A conservative count of the prompt tokens a call will cost, before it is made
//! ([`estimate_input_tokens`]): what a budget reserves for a call's input, settled to the
//! provider's count once it answers.
//!
//! Tokenizers differ by model and none is at hand, so the estimate counts bytes: one token
//! per 3 bytes of the system prompt, of every message's text, tool calls and results, and of
//! every tool's name, description and schema, plus 8 tokens per message (roles and
//! separators) and 16 for the call. Real tokenizers average about 4 bytes per token on
//! English and code (llama.cpp's SmolLM2 tokenizer counted 1,760 tokens for a 6,190-byte
//! request, 3.5 bytes each), so the estimate is above the count for such text; text of many
//! short multibyte words can count more tokens than it. The reservation's error is at most
//! one call's worth of that difference, and the budget says so.

use arbor_protocol::Message;

use crate::provider::ModelRequest;

/// Bytes per estimated token.
pub const BYTES_PER_TOKEN: u64 = 3;
/// Tokens added per message (its role and separators).
pub const TOKENS_PER_MESSAGE: u64 = 8;
/// Tokens added per call.
pub const TOKENS_PER_CALL: u64 = 16;

fn len(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// The bytes a message puts in a prompt.
fn message_bytes(m: &Message) -> u64 {
    match m {
        Message::System { content } | Message::User { content } => len(content.len()),
        Message::Assistant {
            content,
            tool_calls,
        } => tool_calls.iter().fold(len(content.len()), |sum, c| {
            sum.saturating_add(len(c.id.len() + c.name.len()))
                .saturating_add(len(c.arguments.to_string().len()))
        }),
        Message::Tool(r) => len(r.call_id.len() + r.name.len() + r.content.len()),
    }
}

/// A conservative count of `request`'s prompt tokens (see the module docs).
pub fn estimate_input_tokens(request: &ModelRequest<'_>) -> u64 {
    let mut bytes = len(request.system.map_or(0, str::len));
    for m in request.messages {
        bytes = bytes.saturating_add(message_bytes(m));
    }
    for t in request.tools {
        bytes = bytes
            .saturating_add(len(t.name.len() + t.description.len()))
            .saturating_add(len(t.parameters.to_string().len()));
    }
    if let Some(schema) = request.output_schema {
        bytes = bytes.saturating_add(len(schema.to_string().len()));
    }
    bytes
        .div_ceil(BYTES_PER_TOKEN)
        .saturating_add(TOKENS_PER_MESSAGE.saturating_mul(len(request.messages.len())))
        .saturating_add(TOKENS_PER_CALL)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolSpec;
    use serde_json::json;

    #[test]
    fn every_part_of_the_prompt_counts() {
        let messages = vec![Message::user("x".repeat(300))];
        let bare = ModelRequest::new("m", &messages);
        // 300 bytes / 3, one message, one call.
        assert_eq!(estimate_input_tokens(&bare), 100 + 8 + 16);
        let system = "s".repeat(30);
        let tools = [ToolSpec {
            name: "t".into(),
            description: "d".repeat(8),
            parameters: json!({}),
        }];
        let full = bare.system(Some(&system)).tools(&tools);
        // + 30 system bytes + 1 + 8 + 2 tool bytes = 341 bytes, rounded up.
        assert_eq!(estimate_input_tokens(&full), 114 + 8 + 16);
        // An output schema is sent too: its 12 bytes count.
        let schema = json!({"type": "x"});
        assert_eq!(schema.to_string().len(), 12);
        let typed = full.output_schema(Some(&schema));
        assert_eq!(estimate_input_tokens(&typed), 118 + 8 + 16);
    }

    #[test]
    fn the_estimate_stays_above_the_ratio_a_real_tokenizer_gave() {
        // The review example's root prompt: 6,190 bytes that llama.cpp's SmolLM2 tokenizer
        // counted as 1,760 tokens (docs/PROVIDERS.md, "A lean tool set").
        let text = "Review the repository: public API, test coverage, and a slow audit. ";
        let messages = vec![Message::user(text.repeat(91))];
        let estimate = estimate_input_tokens(&ModelRequest::new("m", &messages));
        let bytes = u64::try_from(text.len() * 91).unwrap();
        assert!(estimate * 35 >= bytes * 10, "{estimate} for {bytes} bytes");
    }
}
