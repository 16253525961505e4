//! A real two-level delegation through a local OpenAI-compatible server with a small model,
//! when one is available: `ARBOR_LLAMA_SERVER` names a llama.cpp `llama-server` binary and
//! `ARBOR_LLAMA_MODEL` a GGUF model file. Without them the test says it is skipped and
//! passes. (Small local models do not call tools reliably, so the root is scripted and each
//! child runs a real streamed turn: one on the Chat Completions API, one on the Messages API
//! that llama.cpp also serves.)
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    clippy::print_stderr
)]

use std::time::{Duration, Instant};

use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_level_delegation_runs_on_a_local_model() {
    let (Ok(server), Ok(model)) = (
        std::env::var("ARBOR_LLAMA_SERVER"),
        std::env::var("ARBOR_LLAMA_MODEL"),
    ) else {
        eprintln!("skipped: set ARBOR_LLAMA_SERVER and ARBOR_LLAMA_MODEL to run it");
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let _llama = tokio::process::Command::new(&server)
        .args(["-m", &model, "--alias", "smollm2", "--host", "127.0.0.1"])
        .args(["--port", &port.to_string(), "-c", "2048", "-t", "2"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "llama-server did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let dir = tempfile::tempdir().unwrap();
    let spec = format!(
        r#"task = "ask both writers"
[providers.chat]
kind = "openai"
base_url = "{base}/v1"
max_tokens = 12
[providers.messages]
kind = "anthropic"
base_url = "{base}"
max_tokens = 12
[agents.root]
children = ["chat-writer", "messages-writer"]
limits = {{ max_tokens = 1000000 }}
[[agents.root.turns]]
tool_calls = [{{ name = "spawn_agent", arguments = {{ child_id = "chat-writer", input = "Say hello." }} }}]
usage = {{ input_tokens = 10, output_tokens = 5 }}
[[agents.root.turns]]
tool_calls = [{{ name = "spawn_agent", arguments = {{ child_id = "messages-writer", input = "Say hi." }} }}]
usage = {{ input_tokens = 10, output_tokens = 5 }}
[[agents.root.turns]]
text = "both answered"
usage = {{ input_tokens = 10, output_tokens = 5 }}
[agents.chat-writer]
provider = "chat"
model = "smollm2"
[agents.messages-writer]
provider = "messages"
model = "smollm2"
"#
    );
    std::fs::write(dir.path().join("spec.toml"), spec).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["run", "spec.toml", "--json", "-q"])
        .current_dir(dir.path())
        .env_remove("ARBOR_LOG")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["status"], "succeeded");
    assert_eq!(report["reconciliation"]["consistent"], true);
    for agent in ["chat-writer", "messages-writer"] {
        let s = report["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["agent"] == agent)
            .unwrap_or_else(|| panic!("no {agent} in {report}"));
        assert_eq!(s["status"], "succeeded", "{agent}");
        assert!(
            s["usage"]["own"]["output_tokens"].as_u64().unwrap() > 0,
            "{agent}: {s}"
        );
    }
    eprintln!("ran against {server}: {}", report["tree_own_total_tokens"]);
}
