//! Tree budgets from the outside: a spec's root `budget`, `arbor run --max-tree-tokens` and
//! a `/v1/runs` request's `budget` refuse the call a pool cannot cover (the run ends
//! `budget_exhausted`, naming the pool); bad amounts are refused naming the field.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

#[allow(dead_code)]
mod serve_support;
use serve_support::{call, client, serve};

/// A chain whose every generation would spend 90,000 tokens (answers capped at 90,000).
const CHAIN: &str = r#"
task = "spend"

[agents.root]
children = ["child"]
controls = { max_output_tokens = 90000 }
limits = { max_tokens = 1000000 }
budget = { max_tree_tokens = 100000 }
[[agents.root.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "child", name = "child", input = "go" } }]
usage = { input_tokens = 10, output_tokens = 10 }
[[agents.root.turns]]
text = "spent"
usage = { input_tokens = 10, output_tokens = 89990 }

[agents.child]
children = ["grandchild"]
controls = { max_output_tokens = 90000 }
limits = { max_tokens = 1000000 }
[[agents.child.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "grandchild", name = "grandchild", input = "go" } }]
usage = { input_tokens = 10, output_tokens = 10 }
[[agents.child.turns]]
text = "spent"
usage = { input_tokens = 10, output_tokens = 89990 }

[agents.grandchild]
controls = { max_output_tokens = 90000 }
limits = { max_tokens = 1000000 }
[[agents.grandchild.turns]]
text = "spent"
usage = { input_tokens = 10, output_tokens = 89990 }
"#;

fn arbor(dir: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(args)
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn a_specs_root_budget_refuses_the_call_it_cannot_cover() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("chain.toml"), CHAIN).unwrap();
    let (_, out, err) = arbor(dir.path(), &["run", "chain.toml", "--json"]);
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    assert_eq!(report["status"], "failed", "{report}");
    assert_eq!(report["result"]["stop_reason"], "budget_exhausted");
    let error = report["result"]["error"].as_str().unwrap();
    assert!(error.contains("max_tree_tokens = 100000 tokens"), "{error}");
    let spent = report["reconciliation"]["root_aggregate_tokens"]
        .as_u64()
        .unwrap();
    assert_eq!(
        spent,
        90_000 + 20 + 20,
        "only the grandchild's call was made"
    );

    // A smaller pool from the command line, over the spec's: the root's first call could
    // answer 90,000 tokens, more than 50,000, so it is not made.
    let (_, out, _) = arbor(
        dir.path(),
        &["run", "chain.toml", "--json", "--max-tree-tokens", "50000"],
    );
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["result"]["stop_reason"], "budget_exhausted");
    assert_eq!(report["reconciliation"]["root_aggregate_tokens"], 0);

    for (flag, value, said) in [
        ("--max-tree-tokens", "0", "--max-tree-tokens"),
        ("--max-tree-cost", "0", "\"0\" is not a positive amount"),
    ] {
        let (ok, _, err) = arbor(dir.path(), &["run", "chain.toml", flag, value]);
        assert!(!ok);
        assert!(err.contains(said), "{err}");
    }
    let bad = CHAIN.replace(
        "budget = { max_tree_tokens = 100000 }",
        "budget = { max_tree_tokens = 0 }",
    );
    std::fs::write(dir.path().join("bad.toml"), bad).unwrap();
    let (ok, _, err) = arbor(dir.path(), &["run", "bad.toml"]);
    assert!(!ok);
    assert!(
        err.contains(
            "agent \"root\": budget.max_tree_tokens: max_tree_tokens must be a positive integer"
        ),
        "{err}"
    );
}

#[tokio::test]
async fn a_v1_runs_budget_limits_the_tree_and_a_bad_one_is_a_400() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    let unpooled = CHAIN.replace("budget = { max_tree_tokens = 100000 }\n", "");
    std::fs::write(dir.path().join("specs/chain.toml"), unpooled).unwrap();
    let served = serve(dir.path(), &[]);
    let http = client();
    let base = &served.base;
    for (budget, field) in [
        (json!({"max_tree_tokens": 0}), "budget.max_tree_tokens"),
        (json!({"max_tree_cost": -1.0}), "budget.max_tree_cost"),
        (json!({}), "budget"),
    ] {
        let (status, body) = call(
            &http,
            Method::POST,
            format!("{base}/v1/runs"),
            Some(json!({"spec": "chain", "budget": budget})),
        )
        .await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["field"], field, "{body}");
    }
    let (status, run) = call(
        &http,
        Method::POST,
        format!("{base}/v1/runs"),
        Some(json!({"spec": "chain", "budget": {"max_tree_tokens": 100_000}})),
    )
    .await;
    assert_eq!(status, 201, "{run}");
    let root = run["root_id"].as_str().unwrap().to_owned();
    let started = Instant::now();
    let done = loop {
        let (_, run) = call(&http, Method::GET, format!("{base}/v1/runs/{root}"), None).await;
        if run["result"]["status"].is_string() {
            break run;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{run}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(done["result"]["stop_reason"], "budget_exhausted", "{done}");
    let (_, session) = call(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{root}"),
        None,
    )
    .await;
    assert_eq!(session["usage"]["aggregate"]["total_tokens"], 90_040);
}
