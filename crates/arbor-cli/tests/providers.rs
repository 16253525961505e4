//! Real providers from the CLI, against a local replay server: a two-level delegation whose
//! child runs on an OpenAI-compatible server, the root on a provider chosen at the command
//! line with its model preflighted, `arbor models`; and the key never stored or printed.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;

use arbor_model::testing::{Canned, ReplayServer};
use serde_json::Value;

const KEY: &str = "sk-arbor-SECRET-7f3a";
const TEXT: &[u8] = include_bytes!("../../arbor-model/tests/fixtures/openai/text.sse");

async fn arbor(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_arbor"));
    cmd.args(args)
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().await.unwrap()
}

/// Every byte the run left: the store files, stdout and stderr.
fn leaked(dir: &Path, out: &std::process::Output) -> bool {
    let mut all = out.stdout.clone();
    all.extend_from_slice(&out.stderr);
    for entry in walk(dir) {
        all.extend(std::fs::read(entry).unwrap_or_default());
    }
    all.windows(KEY.len()).any(|w| w == KEY.as_bytes())
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_on_an_openai_compatible_server_is_accounted_and_the_key_stays_secret() {
    let server = ReplayServer::start(vec![
        Canned::json(200, r#"{"id":"gpt-4o-mini","object":"model"}"#),
        Canned::sse(TEXT),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spec = format!(
        r#"task = "ask the writer"
[providers.local]
kind = "openai"
base_url = "{}/v1"
api_key_env = "LOCAL_KEY"
[agents.root]
children = ["writer"]
[[agents.root.turns]]
tool_calls = [{{ name = "spawn_agent", arguments = {{ child_id = "writer", input = "say hello" }} }}]
usage = {{ input_tokens = 100, output_tokens = 10 }}
[[agents.root.turns]]
text = "the writer said hello"
usage = {{ input_tokens = 120, output_tokens = 5 }}
[agents.writer]
provider = "local"
model = "gpt-4o-mini"
"#,
        server.url
    );
    std::fs::write(dir.path().join("spec.toml"), spec).unwrap();
    let out = arbor(
        dir.path(),
        &["run", "spec.toml", "--json", "-q"],
        &[("LOCAL_KEY", KEY)],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["status"], "succeeded");
    let writer = report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["agent"] == "writer")
        .unwrap();
    assert_eq!(writer["model"], "gpt-4o-mini");
    assert_eq!(writer["usage"]["own"]["total_tokens"], 1123);
    assert_eq!(writer["usage"]["own"]["cache_read_tokens"], 1024);
    assert_eq!(report["tree_own_total_tokens"], 110 + 125 + 1123);
    assert_eq!(report["reconciliation"]["consistent"], true);
    // The child's model was preflighted at its admission, then it ran.
    let paths: Vec<String> = server.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/v1/models/gpt-4o-mini", "/v1/chat/completions"]);
    let request = &server.requests()[1];
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {KEY}").as_str())
    );
    assert!(!leaked(dir.path(), &out), "the key was stored or printed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_root_runs_on_the_provider_and_model_given_after_a_preflight() {
    let server = ReplayServer::start(vec![
        Canned::json(200, r#"{"id":"gpt-test","object":"model"}"#),
        Canned::sse(TEXT),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/tools.toml");
    let base = format!("{}/v1", server.url);
    let env = [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", KEY)];
    let out = arbor(
        dir.path(),
        &[
            "run",
            example,
            "--provider",
            "openai",
            "--model",
            "gpt-test",
            "--json",
            "-q",
        ],
        &env,
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["result"]["text"], "Hello there — ünïcode!");
    let paths: Vec<String> = server.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/v1/models/gpt-test", "/v1/chat/completions"]);
    assert!(!leaked(dir.path(), &out));

    // A model the server does not offer: refused before anything is stored.
    let server = ReplayServer::start(vec![
        Canned::json(
            404,
            r#"{"error":{"message":"The model `nope` does not exist","code":"model_not_found"}}"#,
        ),
        Canned::json(200, r#"{"object":"list","data":[{"id":"gpt-test"}]}"#),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let base = format!("{}/v1", server.url);
    let env = [("OPENAI_BASE_URL", base.as_str()), ("OPENAI_API_KEY", KEY)];
    let out = arbor(
        dir.path(),
        &["run", example, "--provider", "openai", "--model", "nope"],
        &env,
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "model \"nope\" is unavailable: openai does not offer it (it offers: gpt-test)"
        ),
        "{err}"
    );
    assert!(!dir.path().join(".arbor").exists(), "nothing was stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_lists_what_the_configured_providers_offer() {
    let server = ReplayServer::start(vec![Canned::json(
        200,
        r#"{"object":"list","data":[{"id":"gpt-a"},{"id":"gpt-b"}]}"#,
    )])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let base = format!("{}/v1", server.url);
    let out = arbor(
        dir.path(),
        &["models"],
        &[("OPENAI_BASE_URL", base.as_str())],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "openai  gpt-a\nopenai  gpt-b\n"
    );
    let out = arbor(dir.path(), &["models"], &[]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no provider is configured"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_naming_its_own_server_never_gets_the_users_key() {
    let server = ReplayServer::start(vec![
        Canned::json(200, r#"{"id":"m","object":"model"}"#),
        Canned::sse(TEXT),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spec = format!(
        "task = \"x\"\n[providers.elsewhere]\nkind = \"openai\"\nbase_url = \"{}/v1\"\n\
         [agents.root]\nprovider = \"elsewhere\"\nmodel = \"m\"\n",
        server.url
    );
    std::fs::write(dir.path().join("spec.toml"), spec).unwrap();
    let out = arbor(
        dir.path(),
        &["run", "spec.toml", "--memory", "-q"],
        &[("OPENAI_API_KEY", KEY), ("OPENAI_ORG_ID", "org-mine")],
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for r in server.requests() {
        assert_eq!(r.header("authorization"), None, "{}", r.path);
        assert_eq!(r.header("openai-organization"), None);
    }
}
