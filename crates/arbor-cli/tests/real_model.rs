//! A delegation a real model decides, on llama.cpp's `llama-server` (OpenAI-compatible) with
//! SmolLM2-135M-Instruct: the root's model writes the `spawn_agent` call, the child runs on
//! the same model, the root reads its answer, and arbor's token counts equal the server's
//! own counters (`--metrics`). `.ci/llama.sh test` builds the server and fetches the model
//! once per machine, then runs this with `ARBOR_REAL_MODEL=required`: without a server or a
//! model it then fails loudly; elsewhere it says it is skipped.
//!
//! The root's controls force its first turn to call a tool (`tool_choice = "required"`,
//! llama.cpp's grammar) and its next to answer (`tool_choice_after_call = "none"`); sampling
//! is greedy with a seed, so the run is the same on every machine with the same build.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    clippy::print_stderr
)]

use std::time::{Duration, Instant};

use serde_json::Value;

const SYSTEM: &str = "You are a dispatcher: you never do a task yourself, you hand it to \
the writer. Reply with a tool call only, for example:\n<tool_call>\n{\"name\": \
\"spawn_agent\", \"arguments\": {\"child_id\": \"writer\", \"input\": \"Write a limerick \
about cats.\"}}\n</tool_call>";

fn spec(base: &str) -> String {
    format!(
        r#"task = "Write a haiku about autumn."
[providers.local]
kind = "openai"
base_url = "{base}/v1"
[agents.root]
provider = "local"
model = "smollm2"
system = {system}
children = ["writer"]
delegation_tools = ["spawn_agent"]
[agents.root.controls]
temperature = 0.0
seed = 1
tool_choice = "required"
tool_choice_after_call = "none"
parallel_tool_calls = false
max_output_tokens = 96
[agents.writer]
provider = "local"
model = "smollm2"
system = "You are a poet. Answer with one short line."
delegation_tools = []
[agents.writer.controls]
temperature = 0.0
seed = 1
max_output_tokens = 48
"#,
        system = serde_json::to_string(SYSTEM).unwrap()
    )
}

/// A counter of the server's Prometheus text.
fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .map_or_else(|| panic!("no {name} in {metrics}"), |v| v as u64)
}

fn arbor(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(args)
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap()
}

fn log(dir: &std::path::Path, session: &str) -> Vec<Value> {
    let out = arbor(dir, &["log", session, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
async fn a_real_model_decides_a_delegation_and_the_counts_match_the_servers() {
    let required = std::env::var("ARBOR_REAL_MODEL").is_ok_and(|v| v == "required");
    let (Ok(server), Ok(model)) = (
        std::env::var("ARBOR_LLAMA_SERVER"),
        std::env::var("ARBOR_LLAMA_MODEL"),
    ) else {
        assert!(
            !required,
            "ARBOR_REAL_MODEL=required, but ARBOR_LLAMA_SERVER and ARBOR_LLAMA_MODEL are not set"
        );
        eprintln!(
            "skipped: run .ci/llama.sh test (or set ARBOR_LLAMA_SERVER and ARBOR_LLAMA_MODEL)"
        );
        return;
    };
    let template = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/real_model/chatml-tools.jinja"
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut llama = tokio::process::Command::new(&server)
        .args(["-m", &model, "--alias", "smollm2", "--host", "127.0.0.1"])
        .args([
            "--port",
            &port.to_string(),
            "-c",
            "4096",
            "-np",
            "1",
            "-t",
            "2",
        ])
        .args(["--jinja", "--chat-template-file", template, "--metrics"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {server}: {e}"));
    let base = format!("http://127.0.0.1:{port}");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let started = Instant::now();
    loop {
        if let Ok(r) = http.get(format!("{base}/health")).send().await
            && r.status().is_success()
        {
            break;
        }
        assert!(
            llama.try_wait().unwrap().is_none(),
            "llama-server exited while starting"
        );
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "llama-server did not become healthy"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("spec.toml"), spec(&base)).unwrap();
    let t0 = Instant::now();
    let out = arbor(dir.path(), &["run", "spec.toml", "--json", "-q"]);
    let took = t0.elapsed();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(report["status"], "succeeded", "{report}");
    let sessions = report["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2, "{report}");
    let root = &sessions[0];
    let child = sessions.iter().find(|s| s["agent"] == "writer").unwrap();
    let root_id = root["id"].as_str().unwrap();
    let child_id = child["id"].as_str().unwrap();

    // The spawn came from the model's own call: the call id the server gave is the one the
    // child's record keeps.
    let root_log = log(dir.path(), root_id);
    let call = root_log
        .iter()
        .filter(|e| e["kind"] == "message" && e["message"]["role"] == "assistant")
        .flat_map(|e| {
            e["message"]["tool_calls"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .next()
        .unwrap_or_else(|| panic!("the root's model called no tool: {root_log:?}"));
    assert_eq!(call["name"], "spawn_agent", "{call}");
    let call_id = call["id"].as_str().unwrap();
    let store = arbor_store_sqlite::SqliteStore::open(dir.path().join(".arbor/arbor.db")).unwrap();
    let record = arbor_store::Store::session(&store, child_id.parse().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.meta["spawn_call"], call_id, "{:?}", record.meta);

    // The child ran on the model and answered; the root read the answer and ran a turn on
    // it.
    assert_eq!(child["model"], "smollm2");
    assert_eq!(child["status"], "succeeded", "{child}");
    let child_log = log(dir.path(), child_id);
    let answer = child_log
        .iter()
        .rev()
        .find(|e| e["kind"] == "message" && e["message"]["role"] == "assistant")
        .and_then(|e| e["message"]["content"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(!answer.trim().is_empty(), "{child_log:?}");
    let asked = child_log
        .iter()
        .find(|e| e["kind"] == "message" && e["message"]["role"] == "user")
        .map(|e| e["message"]["content"].clone())
        .unwrap_or_default();
    let read = root_log.iter().position(|e| {
        e["kind"] == "message"
            && e["message"]["role"] == "tool"
            && e["message"]["content"]
                .as_str()
                .is_some_and(|c| c.contains(answer.trim()))
    });
    let read = read.unwrap_or_else(|| panic!("the root never read {answer:?}: {root_log:?}"));
    assert!(
        root_log[read..]
            .iter()
            .any(|e| e["kind"] == "message" && e["message"]["role"] == "assistant"),
        "the root ran no turn on the answer: {root_log:?}"
    );

    // arbor's counts are the server's: every prompt token it processed or reused from its
    // cache, and every token it generated.
    let metrics = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let prompt = counter(&metrics, "llamacpp:prompt_tokens_total");
    let cached = counter(&metrics, "llamacpp:prompt_tokens_cached_total");
    let predicted = counter(&metrics, "llamacpp:tokens_predicted_total");
    let sum = |field: &str| -> u64 {
        sessions
            .iter()
            .map(|s| s["usage"]["own"][field].as_u64().unwrap())
            .sum()
    };
    assert_eq!(
        (sum("input_tokens"), sum("output_tokens")),
        (prompt + cached, predicted),
        "arbor's own usage against the server's counters: {metrics}"
    );
    assert_eq!(sum("cache_read_tokens"), cached);
    assert_eq!(report["reconciliation"]["consistent"], true);
    eprintln!(
        "real model: {} prompt ({cached} cached) and {predicted} generated tokens in {:.1} s; \
         the child was asked {asked} and answered {answer:?}",
        prompt + cached,
        took.as_secs_f64(),
    );
}
