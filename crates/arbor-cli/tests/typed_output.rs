//! Typed child results from a spec and over HTTP (issue 39, item 2): an agent's
//! `output_schema` makes its answer checked (a mismatch sent back once, by default) and
//! reach its parent as the value; a spawn over `/v1` names one too; bad ones are refused
//! naming the field.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::{Command, Output};

use reqwest::Method;
use serde_json::{Value, json};

#[allow(dead_code)]
mod serve_support;
use serve_support::{call, client, serve_env, start_run, status_becomes};

const SPEC: &str = r#"
task = "who wrote it?"

[agents.root]
children = ["clerk"]
[[agents.root.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "clerk", name = "clerk", input = "who?" } }]
[[agents.root.turns]]
text = "done"

[agents.clerk]
output_schema = { type = "object", required = ["name", "age"], additionalProperties = false, properties = { name = { type = "string" }, age = { type = "integer", minimum = 0 } } }
[[agents.clerk.turns]]
text = "Ada, 36"
[[agents.clerk.turns]]
text = '{"name": "Ada", "age": 36}'
"#;

fn arbor(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(args)
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .output()
        .unwrap()
}

/// The JSON lines of `arbor log SESSION --json`.
fn log(dir: &Path, session: &str) -> Vec<Value> {
    let out = arbor(dir, &["log", session, "--json"]);
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .collect()
}

#[test]
fn a_spec_agents_answer_is_checked_and_reaches_its_parent_as_the_value() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.toml"), SPEC).unwrap();
    let out = arbor(dir.path(), &["run", "s.toml", "--json", "-q"]);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(report["status"], "succeeded", "{report}");
    let root = report["root_session_id"].as_str().unwrap();
    // The parent's tool result carries the value.
    let answer: Value = log(dir.path(), root)
        .into_iter()
        .find(|e| e["kind"] == "message" && e["message"]["role"] == "tool")
        .map(|e| serde_json::from_str(e["message"]["content"].as_str().unwrap()).unwrap())
        .unwrap();
    assert_eq!(answer["status"], "succeeded", "{answer}");
    assert_eq!(
        answer["value"],
        json!({"name": "Ada", "age": 36}),
        "{answer}"
    );
    // The child was told once why its first answer did not do.
    let tree =
        serde_json::from_slice::<Value>(&arbor(dir.path(), &["tree", root, "--json"]).stdout)
            .unwrap();
    let clerk = tree["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "clerk")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let users: Vec<String> = log(dir.path(), &clerk)
        .into_iter()
        .filter(|e| e["kind"] == "message" && e["message"]["role"] == "user")
        .map(|e| e["message"]["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(users.len(), 2, "{users:?}");
    assert!(
        users[1].contains("does not match the required output schema: /: the answer is not JSON"),
        "{users:?}"
    );
}

#[test]
fn a_bad_output_schema_in_a_spec_is_refused_naming_the_agent_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    for (bad, says) in [
        (
            SPEC.replace(
                "output_schema = { type = \"object\"",
                "output_schema = { type = 12",
            ),
            "output_schema: is not a valid JSON Schema",
        ),
        (
            SPEC.replace(
                "[[agents.clerk.turns]]\ntext = \"Ada, 36\"",
                "output_retries = 9\n[[agents.clerk.turns]]\ntext = \"Ada, 36\"",
            ),
            "output_retries: at most 5, got 9",
        ),
    ] {
        std::fs::write(dir.path().join("bad.toml"), &bad).unwrap();
        let out = arbor(dir.path(), &["run", "bad.toml", "-q"]);
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("clerk") && err.contains(says), "{err}");
    }
}

/// A root that holds its tree open, and a child that answers JSON.
const HOSTED: &str = r#"
task = "hold the tree open"
root = "root"

[agents.root]
children = ["counter"]
repeat_last = true
[[agents.root.turns]]
delay_ms = 8000
text = "done"

[agents.counter]
repeat_last = true
[[agents.counter.turns]]
text = "[1, 2, 3]"
"#;

