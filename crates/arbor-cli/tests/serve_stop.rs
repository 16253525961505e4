//! A host stops a child's run over HTTP and keeps the child (`POST
//! /v1/sessions/{id}/delegations/{d}/stop`), where a cancel releases it: the stopped child
//! stays listed, `aborted` and not deleted, and takes messages; the cancelled one is deleted
//! (`revoked`) and refuses them.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

#[allow(dead_code)]
mod serve_support;
use serve_support::{call, client, serve_env, start_run, status_becomes};

/// A root that holds its tree open, and a child whose runs take ten seconds.
const SLOW_CHILD: &str = r#"
task = "hold the tree open"
root = "root"

[agents.root]
children = ["slow"]
repeat_last = true
[[agents.root.turns]]
delay_ms = 8000
text = "done"

[agents.slow]
repeat_last = true
[[agents.slow.turns]]
delay_ms = 10000
text = "late"
"#;

/// Starts a `slow` child under `root` and returns its delegation and session.
async fn spawn_slow(
    http: &reqwest::Client,
    base: &str,
    root: &str,
    name: &str,
) -> (String, String) {
    let (status, h) = post(
        http,
        format!("{base}/v1/sessions/{root}/children"),
        Some(json!({"child_id": "slow", "input": "take your time", "name": name, "mode": "async"})),
    )
    .await;
    assert_eq!((status, &h["status"]), (201, &json!("running")), "{h}");
    (
        h["delegation_id"].as_str().unwrap().to_owned(),
        h["session_id"].as_str().unwrap().to_owned(),
    )
}

/// A POST of `body` to `url`.
async fn post(http: &reqwest::Client, url: String, body: Option<Value>) -> (u16, Value) {
    call(http, Method::POST, url, body).await
}

