//! Forked context from a spec and over HTTP (issue 39, item 1): a spawn with `context`
//! starts its child with the parent's conversation, recorded once in the child's
//! transcript as `forked`; an agent's `context = "forbid"` refuses it naming the field.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::{Command, Output};

use reqwest::Method;
use serde_json::{Value, json};

#[allow(dead_code)]
mod serve_support;
use serve_support::{call, client, serve_env, start_run, status_becomes};

const SPEC: &str = r#"
task = "look, then hand over"

[agents.root]
children = ["helper", "loner"]
tools = ["echo"]
[[agents.root.turns]]
tool_calls = [{ name = "echo", arguments = { text = "the tide is at six" } }]
[[agents.root.turns]]
tool_calls = [
  { name = "spawn_agent", arguments = { child_id = "helper", name = "helper", input = "carry on", context = "all" } },
  { name = "spawn_agent", arguments = { child_id = "loner", name = "loner", input = "carry on", context = "all" } },
]
[[agents.root.turns]]
text = "done"

[agents.helper]
repeat_last = true
[[agents.helper.turns]]
text = "carried on"

[agents.loner]
context = "forbid"
[[agents.loner.turns]]
text = "alone"
"#;

fn arbor(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(args)
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .output()
        .unwrap()
}

fn log(dir: &Path, session: &str) -> Vec<Value> {
    let out = arbor(dir, &["log", session, "--json"]);
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .collect()
}

#[test]
fn a_spec_spawn_forks_its_parents_conversation_and_a_forbidding_agent_refuses() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.toml"), SPEC).unwrap();
    let out = arbor(dir.path(), &["run", "s.toml", "--json", "-q"]);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(report["status"], "succeeded", "{report}");
    let root = report["root_session_id"].as_str().unwrap();
    let tree: Value =
        serde_json::from_slice(&arbor(dir.path(), &["tree", root, "--json"]).stdout).unwrap();
    let helper = tree["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "helper")
        .unwrap_or_else(|| panic!("no helper: {tree}"))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let entries = log(dir.path(), &helper);
    // Recorded once, first: the task, the echo call and its result (the pending spawn
    // calls left out).
    assert_eq!(entries[0]["kind"], "forked", "{entries:?}");
    assert_eq!(entries[0]["from"], root);
    assert_eq!(entries[0]["messages"], 3);
    assert_eq!(
        entries.iter().filter(|e| e["kind"] == "forked").count(),
        1,
        "{entries:?}"
    );
    // The forbidding agent was never started: the root's model read why.
    let results: Vec<String> = log(dir.path(), root)
        .into_iter()
        .filter(|e| e["kind"] == "message" && e["message"]["role"] == "tool")
        .map(|e| e["message"]["content"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        results.iter().any(|r| r.contains(
            "context: the catalog entry of loner forbids forking the parent's conversation"
        )),
        "{results:?}"
    );
    assert!(
        !tree.to_string().contains("\"loner\""),
        "the refused child has no record: {tree}"
    );
}

/// A root that holds its tree open, and a child that answers at once.
const HOSTED: &str = r#"
task = "hold the tree open"
root = "root"

[agents.root]
children = ["helper"]
repeat_last = true
[[agents.root.turns]]
delay_ms = 8000
text = "done"

[agents.helper]
repeat_last = true
[[agents.helper.turns]]
text = "helped"
"#;

#[tokio::test]
async fn a_spawn_over_http_forks_and_a_bad_context_names_the_field() {
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
        Some(json!({"child_id": "helper", "input": "help", "mode": "sync", "context": "all"})),
    )
    .await;
    assert_eq!(status, 200, "{a}");
    let child = a["session_id"].as_str().unwrap();
    let (status, page) = call(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{child}/transcript"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{page}");
    let entries = page["entries"].as_array().unwrap();
    assert_eq!(entries[0]["kind"], "forked", "{page}");
    assert_eq!(entries[0]["from"], json!(root), "{page}");
    let (status, e) = call(
        &http,
        Method::POST,
        url,
        Some(json!({"child_id": "helper", "input": "help", "context": "some"})),
    )
    .await;
    assert_eq!(status, 400, "{e}");
    assert!(e.to_string().contains("context"), "{e}");
}