#[tokio::test]
async fn a_spawn_over_http_names_its_schema_and_gets_the_value() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("specs/hosted.toml"), HOSTED).unwrap();
    let served = serve_env(dir.path(), &[], &[]);
    let (base, http) = (served.base.clone(), client());
    let root = start_run(&http, &base, "hosted").await;
    status_becomes(&http, &base, &root, "running").await;
    let url = format!("{base}/v1/sessions/{root}/children");
    let (status, a) = call(
        &http,
        Method::POST,
        url.clone(),
        Some(
            json!({"child_id": "counter", "input": "count", "mode": "sync",
            "output_schema": {"type": "array", "items": {"type": "integer"}}}),
        ),
    )
    .await;
    assert_eq!(status, 200, "{a}");
    assert_eq!(a["value"], json!([1, 2, 3]), "{a}");
    // Without a schema there is no value.
    let (status, a) = call(
        &http,
        Method::POST,
        url.clone(),
        Some(json!({"child_id": "counter", "input": "count", "mode": "sync"})),
    )
    .await;
    assert_eq!(status, 200, "{a}");
    assert!(a.get("value").is_none(), "{a}");
    // A bad schema names the field, and nothing is started.
    let (status, e) = call(
        &http,
        Method::POST,
        url.clone(),
        Some(json!({"child_id": "counter", "input": "count", "output_schema": {"type": 12}})),
    )
    .await;
    assert_eq!(
        (status, &e["error"]["field"]),
        (400, &json!("output_schema")),
        "{e}"
    );
    let (status, e) = call(
        &http,
        Method::POST,
        url,
        Some(json!({"child_id": "counter", "input": "count", "output_retries": 2})),
    )
    .await;
    assert_eq!(
        (status, &e["error"]["field"]),
        (400, &json!("output_retries")),
        "{e}"
    );
}

/// One streamed Chat Completions answer whose text is `text`.
fn sse_answer(text: &str) -> Vec<u8> {
    let chunk = |delta: Value, finish: Value| {
        json!({"id": "c", "object": "chat.completion.chunk", "model": "m",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    format!(
        "data: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
        chunk(json!({"content": text}), Value::Null),
        chunk(json!({}), json!("stop"))
    )
    .into_bytes()
}

/// An agent with an output schema on an OpenAI-compatible server: the schema goes to the
/// server as `response_format` (it constrains the answer), unless the provider turns it off;
/// an Anthropic provider refuses the option by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_output_schema_reaches_an_openai_server_as_its_response_format() {
    use arbor_model::testing::{Canned, ReplayServer};
    for structured in [None, Some(false)] {
        let answer = sse_answer(r#"{"name": "Ada"}"#);
        let server = ReplayServer::start(vec![
            Canned::json(200, r#"{"id":"m","object":"model"}"#),
            Canned::sse(&answer),
        ])
        .await
        .unwrap();
        let option = structured.map_or(String::new(), |s| format!("structured_output = {s}\n"));
        let spec = format!(
            "task = \"who?\"\n[providers.fake]\nkind = \"openai\"\nbase_url = \"{}/v1\"\n\
             api_key_env = \"FAKE_KEY\"\n{option}[agents.root]\nprovider = \"fake\"\nmodel = \"m\"\n\
             output_schema = {{ type = \"object\", required = [\"name\"], properties = {{ name = \
             {{ type = \"string\" }} }} }}\n",
            server.url
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("s.toml"), spec).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_arbor"))
            .args(["run", "--memory", "s.toml", "-q", "--json"])
            .current_dir(dir.path())
            .env_remove("ARBOR_LOG")
            .env("FAKE_KEY", "k")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let sent = server.requests();
        assert_eq!(sent.len(), 2);
        let body: Value = serde_json::from_str(&sent[1].body).unwrap();
        if structured.is_none() {
            assert_eq!(
                body["response_format"],
                json!({"type": "json_schema", "json_schema": {"name": "answer", "strict": false,
                    "schema": {"type": "object", "required": ["name"],
                               "properties": {"name": {"type": "string"}}}}}),
                "{body}"
            );
        } else {
            assert!(body.get("response_format").is_none(), "{body}");
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let anthropic = "task = \"x\"\n[providers.a]\nkind = \"anthropic\"\nstructured_output = true\n\
                     [agents.root]\nprovider = \"a\"\nmodel = \"m\"\n";
    std::fs::write(dir.path().join("a.toml"), anthropic).unwrap();
    let out = arbor(dir.path(), &["validate", "a.toml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("structured_output applies to kind = \"openai\""),
        "{err}"
    );
}