/// The child's session once its run has ended.
async fn ended(http: &reqwest::Client, base: &str, session: &str) -> Value {
    let started = Instant::now();
    loop {
        let (status, s) = call(
            http,
            Method::GET,
            format!("{base}/v1/sessions/{session}"),
            None,
        )
        .await;
        assert_eq!(status, 200, "{s}");
        if s["status"] != "running" && s["status"] != "idle" && s["status"] != "queued" {
            return s;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{s}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_stopped_child_is_kept_and_takes_messages_a_cancelled_one_is_released() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("specs/slow.toml"), SLOW_CHILD).unwrap();
    let served = serve_env(dir.path(), &[], &[]);
    let (base, http) = (served.base.clone(), client());
    let root = start_run(&http, &base, "slow").await;
    status_becomes(&http, &base, &root, "running").await;

    // Stopped: kept, aborted, and a message to it is taken.
    let (did, kept) = spawn_slow(&http, &base, &root, "kept").await;
    let (status, s) = post(
        &http,
        format!("{base}/v1/sessions/{root}/delegations/{did}/stop"),
        None,
    )
    .await;
    assert_eq!((status, &s["status"]), (200, &json!("stopping")), "{s}");
    let child = ended(&http, &base, &kept).await;
    assert_eq!(
        (&child["status"], &child["deleted"], &child["tombstone"]),
        (&json!("aborted"), &json!(false), &Value::Null),
        "{child}"
    );
    let (status, r) = post(
        &http,
        format!("{base}/v1/sessions/{kept}/messages"),
        Some(json!({"text": "go on"})),
    )
    .await;
    assert_eq!(status, 202, "{r}");
    // Over now: a second stop says so.
    let (status, s) = post(
        &http,
        format!("{base}/v1/sessions/{root}/delegations/{did}/stop"),
        None,
    )
    .await;
    assert_eq!((status, &s["status"]), (200, &json!("terminal")), "{s}");

    // Cancelled: released (deleted, `revoked`), and a message to it is refused.
    let (did, released) = spawn_slow(&http, &base, &root, "released").await;
    let (status, s) = post(
        &http,
        format!("{base}/v1/sessions/{root}/delegations/{did}/cancel"),
        None,
    )
    .await;
    assert_eq!((status, &s["status"]), (200, &json!("cancelling")), "{s}");
    let started = Instant::now();
    let child = loop {
        let (_, c) = call(
            &http,
            Method::GET,
            format!("{base}/v1/sessions/{released}"),
            None,
        )
        .await;
        if c["deleted"] == true {
            break c;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{c}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(child["tombstone"]["reason"], "revoked", "{child}");
    let (status, r) = post(
        &http,
        format!("{base}/v1/sessions/{released}/messages"),
        Some(json!({"text": "go on"})),
    )
    .await;
    assert_eq!(status, 404, "{r}");

    // A blank input is refused naming it (admission's one check, as over MCP).
    let (status, e) = post(
        &http,
        format!("{base}/v1/sessions/{root}/children"),
        Some(json!({"child_id": "slow", "input": "  "})),
    )
    .await;
    assert_eq!(
        (status, &e["error"]["field"], &e["error"]["message"]),
        (400, &json!("input"), &json!("input must not be blank")),
        "{e}"
    );

    // An unknown handle is unknown to a stop as to a cancel.
    let (status, _) = post(
        &http,
        format!("{base}/v1/sessions/{root}/delegations/supervisor-forged/stop"),
        None,
    )
    .await;
    assert_eq!(status, 404);
}

/// A root that holds its tree open, a `mid` child that starts two slow `leaf` children at
/// once and waits for them.
const NESTED: &str = r#"
task = "hold the tree open"
root = "root"

[agents.root]
children = ["mid"]
repeat_last = true
[[agents.root.turns]]
delay_ms = 8000
text = "done"

[agents.mid]
children = ["leaf"]
[[agents.mid.turns]]
tool_calls = [
  { name = "spawn_agent", arguments = { child_id = "leaf", name = "leaf-a", input = "work" } },
  { name = "spawn_agent", arguments = { child_id = "leaf", name = "leaf-b", input = "work" } },
]
[[agents.mid.turns]]
text = "mid done"

[agents.leaf]
repeat_last = true
[[agents.leaf.turns]]
delay_ms = 10000
text = "late"
"#;

/// Waits until `n` children of `session` run.
async fn children_running(http: &reqwest::Client, base: &str, session: &str, n: usize) {
    let started = Instant::now();
    loop {
        let (status, c) = call(
            http,
            Method::GET,
            format!("{base}/v1/sessions/{session}/children"),
            None,
        )
        .await;
        assert_eq!(status, 200, "{c}");
        let running = c["children"]
            .as_array()
            .map_or(0, |a| a.iter().filter(|c| c["status"] == "running").count());
        if running >= n {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{c}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The names and states of a `stopped` list, sorted.
fn stopped_of(v: &Value) -> Vec<(String, u64, String)> {
    let mut out: Vec<_> = v["stopped"]
        .as_array()
        .unwrap_or_else(|| panic!("no stopped list: {v}"))
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_owned(),
                s["depth"].as_u64().unwrap(),
                s["was"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn a_cancel_and_a_delete_over_http_say_which_descendants_they_stopped() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("specs/nested.toml"), NESTED).unwrap();
    let served = serve_env(dir.path(), &[], &[]);
    let (base, http) = (served.base.clone(), client());
    let root = start_run(&http, &base, "nested").await;
    status_becomes(&http, &base, &root, "running").await;
    let leaves = [
        ("leaf-a".to_owned(), 2, "running".to_owned()),
        ("leaf-b".to_owned(), 2, "running".to_owned()),
    ];

    // A cancel by handle lists the two leaves whose runs ended with `mid`.
    let (status, h) = post(
        &http,
        format!("{base}/v1/sessions/{root}/children"),
        Some(json!({"child_id": "mid", "input": "go", "name": "first", "mode": "async"})),
    )
    .await;
    assert_eq!(status, 201, "{h}");
    let (did, mid) = (
        h["delegation_id"].as_str().unwrap().to_owned(),
        h["session_id"].as_str().unwrap().to_owned(),
    );
    children_running(&http, &base, &mid, 2).await;
    let (status, s) = post(
        &http,
        format!("{base}/v1/sessions/{root}/delegations/{did}/cancel"),
        None,
    )
    .await;
    assert_eq!((status, &s["status"]), (200, &json!("cancelling")), "{s}");
    assert_eq!(stopped_of(&s), leaves, "{s}");
    for stopped in s["stopped"].as_array().unwrap() {
        let id = stopped["session_id"].as_str().unwrap();
        let leaf = ended(&http, &base, id).await;
        assert_eq!(leaf["status"], "aborted", "{leaf}");
        assert_eq!(leaf["parent_id"], json!(mid), "{leaf}");
    }

    // A delete does too.
    let (status, h) = post(
        &http,
        format!("{base}/v1/sessions/{root}/children"),
        Some(json!({"child_id": "mid", "input": "go", "name": "second", "mode": "async"})),
    )
    .await;
    assert_eq!(status, 201, "{h}");
    let mid = h["session_id"].as_str().unwrap().to_owned();
    children_running(&http, &base, &mid, 2).await;
    let (status, d) = call(
        &http,
        Method::DELETE,
        format!("{base}/v1/sessions/{mid}"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{d}");
    assert_eq!(d["already_deleted"], false, "{d}");
    assert_eq!(stopped_of(&d), leaves, "{d}");
    // Deleted again: nothing more to stop.
    let (status, d) = call(
        &http,
        Method::DELETE,
        format!("{base}/v1/sessions/{mid}"),
        None,
    )
    .await;
    assert_eq!((status, &d["already_deleted"]), (200, &json!(true)), "{d}");
    assert_eq!(d["stopped"], json!([]), "{d}");
}

/// A root that holds its tree open, one slot, a queue of one, and a child that takes a
/// while.
const QUEUED: &str = r#"
task = "hold the tree open"
root = "root"

[supervisor]
limits = { max_active_children = 1 }
max_queued = 1

[agents.root]
children = ["slow"]
repeat_last = true
[[agents.root.turns]]
delay_ms = 8000
text = "done"

[agents.slow]
repeat_last = true
[[agents.slow.turns]]
delay_ms = 700
text = "late"
"#;

#[tokio::test]
async fn a_spawn_over_http_waits_queued_and_a_full_queue_names_both_limits() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("specs/queued.toml"), QUEUED).unwrap();
    let served = serve_env(dir.path(), &[], &[]);
    let (base, http) = (served.base.clone(), client());
    let root = start_run(&http, &base, "queued").await;
    status_becomes(&http, &base, &root, "running").await;
    let url = format!("{base}/v1/sessions/{root}/children");
    let body = |name: &str| {
        Some(
            json!({"child_id": "slow", "input": "go", "name": name, "mode": "async", "on_full": "queue"}),
        )
    };
    let (status, first) = post(&http, url.clone(), body("first")).await;
    assert_eq!(
        (status, &first["status"]),
        (201, &json!("running")),
        "{first}"
    );
    let (status, second) = post(&http, url.clone(), body("second")).await;
    assert_eq!(
        (status, &second["status"]),
        (201, &json!("queued")),
        "{second}"
    );
    let id = second["session_id"].as_str().unwrap().to_owned();
    let (_, s) = call(&http, Method::GET, format!("{base}/v1/sessions/{id}"), None).await;
    assert_eq!(s["status"], "queued", "listed as queued: {s}");
    // The queue holds one: the next is refused, naming both limits.
    let (status, e) = post(&http, url.clone(), body("third")).await;
    assert_eq!(status, 429, "{e}");
    assert_eq!(e["error"]["limit"]["name"], "max_queued", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_active_children"),
        "{e}"
    );
    // The queued one starts once the first is done, and answers.
    let child = ended(&http, &base, &id).await;
    assert_eq!(child["status"], "succeeded", "{child}");
}
