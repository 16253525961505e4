//! A model's thinking from the CLI: an Anthropic answer's thinking block is kept in the
//! transcript (`arbor log --json` has it whole, with its signature) and `arbor log` shows it
//! folded to one line.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use arbor_model::testing::{Canned, ReplayServer};

const ANSWER: &str = concat!(
    "event: message_start\n",
    "data: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-test\",\"id\":\"msg_1\",",
    "\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"stop_reason\":null,",
    "\"usage\":{\"input_tokens\":20,\"output_tokens\":1}}}\n\n",
    "event: content_block_start\n",
    "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Short question; answer in one word.\"}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"c2ln\"}}\n\n",
    "event: content_block_stop\n",
    "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: content_block_start\n",
    "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Sunny.\"}}\n\n",
    "event: content_block_stop\n",
    "data: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
    "event: message_delta\n",
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":9}}\n\n",
    "event: message_stop\n",
    "data: {\"type\":\"message_stop\"}\n\n",
);

fn arbor(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(args)
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thinking_block_is_kept_whole_and_shown_folded() {
    let server = ReplayServer::start(vec![
        Canned::json(200, r#"{"id":"claude-test","type":"model"}"#),
        Canned::sse(ANSWER.as_bytes()),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spec = format!(
        "task = \"Weather?\"\n[providers.claude]\nkind = \"anthropic\"\nbase_url = \"{}\"\n\
         [agents.root]\nprovider = \"claude\"\nmodel = \"claude-test\"\n",
        server.url
    );
    std::fs::write(dir.path().join("s.toml"), spec).unwrap();
    let out = arbor(dir.path(), &["run", "s.toml", "-q"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = arbor(dir.path(), &["log"]);
    let text = String::from_utf8_lossy(&log.stdout);
    assert!(
        text.contains("turn 1: thinking, folded (35 chars): Short question; answer in one word."),
        "{text}"
    );
    let log = arbor(dir.path(), &["log", "--json"]);
    let entries: Vec<serde_json::Value> = String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let at = entries
        .iter()
        .position(|e| e["kind"] == "reasoning")
        .unwrap();
    assert_eq!(
        entries[at]["blocks"],
        serde_json::json!([{"type": "thinking", "thinking": "Short question; answer in one word.",
                            "signature": "c2ln"}])
    );
    assert_eq!(entries[at - 1]["message"]["content"], "Sunny.");
}

/// Chat Completions chunks: reasoning, then a call of `look` (a tool the agent lacks: the
/// run answers it with an error and goes on).
fn thinking_call() -> String {
    [
        r#"{"choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"Look first."}}]}"#,
        r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_look","type":"function","function":{"name":"look","arguments":"{}"}}]}}]}"#,
        r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
        "[DONE]",
    ]
    .iter()
    .map(|c| format!("data: {c}\n\n"))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_reasoning_echoes_a_loops_reasoning_content_and_only_when_asked() {
    let text = include_bytes!("../../arbor-model/tests/fixtures/openai/text.sse");
    for (option, sent) in [("send_reasoning = true", true), ("", false)] {
        let server = ReplayServer::start(vec![
            Canned::json(200, r#"{"id":"m","object":"model"}"#),
            Canned::sse(thinking_call().as_bytes()),
            Canned::sse(text),
        ])
        .await
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let spec = format!(
            "task = \"go\"\n[providers.deep]\nkind = \"openai\"\nbase_url = \"{}/v1\"\n{option}\n\
             [agents.root]\nprovider = \"deep\"\nmodel = \"m\"\n",
            server.url
        );
        std::fs::write(dir.path().join("s.toml"), spec).unwrap();
        let out = arbor(dir.path(), &["run", "--memory", "s.toml", "-q"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let second: serde_json::Value = serde_json::from_str(&server.requests()[2].body).unwrap();
        let assistant = &second["messages"][1];
        assert_eq!(assistant["tool_calls"][0]["id"], "call_look", "{second}");
        assert_eq!(
            assistant.get("reasoning_content").and_then(|r| r.as_str()),
            sent.then_some("Look first."),
            "{option}: {assistant}"
        );
    }
}
