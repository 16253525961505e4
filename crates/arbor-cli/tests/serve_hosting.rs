//! A host's call that reaches a served tree in the window after its root's run reads
//! `succeeded` but before the run has let the tree go (the root waits for a message-mode
//! child's reply meanwhile). The tree must pass to the host: a resume then hears "hosted",
//! never "still going", the host's child is not cancelled by the run's end, and the tree is
//! released once idle.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

#[allow(dead_code)]
mod serve_support;
use serve_support::{call, client, resume_until_released, serve_env, start_run, status_becomes};

/// The root spawns a slow message-mode child and ends its turn: its run reads `succeeded`
/// while it still waits (about 1.5 s) for the child's reply, then runs again on it.
const WINDOW: &str = r#"
task = "hand work out and wait for the note"
root = "root"

[agents.root]
children = ["slow", "helper"]
[[agents.root.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "slow", name = "slow", mode = "message", input = "take your time" } }]
[[agents.root.turns]]
text = "handed out"
[[agents.root.turns]]
text = "got the note"

[agents.slow]
[[agents.slow.turns]]
delay_ms = 1500
text = "the note"

[agents.helper]
repeat_last = true
[[agents.helper.turns]]
delay_ms = 300
text = "helped"
"#;

async fn resume_refusal(http: &reqwest::Client, base: &str, root: &str) -> String {
    let (status, e) = call(
        http,
        Method::POST,
        format!("{base}/v1/runs/{root}/resume"),
        None,
    )
    .await;
    assert_eq!(status, 409, "{e}");
    e["error"]["message"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_host_call_while_the_run_winds_down_keeps_the_tree_for_the_host() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("specs/window.toml"), WINDOW).unwrap();
    let served = serve_env(dir.path(), &[], &[("ARBOR_HOST_IDLE_MS", "1500")]);
    let (base, http) = (served.base.clone(), client());
    let root = start_run(&http, &base, "window").await;

    // The root's run has ended its turn; the slow child still works.
    let run = status_becomes(&http, &base, &root, "succeeded").await;
    assert!(
        run["result"].is_null(),
        "the run kept its result already: {run}"
    );
    let (status, h) = call(
        &http,
        Method::POST,
        format!("{base}/v1/sessions/{root}/children"),
        Some(json!({"child_id": "helper", "input": "help the host", "name": "hosts"})),
    )
    .await;
    assert_eq!((status, &h["status"]), (201, &json!("running")), "{h}");
    let did = h["delegation_id"].as_str().unwrap().to_owned();

    // In the window: the tree is the host's until idle, not "still going".
    let refusal = resume_refusal(&http, &base, &root).await;
    assert!(refusal.contains("hosted"), "{refusal}");

    // The host's child answers, the root runs again on the slow child's note, and the run
    // keeps how it ended.
    let (status, done) = call(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{root}/delegations/{did}?wait_ms=10000"),
        None,
    )
    .await;
    assert_eq!(
        (status, &done["status"], &done["text"]),
        (200, &json!("succeeded"), &json!("helped")),
        "{done}"
    );
    let started = Instant::now();
    loop {
        let (_, run) = call(&http, Method::GET, format!("{base}/v1/runs/{root}"), None).await;
        if run["result"]["text"] == "got the note" {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{run}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The run is over and the tree is still held for the host (its idle time is 1.5 s).
    let refusal = resume_refusal(&http, &base, &root).await;
    assert!(refusal.contains("hosted"), "{refusal}");
    // A host's call in the hosted period gets the same tree.
    let (status, a) = call(
        &http,
        Method::POST,
        format!("{base}/v1/sessions/{root}/children"),
        Some(json!({"child_id": "helper", "input": "once more", "mode": "sync", "wait_ms": 5000})),
    )
    .await;
    assert_eq!((status, &a["text"]), (200, &json!("helped")), "{a}");

    // Once idle the tree is released: a resume finds nothing waiting.
    resume_until_released(&http, &base, &root).await;
}
