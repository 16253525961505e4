//! What a tree costs, on every surface: `[pricing]` in a spec prices each turn (two models,
//! cache reads), and the figures a hand computation gives appear in `arbor run`'s table and
//! `--json` (sessions and reconciliation), `arbor ls`, `arbor log`, `/v1` and `/metrics`.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Command;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

#[allow(dead_code)]
mod serve_support;
use serve_support::{call, client, serve};

/// Root on `scripted` ($3 in, $15 out; cache reads at the input price), its child on
/// `cheap` ($0.15 in, $0.60 out), in EUR:
/// root turn 1: 4,000 × 3 + 6,000 × 3 + 1,000 × 15 = 45,000 micro-euros;
/// child:       20,000 × 0.15 + 3,000 × 0.60       =  4,800;
/// root turn 2: 2,000 × 3 + 100 × 15               =  7,500; the tree: 57,300 (0.0573 EUR).
const PRICED: &str = r#"
task = "review"
[pricing]
currency = "EUR"
[pricing."scripted"]
input = 3.0
output = 15.0
[pricing."cheap"]
input = 0.15
output = 0.6

[agents.root]
children = ["kid"]
[[agents.root.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "kid", name = "kid", input = "look" } }]
usage = { input_tokens = 10000, output_tokens = 1000, cache_read_tokens = 6000 }
[[agents.root.turns]]
text = "done"
usage = { input_tokens = 2000, output_tokens = 100 }

[agents.kid]
model = "cheap"
limits = { max_tokens = 100000 }
[[agents.kid.turns]]
text = "looked"
usage = { input_tokens = 20000, output_tokens = 3000 }
"#;

fn arbor(dir: &std::path::Path, args: &[&str]) -> (String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(args)
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    );
    assert!(out.status.success(), "{args:?}: {stdout}{stderr}");
    (stdout, stderr)
}

#[test]
fn the_cli_shows_what_the_tree_cost() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("priced.toml"), PRICED).unwrap();
    let (out, _) = arbor(dir.path(), &["run", "priced.toml", "--json"]);
    let report: Value = serde_json::from_str(&out).unwrap();
    let rec = &report["reconciliation"];
    assert_eq!(rec["consistent"], true, "{rec}");
    assert_eq!(
        (
            &rec["own_total_cost_micros"],
            &rec["root_aggregate_cost_micros"]
        ),
        (&json!(57_300), &json!(57_300))
    );
    let costs: Vec<(&str, &Value)> = report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), &s["cost"]))
        .collect();
    assert_eq!(
        costs,
        [
            (
                "root",
                &json!({"own_micros": 52_500, "aggregate_micros": 57_300})
            ),
            (
                "kid",
                &json!({"own_micros": 4_800, "aggregate_micros": 4_800})
            ),
        ]
    );

    // The table: a cost column (aggregate), and the tree's cost in its currency.
    let (table, _) = arbor(dir.path(), &["run", "priced.toml"]);
    let header = table.lines().find(|l| l.starts_with("session")).unwrap();
    assert!(header.contains("aggregate    cost  context"), "{table}");
    let root = table.lines().find(|l| l.starts_with("root ")).unwrap();
    assert!(root.contains("36,100  0.0573"), "{root}");
    let kid = table
        .lines()
        .find(|l| l.trim_start().starts_with("kid "))
        .unwrap();
    assert!(kid.contains("23,000  0.0048"), "{kid}");
    assert!(table.contains("the tree cost 0.0573 EUR"), "{table}");

    let (ls, _) = arbor(dir.path(), &["ls"]);
    assert_eq!(
        ls.lines()
            .next()
            .unwrap()
            .split_whitespace()
            .collect::<Vec<_>>(),
        [
            "id",
            "name",
            "status",
            "own",
            "aggregate",
            "cost",
            "started",
            "spec"
        ],
        "{ls}"
    );
    assert!(ls.contains("0.0573"), "{ls}");
    let (log, _) = arbor(dir.path(), &["log", "@latest"]);
    assert!(log.contains("turn 1: cost 0.045 (scripted)"), "{log}");
    assert!(log.contains("turn 2: cost 0.0075 (scripted)"), "{log}");
    assert!(log.contains("cost 0.0048 of "), "{log}");
    let (tree, _) = arbor(dir.path(), &["tree", "@latest"]);
    assert!(tree.contains("costing 0.0573 EUR"), "{tree}");
}

#[test]
fn a_spec_without_prices_shows_no_cost() {
    let dir = tempfile::tempdir().unwrap();
    let plain = "task = \"x\"\n[agents.root]\n[[agents.root.turns]]\ntext = \"hi\"\n\
                 usage = { input_tokens = 10, output_tokens = 1 }\n";
    std::fs::write(dir.path().join("plain.toml"), plain).unwrap();
    let (table, stderr) = arbor(dir.path(), &["run", "plain.toml"]);
    assert!(!table.contains("cost"), "{table}");
    assert!(
        !stderr.contains("no price"),
        "the scripted model is free: {stderr}"
    );
}

#[tokio::test]
async fn v1_and_metrics_show_what_the_tree_cost() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("specs/priced.toml"), PRICED).unwrap();
    let served = serve(dir.path(), &[]);
    let http = client();
    let base = &served.base;
    let (status, run) = call(
        &http,
        Method::POST,
        format!("{base}/v1/runs"),
        Some(json!({"spec": "priced"})),
    )
    .await;
    assert_eq!(status, 201, "{run}");
    let root = run["root_id"].as_str().unwrap().to_owned();
    let started = Instant::now();
    loop {
        let (_, run) = call(&http, Method::GET, format!("{base}/v1/runs/{root}"), None).await;
        if run["result"]["status"] == "succeeded" {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{run}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (status, session) = call(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{root}"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{session}");
    assert_eq!(
        session["cost"],
        json!({"own_micros": 52_500, "aggregate_micros": 57_300})
    );
    let (_, children) = call(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{root}/children"),
        None,
    )
    .await;
    assert_eq!(
        children["children"][0]["cost"]["own_micros"], 4_800,
        "{children}"
    );
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (line, wanted) in [
        ("arbor_cost_micros_total{model=\"scripted\"}", "52500"),
        ("arbor_cost_micros_total{model=\"cheap\"}", "4800"),
        // The tenant's spend from the store: both models' turns, each once.
        ("arbor_cost_micros{tenant=\"local\"}", "57300"),
    ] {
        let got = text
            .lines()
            .find(|l| l.starts_with(line))
            .unwrap_or_else(|| panic!("no {line} in {text}"));
        assert_eq!(got.split_whitespace().last(), Some(wanted), "{got}");
    }
}
