//! One decision per call, over HTTP against a live `arbor serve`: the child's call of
//! `examples/approvals.toml` is listed at the root (`sub_…`) and at the child (`apr_…`); the
//! first decision through either id wins, a second through the other is refused (409) naming
//! it, the resume runs what the first said, and the child's transcript records the decision
//! with who, when and why.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use reqwest::Method;
use serde_json::{Value, json};

#[allow(dead_code)]
mod serve_support;
use serve_support::{
    call, client, messenger_and_worker, node, serving, start_run, status_becomes, tool_results,
};

const APPROVALS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/approvals.toml");

async fn pending_at(http: &reqwest::Client, base: &str, session: &str) -> Vec<Value> {
    let (status, listed) = call(
        http,
        Method::GET,
        format!("{base}/v1/sessions/{session}/approvals"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    listed["suspensions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["pending"].as_array().unwrap().clone())
        .collect()
}

async fn decide(http: &reqwest::Client, base: &str, session: &str, body: Value) -> (u16, Value) {
    call(
        http,
        Method::POST,
        format!("{base}/v1/sessions/{session}/approvals"),
        Some(body),
    )
    .await
}

/// The run of `root` once `done` holds of it (polled; fails after `secs` seconds).
async fn run_when(
    http: &reqwest::Client,
    base: &str,
    root: &str,
    secs: u64,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let started = std::time::Instant::now();
    loop {
        let (_, run) = call(http, Method::GET, format!("{base}/v1/runs/{root}"), None).await;
        if done(&run) {
            return run;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(secs),
            "{run}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_rejection_at_the_root_holds_against_an_allow_at_the_child_in_both_orders() {
    for root_first in [true, false] {
        let (_dir, served) = serving("approvals", &std::fs::read_to_string(APPROVALS).unwrap());
        let (base, http) = (served.base.clone(), client());
        let root = start_run(&http, &base, "approvals").await;
        let run = status_becomes(&http, &base, &root, "suspended").await;
        let publisher = node(&run, "publisher")["id"].as_str().unwrap().to_owned();

        let at_root = pending_at(&http, &base, &root).await;
        let at_child = pending_at(&http, &base, &publisher).await;
        assert_eq!((at_root.len(), at_child.len()), (1, 1));
        let (sub, apr) = (
            at_root[0]["id"].as_str().unwrap().to_owned(),
            at_child[0]["id"].as_str().unwrap().to_owned(),
        );
        assert!(sub.starts_with("sub_") && apr.starts_with("apr_"));
        // Both name the session whose call it is.
        assert_eq!(at_root[0]["session_id"], json!(publisher));
        assert_eq!(at_child[0]["session_id"], json!(publisher));

        let reject = json!({"decisions": [{"id": sub, "verdict": "reject_once",
            "reason": "not before the review"}], "by": "alice"});
        let allow = json!({"decisions": [{"id": apr, "verdict": "allow_once"}], "by": "bob"});
        let ((first, first_at), (second, second_at)) = if root_first {
            ((reject, &root), (allow, &publisher))
        } else {
            ((allow, &publisher), (reject, &root))
        };
        let (status, left) = decide(&http, &base, first_at, first).await;
        assert_eq!((status, &left["pending"]), (200, &json!([])), "{left}");
        // Decided through one id: it waits through neither.
        assert!(pending_at(&http, &base, &root).await.is_empty());
        assert!(pending_at(&http, &base, &publisher).await.is_empty());

        let (status, e) = decide(&http, &base, second_at, second).await;
        assert_eq!(
            (status, e["error"]["kind"].as_str()),
            (409, Some("conflict")),
            "{e}"
        );
        let message = e["error"]["message"].as_str().unwrap();
        let named = if root_first {
            "This call was already decided: reject_once by alice (tenant "
        } else {
            "This call was already decided: allow_once by bob (tenant "
        };
        assert!(message.starts_with(named), "{message}");
        assert!(message.contains(" GMT"), "{message}");

        let (status, resumed) = call(
            &http,
            Method::POST,
            format!("{base}/v1/runs/{root}/resume"),
            None,
        )
        .await;
        assert_eq!(status, 202, "{resumed}");
        status_becomes(&http, &base, &root, "succeeded").await;
        let results = tool_results(&http, &base, &publisher).await;
        if root_first {
            assert_eq!(
                results,
                ["rejected by a reviewer: not before the review"],
                "the rejection held: echo never ran"
            );
        } else {
            assert_eq!(results, ["published v1.2 release notes"]);
        }
        // The decision, once, in the child's transcript: who, the tenant, when, why.
        let (_, page) = call(
            &http,
            Method::GET,
            format!("{base}/v1/sessions/{publisher}/transcript?limit=500"),
            None,
        )
        .await;
        let decisions: Vec<&Value> = page["entries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "decision")
            .collect();
        assert_eq!(decisions.len(), 1, "{page}");
        let d = decisions[0];
        assert_eq!(d["tool"], "echo");
        assert!(d["at"].as_u64().unwrap() > 0);
        assert!(d["tenant"].is_string(), "{d}");
        if root_first {
            assert_eq!(
                (&d["verdict"], &d["by"], &d["reason"]),
                (
                    &json!("reject_once"),
                    &json!("alice"),
                    &json!("not before the review")
                )
            );
        } else {
            assert_eq!(
                (&d["verdict"], &d["by"]),
                (&json!("allow_once"), &json!("bob"))
            );
        }
    }
}

#[tokio::test]
async fn a_decider_name_out_of_bounds_is_refused_naming_the_field() {
    let (_dir, served) = serving("approvals", &std::fs::read_to_string(APPROVALS).unwrap());
    let (base, http) = (served.base.clone(), client());
    let root = start_run(&http, &base, "approvals").await;
    status_becomes(&http, &base, &root, "suspended").await;
    let id = pending_at(&http, &base, &root).await[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for by in [String::new(), "x".repeat(129)] {
        let (status, e) = decide(
            &http,
            &base,
            &root,
            json!({"decisions": [{"id": id, "verdict": "allow_once"}], "by": by}),
        )
        .await;
        assert_eq!((status, &e["error"]["field"]), (400, &json!("by")), "{e}");
    }
    assert_eq!(
        pending_at(&http, &base, &root).await.len(),
        1,
        "nothing decided"
    );
}

/// A messenger still on its first turn when the worker stops the root, reaching its own
/// gated call 700 ms later.
const LATE_MESSENGER: &str = r#"tools = ["echo"]

[[agents.messenger.turns]]
delay_ms = 700
tool_calls = [{ name = "echo", arguments = { text = "messenger's" } }]

[[agents.messenger.turns]]
text = "sent"
"#;

/// A messenger that works for 5 s, then answers (no gated call).
const SLOW_MESSENGER: &str = r#"
[[agents.messenger.turns]]
delay_ms = 5000
text = "sent"
"#;

/// The root's run suspends while a message-mode child's run is still going: the tree is not
/// ended under it (which cancelled it, `aborted`, in 3 of 8 runs, found through A2A); it
/// reaches its own gated call, and both calls wait at the root. Approved, all three finish.
#[tokio::test]
async fn a_message_child_still_running_when_the_root_suspends_reaches_its_own_suspension() {
    let (_dir, served) = serving("late", &messenger_and_worker(LATE_MESSENGER, &["done"]));
    let (base, http) = (served.base.clone(), client());
    let root = start_run(&http, &base, "late").await;
    let run = status_becomes(&http, &base, &root, "suspended").await;
    assert_eq!(node(&run, "worker")["status"], "suspended", "{run}");
    let started = std::time::Instant::now();
    let pending = loop {
        let pending = pending_at(&http, &base, &root).await;
        if pending.len() == 2 || started.elapsed() > std::time::Duration::from_secs(10) {
            break pending;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let (_, run) = call(&http, Method::GET, format!("{base}/v1/runs/{root}"), None).await;
    assert_eq!(node(&run, "messenger")["status"], "suspended", "{run}");
    let mut paths: Vec<&str> = pending
        .iter()
        .map(|p| p["path"][0].as_str().unwrap())
        .collect();
    paths.sort_unstable();
    assert_eq!(paths, ["messenger", "worker"], "{pending:?}");
    // Two runs wait (the root's, carrying the worker's call, and the messenger's own): one
    // request decides the calls of one run.
    for p in &pending {
        let allow = json!({"decisions": [{"id": p["id"], "verdict": "allow_once"}], "by": "alice"});
        let (status, left) = decide(&http, &base, &root, allow).await;
        assert_eq!(status, 200, "{left}");
    }
    assert!(pending_at(&http, &base, &root).await.is_empty());
    let (status, resumed) = call(
        &http,
        Method::POST,
        format!("{base}/v1/runs/{root}/resume"),
        None,
    )
    .await;
    assert!(status < 300, "{status} {resumed}");
    run_when(&http, &base, &root, 20, |run| {
        ["root", "messenger", "worker"]
            .iter()
            .all(|n| node(run, n)["status"] == "succeeded")
    })
    .await;
}

/// While a suspended root's message-mode child still works, the root's decided call is
/// resumed at once, in the tree that still runs (not refused as "still going" until the
/// child ends): the worker finishes while the messenger still runs, and the root, gone on,
/// hears the messenger's answer when it comes.
#[tokio::test]
async fn a_resume_while_a_message_child_still_runs_goes_on_in_that_tree() {
    let (_dir, served) = serving(
        "slow",
        &messenger_and_worker(SLOW_MESSENGER, &["done", "heard the messenger"]),
    );
    let (base, http) = (served.base.clone(), client());
    let root = start_run(&http, &base, "slow").await;
    status_becomes(&http, &base, &root, "suspended").await;
    // Its result is kept as the tree starts to quiet (a resume is taken in place then).
    let run = run_when(&http, &base, &root, 3, |run| {
        run["result"]["status"] == "suspended"
    })
    .await;
    assert_eq!(node(&run, "messenger")["status"], "running", "{run}");
    let pending = pending_at(&http, &base, &root).await;
    assert_eq!(pending.len(), 1, "{pending:?}");
    // Undecided, it is not resumed: refused naming what waits.
    let (status, refused) = call(
        &http,
        Method::POST,
        format!("{base}/v1/runs/{root}/resume"),
        None,
    )
    .await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(
        refused["error"]["message"],
        "1 call(s) still wait for a decision: decide them first"
    );
    let allow = json!({"decisions": [{"id": pending[0]["id"], "verdict": "allow_once"}]});
    let (status, left) = decide(&http, &base, &root, allow).await;
    assert_eq!(status, 200, "{left}");
    let (status, resumed) = call(
        &http,
        Method::POST,
        format!("{base}/v1/runs/{root}/resume"),
        None,
    )
    .await;
    assert_eq!(status, 202, "{resumed}");
    // Answered once the resume has begun: the suspension's result is no longer shown.
    let (_, run) = call(&http, Method::GET, format!("{base}/v1/runs/{root}"), None).await;
    assert_ne!(run["result"]["status"], "suspended", "{run}");
    // The worker's approved call ran, and it finished, while the messenger still works.
    let run = run_when(&http, &base, &root, 4, |run| {
        node(run, "worker")["status"] == "succeeded"
    })
    .await;
    assert_eq!(node(&run, "messenger")["status"], "running", "{run}");
    // The run's result is kept once the tree is at rest: after the root heard the answer.
    let run = run_when(&http, &base, &root, 15, |run| !run["result"].is_null()).await;
    assert_eq!(run["result"]["status"], "succeeded", "{run}");
    assert_eq!(run["result"]["text"], "heard the messenger", "{run}");
    assert_eq!(node(&run, "messenger")["status"], "succeeded", "{run}");
}
