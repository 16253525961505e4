//! `arbor serve` continues what a crash interrupted, and starts a run once per
//! `Idempotency-Key`: a server SIGKILLed mid-run and started again continues the run through
//! `POST /v1/runs/{id}/resume` exactly as `arbor resume` does (the root's call in flight
//! rejoins its sync child, which goes on from its transcript and answers; the root goes on
//! to its answer), and a retried start with the same key answers with the run the first one
//! started.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

#[allow(dead_code)]
mod serve_support;
use serve_support::{call, client, serve, status_becomes, tool_results};

/// A root whose child takes a while: the server dies while the root waits on it.
const STUCK: &str = r#"
task = "Ask the slow one."
root = "root"

[agents.root]
children = ["slow"]

[[agents.root.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "slow", name = "slow", input = "Take your time." } }]

[[agents.root.turns]]
text = "Recovered with the slow one's answer."

[agents.slow]

[[agents.slow.turns]]
text = "Finally."
delay_ms = 3000
"#;

fn dir_with(name: &str, text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join(format!("specs/{name}.toml")), text).unwrap();
    dir
}

#[tokio::test]
async fn a_run_interrupted_by_a_sigkill_is_continued_over_http_once() {
    let dir = dir_with("stuck", STUCK);
    let http = client();
    let root = {
        let mut served = serve(dir.path(), &[]);
        let (status, run) = call(
            &http,
            Method::POST,
            format!("{}/v1/runs", served.base),
            Some(json!({"spec": "stuck"})),
        )
        .await;
        assert_eq!(status, 201, "{run}");
        let root = run["root_id"].as_str().unwrap().to_owned();
        // The slow child is running: the root waits on its call.
        let started = std::time::Instant::now();
        loop {
            let (_, run) = call(
                &http,
                Method::GET,
                format!("{}/v1/runs/{root}", served.base),
                None,
            )
            .await;
            let sessions = run["tree"]["sessions"].as_array().unwrap();
            if sessions
                .iter()
                .any(|s| s["name"] == "slow" && s["status"] == "running")
            {
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(20), "{run}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        served.child.kill().unwrap();
        served.child.wait().unwrap();
        root
    };
    let served = serve(dir.path(), &[]);
    let base = served.base.clone();
    let run = status_becomes(&http, &base, &root, "interrupted").await;
    assert_eq!(run["status"], "interrupted", "{run}");
    let (status, resumed) = call(
        &http,
        Method::POST,
        format!("{base}/v1/runs/{root}/resume"),
        None,
    )
    .await;
    assert_eq!(status, 202, "{resumed}");
    status_becomes(&http, &base, &root, "succeeded").await;
    // The result is kept just after the run's end is written.
    let started = std::time::Instant::now();
    let run = loop {
        let (_, run) = call(&http, Method::GET, format!("{base}/v1/runs/{root}"), None).await;
        if run["result"]["status"] == "succeeded" {
            break run;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no result kept: {run}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        run["result"]["text"], "Recovered with the slow one's answer.",
        "{run}"
    );
    // The call in flight rejoined the slow child, which went on here and answered.
    let results = tool_results(&http, &base, &root).await;
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].contains("Finally."), "{results:?}");
    let slow = run["tree"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "slow")
        .unwrap();
    assert_eq!(slow["status"], "succeeded");
    // Over: a second resume has nothing to continue.
    let (status, e) = call(
        &http,
        Method::POST,
        format!("{base}/v1/runs/{root}/resume"),
        None,
    )
    .await;
    assert_eq!(status, 409, "{e}");
}

const QUICK: &str = r#"
task = "Say hi."
root = "root"

[agents.root]

[[agents.root.turns]]
text = "hi"
"#;

async fn start_with_key(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    body: Value,
) -> (u16, Value) {
    let resp = http
        .post(format!("{base}/v1/runs"))
        .header("Idempotency-Key", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_start_retried_with_its_idempotency_key_never_starts_a_second_run() {
    let dir = dir_with("quick", QUICK);
    let served = serve(dir.path(), &[]);
    let (base, http) = (served.base.clone(), client());
    let body = json!({"spec": "quick"});
    let (status, first) = start_with_key(&http, &base, "order-17", body.clone()).await;
    assert_eq!(status, 201, "{first}");
    let (status, again) = start_with_key(&http, &base, "order-17", body.clone()).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["root_id"], first["root_id"]);
    // The same key on another request is refused, naming the header's rule.
    let (status, e) = start_with_key(
        &http,
        &base,
        "order-17",
        json!({"spec": "quick", "task": "other"}),
    )
    .await;
    assert_eq!(
        (status, e["error"]["kind"].as_str()),
        (409, Some("conflict")),
        "{e}"
    );
    // A bad key names the header.
    let (status, e) = start_with_key(&http, &base, &"k".repeat(256), body.clone()).await;
    assert_eq!(
        (status, &e["error"]["field"]),
        (400, &json!("Idempotency-Key"))
    );
    // Eight at once with a fresh key: one run, one 201.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (http, base, body) = (http.clone(), base.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            start_with_key(&http, &base, "order-18", body).await
        }));
    }
    let mut roots = std::collections::BTreeSet::new();
    let mut created = 0;
    for t in tasks {
        let (status, run) = t.await.unwrap();
        assert!(status == 200 || status == 201, "{status} {run}");
        created += usize::from(status == 201);
        roots.insert(run["root_id"].as_str().unwrap().to_owned());
    }
    assert_eq!((roots.len(), created), (1, 1), "{roots:?}");
    // The store holds two roots: one per key, and none for the refusals.
    drop(served);
    let ls = std::process::Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["ls", "--store", "a.db", "--json"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let listed: Value = serde_json::from_slice(&ls.stdout).unwrap();
    assert_eq!(listed["roots"].as_array().unwrap().len(), 2, "{listed}");
}
