//! Prompt caching from a spec: an Anthropic provider sets its cache breakpoints by default
//! (`[providers.NAME] cache = "off"` sets none; the OpenAI kind refuses the key, naming it),
//! and the cache reads and writes the server reports show per turn in the transcript
//! (`arbor log`, JSON and text) and in the progress lines.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use arbor_model::testing::{Canned, ReplayServer};

/// One streamed Messages answer whose usage reports cache reads and writes.
const ANSWER: &str = concat!(
    "event: message_start\n",
    "data: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-test\",\"id\":\"msg_1\",",
    "\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"stop_reason\":null,",
    "\"usage\":{\"input_tokens\":20,\"cache_creation_input_tokens\":300,",
    "\"cache_read_input_tokens\":2000,\"output_tokens\":1}}}\n\n",
    "event: content_block_start\n",
    "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"cached hello\"}}\n\n",
    "event: content_block_stop\n",
    "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: message_delta\n",
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},",
    "\"usage\":{\"output_tokens\":5}}\n\n",
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

fn spec(base: &str, cache: &str) -> String {
    format!(
        "task = \"hi\"\n[providers.claude]\nkind = \"anthropic\"\nbase_url = \"{base}\"\n{cache}\n\
         [agents.root]\nprovider = \"claude\"\nmodel = \"claude-test\"\n\
         system = \"You are brief.\"\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cache_breakpoints_are_sent_and_reads_and_writes_show_per_turn() {
    let model = || Canned::json(200, r#"{"id":"claude-test","type":"model"}"#);
    let server = ReplayServer::start(vec![
        model(),
        Canned::sse(ANSWER.as_bytes()),
        model(),
        Canned::sse(ANSWER.as_bytes()),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.toml"), spec(&server.url, "")).unwrap();
    let out = arbor(dir.path(), &["run", "s.toml", "--progress", "lines"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let progress = String::from_utf8_lossy(&out.stderr);
    assert!(
        progress.contains(
            "root: turn 1: 2,325 tokens (input 2,320: 2,000 cache read, 300 cache write; output 5)"
        ),
        "{progress}"
    );
    let body = &server.requests()[1].body;
    assert!(
        body.contains(
            r#""system":[{"cache_control":{"type":"ephemeral"},"text":"You are brief.","type":"text"}]"#
        ),
        "{body}"
    );
    assert_eq!(
        body.matches("cache_control").count(),
        2,
        "system and message: {body}"
    );
    let log = arbor(dir.path(), &["log"]);
    let text = String::from_utf8_lossy(&log.stdout);
    assert!(
        text.contains(
            "turn 1: 2,325 tokens (input 2,320: 2,000 cache read, 300 cache write; output 5)"
        ),
        "{text}"
    );
    let log = arbor(dir.path(), &["log", "--json"]);
    let usage = String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["kind"] == "usage")
        .unwrap();
    assert_eq!(
        (
            &usage["usage"]["cache_read_tokens"],
            &usage["usage"]["cache_write_tokens"]
        ),
        (&serde_json::json!(2000), &serde_json::json!(300)),
        "{usage}"
    );

    // Off: no breakpoint, the system prompt as plain text.
    std::fs::write(
        dir.path().join("s.toml"),
        spec(&server.url, "cache = \"off\""),
    )
    .unwrap();
    let out = arbor(dir.path(), &["run", "--memory", "s.toml", "-q"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body = &server.requests()[3].body;
    assert!(!body.contains("cache_control"), "{body}");
    assert!(body.contains(r#""system":"You are brief.""#), "{body}");
}

#[test]
fn cache_on_an_openai_kind_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let text = "task = \"hi\"\n[providers.local]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:1/v1\"\n\
                cache = \"auto\"\n[agents.root]\nprovider = \"local\"\nmodel = \"m\"\n";
    std::fs::write(dir.path().join("s.toml"), text).unwrap();
    let out = arbor(dir.path(), &["validate", "s.toml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("provider \"local\": cache applies to kind = \"anthropic\""),
        "{err}"
    );
}
