//! The tenant's one stream on `arbor serve` (`GET /v1/events`, issue 36): a run's status
//! changes, the call that comes to wait for a decision and its decision, in order, replayed
//! whole with `Last-Event-ID`, and none of it on another tenant's stream.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

#[allow(dead_code)]
mod serve_support;
use serve_support::tenants::{TOKEN_A, TOKEN_B, two_tenants};
use serve_support::{call_as, client, serve_env, status_becomes_as};

const APPROVALS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/approvals.toml");

/// An open event stream, read as events come.
struct Events {
    body: reqwest::Response,
    text: String,
}

impl Events {
    async fn open(http: &reqwest::Client, base: &str, token: &str, last: Option<u64>) -> Self {
        let mut req = http.get(format!("{base}/v1/events")).bearer_auth(token);
        if let Some(n) = last {
            req = req.header("Last-Event-ID", n.to_string());
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 200);
        Self {
            body: resp,
            text: String::new(),
        }
    }

    /// The next event, `(event, id, data)`, or none within `within`.
    async fn next(&mut self, within: Duration) -> Option<(String, u64, Value)> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if let Some(at) = self.text.find("\n\n") {
                let block: String = self.text.drain(..at + 2).collect();
                // A block without data is a keep-alive comment.
                if let Some(event) = serve_support::sse_block(&block) {
                    return Some(event);
                }
                continue;
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.chunk())
                .await
                .ok()?
                .unwrap()?;
            self.text.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// Events until one `done` says stop (at most 20 s).
    async fn until(&mut self, done: impl Fn(&str, &Value) -> bool) -> Vec<(String, u64, Value)> {
        let mut out = Vec::new();
        loop {
            let e = self
                .next(Duration::from_secs(20))
                .await
                .unwrap_or_else(|| panic!("no more events after {out:?}"));
            let stop = done(&e.0, &e.2);
            out.push(e);
            if stop {
                return out;
            }
        }
    }
}

/// A's stream carries its run from start to end with the approval between, numbered 1, 2,
/// 3…; a reconnect from 0 replays exactly that; B's stream carries none of it.
#[tokio::test]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
async fn a_tenants_stream_carries_its_runs_and_approvals_and_replays_them() {
    let (dir, served) = two_tenants(&[]);
    std::fs::copy(APPROVALS, dir.path().join("specs/approvals.toml")).unwrap();
    drop(served);
    let tokens = format!("a={TOKEN_A},b={TOKEN_B}");
    let served = serve_env(dir.path(), &[], &[("ARBOR_TOKENS", &tokens)]);
    let (http, base) = (client(), served.base.clone());
    let mut a = Events::open(&http, &base, TOKEN_A, None).await;
    let mut b = Events::open(&http, &base, TOKEN_B, None).await;

    let (status, run) = call_as(
        &http,
        Method::POST,
        format!("{base}/v1/runs"),
        TOKEN_A,
        Some(json!({"spec": "approvals", "labels": {"user": "ann"}})),
    )
    .await;
    assert_eq!(status, 201, "{run}");
    let root = run["root_id"].as_str().unwrap().to_owned();
    let to_wait = a.until(|kind, _| kind == "approval_pending").await;
    let first = &to_wait[0];
    assert_eq!((first.0.as_str(), first.1), ("run", 1), "{to_wait:?}");
    assert_eq!(first.2["root_id"], root.as_str());
    assert_eq!(first.2["spec"], "approvals");
    assert_eq!(first.2["labels"], json!({"user": "ann"}));
    let statuses: Vec<&Value> = to_wait
        .iter()
        .filter(|e| e.0 == "run")
        .map(|e| &e.2["status"])
        .collect();
    assert_eq!(
        statuses.last().unwrap(),
        &&json!("suspended"),
        "{to_wait:?}"
    );
    let pending = &to_wait.last().unwrap().2;
    assert_eq!(pending["tool"], "echo", "{pending}");
    assert_eq!(pending["root_id"], root.as_str());
    let approval = pending["approval_id"].as_str().unwrap().to_owned();
    let session = pending["session_id"].as_str().unwrap().to_owned();

    let (status, left) = call_as(
        &http,
        Method::POST,
        format!("{base}/v1/sessions/{session}/approvals"),
        TOKEN_A,
        Some(json!({"decisions": [{"id": approval, "verdict": "allow_once"}]})),
    )
    .await;
    assert_eq!(status, 200, "{left}");
    let decided = a.until(|kind, _| kind == "approval_decided").await;
    assert_eq!(decided.last().unwrap().2["approval_id"], approval.as_str());
    let (status, resumed) = call_as(
        &http,
        Method::POST,
        format!("{base}/v1/runs/{root}/resume"),
        TOKEN_A,
        None,
    )
    .await;
    assert_eq!(status, 202, "{resumed}");
    let ended = a
        .until(|kind, data| kind == "run" && data["status"] == "succeeded")
        .await;
    status_becomes_as(&http, &base, &root, "succeeded", TOKEN_A).await;

    // Numbered from 1 without a gap; a replay from 0 is the same, event for event.
    let all: Vec<(String, u64, Value)> = to_wait.into_iter().chain(decided).chain(ended).collect();
    let seqs: Vec<u64> = all.iter().map(|e| e.1).collect();
    assert_eq!(seqs, (1..=all.len() as u64).collect::<Vec<_>>());
    let mut again = Events::open(&http, &base, TOKEN_A, Some(0)).await;
    let mut replayed = Vec::new();
    for _ in 0..all.len() {
        replayed.push(again.next(Duration::from_secs(10)).await.unwrap());
    }
    assert_eq!(replayed, all);
    // From the middle: the rest only.
    let mut tail = Events::open(&http, &base, TOKEN_A, Some(all.len() as u64 - 1)).await;
    assert_eq!(
        tail.next(Duration::from_secs(10)).await.unwrap(),
        all[all.len() - 1]
    );

    // Nothing of A's on B's stream.
    assert_eq!(b.next(Duration::from_millis(800)).await, None);
}
